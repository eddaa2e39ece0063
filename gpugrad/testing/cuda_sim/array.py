"""The simulated device's array: a NumPy buffer that behaves like a ``cupy.ndarray`` and nothing more.

It is deliberately not a NumPy array. Implicit conversion to host memory raises TypeError as CuPy does
(``np.asarray(x)``, ``__array__``); NumPy functions and ufuncs reach it through ``__array_function__`` and
``__array_ufunc__`` only where CuPy implements them. Scalar conversions, ``.get()``, ``.item()`` and printing work
and count a device-to-host sync. Each array lives on one device and every operation checks that it runs on the
current device, as a kernel launch on another GPU would fail. Integer-array indices wrap around as CuPy's do.
"""
from __future__ import annotations

import warnings
import weakref

import numpy as np

from gpugrad.testing.cuda_sim import _state


class MemoryPointer:
    """``x.data``: the device address (here the host buffer's address) and the device it belongs to."""

    __slots__ = ("ptr", "device")

    def __init__(self, ptr, device):
        self.ptr, self.device = ptr, device

    def __int__(self):
        return self.ptr


def _np_root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _device_error(index):
    return ValueError(f"The device where the array resides ({index}) is different from the current device "
                      f"({_state.current_device()}). Peer access is unavailable between these devices "
                      "(gpugrad cuda_sim: run the operation under `with cupy.cuda.Device(index):`).")


def unwrap(x):
    """Host buffers for a call: simulated arrays (on the current device), scalars, shapes and nested sequences.
    A NumPy array is refused as CuPy refuses it: kernels cannot read host memory."""
    if type(x) is ndarray:
        if x._dev != _state.current_device():
            raise _device_error(x._dev)
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)} (a host NumPy array was passed to the simulated GPU; "
                        "move it with cupy.asarray first)")
    if type(x) in (list, tuple):
        return type(x)(unwrap(v) for v in x)
    return x


def unwrap_kwargs(kwargs):
    return {k: unwrap(v) for k, v in kwargs.items()}


def inputs_of(args, kwargs):
    """The simulated arrays among a call's arguments (one level of nesting: sequences of arrays)."""
    found = []
    for v in (*args, *kwargs.values()):
        if type(v) is ndarray:
            found.append(v)
        elif type(v) in (list, tuple):
            found.extend(a for a in v if type(a) is ndarray)
    return found


def wrap(out, inputs, what):
    """Simulated arrays for a NumPy result: views of an input share its buffer (no allocation), anything else is
    a new allocation on the current device. NumPy scalars become 0-d arrays, as CuPy returns them.
    Returns (result, fresh): ``fresh`` lists the host buffers of the new allocations (the kernel's outputs)."""
    if isinstance(out, np.ndarray):
        root = _np_root(out)
        for x in inputs:
            if _np_root(x._a) is root:
                return make(out, x._dev, x if x._base is None else x._base), []
        return new(out, what), [out]
    if isinstance(out, np.generic):
        a = np.asarray(out)
        return new(a, what), [a]
    if type(out) in (tuple, list):
        parts = [wrap(o, inputs, what) for o in out]
        return type(out)(p for p, _ in parts), [a for _, f in parts for a in f]
    return out, []


def refill(fresh, result):
    """Replay of a captured function call: its recomputed ``result`` into the buffers it first allocated."""
    results = result if type(result) in (tuple, list) else (result,)
    for buf, r in zip(fresh, (r for r in results if isinstance(r, (np.ndarray, np.generic)))):
        buf[...] = r


def make(a, dev, base=None):
    x = object.__new__(ndarray)
    x._a, x._dev, x._base = a, dev, base
    return x


def new(a, what):
    """A fresh device allocation holding ``a`` (already computed on the host)."""
    if a.nbytes:
        _state.alloc(a.nbytes, what)
        _state.pool_used[0] += a.nbytes
        _state.register(_np_root(a), _state.current_device())
    x = make(a, _state.current_device())
    if a.nbytes:
        weakref.finalize(x, _release, a.nbytes)
    if _state.capture is not None:
        _state.capture.keep.append(a)  # the graph's memory: freed with the graph, not with this array
    return x


def _release(nbytes):
    _state.pool_used[0] -= nbytes


def _wrap_index(key, shape):
    """CuPy wraps out-of-range integer-array indices around instead of raising (NumPy raises)."""
    if not isinstance(key, tuple):
        key = (key,)
    consuming = [k for k in key if k is not None and k is not Ellipsis]
    ndim_used = sum(k.ndim if isinstance(k, np.ndarray) and k.dtype == bool else 1 for k in consuming)
    out, axis = [], 0
    for k in key:
        if k is None:
            out.append(k)
        elif k is Ellipsis:
            out.append(k)
            axis += len(shape) - ndim_used
        elif isinstance(k, np.ndarray) and k.dtype == bool:
            out.append(k)
            axis += k.ndim
        elif isinstance(k, np.ndarray) and k.dtype.kind in "iu":
            n = shape[axis] if axis < len(shape) else 0
            out.append(k % n if n else k)
            axis += 1
        else:
            out.append(k)
            axis += 1
    return tuple(out)


def _index_key(key):
    """Unwrap an index: simulated arrays, lists (copied to the device first, as CuPy does) and plain keys."""
    parts = key if isinstance(key, tuple) else (key,)
    out, advanced, mask = [], False, False
    for k in parts:
        if isinstance(k, list):
            k = np.asarray(k)
            _state.h2d(k.nbytes, "index list")
        elif type(k) is ndarray:
            k = unwrap(k)
        elif isinstance(k, np.ndarray):
            _state.h2d(k.nbytes, "host index array")
        if isinstance(k, np.ndarray):
            advanced = True
            mask = mask or k.dtype == bool
        out.append(k)
    return tuple(out), advanced, mask


class ndarray:
    """A simulated ``cupy.ndarray`` (see the module docstring)."""

    __slots__ = ("_a", "_dev", "_base", "__weakref__")
    __array_priority__ = 100.0
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("gpugrad cuda_sim: ndarray(memptr=, strides=) is not simulated")
        x = new(np.empty(shape, dtype, order=order), "ndarray")
        self._a, self._dev, self._base = x._a, x._dev, None

    # ---- attributes -----------------------------------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    base = property(lambda self: self._base)
    T = property(lambda self: make(self._a.T, self._dev, self if self._base is None else self._base))
    mT = property(lambda self: make(np.swapaxes(self._a, -1, -2), self._dev, self if self._base is None else self._base))

    @property
    def data(self):
        return MemoryPointer(self._a.__array_interface__["data"][0], self.device)

    @property
    def device(self):
        from gpugrad.testing.cuda_sim.cuda import Device

        return Device(self._dev)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "version": 3,
                "data": (self.data.ptr, not self._a.flags.writeable),
                "strides": None if self._a.flags.c_contiguous else self._a.strides}

    def __dlpack_device__(self):
        return 2, self._dev  # kDLCUDA

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # NOTE: no PyCapsule: a real one would say where the memory is, the host. Only the simulator's from_dlpack
        # reads this; NumPy and torch refuse it (TypeError), as their CPU builds refuse a CUDA capsule.
        # The consumer's stream, as CuPy checks it (cupy/_core/core.pyx, ndarray.__dlpack__): None is the legacy
        # stream, 0 is taken for it with a warning (PyTorch sends 0), anything below -1 is refused.
        if isinstance(stream, int) and stream < -1:
            raise ValueError(f"On CUDA, the valid stream for the DLPack protocol is -1, 1, 2, or any larger value, "
                             f"but {stream} was provided")
        if stream == 0:
            warnings.warn("Stream 0 is passed from a library that you are converting to; CuPy assumes 0 as a legacy "
                          "default stream. Please report this problem to the library as this violates the DLPack "
                          "protocol.")
        return ("cuda_sim", self)

    # ---- host conversions: explicit ones work and count a sync; implicit ones raise as in CuPy ----------------
    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
                        "NumPy array explicitly.")

    def get(self, stream=None, order="C", out=None, blocking=True):
        _state.d2h(self.nbytes, "ndarray.get")
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, order=order)

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise ValueError(f"Shape/dtype mismatch: {arr.shape} {arr.dtype} into {self.shape} {self.dtype}")
        _state.h2d(arr.nbytes, "ndarray.set")
        self._a[...] = arr

    def _host_scalar(self, what):
        _state.d2h(self.itemsize, what)
        return self._a

    def item(self):
        return self._host_scalar("ndarray.item").item()

    def tolist(self):
        _state.d2h(self.nbytes, "ndarray.tolist")
        return self._a.tolist()

    def tobytes(self, order="C"):
        _state.d2h(self.nbytes, "ndarray.tobytes")
        return self._a.tobytes(order)

    def __float__(self):
        return float(self._host_scalar("float(ndarray)"))

    def __int__(self):
        return int(self._host_scalar("int(ndarray)"))

    def __complex__(self):
        return complex(self._host_scalar("complex(ndarray)"))

    def __bool__(self):
        return bool(self._host_scalar("bool(ndarray)"))

    def __repr__(self):
        _state.d2h(self.nbytes, "repr(ndarray)")
        return repr(self._a)

    def __str__(self):
        _state.d2h(self.nbytes, "str(ndarray)")
        return str(self._a)

    def __reduce__(self):
        _state.d2h(self.nbytes, "pickle(ndarray)")
        return _rebuild, (np.array(self._a), self._dev)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self._a)))

    # ---- NumPy protocols: only what CuPy implements -----------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from gpugrad.testing.cuda_sim import functions

        mine = functions.UFUNCS.get(ufunc.__name__)
        if mine is None or not hasattr(mine, method):
            return NotImplemented
        return getattr(mine, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from gpugrad.testing.cuda_sim import functions

        mine = functions.lookup(func)
        if mine is None:
            return NotImplemented
        return mine(*args, **kwargs)

    # ---- indexing -----------------------------------------------------------------------------------------------
    def __getitem__(self, key):
        key, advanced, mask = _index_key(key)
        if not advanced:
            # NumPy hands back scalars for full integer indexing; a trailing Ellipsis keeps a 0-d view, as CuPy.
            if Ellipsis not in key:
                key = key + (Ellipsis,)
            return make(self._a[key], self._dev, self if self._base is None else self._base)
        unwrap(self)  # a gather kernel: on the array's device
        if mask:
            _state.read_back("boolean-mask indexing (the result's size lives on the device)")
        key, src = _wrap_index(key, self.shape), self._a
        out = np.asarray(src[key])
        result = new(out, "getitem")
        _state.launch("getitem", replay=lambda: out.__setitem__(Ellipsis, src[key]), outputs=[out])
        return result

    def __setitem__(self, key, value):
        key, advanced, mask = _index_key(key)
        if self._dev != _state.current_device():
            raise _device_error(self._dev)
        value = unwrap(value)
        if mask and isinstance(value, np.ndarray) and value.size > 1:
            _state.read_back("boolean-mask assignment of an array (its count lives on the device)")
        key, dst = (_wrap_index(key, self.shape) if advanced else key), self._a
        _state.run("setitem", lambda: dst.__setitem__(key, value))

    # ---- methods with device semantics of their own ---------------------------------------------------------
    def copy(self, order="C"):
        return _call_method(self, "copy", (order,), {}, force_launch=True)

    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        kw = {} if casting is None else {"casting": casting}
        return _call_method(self, "astype", (dtype,), dict(order=order, **kw), force_launch=True)

    def fill(self, value):
        dst, value = unwrap(self), unwrap(value)
        _state.run("ndarray.fill", lambda: dst.fill(value))

    def view(self, dtype=None, type=None):
        if type is not None:
            raise NotImplementedError("gpugrad cuda_sim: ndarray.view(type=) is not simulated")
        return make(self._a if dtype is None else self._a.view(dtype), self._dev, self if self._base is None else self._base)

    def take(self, indices, axis=None, out=None):
        from gpugrad.testing.cuda_sim import functions

        return functions.take(self, indices, axis=axis, out=out)

    def nonzero(self):
        _state.read_back("nonzero (the result's size lives on the device)")
        return _call_method(self, "nonzero", (), {})

    def scatter_add(self, slices, value):
        _scatter(np.add, self, slices, value)

    def scatter_max(self, slices, value):
        _scatter(np.maximum, self, slices, value)

    def scatter_min(self, slices, value):
        _scatter(np.minimum, self, slices, value)


def _scatter(ufunc, x, slices, value):
    key, advanced, _ = _index_key(slices)
    dst, key, value = unwrap(x), (_wrap_index(key, x.shape) if advanced else key), unwrap(value)
    _state.run("scatter", lambda: ufunc.at(dst, key, value))


def _rebuild(host, dev):
    with _on(dev):
        _state.h2d(host.nbytes, "unpickle(ndarray)")
        return new(host, "unpickle")


class _on:
    def __init__(self, dev):
        self.dev = dev

    def __enter__(self):
        self.prev = _state.current_device()
        _state.set_current_device(self.dev)

    def __exit__(self, *exc):
        _state.set_current_device(self.prev)


def _call_method(x, name, args, kwargs, force_launch=False):
    # Views (reshape, transpose, ...) launch nothing, so CuPy makes them from any current device; work that
    # launches a kernel must run on the array's device. Writes are checked before they happen.
    out = kwargs.get("out")
    if force_launch or out is not None:
        unwrap(x)
    method, hargs, hkwargs = getattr(x._a, name), unwrap(args), unwrap_kwargs(kwargs)
    if out is not None:
        _state.run(f"ndarray.{name}", lambda: method(*hargs, **hkwargs))
        return out
    with _state.computing():
        result = method(*hargs, **hkwargs)
    wrapped, fresh = wrap(result, [x, *inputs_of(args, kwargs)], f"ndarray.{name}")
    if fresh or force_launch:
        unwrap(x)
        _state.launch(f"ndarray.{name}", replay=lambda: refill(fresh, method(*hargs, **hkwargs)), outputs=fresh)
    return wrapped


def _method(name):
    def method(self, *args, **kwargs):
        from gpugrad.testing.cuda_sim.functions import check_kwargs

        check_kwargs(f"ndarray.{name}", _NS["ndarray_methods"][name], kwargs)
        return _call_method(self, name, args, kwargs)

    method.__name__ = name
    return method


# In-place methods that allocate nothing but still run a kernel.
_IN_PLACE = {"sort", "put", "partition"}


def _in_place_method(name):
    def method(self, *args, **kwargs):
        bound, hargs, hkwargs = getattr(unwrap(self), name), unwrap(args), unwrap_kwargs(kwargs)
        _state.run(f"ndarray.{name}", lambda: bound(*hargs, **hkwargs))

    method.__name__ = name
    return method


def _binary(ufunc_name, reflected=False, inplace=False):
    def op(self, other):
        from gpugrad.testing.cuda_sim import functions

        if not (type(other) is ndarray or isinstance(other, (int, float, complex, bool, np.generic))):
            if isinstance(other, np.ndarray):
                raise TypeError(f"Unsupported type {type(other)}: operands must be on the simulated GPU")
            return NotImplemented
        u = functions.UFUNCS.get(ufunc_name) or functions.FUNCTIONS[ufunc_name]
        if inplace:
            return u(self, other, out=self)
        return u(other, self) if reflected else u(self, other)

    return op


def _unary(ufunc_name):
    def op(self):
        from gpugrad.testing.cuda_sim import functions

        return functions.UFUNCS[ufunc_name](self)

    return op


def _install_methods():
    from gpugrad.testing.cuda_sim.namespace import load

    global _NS
    _NS = load()
    for name in _NS["ndarray_methods"]:
        if name in ndarray.__dict__ or not hasattr(np.ndarray, name):
            continue
        setattr(ndarray, name, (_in_place_method if name in _IN_PLACE else _method)(name))
    for op, uf in {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
                   "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "and": "bitwise_and",
                   "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift",
                   "matmul": "matmul"}.items():
        setattr(ndarray, f"__{op}__", _binary(uf))
        setattr(ndarray, f"__r{op}__", _binary(uf, reflected=True))
        if op != "matmul":  # CuPy has no __imatmul__
            setattr(ndarray, f"__i{op}__", _binary(uf, inplace=True))
    for op, uf in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                   "ge": "greater_equal"}.items():
        setattr(ndarray, f"__{op}__", _binary(uf))
    for op, uf in {"neg": "negative", "pos": "positive", "abs": "absolute", "invert": "invert"}.items():
        setattr(ndarray, f"__{op}__", _unary(uf))
    ndarray.__copy__ = lambda self: self.copy()
    ndarray.__deepcopy__ = lambda self, memo: self.copy()
    ndarray.__module__ = "cupy"


_NS: dict = {}
