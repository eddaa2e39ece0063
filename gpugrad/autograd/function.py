"""User-defined differentiable functions, as ``torch.autograd.function``: ``Function``, its ``FunctionCtx`` and
``once_differentiable``.

``class F(gpugrad.autograd.Function)`` gets a node class ``FBackward`` (torch's ``F._backward_cls``); each ``apply``
makes one instance of it, which is both the ``ctx`` that ``forward``/``setup_context`` and ``backward`` share and the
``grad_fn`` of the outputs, as in torch. A forward returning a tuple makes a node with one output per element
(``core.node.SeveralOutputs``): ``backward`` gets one gradient per output.

Saved tensors unpack as torch's do: a saved output is that output, connected to this node (so a double backward
through ``backward`` differentiates it, as torch does), a saved input is the input, anything else a constant; each is
checked against the version it had when ``apply`` finished.
"""
from __future__ import annotations

import contextlib
import functools

from gpugrad._tensor import Tensor
from gpugrad.core import forward_state
from gpugrad.core.anomaly import STATE as _ANOMALY, record as _record_stack
from gpugrad.core.batching import STATE as _BATCHING
from gpugrad.core.grad_mode import STATE, enable_grad, no_grad
from gpugrad.core.node import Node, SeveralOutputs, freed_error, grad_edge, modified_error
from gpugrad.core.tensor import make
from gpugrad.core.views import fresh, rebase, write_through

_FORWARD = forward_state.STATE
_NOTHING = contextlib.nullcontext()


class FunctionCtx:
    """What ``forward`` (or ``setup_context``) tells ``backward``: saved tensors, which outputs are in-place
    changes of inputs or not differentiable, whether missing gradients become zeros, and any attribute set on it."""

    _to_save = ()
    _for_forward = ()
    _dirty = ()
    _non_differentiable = ()
    materialize_grads = True

    def save_for_backward(self, *tensors):
        """Keep tensors (or None) for ``backward``'s ``ctx.saved_tensors``; checked for in-place changes there."""
        self._to_save = _tensors_only(tensors, "save_for_backward")

    def save_for_forward(self, *tensors):
        """Keep tensors (or None) for ``jvp``'s ``ctx.saved_tensors``."""
        self._for_forward = _tensors_only(tensors, "save_for_forward")

    def mark_dirty(self, *tensors):
        """Inputs that ``forward`` changed in place and returns: they become the outputs, with this node as their
        history (as any in-place op's output)."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        """Outputs that get no gradient: they do not require grad, and ``backward`` gets zeros (or None) for them."""
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool):
        """True (the default): an output that got no gradient gets zeros in ``backward``; False: None."""
        self.materialize_grads = bool(value)


def _tensors_only(tensors, what):
    for i, t in enumerate(tensors):
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{what} can only save variables, but argument {i} is of type {type(t).__name__}")
    return tensors


class BackwardFunction(FunctionCtx, SeveralOutputs, Node):
    """The node of one ``apply`` of a custom Function (torch's ``BackwardCFunction``); ``_forward_cls`` is the
    Function. Its class is ``<Function>Backward``, which is also its name."""

    _forward_cls = None
    fresh_grads = False  # a user's backward may return a tensor it keeps: never add into it in place
    _saved = None  # after apply: per saved tensor, ("out", k, array, version counter, version) or ("in", t, version)
    _released = False
    _in_jvp = False
    _outputs = ()  # per output: (shape, dtype, backend) of a Tensor, None for anything else

    def name(self):
        return type(self).__name__

    @property
    def saved_tensors(self):
        if self._in_jvp:
            return self._for_forward
        if self._released:
            raise freed_error(self)
        if self._saved is None:  # read in forward, before apply has bound them
            return self._to_save
        out = []
        for entry in self._saved:
            if entry is None:
                out.append(None)
            elif entry[0] == "out":
                _, k, array, counter, version = entry
                t = make(array, self._be)
                t._version_counter, t._requires_grad = counter, True
                t._grad_fn = self if self.n_outputs == 1 else self.output_slot(k, (array.shape, array.dtype))
                self._check_version(t, counter[0], version)
                out.append(t)
            else:
                _, t, version = entry
                self._check_version(t, t._version, version)
                out.append(t)
        return tuple(out)

    saved_variables = saved_tensors  # torch's old name

    def _check_version(self, t, now, version):
        if now != version:
            raise modified_error(t, t._grad_fn, now, version,
                                 f" ({self.name()} saved it: avoid the in-place change, or .clone() first.)")

    def run_backward(self, g, create_graph):
        grads = list(g) if self.n_outputs > 1 else [g]
        if self.n_outputs > 1:
            self.call_hooks_of_unused_outputs(grads)
        for k, meta in enumerate(self._outputs):
            if grads[k] is None:
                if meta is not None and self.materialize_grads:
                    shape, dtype, be = meta
                    grads[k] = make(be.xp.zeros(shape, dtype), be)
            elif not create_graph:
                grads[k] = make(grads[k], self._be)
        cls = self._forward_cls
        backward = cls.vjp if cls.backward is Function.backward else cls.backward
        with enable_grad() if create_graph else no_grad():
            gxs = backward(self, *grads)
        gxs = gxs if isinstance(gxs, tuple) else (gxs,)
        n = len(self._in_meta)
        if len(gxs) < n or any(gx is not None for gx in gxs[n:]):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients (expected {n}, got "
                               f"{len(gxs)})")
        return tuple(self._checked(i, gx, create_graph) for i, gx in enumerate(gxs[:n]))

    def _checked(self, i, gx, create_graph):
        """Input i's gradient as the engine takes it, after torch's checks: a Tensor (or None) where the input is
        a Tensor, of its shape or one that sums to it."""
        meta = self._in_meta[i]
        if gx is None:
            return None
        if not isinstance(gx, Tensor):
            raise RuntimeError(f"expected Variable or None (got {type(gx).__name__})")
        if meta is None:
            raise RuntimeError(f"function {self.name()} returned a gradient different than None at position {i + 1}, "
                               "but the corresponding forward input was not a Variable")
        if self.next_functions[i][0] is None:
            return None  # the input needs no gradient
        shape, got = tuple(meta[0]), tuple(gx.shape)
        lead = len(got) - len(shape)
        if lead < 0 or any(n != m and n != 1 for n, m in zip(shape, got[lead:])):
            raise RuntimeError(f"Function {self.name()} returned an invalid gradient at index {i} - got "
                               f"{list(got)} but expected shape compatible with {list(shape)}")
        return gx if create_graph else gx._data

    def release(self):
        self._released = True  # as torch: ctx.saved_tensors raises from now on, even when nothing was saved
        self._saved = ()

    def register_prehook(self, hook):
        if self.n_outputs > 1:  # gpugrad's pre-hooks are tensor hooks: register them on the outputs
            raise RuntimeError(f"{self.name()} has {self.n_outputs} outputs: register a hook on each output tensor "
                               "(output.register_hook) instead of on its grad_fn")
        return super().register_prehook(hook)

    # -- apply --------------------------------------------------------------------------------------------------
    def _wrap(self, args, out):
        """The outputs of ``forward`` joined to this node: ``out`` as the user gets it."""
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        if not single:
            self.n_outputs = len(outs)
        tensors = [a for a in args if isinstance(a, Tensor)]
        self._be = tensors[0]._backend
        self.next_functions = tuple((grad_edge(a), 0) if isinstance(a, Tensor) and a._requires_grad else (None, 0)
                                    for a in args)
        self._in_meta = tuple((a._data.shape, a._data.dtype) if isinstance(a, Tensor) else None for a in args)
        inputs = {id(a) for a in tensors}
        returned = {id(o) for o in outs}
        dirty = {id(t) for t in self._dirty}
        if not dirty <= returned:
            raise RuntimeError("Some elements marked as dirty during the forward method were not returned as output. "
                               "The inputs that are modified inplace must all be outputs of the Function.")
        for t in self._dirty:
            root = t._base if t._base is not None else t
            if root._grad_fn is None and root._requires_grad:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                                   "operation." if root is not t else
                                   "a leaf Variable that requires grad has been used in an in-place operation.")
        non_diff = {id(t) for t in self._non_differentiable}
        self._outputs = tuple((o._data.shape, o._data.dtype, o._backend) if isinstance(o, Tensor) else None
                              for o in outs)
        results, own = [], {}  # own: outputs relabelled in place (id -> k), which saved tensors refer to
        for k, o in enumerate(outs):
            if not isinstance(o, Tensor):
                results.append(o)
                continue
            if id(o) in non_diff or o._data.dtype.kind != "f":
                results.append(o.detach() if id(o) in inputs else o)
                continue
            edge = self if single else self.output_slot(k, (o._data.shape, o._data.dtype))
            if id(o) in dirty:  # an input changed in place: it now holds this node's output, as after x.add_(1)
                if o._base is None:
                    rebase(o, edge)
                else:
                    write_through(o, _relabel(o.detach(), edge))
                own[id(o)] = k
            elif id(o) in inputs or id(o) in own:
                # an input returned as is, or one tensor returned twice: a new tensor sharing its memory, so a tensor
                # the user holds is never relabelled
                o = _relabel(o.detach(), edge)
            else:
                # made by forward (maybe a view of an input or of a temporary): its history is this node now, and a
                # view's links would re-derive another one
                o._base = o._view_fn = o._base_fn = None
                _relabel(o, edge)
                own[id(o)] = k
            results.append(o)
        self._saved = tuple(None if t is None else
                            ("out", own[id(t)], t._data, t._version_counter, t._version) if id(t) in own else
                            ("in", t, t._version) for t in self._to_save)
        self._to_save = ()  # NOTE: no strong reference to an output: output -> node -> output would be a cycle
        return results[0] if single else tuple(results)

    def _forward_ad(self, args, out):
        """Forward mode: the outputs' tangents from the Function's ``jvp`` (inputs without one get zeros)."""
        tangents = [(a._fw_grad if a._fw_grad is not None else a.detach() * 0) if isinstance(a, Tensor) else None
                    for a in args]
        self._in_jvp = True
        try:
            with forward_state.pause():
                touts = self._forward_cls.jvp(self, *tangents)
        finally:
            self._in_jvp = False
        outs, touts = ((out,), (touts,)) if not isinstance(out, tuple) else (out, touts)
        for o, t in zip(outs, touts if isinstance(touts, tuple) else (touts,)):
            if isinstance(o, Tensor) and t is not None and o._data.dtype.kind == "f":
                forward_state.set_tangent(o, t)


def _relabel(t, node):
    t._requires_grad, t._grad_fn = True, node
    return t


class Function:
    """Base of custom differentiable functions::

        class Exp(gpugrad.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp(); ctx.save_for_backward(y); return y
            @staticmethod
            def backward(ctx, gy):
                (y,) = ctx.saved_tensors; return gy * y

        y = Exp.apply(x)

    torch 2's style works too: ``forward(*args)`` without ctx, then ``setup_context(ctx, inputs, output)``.
    ``forward`` runs under no_grad; ``backward`` gets one gradient per output and returns one per input of
    ``forward`` (None for inputs that are not Tensors or need none; extra trailing Nones are allowed).
    """

    generate_vmap_rule = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # The node class, named as torch's: "<Function>Backward" is the grad_fn's type and name().
        cls._backward_cls = type(f"{cls.__name__}Backward", (BackwardFunction,),
                                 {"_forward_cls": cls, "__module__": __name__})

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """torch 2's style: a class that defines it has ``forward(*args)`` without ctx, then this fills ctx."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it with "
                                  "forward mode AD.")

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("To use autograd.Function with vmap, you must either override the vmap staticmethod "
                                  "or set generate_vmap_rule=True.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` on ``args`` and join its outputs to the graph (when grad mode is on and an input
        requires grad)."""
        if cls is Function:
            raise RuntimeError("Function.apply: call apply on a subclass that defines forward and backward")
        if _BATCHING.on_function is not None:  # inside gpugrad.func.vmap: batched inputs with a graph run per sample
            _BATCHING.on_function(cls, args)
        args = tuple(fresh(a) if isinstance(a, Tensor) else a for a in args)
        ctx = cls._backward_cls()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        record = STATE.enabled and any(ctx.needs_input_grad)
        dual = _FORWARD.level is not None and not _FORWARD.paused and any(
            isinstance(a, Tensor) and a._fw_grad is not None for a in args)
        hidden = [(a, a._fw_grad) for a in args if isinstance(a, Tensor) and a._fw_grad is not None] if dual else ()
        try:
            for a, _ in hidden:  # as torch: forward sees no tangents; jvp computes the outputs' own
                a._fw_grad = None
            with no_grad(), forward_state.pause() if dual else _NOTHING:
                if cls.setup_context is Function.setup_context:
                    out = cls.forward(ctx, *args, **kwargs)
                else:
                    out = cls.forward(*args, **kwargs)
                    cls.setup_context(ctx, args, out)
        finally:
            for a, t in hidden:
                a._fw_grad = t
        for t in ctx._dirty:  # as torch: marking dirty counts as a write of its own
            t._version_counter[0] += 1
        if record:
            out = ctx._wrap(args, out)
            if _ANOMALY.enabled:
                _record_stack(ctx)  # the frames above this apply: where the user made the node
        if dual:
            ctx._forward_ad(args, out)
        return out


class _DelayedError(Node):
    """What once_differentiable's backward returns under create_graph: a gradient whose own backward raises."""
    _in_meta = ()

    def __init__(self, be):
        self._be = be

    def name(self):
        return "Error"

    def run_backward(self, gy, create_graph):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def once_differentiable(backward):
    """For ``backward``: run it under no_grad; its gradients then cannot be differentiated again, and a
    higher-order backward through them raises (instead of silently treating them as constants)."""
    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with no_grad():
            grads = backward(ctx, *grad_outputs)
        if not STATE.enabled or not any(isinstance(g, Tensor) and g._requires_grad for g in grad_outputs):
            return grads
        single = not isinstance(grads, tuple)
        marked = tuple(_relabel(g.detach(), _DelayedError(g._backend)) if isinstance(g, Tensor) else g
                       for g in ((grads,) if single else grads))
        return marked[0] if single else marked

    return wrapper
