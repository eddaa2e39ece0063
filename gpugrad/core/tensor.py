"""A tensor's state: its array, its backend, its autograd slots, its version counter and its view links.

``TensorBase`` holds no math: the methods users call live in ``gpugrad/methods/`` and are put together into
``gpugrad.Tensor`` (``gpugrad/_tensor.py``), above the ops. Everything below that layer (the engine, the ops, the
creation functions) makes tensors with :func:`make` and tells them from other values with ``TensorBase``; ``make``
builds instances of the class registered by :func:`set_tensor_class` (``gpugrad.Tensor``), as torch's C++ core
builds instances of the Python class ``torch.Tensor``.

Version counter: a list ``[version]`` shared by a tensor, its views and its detached aliases, bumped by every
in-place write; nodes that must copy a saved value before it is overwritten subscribe to it (``[version, WeakSet]``,
see ``core/views.py``). View links: ``_base`` is the tensor whose memory a view shares, ``_view_fn`` maps the base's
array to the view's, and ``_base_fn`` is the base's grad_fn when the view's graph was last derived.
"""
from __future__ import annotations

import numbers

import numpy as np

from gpugrad.backend import backend_of, dlpack, get_backend, is_array
from gpugrad.backend.deferred import raise_pending
from gpugrad.core.grad_mode import STATE
from gpugrad.dtypes import DEFAULTS, Size, default_complex, of_array, to_np


class TensorBase:
    """The slots of a tensor and what needs no op: metadata, host conversion, printing."""

    __slots__ = ("_data", "_backend", "_requires_grad", "_grad", "_grad_fn", "_accumulator", "_version_counter",
                 "_base", "_view_fn", "_base_fn", "_inference", "_fw_grad", "_post_acc_hooks", "__weakref__")
    __array_ufunc__ = None  # numpy defers `ndarray + tensor` to Tensor.__radd__
    __hash__ = object.__hash__  # == is elementwise; identity hashing keeps tensors usable as dict keys

    def __init__(self, *args, **kwargs):
        """torch's legacy constructor: ``Tensor(2, 3)`` (uninitialized, the default float dtype), ``Tensor([1, 2])``
        (the data in the default float dtype), ``Tensor()`` (empty), ``Tensor(other)`` (an alias of ``other``);
        ``device=`` only.  ``gpugrad.tensor(data)`` infers the dtype instead."""
        legacy_init(self, args, kwargs, None)

    def __reduce__(self):
        # Pickle/deepcopy by value: host data, device and flags (the backend holds modules, which do not pickle).
        raise_pending(self._backend, "pickling a tensor")  # reads raise the device's failed checks (deferred.py)
        return _rebuild, (type(self), self._backend.to_host(self._data), str(self.device), self._requires_grad)

    @staticmethod
    def _wrap(array, backend=None):
        """A gradient array as a Tensor (no graph)."""
        return make(array, backend or backend_of(array))

    # -- metadata -------------------------------------------------------------------------------------------------
    @property
    def shape(self):
        return Size(self._data.shape)

    def size(self, dim=None, **kw):
        if kw:  # torch's alias: size(axis=...) is not accepted by torch, but dim= is; NumPy users write axis
            dim = kw.pop("dim", kw.pop("axis", dim))
        if kw:
            raise TypeError(f"size() got an unexpected keyword argument '{next(iter(kw))}'")
        return self.shape if dim is None else self._data.shape[dim]

    @property
    def ndim(self):
        return self._data.ndim

    def dim(self):
        return self._data.ndim

    ndimension = dim

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
        return self._data.dtype.kind in "fV"

    def is_complex(self):
        return self._data.dtype.kind == "c"

    def element_size(self):
        return self._data.dtype.itemsize

    @property
    def itemsize(self):
        return self._data.dtype.itemsize

    @property
    def nbytes(self):
        return self._data.nbytes

    def numel(self):
        return int(self._data.size)

    nelement = numel

    def __len__(self):
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    @property
    def _version(self):
        return self._version_counter[0]

    def is_contiguous(self, memory_format=None):
        return bool(self._data.flags.c_contiguous)

    # -- host values ----------------------------------------------------------------------------------------------
    def numpy(self, *, force=False):
        """The CPU tensor's array (shared memory); ``force=True`` copies from any device, as torch."""
        if not force and self._requires_grad_now():
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        raise_pending(self._backend, "Tensor.numpy()")
        return self._backend.to_host(self._data) if force else self.__array__()

    def __array__(self, dtype=None, copy=None):
        """NumPy's view of a CPU tensor (no copy). A CUDA tensor refuses, as torch's: copying it to the host is a
        sync that should be written down (``.cpu()``)."""
        if self._backend.name != "cpu":
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if self._requires_grad_now():
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        a = self._data if dtype is None else self._data.astype(dtype)
        return a.copy() if copy and a is self._data else a

    def _requires_grad_now(self):
        return self.requires_grad  # the Tensor's property: a view re-derives its state first (methods/autograd.py)

    def __dlpack__(self, *args, **kwargs):
        """Export the memory (zero copy) to any DLPack consumer: ``np.from_dlpack``, ``torch.from_dlpack``,
        ``cupy.from_dlpack``."""
        if self._requires_grad_now():
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        raise_pending(self._backend, None)  # not a host read: allowed inside a capture
        if self._data.dtype == dlpack.BF16 and isinstance(self._data, np.ndarray):  # NumPy's DLPack has no bfloat16
            return dlpack.export_bf16(self._data)
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


_CLASS = TensorBase  # set_tensor_class(gpugrad.Tensor) replaces it once the methods are bound


def set_tensor_class(cls):
    """Make :func:`make` build ``cls`` (a subclass of TensorBase): called once, by ``gpugrad/_tensor.py``."""
    global _CLASS
    if not issubclass(cls, TensorBase):
        raise TypeError(f"set_tensor_class: {cls!r} is not a subclass of TensorBase")
    _CLASS = cls


def tensor_class():
    return _CLASS


def make(data, backend, requires_grad=False):
    """A tensor around ``data`` (an array of ``backend``): no checks, no copies (the hot path of every op)."""
    t = object.__new__(_CLASS)
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


def init(t, array, backend):
    """Fill the slots of a newly constructed ``t`` (``Tensor(data)``, ``nn.Parameter``) as :func:`make` does."""
    t._data, t._backend = array, backend
    t._requires_grad = False
    t._grad = t._grad_fn = t._accumulator = t._base = t._view_fn = t._base_fn = None
    t._version_counter = [0]
    t._inference = STATE.inference
    t._fw_grad = None
    t._post_acc_hooks = None


def new(data, dtype=None, device=None, requires_grad=False):
    """``gpugrad.tensor(data, ...)``: a new leaf holding a copy of ``data``, its dtype inferred as torch infers it."""
    t = object.__new__(_CLASS)
    init(t, *to_array(data, dtype, device))
    return t.requires_grad_(True) if requires_grad else t


def legacy_init(t, args, kwargs, dtype, device_type=None):
    """Fill ``t`` as torch's legacy constructors do (``torch.Tensor(...)``; ``torch.FloatTensor(...)`` with its
    ``dtype`` and ``device_type``): no args: empty; ints or a Size: that shape, uninitialized; one sequence or array:
    its values cast to the dtype (the default float dtype for Tensor); one Tensor: an alias (shares its memory)."""
    device = kwargs.pop("device", None)
    size = kwargs.pop("size", None)
    if kwargs or (size is not None and args):
        got = ", ".join([type(a).__name__ for a in args] + [f"{k}={type(v).__name__}" for k, v in kwargs.items()])
        raise TypeError(f"new() received an invalid combination of arguments - got ({got}), but expected one of: "
                        "(*, device), (Tensor other), (tuple of ints size, *, device), (object data, *, device)")
    if device_type is not None:
        if device is not None and get_backend(device).device.type != device_type:
            raise RuntimeError(f"legacy constructor expects device type: {device_type} but device type: "
                               f"{get_backend(device).device.type} was passed")
        device = device if device is not None else device_type
    dtype = np.dtype(DEFAULTS.float if dtype is None else to_np(dtype))
    if size is not None:
        args = tuple(size)
    if len(args) == 1 and isinstance(args[0], TensorBase):
        _alias(t, args[0], None if device_type is None else dtype)
        return
    if len(args) == 1 and isinstance(args[0], Size) or all(isinstance(a, numbers.Integral) for a in args):
        shape = tuple(int(a) for a in (args[0] if len(args) == 1 and isinstance(args[0], Size) else args)) or (0,)
        if any(n < 0 for n in shape):
            bad = next(n for n in shape if n < 0)
            raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {list(shape)}")
        be = get_backend(device)
        init(t, be.as_array(be.xp.empty(shape, dtype=dtype)), be)
        return
    data = args[0]
    if len(args) > 1 or not (isinstance(data, (list, tuple, range)) or is_array(data)):
        raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})" if len(args) == 1 else
                        f"new(): argument 'size' must be a tuple of ints, but got {[type(a).__name__ for a in args]}")
    array, be = to_array(data, None, device)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"new(): invalid data type '{array.dtype.name}': expected real numbers")
    init(t, array.astype(dtype, copy=False), be)


def _alias(t, other, dtype):
    """``Tensor(other)``: ``t`` becomes a view of all of ``other`` (same memory, version counter and, when other
    requires grad, a node of its own, as torch's AliasBackward0)."""
    if dtype is not None and other._data.dtype != dtype:
        raise TypeError(f"expected a tensor of dtype {dtype.name}, got {other.dtype}: convert it with .to(dtype)")
    view = other[...]
    for slot in TensorBase.__slots__[:-1]:  # all but __weakref__
        object.__setattr__(t, slot, getattr(view, slot))
    if t._grad_fn is not None:
        t._grad_fn._name = "AliasBackward0"


def _rebuild(cls, array, device, requires_grad):
    t = new(array, device=device)
    if cls is not _CLASS:  # nn.Parameter
        return cls(t, requires_grad=requires_grad)
    return t.requires_grad_() if requires_grad else t


# -- construction from Python data, as torch's tensor() infers it --------------------------------------------------
_PY_DEFAULTS = {np.dtype(np.float64): lambda: DEFAULTS.float, np.dtype(np.complex128): default_complex}


def to_array(data, dtype=None, device=None):
    """(array, backend) for any array-like, its dtype inferred as torch's ``tensor()`` does."""
    dtype = to_np(dtype)
    if isinstance(data, TensorBase):
        data = data._data
    if is_array(data):
        src = backend_of(data)
        # Host data goes to the default device, as lists do; device arrays (and tensors) stay where they are.
        be = src if device is None and src.name != "cpu" else get_backend(device)
        if be is not src:
            data = src.to_host(data) if be.name == "cpu" else be.asarray(data)
        array = be.xp.array(data, dtype=dtype, copy=True) if be.name == "cpu" else be.asarray(data, dtype).copy()
        return array, be
    be = get_backend(device)
    host = np.asarray(data, dtype=dtype)
    if _beyond_int64(data, host):
        raise ValueError(f"tensor(): Overflow when unpacking long: {data!r} holds an integer out of int64's range")
    if dtype is None and not _numpy_typed(data) and host.dtype in _PY_DEFAULTS:
        host = host.astype(_PY_DEFAULTS[host.dtype]())  # Python floats (complex) take the default dtype, as in torch
    if host.dtype.kind not in "biufcV":
        raise TypeError(f"tensor(): cannot make a tensor from {type(data).__name__} data (of NumPy type "
                        f"{host.dtype}): expected numbers, nested lists of numbers or arrays")
    return (host if be.name == "cpu" else be.asarray(host)), be


def _beyond_int64(data, host):
    """Whether Python data holds an int that int64 cannot hold, which torch refuses: NumPy keeps such ints as uint64
    or objects, and a list mixing them with int64's negative range becomes float64 (losing digits)."""
    if host.dtype != object and (host.dtype not in (np.uint64, np.float64) or _numpy_typed(data)):
        return False
    if host.dtype == np.float64:
        if not isinstance(data, (list, tuple)):
            return False
        host = np.asarray(data, dtype=object)  # the values as given, ints among them
    return any(type(v) is int and not -2**63 <= v < 2**63 for v in host.ravel().tolist())


def _numpy_typed(data):
    """NumPy scalars (np.float64(1.0), [np.float64(1.0)]) keep their dtype, as in torch."""
    while isinstance(data, (list, tuple)) and data:
        data = data[0]
    return isinstance(data, np.generic)


_PY_NUMBERS = frozenset((float, int, bool, complex))


def as_operand(other, like):
    """``other`` as an op operand beside tensor ``like``: Tensors as they are, Python and NumPy scalars as Python
    numbers (weakly typed, as in torch), anything else (lists, arrays) as a tensor on ``like``'s device."""
    if isinstance(other, TensorBase) or type(other) in _PY_NUMBERS:  # the common cases first: x * y, x * 2.0
        return other
    if isinstance(other, np.generic):
        return other.item()  # NumPy 2 treats np.float64(2) as strong: x32 * it would become float64
    if isinstance(other, numbers.Number):
        return other
    return new(other, device=like.device)


def on_own_device(method):
    """Run a method that calls ``xp`` directly (not through an op) on its tensor's device: CuPy launches on the
    current device, and ops already switch in ``Op.apply``."""
    def wrapped(self, *args, **kwargs):
        scope = self._backend.device_scope
        if scope is None:
            return method(self, *args, **kwargs)
        with scope:
            return method(self, *args, **kwargs)

    wrapped.__name__, wrapped.__qualname__, wrapped.__doc__ = method.__name__, method.__qualname__, method.__doc__
    wrapped.__wrapped__ = method
    return wrapped
