"""Graph nodes (``grad_fn``) and the op base class.

An op is one class: ``forward(xp, *arrays)`` computes, ``backward(xp, gy)`` returns one gradient per positional
input (the VJP), and optional ``forward_<backend>`` / ``backward_<backend>`` methods are fast paths with the same
contract.  ``Op.apply`` decides the backend once, from the inputs' data, and records the node.
Broadcasting is undone by the engine, never by an op: a VJP may return a gradient in the broadcast shape.
"""
from __future__ import annotations

import numbers
import weakref

from gpugrad.autograd import forward_ad as _forward_ad
from gpugrad.autograd.anomaly import STATE as _ANOMALY, record as _record_stack
from gpugrad.autograd.grad_mode import STATE
from gpugrad.backend import backend_of, graphs as _graphs
from gpugrad.dtypes import promoted as _promoted


class Node:
    """A recorded op as seen by the engine: ``next_functions`` lead towards the inputs."""

    next_functions: tuple = ()
    fresh_grads = True  # the VJP returns new arrays (or gy / views of it), never arrays someone else keeps
    _pre_hooks = None  # hooks of the tensor this node produced (register_hook on a non-leaf)
    _retain = None  # weakref to that tensor when it asked to retain_grad()

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    def register_prehook(self, hook):
        if self._pre_hooks is None:
            self._pre_hooks = []
        self._pre_hooks.append(hook)
        return _HookHandle(self._pre_hooks, hook)


class _HookHandle:
    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class AccumulateGrad(Node):
    """The sink for a leaf that requires grad: adds incoming gradients into ``leaf.grad``."""

    def __init__(self, variable):
        self.variable = variable

    @property
    def _be(self):
        return self.variable._backend

    @property
    def _pre_hooks(self):
        link = self.variable._accumulator  # the leaf's hooks live on the leaf's side: see _LeafHooks
        return link.hooks if type(link) is _LeafHooks else None

    def register_prehook(self, hook):
        return AccumulateGrad.register_leaf_hook(self.variable, hook)

    @staticmethod
    def register_leaf_hook(tensor, hook):
        link = tensor._accumulator
        if type(link) is not _LeafHooks:
            link = tensor._accumulator = _LeafHooks(link)
        link.hooks.append(hook)
        return _HookHandle(link.hooks, hook)

    @staticmethod
    def of(tensor) -> "AccumulateGrad":
        # The tensor keeps only a weak reference, like PyTorch: graph nodes keep the accumulator alive.
        link = tensor._accumulator
        acc = link() if link is not None else None
        if acc is None:
            acc = AccumulateGrad(tensor)
            if type(link) is _LeafHooks:
                link.ref = weakref.ref(acc)
            else:
                tensor._accumulator = weakref.ref(acc)
        return acc


class _LeafHooks:
    """A leaf's ``_accumulator`` once hooks are registered on it: the accumulator, still held weakly, and the hooks,
    which must outlive graphs.  NOTE: holding the accumulator strongly instead would make a cycle (leaf -> node ->
    node.variable is the leaf), so a hooked leaf and its .grad would wait for the cyclic GC to be freed."""

    __slots__ = ("ref", "hooks")

    def __init__(self, ref):
        self.ref, self.hooks = ref, []

    def __call__(self):
        return self.ref() if self.ref is not None else None


def _describe(op: str, args) -> str:
    from gpugrad._tensor import Tensor

    ts = [a for a in args if isinstance(a, Tensor)]
    shapes = ", ".join(str(tuple(t.shape)) for t in ts)
    dtypes = ", ".join(str(t.dtype) for t in ts)
    devices = ", ".join(str(t.device) for t in ts)
    return f"{op}: got shapes [{shapes}], dtypes [{dtypes}], devices [{devices}]"


def _root(array):
    """The array that owns the memory ``array`` views (NumPy and CuPy both keep ``.base``)."""
    while getattr(array, "base", None) is not None:
        array = array.base
    return array


def _refresh_view(view):
    """Re-derive a view's grad_fn from its base's current graph (the base was rebased by an in-place op)."""
    from gpugrad.autograd.grad_mode import enable_grad
    from gpugrad.ops.convert import AsView

    base = view._base
    with enable_grad():
        fresh = AsView.apply(base, view_fn=view._view_fn)
    rebase(view, fresh._grad_fn)
    view._requires_grad, view._base_fn = fresh._requires_grad, base._grad_fn


def fresh(tensor):
    """``tensor``, its grad_fn re-derived first if it is a view whose base was changed in place with a graph since it
    was taken: torch re-derives a view's grad_fn whenever it is read (requires_grad, hooks, backward)."""
    if tensor._base is not None and tensor._base_fn is not tensor._base._grad_fn:
        _refresh_view(tensor)
    return tensor


def rebase(tensor, node):
    """``tensor`` now holds the output of ``node`` (it was changed in place): its grad_fn moves there, and so does
    ``retain_grad()``, as in torch (.grad is then the gradient of the new value); hooks stay on the old value's node."""
    old = tensor._grad_fn
    if old is not None and old._retain is not None and old._retain() is tensor:
        old._retain = None
        if node is not None:
            node._retain = weakref.ref(tensor)
    tensor._grad_fn, tensor._requires_grad = node, node is not None or tensor._requires_grad


def before_write(tensor):
    """Called before an in-place write into ``tensor``'s memory.  Nodes that saved one of its values where torch
    saves a copy or an intermediate of its own (so torch raises nothing when the tensor is then changed) take a
    private copy now: copy-on-write, paid only when such a write happens.  They subscribed in the tensor's version
    counter, which every alias (view, detach()) shares: ``[version, WeakSet of nodes]``."""
    counter = tensor._version_counter
    if len(counter) > 1:
        for node in list(counter.pop()):
            node.unshare_saved(None, counter)


def _shadow(array, ref):
    """(copy, ref) for a saved value of an input about to be overwritten: a private copy, held by a tensor with the
    input's history (its grad_fn, or for a leaf its accumulator), so create_graph still differentiates through it."""
    kind, tensor, _ = ref
    shadow = _make_tensor(array.copy(), tensor._backend, tensor._requires_grad)
    if tensor._grad_fn is not None:
        shadow._grad_fn = tensor._grad_fn
    elif tensor._requires_grad:
        acc = AccumulateGrad.of(tensor)
        shadow._accumulator = lambda: acc
    return shadow._data, (kind, shadow, 0)


_tensor_type = None  # set by gpugrad._tensor (it imports this module, so it cannot be imported here)
_make_tensor = None
_NO_GRAD = [(False,) * n for n in range(8)]
_FORWARD = _forward_ad.STATE


class Op(Node):
    """Base class of gpugrad's built-in ops (each instance is the ``grad_fn`` of its output).

    Subclasses define ``forward(self, xp, *inputs)`` and ``backward(self, xp, gy)``; keyword arguments of
    ``apply`` become attributes before ``forward`` runs.  ``double_backward = True`` declares that ``backward``
    uses only operations that also exist on Tensors (see ``autograd/tensor_xp.py``), so ``create_graph=True``
    can run it on Tensors and get higher-order gradients; an op whose ``backward`` runs a kernel reference may
    instead give a Tensor-safe ``backward_graph``.  Other ops raise a clear error under ``create_graph``.
    """

    double_backward = False
    # Type promotion of the tensor inputs (dtypes.promoted): True as torch's binary ops, "float" where integers
    # compute in the default float dtype (true division, exp), "same" where mixed dtypes are an error (matmul).
    promotes = False
    # A linear op's JVP is the op applied to the tangents (forward_ad._linear_jvp); others define
    # ``jvp(self, xp, ins, out, ts)``: the output's tangent from the inputs ``ins``, the output ``out`` and the
    # inputs' tangents ``ts`` (None where an input has none), as arrays, or as Tensors when xp is autograd.tensor_xp.
    linear = False
    # y's k-th element depends only on the inputs' k-th (broadcast) elements, so each input's Jacobian is diagonal
    # and J_i t = VJP_i(t): the JVP is the sum of the VJPs of the tangents, with no formula of its own.
    elementwise = False
    batched_jvp = False  # the JVP also takes tangents with a leading axis of B directions (broadcasting formulas)
    changes_device = False
    _name = None
    saved = None
    _saved_refs = None
    _released = False
    # Indices of saved inputs that torch keeps as a copy or an intermediate of its own, not as the input tensor
    # (cross-entropy's logits, 2 / x's x, matmul's folded copies): an in-place change of the input is then legal,
    # and this node copies the values first (before_write) instead of raising at backward.
    private_saved = ()

    # One naming rule: a node is named ``node_name``, ``<ClassName>Backward0`` unless the class (or its declaration)
    # gives torch's name; an op named by case, as torch does (MmBackward0 vs DotBackward0), sets ``_name`` in forward.
    node_name = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "node_name" not in cls.__dict__:
            cls.node_name = cls.__name__ + "Backward0"

    def name(self) -> str:
        return self._name or self.node_name

    _params = {}  # the keyword arguments of apply

    def save_for_backward(self, *arrays):
        self.saved = arrays

    @classmethod
    def apply(cls, *args, **params):
        # The hot path of every op: one pass over the inputs, no generators, no imports.
        if cls.promotes:  # torch's type promotion: the inputs cast to the dtype the op computes in
            args = _promoted(cls, args)
        fn = cls.__new__(cls)
        if params:
            fn.__dict__.update(params)
            fn._params = params
        Tensor = _tensor_type
        be = None
        record = False
        datas = []
        for a in args:
            if isinstance(a, Tensor):
                if a._base is not None and a._base_fn is not a._base._grad_fn:
                    _refresh_view(a)  # its base was changed in place with a graph since the view was taken
                datas.append(a._data)
                if be is None:
                    be = a._backend
                elif a._backend is not be:
                    raise RuntimeError(
                        f"{_describe(cls.__name__.lower(), args)}: all tensors must be on the same device; "
                        "move them with .to(device) first")
                if a._requires_grad:
                    record = True
            else:
                datas.append(a)
        if record and STATE.enabled:
            ng = []
            for a in args:
                if isinstance(a, Tensor):
                    if a._data.dtype.kind != "f":
                        raise TypeError(
                            f"{_describe(cls.__name__.lower(), args)}: differentiable ops need floating-point "
                            f"inputs, but one input is {a.dtype}; convert it with .float() or .to(dtype) first")
                    if a._inference:
                        raise RuntimeError(
                            f"{_describe(cls.__name__.lower(), args)}: an inference tensor (made under "
                            "inference_mode) cannot be saved for backward; make a copy with .clone() outside it")
                    ng.append(a._requires_grad)
                else:
                    ng.append(False)
            fn.needs_input_grad = ng
        else:
            record = False
            fn.needs_input_grad = _NO_GRAD[len(args)] if len(args) < 8 else (False,) * len(args)
        if _FORWARD.level is not None and not _FORWARD.paused:  # forward mode: save what the VJP reads of these too
            fn.needs_input_grad = [n or getattr(a, "_fw_grad", None) is not None
                                   for n, a in zip(fn.needs_input_grad, args)]
        fn._be = be
        scope = be.device_scope  # CUDA: CuPy launches on the current device, so make the inputs' device current
        if scope is None:
            out = (getattr(fn, be.forward_name, None) or fn.forward)(be.xp, *datas)
        else:
            try:
                with scope:
                    out = (getattr(fn, be.forward_name, None) or fn.forward)(be.xp, *datas)
            except Exception as e:
                if _graphs.CAPTURING:  # name the op: the device error alone says only which CuPy call failed
                    raise _graphs.capture_error(cls.__name__, e) from e
                raise
        rbe = backend_of(out) if fn.changes_device else be
        if not isinstance(out, rbe.array_type):
            # NumPy returns 0-d results as scalars (np.float32): the tensor gets a 0-d array, and an op that saved
            # its output (exp, sqrt, div, max) must hold that same array, or it is not recognised as the output.
            array = rbe.as_array(out)
            if fn.saved:
                fn.saved = tuple(array if s is out else s for s in fn.saved)
            out = array
        result = _make_tensor(out, rbe)
        if record and out.dtype.kind == "f":  # an integer result (e.g. a cast to int64) carries no gradient
            edges, meta = [], []
            for a in args:
                if isinstance(a, Tensor):
                    meta.append((a._data.shape, a._data.dtype))
                    edges.append(((a._grad_fn or AccumulateGrad.of(a)) if a._requires_grad else None, 0))
                else:
                    meta.append(None)
                    edges.append((None, 0))
            fn.next_functions = tuple(edges)
            fn._in_meta = meta
            result._requires_grad = True
            result._grad_fn = fn
            if _ANOMALY.enabled:
                _record_stack(fn)
            if fn.saved:
                fn._bind_saved(args, datas, result)
        if _FORWARD.level is not None and not _FORWARD.paused:
            _forward_ad.propagate(fn, args, datas, result, params)
        return result

    def _bind_saved(self, args, datas, result):
        # Remember which saved arrays are (views of) an input's or the output's buffer, with the version it had,
        # so an in-place change before backward is caught instead of silently giving a wrong gradient.  Memory is
        # compared, not identity: ops often save a reshaped view (softmax's 2-D rows, max's keepdims result).
        out_root = _root(result._data)
        refs = []
        for s in self.saved:
            ref = None
            if s is not None and hasattr(s, "shape"):
                root = _root(s)
                if root is out_root:
                    ref = ("out" if s is result._data else "outview", result._version_counter,
                           result._version_counter[0])
                else:  # the input itself first: x * x.unsqueeze(0) saves two arrays of one buffer
                    for a, d in zip(args, datas):
                        if s is d and hasattr(a, "_version_counter"):
                            ref = ("in", a, a._version_counter[0])
                            break
                    else:
                        for a, d in zip(args, datas):
                            if hasattr(a, "_version_counter") and root is _root(d):
                                ref = ("inview", a, a._version_counter[0])
                                break
            refs.append(ref)
        self._saved_refs = refs
        for i in self.private_saved:
            ref = refs[i]
            if ref is not None and ref[0] in ("in", "inview"):
                counter = ref[1]._version_counter
                if len(counter) == 1:
                    counter.append(weakref.WeakSet())
                counter[1].add(self)

    def unshare_saved(self, tensor, counter=None):
        """Give the node private copies of whatever it saved from ``tensor``'s buffer, which an in-place op
        is about to overwrite (``z.clamp_()``, ``z.mul_(w)`` on a graph tensor): torch's clone-on-write.
        With ``counter`` (before_write): of its ``private_saved`` inputs whose memory has that version counter."""
        if not self.saved or not self._saved_refs:
            return
        saved, refs = list(self.saved), self._saved_refs
        for i, ref in enumerate(refs):
            if ref is not None and ref[0] in ("in", "inview") and (ref[1] is tensor if counter is None else
                                                                  i in self.private_saved
                                                                  and ref[1]._version_counter is counter):
                saved[i], refs[i] = _shadow(saved[i], ref)
        self.saved = tuple(saved)

    # -- used by the engine -------------------------------------------------------------------------------------
    def _check_saved(self):
        if self._released:
            raise RuntimeError(
                f"Trying to backward through the graph a second time at {self.name()}: its saved tensors were "
                "freed after the first backward. Specify retain_graph=True on the first backward() "
                "(or autograd.grad) call if you need to backward through the graph again.")
        for ref in self._saved_refs or ():
            if ref is None:
                continue
            kind, obj, version = ref
            now = obj[0] if kind.startswith("out") else obj._version_counter[0]
            if now != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an in-place "
                    f"operation: {self.name()} saved its {'output' if kind.startswith('out') else 'input'} at "
                    f"version {version}, but it is now at version {now}. Avoid the in-place change, or .clone() "
                    "first.")

    def run_backward(self, gy, create_graph: bool):
        self._check_saved()
        if not create_graph:
            backward = getattr(self, self._be.backward_name, None) or self.backward
            gxs = backward(self._be.xp, gy)
        else:
            backward = getattr(self, "backward_graph", None) or (self.backward if self.double_backward else None)
            if backward is None and self.linear:  # the VJP of a linear op is linear: an op of its own (Transposed)
                return tuple(Transposed.apply(gy, node=self, i=i) if n else None
                             for i, n in enumerate(self.needs_input_grad))
            if backward is None:
                raise RuntimeError(
                    f"{self.name()} does not support create_graph=True (higher-order gradients) yet; "
                    "compute this gradient without create_graph, or express the op with differentiable ops")
            from gpugrad.autograd import tensor_xp

            arrays = self.saved
            if self.saved is not None:
                self.saved = tensor_xp.saved_as_tensors(self)
            try:
                gxs = backward(tensor_xp, gy)
            finally:
                self.saved = arrays
        return gxs if isinstance(gxs, tuple) else (gxs,)

    def release(self):
        # Only saved arrays are freed: a node that saved just Python scalars (x * 2, add_(y, alpha=2)) stays usable,
        # as torch's nodes that saved no tensors, so a create_graph gradient may still pass through it later.
        if self.saved is not None and any(s is not None and not isinstance(s, numbers.Number) for s in self.saved):
            self._released = True
            self.saved = None
        self._saved_refs = None

    # -- to be defined by ops -----------------------------------------------------------------------------------
    def forward(self, xp, *inputs):
        raise NotImplementedError

    def backward(self, xp, gy):
        raise NotImplementedError(f"{self.name()} has no backward")

    def jvp_batched(self, ts, out, batch):
        """A linear op on B tangents at once (Tensors of shape (B, *input.shape); ``out`` is the op's output), or
        None to take one direction at a time. Ops whose parameters name axes or shapes give theirs, shifted."""
        return None

    def jvp(self, xp, ins, out, ts):
        if not self.elementwise:
            raise NotImplementedError(f"{self.name()} has no forward-mode derivative (jvp)")
        total = None
        for i, t in enumerate(ts):
            if t is not None:
                g = self.run_backward(t, create_graph=not isinstance(t, self._be.array_type))[i]
                total = g if total is None else total + g
        return total


class Transposed(Op):
    """The VJP of input ``i`` of a linear op ``node`` as an op of its own, so create_graph differentiates through it:
    its forward is node's backward (gy -> the gradient of input i), and the transpose of that linear map is node's
    forward, applied to g in slot i (zeros in the others).  Both are linear, so every order works."""
    linear = changes_device = True

    def forward(self, xp, gy):
        backward = getattr(self.node, self.node._be.backward_name, None) or self.node.backward
        gxs = backward(xp, gy)
        return (gxs if isinstance(gxs, tuple) else (gxs,))[self.i]

    def _slots(self, g, zeros):
        return [g if j == self.i else (zeros(meta) if meta is not None else 0)
                for j, meta in enumerate(self.node._in_meta)]

    def backward(self, xp, g):
        node = type(self.node).__new__(type(self.node))
        node.__dict__.update(self.node.__dict__)  # its params and the shapes its forward worked out
        node.saved, node.needs_input_grad = None, (False,) * len(self.node._in_meta)
        fwd = getattr(node, self.node._be.forward_name, None) or node.forward
        return fwd(self.node._be.xp, *self._slots(g, lambda m: self.node._be.xp.zeros(m[0], dtype=m[1])))

    def backward_graph(self, xp, g):
        be = self.node._be
        return type(self.node).apply(*self._slots(g, lambda m: _make_tensor(be.xp.zeros(m[0], dtype=m[1]), be)),
                                     **self.node._params)
