"""Graph nodes (``grad_fn``) and the op base class.

An op is one class: ``forward(xp, *arrays)`` computes, ``backward(xp, gy)`` returns one gradient per positional
input (the VJP), and optional ``forward_<backend>`` / ``backward_<backend>`` methods are fast paths with the same
contract.  ``Op.apply`` decides the backend once, from the inputs' data, and records the node.
Broadcasting is undone by the engine, never by an op: a VJP may return a gradient in the broadcast shape.
"""
from __future__ import annotations

import weakref

from gpugrad.autograd.grad_mode import STATE
from gpugrad.backend import backend_of, graphs as _graphs


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

    @staticmethod
    def of(tensor) -> "AccumulateGrad":
        # The tensor keeps only a weak reference, like PyTorch: graph nodes keep the accumulator alive.
        acc = tensor._accumulator() if tensor._accumulator is not None else None
        if acc is None:
            acc = AccumulateGrad(tensor)
            tensor._accumulator = weakref.ref(acc)
        return acc


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
    if view._view_fn is None:
        raise RuntimeError("a view made by expand() was used after its base was changed in place; "
                           "take the view again after the in-place operation")
    with enable_grad():
        fresh = AsView.apply(base, view_fn=view._view_fn)
    view._grad_fn, view._requires_grad, view._base_fn = fresh._grad_fn, fresh._requires_grad, base._grad_fn


_tensor_type = None  # set by gpugrad._tensor (it imports this module, so it cannot be imported here)
_make_tensor = None
_NO_GRAD = [(False,) * n for n in range(8)]


class Op(Node):
    """Base class of gpugrad's built-in ops (each instance is the ``grad_fn`` of its output).

    Subclasses define ``forward(self, xp, *inputs)`` and ``backward(self, xp, gy)``; keyword arguments of
    ``apply`` become attributes before ``forward`` runs.  ``double_backward = True`` declares that ``backward``
    uses only operations that also exist on Tensors (see ``autograd/tensor_xp.py``), so ``create_graph=True``
    can run it on Tensors and get higher-order gradients; an op whose ``backward`` runs a kernel reference may
    instead give a Tensor-safe ``backward_graph``.  Other ops raise a clear error under ``create_graph``.
    """

    double_backward = False
    changes_device = False
    _name = None
    saved = None
    _saved_refs = None
    _released = False

    @classmethod
    def backward_name(cls) -> str:
        return cls.__name__ + "Backward0"

    def name(self) -> str:
        # Some ops are named by case, as torch does (MmBackward0 vs DotBackward0): they set `_name`.
        return self._name or self.backward_name()

    def save_for_backward(self, *arrays):
        self.saved = arrays

    @classmethod
    def apply(cls, *args, **params):
        # The hot path of every op: one pass over the inputs, no generators, no imports.
        fn = cls.__new__(cls)
        if params:
            fn.__dict__.update(params)
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
        out = rbe.as_array(out)
        result = _make_tensor(out, rbe)
        if record and out.dtype.kind == "f":  # an integer result (e.g. a cast to int64) carries no gradient
            fn._be = be
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
            if fn.saved:
                fn._bind_saved(args, datas, result)
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
                else:
                    for a, d in zip(args, datas):
                        if hasattr(a, "_version_counter") and root is _root(d):
                            ref = ("in" if s is d else "inview", a, a._version_counter[0])
                            break
            refs.append(ref)
        self._saved_refs = refs

    def unshare_saved(self, tensor):
        """Give the node private copies of whatever it saved from ``tensor``'s buffer, which an in-place op
        is about to overwrite (``z.clamp_()``, ``z.mul_(w)`` on a graph tensor): torch's clone-on-write."""
        if not self.saved or not self._saved_refs:
            return
        saved, refs = list(self.saved), self._saved_refs
        for i, ref in enumerate(refs):
            if ref is not None and ref[0] in ("in", "inview") and ref[1] is tensor:
                shadow = _make_tensor(saved[i].copy(), tensor._backend, tensor._requires_grad)
                shadow._grad_fn = tensor._grad_fn  # the values' history, for create_graph
                saved[i] = shadow._data
                refs[i] = ("in" if ref[0] == "in" else "inview", shadow, 0)
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
        if self.saved is not None:
            self._released = True
        self.saved = None
        self._saved_refs = None

    # -- to be defined by ops -----------------------------------------------------------------------------------
    def forward(self, xp, *inputs):
        raise NotImplementedError

    def backward(self, xp, gy):
        raise NotImplementedError(f"{self.name()} has no backward")
