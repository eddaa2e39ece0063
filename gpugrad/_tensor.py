"""Tensor: an array (NumPy or CuPy) plus what autograd needs.  Methods are one-line bindings to ops."""
from __future__ import annotations

import numbers
import weakref

import numpy as np

from gpugrad.autograd.grad_mode import STATE
from gpugrad.backend import backend_of, get_backend, on
from gpugrad.backend.deferred import raise_pending
from gpugrad import ops as _ops
from gpugrad import creation as _creation, dtypes as _dtypes
from gpugrad.dtypes import DEFAULTS, Size, as_dtype, default_complex, is_dtype, of_array
from gpugrad.ops.activation import POINTWISE_OPS, BiasAct, Dropout
from gpugrad.ops.arith import Abs, Add, Clamp, Div, Maximum, Minimum, Mul, Neg, Pow, Sub, Where
from gpugrad.ops.matmul import Matmul
from gpugrad.ops.movement import Cat, Expand, Gather, Index, Permute, Reshape, Squeeze, Stack, Unsqueeze
from gpugrad.ops.reduce import Max, Mean, Min, Std, Sum, Var
from gpugrad.ops.rounding import Fmod, Remainder, RoundingDiv
from gpugrad.ops.softmax import LogSoftmax, LogSumExp, Softmax


def _make(data, backend, requires_grad=False):
    """Internal constructor: no checks, no copies (the hot path of every op)."""
    t = object.__new__(Tensor)
    t._data = data
    t._backend = backend
    t._requires_grad = requires_grad
    t._grad = None
    t._grad_fn = None
    t._accumulator = None
    t._version_counter = [0]
    t._base = t._view_fn = t._base_fn = None
    t._inference = STATE.inference
    t._fw_grad = None
    t._post_acc_hooks = None
    return t


def _on_own_device(method):
    """Run a method that calls ``xp`` directly (not through an op) on its tensor's device: CuPy launches on the
    current device, and ops already switch in ``Op.apply``."""
    def wrapped(self, *args, **kwargs):
        scope = self._backend.device_scope
        if scope is None:
            return method(self, *args, **kwargs)
        with scope:
            return method(self, *args, **kwargs)

    wrapped.__name__, wrapped.__doc__ = method.__name__, method.__doc__
    return wrapped


class Tensor:
    """An n-dimensional array on a device that can record the ops applied to it.

    >>> x = gpugrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4., 6.])
    """

    # _base: the tensor whose memory a view shares; _view_fn: array -> the view (to write through it, or to
    # re-derive the view's graph); _base_fn: the base's grad_fn when the view's graph was last derived.
    __slots__ = ("_data", "_backend", "_requires_grad", "_grad", "_grad_fn", "_accumulator", "_version_counter",
                 "_base", "_view_fn", "_base_fn", "_inference", "_fw_grad", "_post_acc_hooks",
                 "__weakref__")
    __array_ufunc__ = None  # numpy defers `ndarray + tensor` to Tensor.__radd__
    __hash__ = object.__hash__  # == is elementwise; identity hashing keeps tensors usable as dict keys

    def __init__(self, data, requires_grad=False, dtype=None, device=None):
        from gpugrad.creation import _to_array

        self._init(*_to_array(data, dtype, device), requires_grad)

    def _init(self, array, backend, requires_grad):
        self._data, self._backend = array, backend
        self._requires_grad = False
        self._grad = self._grad_fn = self._accumulator = self._base = self._view_fn = self._base_fn = None
        self._version_counter = [0]
        self._inference = STATE.inference
        self._fw_grad = None
        self._post_acc_hooks = None  # register_post_accumulate_grad_hook
        if requires_grad:
            self.requires_grad_(True)

    def __reduce__(self):
        # Pickle/deepcopy by value: host data, device and flags (the backend holds modules, which do not pickle).
        raise_pending(self._backend)  # reads of a device raise its failed device-side checks (backend/deferred.py)
        return _rebuild, (type(self), self._backend.to_host(self._data), str(self.device), self._requires_grad)

    @staticmethod
    def _wrap(array, backend=None):
        """A gradient array as a Tensor (no graph)."""
        return _make(array, backend or backend_of(array))

    # -- data and metadata --------------------------------------------------------------------------------------
    @property
    def data(self):
        """The same values as a tensor without a graph, sharing memory (as torch's): writes through it bypass
        autograd's version checks. The raw NumPy/CuPy array is ``numpy()`` (CPU) or ``_data``."""
        return _make(self._data, self._backend)

    @data.setter
    def data(self, value):
        """Swap in another tensor's (or array's) memory; its shape and dtype may differ, as in torch."""
        array = value._data if isinstance(value, Tensor) else value
        self._data, self._backend = array, backend_of(array)

    @property
    def shape(self):
        return Size(self._data.shape)

    def size(self, dim=None, **kw):
        dim = _dim(dim, False, kw, "size")["axis"]
        return self.shape if dim is None else self._data.shape[dim]

    @property
    def ndim(self):
        return self._data.ndim

    def dim(self):
        return self._data.ndim

    @property
    def dtype(self):
        return of_array(self._data)

    @property
    def device(self):
        return self._backend.device

    @property
    def is_cuda(self):
        return self._backend.name == "cuda"

    @property
    def is_cpu(self):
        return self._backend.name == "cpu"

    def get_device(self):
        """The CUDA device index, -1 on the CPU."""
        return -1 if self._backend.name == "cpu" else self._backend.device.index

    def is_floating_point(self):
        return self._data.dtype.kind == "f"

    def is_complex(self):
        return self._data.dtype.kind == "c"

    def element_size(self):
        return self._data.dtype.itemsize

    itemsize = property(element_size)
    nbytes = property(lambda self: self._data.nbytes)

    def numel(self):
        return int(self._data.size)

    def __len__(self):
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    @property
    def _version(self):
        return self._version_counter[0]

    # -- autograd state -----------------------------------------------------------------------------------------
    @property
    def requires_grad(self):
        return _function.fresh(self)._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError("requires_grad can only be turned off on a leaf; use .detach() for a "
                                   "non-leaf tensor")
            return self
        if requires_grad and self._data.dtype.kind != "f":  # NOTE: torch allows complex too; gpugrad has no complex VJPs
            raise RuntimeError(f"Only Tensors of floating point dtype can require gradients, got {self.dtype}; "
                               "convert with .float() first")
        if requires_grad and self._inference:
            raise RuntimeError("an inference tensor (made under inference_mode) cannot require grad; "
                               "make a copy with .clone() outside inference_mode")
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad_fn(self):
        return _function.fresh(self)._grad_fn

    @property
    def is_leaf(self):
        return _function.fresh(self)._grad_fn is None

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape or value.dtype != self.dtype or value.device != self.device:
                raise RuntimeError(f"assigned grad has shape {value.shape}, dtype {value.dtype}, device "
                                   f"{value.device}; the tensor has {self.shape}, {self.dtype}, {self.device}")
        self._grad = value

    def retain_grad(self):
        """Keep .grad on a non-leaf after backward (leaves always keep theirs)."""
        if not _function.fresh(self)._requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        if self._grad_fn is not None:
            self._grad_fn._retain = weakref.ref(self)

    @property
    def retains_grad(self):
        """True on a non-leaf after ``retain_grad()`` (False on leaves, as torch)."""
        fn = _function.fresh(self)._grad_fn
        return fn is not None and fn._retain is not None and fn._retain() is self

    def register_hook(self, hook):
        """``hook(grad) -> Tensor or None`` runs when this tensor's gradient is computed; may replace it."""
        if not _function.fresh(self)._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        from gpugrad.autograd.function import AccumulateGrad

        if self._grad_fn is None:
            return AccumulateGrad.register_leaf_hook(self, hook)  # kept on the leaf's side: they outlive graphs
        return self._grad_fn.register_prehook(hook)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor)`` runs after backward has accumulated into this leaf's ``.grad`` (torch's hook of the same
        name; DistributedDataParallel starts a gradient bucket's all-reduce from it). Returns a handle to remove it."""
        if not _function.fresh(self)._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = []
        self._post_acc_hooks.append(hook)
        return _function._HookHandle(self._post_acc_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (``gradient`` = upstream, for non-scalars)."""
        from gpugrad.autograd import backward

        backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def detach(self):
        """Same data (shared), no graph."""
        t = _make(self._data, self._backend)
        t._version_counter = self._version_counter  # in-place changes through it are seen by saved copies
        return t

    def detach_(self):
        if self._base is not None and self._base._requires_grad:
            raise RuntimeError("detach_() on a view of a tensor that requires grad is not allowed; use detach()")
        self._grad_fn = None
        self._requires_grad = False
        return self

    def clone(self):
        return Copy.apply(self)

    # -- conversion ---------------------------------------------------------------------------------------------
    def numpy(self, *, force=False):
        """The CPU tensor's array (shared memory); ``force=True`` copies from any device, as torch."""
        if not force and self.requires_grad:
            raise RuntimeError("can't call numpy() on a tensor that requires grad; use .detach().numpy()")
        raise_pending(self._backend, "Tensor.numpy()")
        return self._backend.to_host(self._data) if force else self.__array__()

    def __array__(self, dtype=None, copy=None):
        """NumPy's view of a CPU tensor (no copy). A CUDA tensor refuses, as torch's: copying it to the host is a
        sync that should be written down (``.cpu()``)."""
        if self._backend.name != "cpu":
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        a = self._data if dtype is None else self._data.astype(dtype)
        return a.copy() if copy and a is self._data else a

    def __dlpack__(self, *args, **kwargs):
        """Export the memory (zero copy) to any DLPack consumer: ``np.from_dlpack``, ``torch.from_dlpack``,
        ``cupy.from_dlpack``."""
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        raise_pending(self._backend, None)  # not a host read: allowed inside a capture
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __format__(self, spec):
        """``f"{loss:.4f}"`` formats a 0-d tensor's value, as torch; other tensors take no format spec."""
        return format(self.item(), spec) if self._data.ndim == 0 else object.__format__(self, spec)

    def item(self):
        if self._data.size != 1:
            raise RuntimeError(f"item(): a Tensor with {self._data.size} elements cannot be converted to a Python "
                               f"scalar (shape {list(self._data.shape)})")
        raise_pending(self._backend, "Tensor.item()")  # also float(), int(), bool(), index(), format()
        return self._data.reshape(()).item()

    def tolist(self):
        raise_pending(self._backend, "Tensor.tolist()")
        return self._backend.to_host(self._data).tolist()

    def __float__(self):
        return float(self._scalar())

    def __int__(self):
        return int(self._scalar())

    def _scalar(self):
        if self._data.size != 1:  # as torch: float() and int() raise ValueError where item() raises RuntimeError
            raise ValueError(f"only one element tensors can be converted to Python scalars, got shape "
                             f"{list(self._data.shape)}")
        return self.item()

    def __bool__(self):
        if self._data.size != 1:
            raise RuntimeError(f"the truth value of a tensor with {self._data.size} elements is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype.kind not in "iu" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
        """Copy to another device and/or dtype (differentiable), as torch: ``to(dtype)``, ``to(device, dtype)``,
        ``to(other)`` (other's device and dtype). Returns self when nothing changes, unless ``copy=True``."""
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif is_dtype(a):
                dtype = a
            elif not isinstance(a, bool):  # a positional non_blocking
                device = a
        out = self
        if dtype is not None and as_dtype(dtype) != self._data.dtype:
            out = Cast.apply(out, dtype=as_dtype(dtype).dtype)
        if device is not None:
            be = get_backend(device)
            if be is not out._backend:
                if be.name == "cpu":
                    raise_pending(out._backend, "copying a tensor to the CPU (Tensor.cpu(), .to('cpu'))")
                out = ToDevice.apply(out, source=out._backend, target=be)
        return out.clone() if copy and out is self else out

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device))

    def float(self):
        return self.to(dtype=np.float32)

    def double(self):
        return self.to(dtype=np.float64)

    def long(self):
        return self.to(dtype=np.int64)

    def int(self): return self.to(dtype=np.int32)
    def short(self): return self.to(dtype=np.int16)
    def char(self): return self.to(dtype=np.int8)
    def byte(self): return self.to(dtype=np.uint8)
    def bool(self): return self.to(dtype=np.bool_)
    def half(self): return self.to(dtype=np.float16)

    def contiguous(self, memory_format=None):
        """Self if its memory is C-ordered, else a C-ordered copy (differentiable)."""
        return self if self.is_contiguous() else Copy.apply(self, order="C")

    def is_contiguous(self, memory_format=None):
        return bool(self._data.flags.c_contiguous)

    def type(self, dtype=None):
        """``type()``: the legacy type name (``gpugrad.FloatTensor``, ``gpugrad.cuda.LongTensor``); ``type(dtype)``:
        a cast."""
        if dtype is None:
            return f"gpugrad.{'cuda.' if self.is_cuda else ''}{_TYPE_NAMES.get(self._data.dtype.name, 'Unknown')}Tensor"
        return self.to(dtype=dtype)

    astype = type

    # -- creation: new tensors with this one's dtype and device (torch's new_*), random fills ---------------------------
    def _new_like(self, fn, *args, dtype=None, device=None, **kw):
        return fn(*args, dtype=self.dtype if dtype is None else dtype, device=device or self.device, **kw)

    def new_zeros(self, *size, **kw): return self._new_like(_creation.zeros, *size, **kw)
    def new_ones(self, *size, **kw): return self._new_like(_creation.ones, *size, **kw)
    def new_empty(self, *size, **kw): return self._new_like(_creation.empty, *size, **kw)
    def new_full(self, size, fill_value, **kw): return self._new_like(_creation.full, size, fill_value, **kw)
    def new_tensor(self, data, **kw): return self._new_like(_creation.tensor, data, **kw)

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        return self._random_fill("standard_normal", generator, lambda z: z * std + mean)

    def uniform_(self, a=0.0, b=1.0, *, generator=None):
        """Uniform draws in [a, b) (torch's ``from`` and ``to``)."""
        return self._random_fill("random", generator, lambda u: u * (b - a) + a)

    def _random_fill(self, draw, generator, scale):
        d = _creation._floating(self.dtype, draw)
        with on(self._backend):
            z = scale(_creation._draw(draw, self._backend, generator, self._data.shape, d)).astype(d, copy=False)
        return self.copy_(_make(z, self._backend))

    def __repr__(self):
        raise_pending(self._backend, "printing a tensor")
        host = self._backend.to_host(self._data)
        finite = host[np.isfinite(host)] if host.dtype.kind == "f" else host
        whole = host.dtype.kind != "f" or bool(np.all(finite == np.round(finite)))
        # torch prints 4 decimals unless every value is whole ("1., 2.")
        # NOTE: NumPy's 81 wraps rows where torch's linewidth of 80 does (8 four-decimal values a line, not 7)
        body = np.array2string(host, separator=", ", precision=4, prefix="tensor(", max_line_width=81,
                               floatmode="maxprec_equal" if whole else "fixed").replace(", ...,", ",  ...,")
        extras = []
        if self.device.type != "cpu":
            extras.append(f"device='{self.device}'")
        if host.dtype not in (DEFAULTS.float, default_complex(), np.int64, np.bool_):
            extras.append(f"dtype={self.dtype}")
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn.name()}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        out = "tensor(" + body
        last = len(out) - out.rfind("\n") + 1  # torch's count of the last line, kept exactly so lines break alike
        for e in extras:  # each suffix on its own line where it would pass torch's 80 columns
            wrap = last + len(e) + 2 > 80
            out, last = out + (",\n       " if wrap else ", ") + e, (7 if wrap else last + 2) + len(e)
        return out + ")"

    # -- helpers for the bindings below -------------------------------------------------------------------------
    def _other(self, other):
        """A Python/NumPy scalar stays a scalar (weakly typed, as in NumPy 2 and torch); arrays become tensors."""
        if isinstance(other, Tensor):
            return other
        if isinstance(other, np.generic):
            return other.item()  # NumPy 2 treats np.float64(2) as strong: x32 * it would become float64
        if isinstance(other, numbers.Number):
            return other
        return Tensor(other, device=self.device)

    # -- arithmetic -----------------------------------------------------------------------------------------------
    def __add__(self, o): return Add.apply(self, self._other(o))
    def __radd__(self, o): return Add.apply(self._other(o), self)
    def __sub__(self, o): return Sub.apply(self, self._other(o))
    def __rsub__(self, o): return Sub.apply(self._other(o), self)
    def __mul__(self, o): return Mul.apply(self, self._other(o))
    def __rmul__(self, o): return Mul.apply(self._other(o), self)
    def __truediv__(self, o): return Div.apply(self, self._other(o))
    def __rtruediv__(self, o): return Div.apply(self._other(o), self)
    def __pow__(self, o): return Pow.apply(self, self._other(o))
    def __rpow__(self, o): return Pow.apply(self._other(o), self)
    def __neg__(self): return Neg.apply(self)
    def __pos__(self): return self
    def __matmul__(self, o): return Matmul.apply(self, self._other(o))
    def __rmatmul__(self, o): return Matmul.apply(self._other(o), self)
    def __abs__(self): return Abs.apply(self)

    def add(self, o): return self + o
    def sub(self, o): return self - o
    def mul(self, o): return self * o
    def pow(self, o): return self ** o
    def neg(self): return Neg.apply(self)
    def matmul(self, o): return self @ o
    def abs(self): return Abs.apply(self)
    def square(self): return self * self
    def maximum(self, o): return Maximum.apply(self, self._other(o))
    def minimum(self, o): return Minimum.apply(self, self._other(o))

    def clamp(self, min=None, max=None):
        """min(max(x, min), max); a Tensor bound gets the gradient where it binds (x beyond it), as in torch."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        if not isinstance(min, Tensor) and not isinstance(max, Tensor):
            return Clamp.apply(self, lo=min, hi=max)
        x = self if min is None else Where.apply(self._other(min), self, cond=(self < min)._data)
        return x if max is None else Where.apply(self._other(max), x, cond=(x > max)._data)

    clip = clamp
    def clamp_min(self, min): return self.clamp(min)
    def clamp_max(self, max): return self.clamp(None, max)

    # -- rounding division, integers staying integers: // and % as Python's, fmod as C's -------------------------------
    def __floordiv__(self, o): return RoundingDiv.apply(self, self._other(o), mode="floor")
    def __rfloordiv__(self, o): return RoundingDiv.apply(self._other(o), self, mode="floor")
    def __mod__(self, o): return Remainder.apply(self, self._other(o))
    def __rmod__(self, o): return Remainder.apply(self._other(o), self)
    def fmod(self, o): return Fmod.apply(self, self._other(o))
    floor_divide, remainder = __floordiv__, __mod__

    def div(self, o, *, rounding_mode=None):
        if rounding_mode not in (None, "trunc", "floor"):
            raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                               f"{rounding_mode!r}")
        return self / o if rounding_mode is None else RoundingDiv.apply(self, self._other(o), mode=rounding_mode)

    # -- comparisons: results carry no gradient ---------------------------------------------------------------------
    @_on_own_device
    def _compare(self, o, fn):
        o = self._other(o)
        od = o._data if isinstance(o, Tensor) else o
        return _make(self._backend.as_array(fn(self._data, od)), self._backend)  # 0-d: an array, not a scalar

    def __eq__(self, o): return self._compare(o, lambda a, b: a == b)
    def __ne__(self, o): return self._compare(o, lambda a, b: a != b)
    def __lt__(self, o): return self._compare(o, lambda a, b: a < b)
    def __le__(self, o): return self._compare(o, lambda a, b: a <= b)
    def __gt__(self, o): return self._compare(o, lambda a, b: a > b)
    def __ge__(self, o): return self._compare(o, lambda a, b: a >= b)
    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__

    @_on_own_device
    def __invert__(self):
        return _make(self._backend.as_array(~self._data), self._backend)

    def __and__(self, o): return self._compare(o, lambda a, b: a & b)
    def __or__(self, o): return self._compare(o, lambda a, b: a | b)

    def __xor__(self, o): return self._compare(o, lambda a, b: a ^ b)
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    @_on_own_device
    def _values(self, name, *others, **kw):
        """``xp.<name>(data, *others, **kw)`` as a tensor without a graph: tests of values, logic, indices."""
        args = [o._data if isinstance(o, Tensor) else o for o in map(self._other, others)]
        return _make(self._backend.as_array(getattr(self._backend.xp, name)(self._data, *args, **kw)), self._backend)

    def argmax(self, dim=None, keepdim=False, **kw): return self._values("argmax", **_dim(dim, keepdim, kw, "argmax"))
    def argmin(self, dim=None, keepdim=False, **kw): return self._values("argmin", **_dim(dim, keepdim, kw, "argmin"))
    def all(self, dim=None, keepdim=False, **kw): return self._values("all", **_dim(dim, keepdim, kw, "all"))
    def any(self, dim=None, keepdim=False, **kw): return self._values("any", **_dim(dim, keepdim, kw, "any"))

    def count_nonzero(self, dim=None):
        return self._values("count_nonzero", axis=_dim(dim, False, {}, "count_nonzero")["axis"])

    # -- reductions: torch's dim (an int or a tuple) and keepdim; NumPy's axis= / keepdims= work too, as in torch ------
    def sum(self, dim=None, keepdim=False, *, dtype=None, **kw):
        return Sum.apply(self._cast(dtype), **_dim(dim, keepdim, kw, "sum"))

    def mean(self, dim=None, keepdim=False, *, dtype=None, **kw):
        x = self._cast(dtype)
        if x._data.dtype.kind not in "fc":
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                               f"complex dtype. Got: {x.dtype}; pass dtype= or call .float() first")
        return Mean.apply(x, **_dim(dim, keepdim, kw, "mean"))

    def amax(self, dim=(), keepdim=False, **kw): return Max.apply(self, **_dim(dim, keepdim, kw, "amax"))
    def amin(self, dim=(), keepdim=False, **kw): return Min.apply(self, **_dim(dim, keepdim, kw, "amin"))

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None, **kw):
        return Var.apply(self, **_moment(dim, unbiased, keepdim, correction, kw, "var"))

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None, **kw):
        return Std.apply(self, **_moment(dim, unbiased, keepdim, correction, kw, "std"))

    def softmax(self, dim=-1, **kw): return Softmax.apply(self, axis=_dim(dim, False, kw, "softmax")["axis"])
    def log_softmax(self, dim=-1, **kw): return LogSoftmax.apply(self, axis=_dim(dim, False, kw, "log_softmax")["axis"])

    def logsumexp(self, dim=-1, keepdim=False, **kw):
        return LogSumExp.apply(self, **_dim(dim, keepdim, kw, "logsumexp"))

    def _cast(self, dtype):
        return self if dtype is None else self.to(dtype=dtype)

    # -- movement -------------------------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        out = Reshape.apply(self, shape=shape)
        if not _shares_memory(out, self):  # reshaping a non-contiguous tensor copies: that is no view
            return out
        new_shape = out.shape
        return _view(out, self, lambda a: a.reshape(new_shape))

    def view(self, *shape):
        """Same memory, new shape: never copies.  Raises (as torch) where the strides do not allow it, e.g. a
        transposed tensor flattened; ``reshape`` copies then."""
        out = self.reshape(*shape)
        if out._base is None and self._data.size:  # reshape had to copy
            raise RuntimeError(f"view size is not compatible with input tensor's size and stride: shape {out.shape} "
                               f"cannot view a tensor of shape {self.shape} and strides {self._data.strides} (at least "
                               "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
        return out

    def flatten(self, start_dim=0, end_dim=-1):
        nd = max(self.ndim, 1)
        s, e = start_dim % nd, end_dim % nd
        shape = self.shape[:s] + (-1,) + self.shape[e + 1:] if self.ndim else (1,)
        return self.reshape(shape)

    def permute(self, *axes):
        axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        out = Permute.apply(self, axes=axes)
        normalized = tuple(a % max(self.ndim, 1) for a in axes)
        return _view(out, self, lambda a: a.transpose(normalized))

    def transpose(self, dim0=None, dim1=None):
        if dim0 is None:
            return self.permute(tuple(reversed(range(self.ndim))))
        axes = list(range(self.ndim))
        axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
        out = self.permute(tuple(axes))
        if out._grad_fn is not None:
            out._grad_fn._name = "TransposeBackward0"
        return out

    @property
    def T(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def t(self):
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, got {self.ndim}; use transpose(d0, d1)")
        out = self.T
        if out._grad_fn is not None:
            out._grad_fn._name = "TBackward0"
        return out

    def expand(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        out = Expand.apply(self, shape=shape)
        new_shape, xp = out.shape, self._backend.xp
        out._data = _broadcast(xp, self._data, new_shape)
        return _view(out, self, lambda a: _broadcast(xp, a, new_shape))

    def expand_as(self, other):
        return self.expand(other.shape)

    broadcast_to = expand

    def squeeze(self, dim=None, **kw):
        return self._reshaped_view(Squeeze.apply(self, axis=_dim(dim, False, kw, "squeeze")["axis"]))

    def unsqueeze(self, dim=None, **kw):
        return self._reshaped_view(Unsqueeze.apply(self, axis=_dim(dim, False, kw, "unsqueeze")["axis"]))

    def _reshaped_view(self, out):
        shape = out.shape
        return _view(out, self, lambda a: a.reshape(shape))

    def __getitem__(self, key):
        key = _index_key(key, self)
        if not _basic_key(key):
            return Index.apply(self, key=key)
        keys, lone = (key if isinstance(key, tuple) else (key,)), isinstance(key, slice)
        if Ellipsis not in keys:
            key = keys + (Ellipsis,)  # x[0] of a 1-D array is a scalar copy; x[0, ...] is a 0-d view
        return _view(Index.apply(self, key=key, lone_slice=lone), self, lambda a: a[key])

    def gather(self, dim=None, index=None, **kw):
        """torch.gather: ``out[i][j] = self[index[i][j]][j]`` for dim 0, and so on."""
        idx = _index_array(index, self, "gather")
        return Gather.apply(self, index=idx, axis=_dim(dim, False, kw, "gather")["axis"])

    def take_along_axis(self, index, axis):
        return self.gather(axis, index)

    @_on_own_device
    def masked_fill(self, mask, value):
        mask = _index_array(mask, self, "masked_fill")
        return Where.apply(self._other(value) if isinstance(value, Tensor) else
                           Tensor(self._backend.xp.asarray(value, dtype=self.dtype), device=self.device),
                           self, cond=mask)

    def dropout(self, p=0.5, training=True):
        from gpugrad.nn.functional import dropout

        return dropout(self, p, training)

    # -- in place: bump the version counter so saved copies are checked ------------------------------------------
    def _check_inplace(self, op, other=None):
        root = self._base if self._base is not None else self
        recording = STATE.enabled and (self._requires_grad or root._requires_grad
                                       or (isinstance(other, Tensor) and other._requires_grad))
        if recording and root.is_leaf and root._requires_grad:
            what = "a view of a leaf tensor" if root is not self else "a leaf tensor"
            raise RuntimeError(f"{op}: {what} that requires grad is being used in an in-place operation; "
                               "wrap it in `with gpugrad.no_grad():` (e.g. for a parameter update)")
        return recording

    @_on_own_device
    def _inplace(self, op, result_fn, other=None, fits=True):
        _check_overlap(self, op, other)
        if fits and isinstance(other, Tensor):
            _check_fits(self, other, op)
        if self._check_inplace(op, other):
            if self._base is not None and self._base_fn is not self._base._grad_fn:
                _function._refresh_view(self)
            result = result_fn()  # out of place, with a graph; then moved into our buffer
            node = result._grad_fn
            if node is not None and hasattr(node, "unshare_saved"):
                node.unshare_saved(self)  # it may have saved the buffer we are about to overwrite
            self._store(op, result)
            if self._base is None:
                _function.rebase(self, node)
            else:
                _write_through(self, result)
        else:
            with _no_grad():
                result = result_fn()
            self._store(op, result)
        if result._fw_grad is not None or self._fw_grad is not None:
            _forward_ad.write_tangent(self, result._fw_grad)
        self._version_counter[0] += 1
        return self

    def _store(self, op, result):
        if not _dtypes.can_cast(result._data.dtype, self._data.dtype):  # as torch: int += float refuses
            raise RuntimeError(f"{op}: result type {result.dtype} can't be cast to the desired output type "
                               f"{self.dtype}; compute out of place, or convert the tensor first (.float())")
        _function.before_write(self)
        self._backend.xp.copyto(self._data, result._data, casting="unsafe")

    def add_(self, o, alpha=1):
        o = self._other(o)
        return self._inplace("add_", lambda: self + (o * alpha if alpha != 1 else o), o)

    def sub_(self, o, alpha=1):
        o = self._other(o)
        return self._inplace("sub_", lambda: self - (o * alpha if alpha != 1 else o), o)

    def mul_(self, o):
        o = self._other(o)
        return self._inplace("mul_", lambda: self * o, o)

    def div_(self, o):
        o = self._other(o)
        return self._inplace("div_", lambda: self / o, o)

    def clamp_(self, min=None, max=None):
        return self._inplace("clamp_", lambda: self.clamp(min, max))

    def zero_(self):
        return self._fill(0, "zero_")

    def fill_(self, value):
        return self._fill(value, "fill_")

    @_on_own_device
    def _fill(self, value, op):
        if self._check_inplace(op, value):
            # Recorded as torch does: the old values get a zero gradient that carries no graph (FillBackward2,
            # ZeroBackward0), so a create_graph pass has no edge into their history.
            name = "ZeroBackward0" if op == "zero_" else "FillBackward2"
            return self._inplace(op, lambda: Overwrite.apply(self, value, _name=name), value)
        _function.before_write(self)
        self._data.fill(value)
        if self._fw_grad is not None:
            _forward_ad.write_tangent(self, None)
        self._version_counter[0] += 1
        return self

    def copy_(self, src):
        src = self._other(src)
        if not isinstance(src, Tensor):
            src = Tensor(src, dtype=self.dtype, device=self.device)
        if self._check_inplace("copy_", src):  # torch's CopyBackwards: zeros to the old values, gy to src
            return self._inplace("copy_", lambda: Overwrite.apply(self, src.to(self.device), _name="CopyBackwards"),
                                 src)
        return self._inplace("copy_", lambda: src.to(self.device, self.dtype).expand(self.shape), src)

    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_

    def __setitem__(self, key, value):
        key = _index_key(key, self)
        value = self._other(value)
        if _basic_key(key):  # as torch: copy_ into the view self[key] (CopySlices), so only that region is written
            region = self[key]
            while isinstance(value, Tensor) and value.ndim > region.ndim and value.shape[0] == 1:
                value = value.squeeze(0)  # torch drops the value's leading size-1 axes
            region.copy_(value)
            return
        self._inplace("__setitem__", lambda: _index_put(self, key, value), value, fits=False)


_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long", "int32": "Int",
               "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool", "complex64": "ComplexFloat",
               "complex128": "ComplexDouble"}


def _rebuild(cls, array, device, requires_grad):
    t = Tensor(array, device=device)
    if cls is not Tensor:  # nn.Parameter
        return cls(t, requires_grad=requires_grad)
    return t.requires_grad_() if requires_grad else t


def _no_grad():
    from gpugrad.autograd.grad_mode import no_grad

    return no_grad()


def _view(out, base, view_fn):
    """Mark ``out`` as a view of ``base``'s memory.  Views share the root's version counter (in-place writes
    through either are seen by saved copies of both) and remember how to re-make themselves from the root:
    ``view_fn`` maps the root's array to the view's."""
    root = base if base._base is None else base._base
    if root is not base:
        view_fn = _compose(view_fn, base._view_fn)
    out._version_counter = root._version_counter
    out._base, out._view_fn, out._base_fn = root, view_fn, root._grad_fn
    return out


def _check_overlap(t, op, other=None):
    """torch refuses in-place writes into a tensor whose elements share memory (an expand along a size-1 axis):
    NumPy would refuse with a read-only error, and CuPy would write each element's several updates in a race.
    fill_ and zero_ write one value everywhere, and x.copy_(x) nothing: torch allows them (and raises at backward,
    in CopySlices)."""
    if op not in ("fill_", "zero_") and not (op == "copy_" and other is t) and _overlaps(t._data):
        raise RuntimeError(f"{op}: {_OVERLAP}")


def _broadcast(xp, a, shape):
    """``xp.broadcast_to``, writable where ``a`` is: NumPy marks it read-only, but torch lets in-place ops write into
    a view of an expand that repeats no element (a column of rows expanded); _check_overlap refuses the others."""
    y = xp.broadcast_to(a, shape)
    if not getattr(y.flags, "writeable", True) and a.flags.writeable:  # CuPy's arrays are always writable
        y.flags.writeable = True
    return y


def _check_fits(t, other, op):
    """As torch: x.op_(y) may not grow x (NumPy's copyto would drop the broadcast's leading size-1 axes)."""
    shape = np.broadcast_shapes(t.shape, other.shape)
    if shape != t.shape:
        raise RuntimeError(f"{op}: output with shape {list(t.shape)} doesn't match the broadcast shape {list(shape)}")


def _compose(outer, inner):
    return lambda a: outer(inner(a))


def _shares_memory(a, b):
    return _function._root(a._data) is _function._root(b._data)


def _write_through(view, value):
    """An in-place op on a view, recorded: the root becomes CopySlices(root, value) (torch's way), and the view
    is re-derived from it, so both the root and the view see the change in values and in graph."""
    root = view._base
    new_root = CopySlices.apply(root, value, view_fn=view._view_fn)
    _function.rebase(root, new_root._grad_fn)
    _function._refresh_view(view)


def _dim(dim, keepdim, kw, op):
    """torch's (dim, keepdim) as an op's (axis, keepdims): dim an int, a tuple or list, or None / () for all axes;
    NumPy's names axis= and keepdims= are aliases (torch accepts them too)."""
    for k in kw:
        if k not in ("axis", "keepdims"):
            raise TypeError(f"{op}() got an unexpected keyword argument '{k}'")
        if k == "axis" and not (dim is None or dim == ()):
            raise TypeError(f"{op}(): give dim or its alias axis, not both")
    dim = kw.get("axis", dim)
    dim = tuple(dim) if isinstance(dim, list) else dim
    if not (dim is None or isinstance(dim, numbers.Integral) or isinstance(dim, tuple) and all(
            isinstance(d, numbers.Integral) for d in dim)):
        raise TypeError(f"{op}(): dim must be an int or a tuple of ints, got {type(dim).__name__} {dim!r}")
    return {"axis": None if dim == () else dim, "keepdims": bool(kw.get("keepdims", keepdim))}


def _moment(dim, unbiased, keepdim, correction, kw, op):
    """var/std's arguments as torch takes them: (dim, unbiased, keepdim), a lone bool meaning unbiased, or
    correction= (1: Bessel's, the default; 0: the population statistic)."""
    if isinstance(dim, bool):  # x.var(False): torch's var(unbiased) overload
        dim, unbiased = None, dim
    if correction is not None and unbiased is not None:
        raise TypeError(f"{op}(): give unbiased or correction, not both")
    return dict(_dim(dim, keepdim, kw, op), correction=(1 if unbiased is None or unbiased else 0)
                if correction is None else correction)


def _basic_key(key):
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice)) for k in keys)


def _index_array(idx, like, op):
    if isinstance(idx, Tensor):
        if idx._backend is not like._backend:
            raise RuntimeError(f"{op}: index is on {idx.device} but the tensor is on {like.device}; "
                               "move it with .to(device)")
        return idx._data
    array = like._backend.asarray(idx)
    return array.astype(np.int64) if array.size == 0 and array.dtype.kind == "f" else array  # x[[]]


def _index_key(key, like):
    """Tensor and list indices become arrays of the tensor's backend; the rest passes through."""
    keys = key if isinstance(key, tuple) else (key,)
    out = tuple(_index_array(k, like, "index") if isinstance(k, (Tensor, list, np.ndarray)) else
                int(k) if isinstance(k, np.integer) else k for k in keys)
    return out if isinstance(key, tuple) else out[0]


@_on_own_device
def _index_put(t, key, value):
    """Out-of-place ``t[key] = value`` as differentiable ops: keep t where not indexed, value where indexed."""
    xp = t._backend.xp
    mask = xp.zeros(t.shape, dtype=bool)
    mask[key] = True
    if isinstance(value, Tensor):
        placed = IndexPlace.apply(value, key=key, shape=t.shape)
    else:
        buf = xp.zeros(t.shape, dtype=t.dtype)
        buf[key] = value
        placed = _make(buf, t._backend)
    return Where.apply(placed, t, cond=mask)


from gpugrad.autograd import forward_ad as _forward_ad, function as _function  # noqa: E402

_function._tensor_type, _function._make_tensor = Tensor, _make
_dtypes.Tensor = Tensor  # promotion tells tensors from numbers


def pointwise_function(op, decl, out_of_place=None):
    """``f(input, *params)`` for a declared pointwise op (a Tensor method, or with ``out_of_place``, the in-place
    ``f_``), with the declaration's parameter names and defaults as in torch."""
    names = [p for p, _ in decl.params]

    def f(self, *args, **kwargs):
        if len(args) > len(names) or set(kwargs) - set(names):
            raise TypeError(f"{decl.name}() takes parameters {tuple(names)}, got {args} and {sorted(kwargs)}")
        params = dict(decl.params)
        params.update(zip(names, args))
        params.update(kwargs)
        if out_of_place is not None:
            return self._inplace(decl.name + "_", lambda: op.apply(self, **params))
        return op.apply(self, **params)

    f.__name__ = decl.name + ("_" if out_of_place is not None else "")
    f.__doc__ = f"{decl.name}({', '.join(f'{p}={d}' for p, d in decl.params)}): see gpugrad/ops/declarations.py"
    return f


for _name, _op in POINTWISE_OPS.items():
    setattr(Tensor, _name, pointwise_function(_op, _op.decl))
    setattr(Tensor, _name + "_", pointwise_function(_op, _op.decl, out_of_place=True))


def _gelu(suffix):
    """Tensor.gelu(approximate='none') as torch: the exact erf form (op gelu_erf) or 'tanh' (op gelu)."""
    ops = {"none": getattr(Tensor, "gelu_erf" + suffix), "tanh": getattr(Tensor, "gelu" + suffix)}

    def gelu(self, approximate="none"):
        if approximate not in ops:
            raise RuntimeError(f"gelu: approximate argument must be either none or tanh, got {approximate!r}")
        return ops[approximate](self)
    gelu.__name__ = "gelu" + suffix
    return gelu


Tensor.gelu, Tensor.gelu_ = _gelu(""), _gelu("_")
for _name in ("isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not", "logical_and",
              "logical_or", "logical_xor"):  # tests of values and logic: no graph
    setattr(Tensor, _name, lambda self, *other, _n=_name: self._values(_n, *other))

# Cast / ToDevice / Copy / IndexPlace are registered ops too; they live here because they are about tensors
# moving between dtypes, devices and buffers rather than about math.
from gpugrad.ops.convert import (OVERLAP as _OVERLAP, Cast, Copy, CopySlices, IndexPlace, Overwrite,  # noqa: E402
                                 ToDevice, overlaps as _overlaps)
