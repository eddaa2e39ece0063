"""The op base class: ``Op.apply`` runs an op's forward on the inputs' backend and records its node.

An op is one class: ``forward(xp, *arrays)`` computes, ``backward(xp, gy)`` returns one gradient per positional
input (the VJP), and optional ``forward_<backend>`` / ``backward_<backend>`` methods are fast paths with the same
contract; ``formula`` says the VJP in words (``explain`` shows it).  ``Op.apply`` decides the backend once, from
the inputs' data, and records the node.  Broadcasting is undone by the engine, never by an op: a VJP may return a
gradient in the broadcast shape.

``apply`` has one fast path, for what nearly every call is: inputs on one device, no view to re-derive, no dtype to
promote, no forward-mode tangents, no anomaly mode, no recording.  Each rare case is noticed in the same pass over
the inputs (or by one flag) and branches off once, to :meth:`Op._apply_general`.
"""
from __future__ import annotations

from gpugrad.backend import backend_of, graphs
from gpugrad.core import anomaly, autocast, batching, forward, forward_state, tensor_xp, trace
from gpugrad.core.grad_mode import STATE
from gpugrad.core.node import AccumulateGrad, Node, freed_error, modified_error
from gpugrad.core.promotion import promoted
from gpugrad.core.tensor import TensorBase, make
from gpugrad.core.views import fresh, root_array, shadow, subscribe

_NO_GRAD = [(False,) * n for n in range(8)]
# One object per distinct needs_input_grad and input-metadata tuple, which a long graph's nodes then share: the
# cyclic GC's full passes over live nodes touch every object a node refers to, and shared ones stay in cache (a
# 100,000-iteration chain's forward spent 0.6 s of 2.3 s in them). Bounded: a program of ever-new shapes clears it.
_SHARED = {}
_SHARED_MAX = 4096
_FORWARD = forward_state.STATE
_ANOMALY = anomaly.STATE
_AUTOCAST = autocast.STATE
_BATCHING = batching.STATE
_new = object.__new__
_PY_NUMBERS = frozenset((int, float, bool, complex))
BACKENDS = ("cpu", "cuda")


def describe(op: str, args) -> str:
    """``op: got shapes [...], dtypes [...], devices [...]`` for an error message about ``args``."""
    ts = [a for a in args if isinstance(a, TensorBase)]
    shapes = ", ".join(str(tuple(t.shape)) for t in ts)
    dtypes = ", ".join(str(t.dtype) for t in ts)
    devices = ", ".join(str(t.device) for t in ts)
    return f"{op}: got shapes [{shapes}], dtypes [{dtypes}], devices [{devices}]"


def named(t, name):
    """``t`` with its node named as torch names it: a composition's last node would otherwise name it."""
    if t._grad_fn is not None:
        t._grad_fn._name = name
    return t


class Op(Node):
    """Base class of gpugrad's built-in ops (each instance is the ``grad_fn`` of its output).

    Subclasses define ``forward(self, xp, *inputs)`` and ``backward(self, xp, gy)``; keyword arguments of
    ``apply`` become attributes before ``forward`` runs.  ``double_backward = True`` declares that ``backward``
    uses only operations that also exist on Tensors (see ``core/tensor_xp.py``), so ``create_graph=True``
    can run it on Tensors and get higher-order gradients; an op whose ``backward`` runs a kernel reference may
    instead give a Tensor-safe ``backward_graph``.  Other ops raise a clear error under ``create_graph``.
    """

    double_backward = False
    # Type promotion of the tensor inputs (core/promotion.py): True as torch's binary ops, "float" where integers
    # compute in the default float dtype (true division, exp), "same" where mixed dtypes are an error (matmul).
    promotes = False
    # A linear op's JVP is the op applied to the tangents (core/forward.py); others define
    # ``jvp(self, xp, ins, out, ts)``: the output's tangent from the inputs ``ins``, the output ``out`` and the
    # inputs' tangents ``ts`` (None where an input has none), as arrays, or as Tensors when xp is core.tensor_xp.
    linear = False
    # y's k-th element depends only on the inputs' k-th (broadcast) elements, so each input's Jacobian is diagonal
    # and J_i t = VJP_i(t): the JVP is the sum of the VJPs of the tangents, with no formula of its own.
    elementwise = False
    batched_jvp = False  # the JVP also takes tangents with a leading axis of B directions (broadcasting formulas)
    changes_device = False
    # torch makes a Python number an input of the node (an edge to nothing) for most ops (x * 2: two edges), but not
    # where its overload takes a Scalar (x ** 2, x % 2: one edge). Such ops say number_edges = False; they cannot be
    # linear (Transposed fills the inputs by position).
    number_edges = True
    _edge_slots = None  # with number_edges False: the positions of the tensor inputs, the node's only edges
    formula = None  # the VJP in words, per input ("ga = gy * b; gb = gy * a"): explain shows it
    _name = None
    saved = None
    _saved_refs = None
    _released = False
    # Indices of saved inputs that torch keeps as a copy or an intermediate of its own, not as the input tensor
    # (cross-entropy's logits, 2 / x's x, matmul's folded copies): an in-place change of the input is then legal,
    # and this node copies the values first (views.before_write) instead of raising at backward.
    private_saved = ()
    # The node's name: ``node_name`` is set by ``core.registry.register`` from the registered name, by torch's rule,
    # unless the class gives torch's own; an op named by case, as torch does (MmBackward0 vs DotBackward0), sets
    # ``_name`` in forward.
    node_name = None
    op_name = None
    _params = {}  # the keyword arguments of apply
    _forwards = _backwards = None  # backend name -> the forward / backward to run there (set per class)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Resolved once per class, not per call: a failed getattr per op (most ops have no forward_cpu) costs more
        # than the op's bookkeeping.
        cls._forwards = {b: getattr(cls, f"forward_{b}", cls.forward) for b in BACKENDS}
        cls._backwards = {b: getattr(cls, f"backward_{b}", cls.backward) for b in BACKENDS}

    def name(self) -> str:
        return self._name or self.node_name or type(self).__name__ + "Backward0"  # an op never registered

    def save_for_backward(self, *arrays):
        self.saved = arrays

    @classmethod
    def apply(cls, *args, **params):
        """Run the op on ``args`` (Tensors and Python numbers) with keyword ``params``; the result records a node
        when grad mode is on and an input requires grad."""
        if _BATCHING.dispatch is not None:  # inside gpugrad.func.vmap: a batched input goes to its batching rule
            out = _BATCHING.dispatch(cls, args, params)
            if out is not None:
                return out
        # The fast path: one pass over the inputs that finds the backend, whether to record, and whether anything
        # rare is going on (a view to re-derive, a dtype to promote, two devices); then the forward and the node.
        be = None
        record = False
        rare = _FORWARD.level is not None or _ANOMALY.enabled or trace.ACTIVE or _AUTOCAST.enabled
        first = None
        datas = []
        push = datas.append
        ng = []  # needs_input_grad, made in the same pass
        need = ng.append
        for a in args:
            if isinstance(a, TensorBase):
                if a._base is not None and a._base_fn is not a._base._grad_fn or a._inference:
                    rare = True
                d = a._data
                push(d)
                if be is None:
                    be = a._backend
                    first = d.dtype
                elif a._backend is not be or d.dtype != first:
                    rare = True
                if a._requires_grad:
                    record = True
                    need(True)
                else:
                    need(False)
            else:
                push(a)
                need(False)
                if type(a) is complex:
                    rare = True
        if rare or cls.promotes and first.kind not in "fV":
            return cls._apply_general(args, params)
        fn = _new(cls)
        if params:
            fn.__dict__.update(params)
            fn._params = params
        if record and STATE.enabled:
            # NOTE: tuples, here and in _connect: a tuple of untracked items leaves the cyclic GC's view at its first
            # collection, a list never does, and on a long graph the GC's full passes over live nodes cost more than
            # the op itself (a 100,000-op chain: ~2x the forward)
            ng = tuple(ng)
            fn.needs_input_grad = _SHARED.setdefault(ng, ng)
        else:
            record = False
            fn.needs_input_grad = _NO_GRAD[len(args)] if len(args) < 8 else (False,) * len(args)
        fn._be = be
        try:
            out = fn._forwards["cpu"](fn, be.xp, *datas) if be.on_host else fn._run_forward(be, datas)
        except ValueError as e:
            raise _as_broadcast_error(fn, datas, e) from None
        if not isinstance(out, be.array_type) or fn.changes_device:
            return fn._finish(args, datas, out, record, params)
        result = make(out, be)
        if record and out.dtype.kind in "fV":
            fn._connect(args, result)
        return result

    def _run_forward(self, be, datas):
        # CUDA: CuPy launches on the current device, so the inputs' device is made current (with several devices)
        scope = be.device_scope
        forward = self._forwards[be.name]
        try:
            if scope is None:
                return forward(self, be.xp, *datas)
            with scope:
                return forward(self, be.xp, *datas)
        except Exception as e:
            if graphs.CAPTURING:  # name the op: the device error alone says only which CuPy call failed
                raise graphs.capture_error(type(self).__name__, e) from e
            raise

    def _connect(self, args, result):
        """Record this node as ``result``'s grad_fn, with edges to the inputs that require grad."""
        parents, meta = [], []
        for a in args:
            if isinstance(a, TensorBase):
                d = a._data
                meta.append((d.shape, d.dtype))
                if a._requires_grad:
                    parent = a._grad_fn
                    parents.append(parent if parent is not None else AccumulateGrad.of(a))
                else:
                    parents.append(None)
            elif self.number_edges:
                meta.append(None)
                parents.append(None)
        if not self.number_edges:
            self._edge_slots = [i for i, a in enumerate(args) if isinstance(a, TensorBase)]
        n = len(parents)
        if n == 1:
            self._p0 = parents[0]
        elif n == 2:
            self._p0, self._p1 = parents
        else:
            self._parents = tuple(parents)
        meta = tuple(meta)
        if len(_SHARED) > _SHARED_MAX:
            _SHARED.clear()
        self._in_meta = _SHARED.setdefault(meta, meta)
        result._requires_grad = True
        result._grad_fn = self
        if self.saved:
            self._bind_saved(args, result)

    @classmethod
    def _apply_general(cls, args, params):
        """Every case: autocast, promotion, view refresh, device checks, inference tensors, forward mode, anomaly,
        record()."""
        if _AUTOCAST.enabled:  # the inputs in the dtype autocast's op lists give this op on their device
            args = autocast.cast_inputs(cls.op_name, args)
        if cls.promotes:  # torch's type promotion: the inputs cast to the dtype the op computes in
            args = promoted(cls, args)
        fn = _new(cls)
        if params:
            fn.__dict__.update(params)
            fn._params = params
        be = None
        record = False
        datas = []
        for a in args:
            if isinstance(a, TensorBase):
                fresh(a)  # its base was changed in place with a graph since the view was taken
                datas.append(a._data)
                if be is None:
                    be = a._backend
                elif a._backend is not be:
                    raise RuntimeError(f"{describe(cls.__name__.lower(), args)}: all tensors must be on the same "
                                       "device; move them with .to(device) first")
                if a._requires_grad:
                    record = True
            else:
                datas.append(a)
        if record and STATE.enabled:
            ng = []
            for a in args:
                if isinstance(a, TensorBase):
                    if a._data.dtype.kind not in "fV":
                        raise TypeError(
                            f"{describe(cls.__name__.lower(), args)}: differentiable ops need floating-point "
                            f"inputs, but one input is {a.dtype}; convert it with .float() or .to(dtype) first")
                    if a._inference:
                        raise RuntimeError(
                            f"{describe(cls.__name__.lower(), args)}: an inference tensor (made under "
                            "inference_mode) cannot be saved for backward; make a copy with .clone() outside it")
                    ng.append(a._requires_grad)
                else:
                    ng.append(False)
            fn.needs_input_grad = ng
        else:
            record = False
            fn.needs_input_grad = _NO_GRAD[len(args)] if len(args) < 8 else (False,) * len(args)
        forward_mode = _FORWARD.level is not None and not _FORWARD.paused
        if forward_mode:  # forward mode: save what the VJP reads of these too
            fn.needs_input_grad = [n or forward.tangent_of(a) is not None for n, a in zip(fn.needs_input_grad, args)]
        fn._be = be
        try:
            out = fn._run_forward(be, datas)
        except ValueError as e:
            raise _as_broadcast_error(fn, datas, e) from None
        result = fn._finish(args, datas, out, record, params)
        if forward_mode:
            forward.propagate(fn, args, datas, result, params)
        return result

    def _finish(self, args, datas, out, record, params):
        """The output as a Tensor (on its own backend for a device move; NumPy's 0-d scalars as 0-d arrays), its node
        recorded, and the rare modes' bookkeeping (anomaly stacks, record())."""
        rbe = backend_of(out) if self.changes_device else self._be
        if not isinstance(out, rbe.array_type):
            # NumPy returns 0-d results as scalars (np.float32): the tensor gets a 0-d array, and an op that saved
            # its output (exp, sqrt, div, max) must hold that same array, or it is not recognised as the output.
            array = rbe.as_array(out)
            if self.saved:
                self.saved = tuple(array if s is out else s for s in self.saved)
            out = array
        result = make(out, rbe)
        if record and out.dtype.kind in "fV":
            self._connect(args, result)
            if _ANOMALY.enabled:
                anomaly.record(self)
        if trace.ACTIVE and trace.WATCH.recording is not None:
            trace.WATCH.recording(result)
        return result

    def _bind_saved(self, args, result):
        # Remember which saved arrays are (views of) an input's or the output's buffer, with the version it had,
        # so an in-place change before backward is caught instead of silently giving a wrong gradient.  Memory is
        # compared, not identity: ops often save a reshaped view (softmax's 2-D rows, max's keepdims result).
        array_type = self._be.array_type
        out_data = result._data
        out_root = None
        refs = []
        bound = False
        for s in self.saved:
            ref = None
            if isinstance(s, array_type):
                if out_root is None:
                    out_root = root_array(out_data)
                root = root_array(s)
                if root is out_root:
                    counter = result._version_counter
                    ref = ("out" if s is out_data else "outview", counter, counter[0])
                else:  # the input itself first: x * x.unsqueeze(0) saves two arrays of one buffer
                    for a in args:
                        if isinstance(a, TensorBase) and s is a._data:
                            ref = ("in", a, a._version_counter[0])
                            break
                    else:
                        for a in args:
                            if isinstance(a, TensorBase) and root is root_array(a._data):
                                ref = ("inview", a, a._version_counter[0])
                                break
            refs.append(ref)
            if ref is not None:
                bound = True
        if not bound:  # nothing saved shares an input's or the output's memory: nothing to check at backward
            return
        self._saved_refs = refs
        for i in self.private_saved:
            ref = refs[i]
            if ref is not None and ref[0] in ("in", "inview"):
                subscribe(self, ref[1])

    def unshare_saved(self, tensor, counter=None):
        """Give the node private copies of whatever it saved from ``tensor``'s buffer, which an in-place op
        is about to overwrite (``z.clamp_()``, ``z.mul_(w)`` on a graph tensor): torch's clone-on-write.
        With ``counter`` (views.before_write): of its ``private_saved`` inputs whose memory has that version
        counter."""
        if not self.saved or not self._saved_refs:
            return
        saved, refs = list(self.saved), self._saved_refs
        for i, ref in enumerate(refs):
            if ref is None or ref[0] not in ("in", "inview"):
                continue
            if counter is None:
                # tensor itself, or the cast of it that type promotion made for this op: a copy that shares its
                # version counter (core/promotion.py _cast_for), as torch's op would have saved tensor
                mine = ref[1] is tensor or (ref[1]._version_counter is tensor._version_counter
                                            and root_array(saved[i]) is not root_array(tensor._data))
            else:
                mine = i in self.private_saved and ref[1]._version_counter is counter
            if mine:
                saved[i], refs[i] = shadow(saved[i], ref)
        self.saved = tuple(saved)

    # -- used by the engine -------------------------------------------------------------------------------------
    def _check_saved(self):
        if self._released:
            raise freed_error(self)
        for i, ref in enumerate(self._saved_refs or ()):
            if ref is None:
                continue
            kind, obj, version = ref
            now = obj[0] if kind.startswith("out") else obj._version_counter[0]
            if now != version:
                out = kind.startswith("out")
                raise modified_error(make(self.saved[i], self._be) if out else obj, self if out else obj._grad_fn,
                                     now, version, f" ({self.name()} saved its {'output' if out else 'input'}: avoid "
                                     "the in-place change, or .clone() first.)")

    def run_backward(self, gy, create_graph: bool):
        """The gradients for the node's edges (the engine's call): the VJP of each input, checked saved values."""
        if self._saved_refs is not None or self._released:
            self._check_saved()
        try:
            gxs = self._vjps(gy, create_graph)
        except (TypeError, AttributeError):
            if self._released:  # another thread's backward freed the saved values meanwhile: torch's error
                self._check_saved()
            raise
        if self._edge_slots is not None:  # a gradient for each tensor input only (number_edges = False)
            gxs = tuple([gxs[i] for i in self._edge_slots])
        return gxs

    def _vjps(self, gy, create_graph):
        """One gradient per positional input (None where none is needed)."""
        gxs = self._backwards[self._be.name](self, self._be.xp, gy) if not create_graph else \
            self._backward_on_tensors(gy)
        return gxs if type(gxs) is tuple else (gxs,)

    def _backward_on_tensors(self, gy):
        backward = getattr(self, "backward_graph", None) or (self.backward if self.double_backward else None)
        if backward is None and self.linear:  # the VJP of a linear op is linear: an op of its own (Transposed)
            return tuple(Transposed.apply(gy, node=self, i=i) if n else None
                         for i, n in enumerate(self.needs_input_grad))
        if backward is None:
            raise RuntimeError(
                f"{self.name()} does not support create_graph=True (higher-order gradients) yet; "
                "compute this gradient without create_graph, or express the op with differentiable ops")
        arrays = self.saved
        if self.saved is not None:
            self.saved = tensor_xp.saved_as_tensors(self)
        try:
            with tensor_xp.on_device(self._be):
                return backward(tensor_xp, gy)
        finally:
            self.saved = arrays

    def release(self):
        # Only saved arrays are freed: a node that saved just Python scalars (x * 2, add_(y, alpha=2)) stays usable,
        # as torch's nodes that saved no tensors, so a create_graph gradient may still pass through it later.
        saved = self.saved
        if saved is not None:
            for s in saved:
                if s is not None and type(s) not in _PY_NUMBERS:
                    self._released = True
                    self.saved = None
                    break
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
                g = self._vjps(t, not isinstance(t, self._be.array_type))[i]
                total = g if total is None else total + g
        return total


def _as_broadcast_error(fn, datas, e):
    """NumPy's broadcast failure as torch's RuntimeError (its sentence first, then the op and the shapes); any other
    ValueError as it is."""
    if not str(e).startswith("operands could not be broadcast together"):
        return e
    shapes = [tuple(d.shape) for d in datas if hasattr(d, "shape")]
    a = shapes[0]
    for b in shapes[1:]:
        for k in range(1, max(len(a), len(b)) + 1):  # from the last dim, as torch's infer_size
            m, n = (a[-k] if k <= len(a) else 1), (b[-k] if k <= len(b) else 1)
            if m != n and m != 1 and n != 1:
                op = getattr(fn, "op_name", None) or fn.name()
                return RuntimeError(f"The size of tensor a ({m}) must match the size of tensor b ({n}) at "
                                    f"non-singleton dimension {max(len(a), len(b)) - k}: {op} of shapes {shapes}; "
                                    "make them broadcastable (reshape, unsqueeze or expand one)")
    return e


class Transposed(Op):
    """The VJP of input ``i`` of a linear op ``node`` as an op of its own, so create_graph differentiates through it:
    its forward is node's backward (gy -> the gradient of input i), and the transpose of that linear map is node's
    forward, applied to g in slot i (zeros in the others).  Both are linear, so every order works."""
    linear = changes_device = True

    def forward(self, xp, gy):
        gxs = self.node._backwards[self.node._be.name](self.node, xp, gy)
        return (gxs if isinstance(gxs, tuple) else (gxs,))[self.i]

    def _slots(self, g, zeros):
        return [g if j == self.i else (zeros(meta) if meta is not None else 0)
                for j, meta in enumerate(self.node._in_meta)]

    def backward(self, xp, g):
        node = type(self.node).__new__(type(self.node))
        node.__dict__.update(self.node.__dict__)  # its params and the shapes its forward worked out
        node.saved, node.needs_input_grad = None, (False,) * len(self.node._in_meta)
        be = self.node._be
        return node._forwards[be.name](node, be.xp, *self._slots(g, lambda m: be.xp.zeros(m[0], dtype=m[1])))

    def backward_graph(self, xp, g):
        be = self.node._be
        return type(self.node).apply(*self._slots(g, lambda m: make(be.xp.zeros(m[0], dtype=m[1]), be)),
                                     **self.node._params)

