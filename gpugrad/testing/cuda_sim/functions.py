"""The simulated ``cupy.*`` functions and ufuncs: NumPy computes, CuPy's rules decide what is allowed and counted.

Each function exists only if CuPy 14 has it (``cupy_namespace.json``) and accepts only CuPy's keyword arguments.
Accounting follows what CuPy would queue on the device: a call whose outputs are all views launches nothing;
one that writes device memory is one launch (CuPy fuses a ufunc, a reduction or a copy into one kernel); creating
uninitialised memory (``empty``) allocates without a launch; functions whose output size depends on the data
(``nonzero``, ``unique``, ...) make the host wait, so they count a sync; matrix products count one cuBLAS call plus
a copy for each operand cuBLAS cannot read in place.
"""
from __future__ import annotations

import numpy as np

from gpugrad.testing.cuda_sim import _state
from gpugrad.testing.cuda_sim.array import _wrap_index, inputs_of, ndarray, new, refill, unwrap, unwrap_kwargs, wrap
from gpugrad.testing.cuda_sim.namespace import load

# Functions whose result's size depends on the data: the host must read it back first.
_SYNCING = {"nonzero", "flatnonzero", "argwhere", "unique", "extract", "compress", "allclose", "unique_values",
            "unique_counts", "unique_inverse", "unique_all", "trim_zeros"}
# Functions that hand back uninitialised memory: an allocation, no kernel.
_NO_LAUNCH = {"empty", "empty_like"}
# cuBLAS-backed products.
_BLAS = {"matmul", "dot", "vdot", "inner", "outer", "tensordot", "einsum", "kron"}

UFUNCS: dict[str, "ufunc"] = {}
FUNCTIONS: dict[str, object] = {}


def check_kwargs(name, sig, kwargs):
    """TypeError for a keyword CuPy's function does not take (NumPy's may, so code would break only on a GPU)."""
    if sig is None or sig["varkw"] or not kwargs:
        return
    allowed = set(sig["params"][sig["posonly"]:]) | set(sig["kwonly"])
    for k in kwargs:
        if k not in allowed:
            raise TypeError(f"{name}() got an unexpected keyword argument '{k}' (CuPy 14 does not accept it)")


def _check_no_lists(name, args):
    for a in args:
        if type(a) in (list, tuple):
            raise TypeError(f"Unsupported type {type(a)}: cupy.{name} takes CuPy arrays and scalars, "
                            "not Python sequences")


def _blas_copies(arrays):
    """cuBLAS reads C- or F-ordered matrices (transposed flags); anything else CuPy copies first."""
    n = 0
    for a in arrays:
        if type(a) is ndarray and a.ndim >= 2:
            m = a._a
            if not (m.flags.c_contiguous or m.flags.f_contiguous or np.swapaxes(m, -1, -2).flags.c_contiguous):
                n += 1
    return n


def _uses_cublas(name, ins):
    """CuPy's products call cuBLAS for floating and complex dtypes; integers take CuPy's own kernel
    (cupy/_core/_routines_linalg.pyx, tensordot_core: ``dtype.kind in 'biu'``), and einsum of one operand reduces."""
    return (len(ins) > 1 or name != "einsum") and any(a.dtype.kind in "fc" for a in ins)


# Functions that only make views (no kernel): CuPy runs them whatever the current device is.
_VIEWS = {"reshape", "ravel", "transpose", "swapaxes", "moveaxis", "rollaxis", "expand_dims", "squeeze",
          "broadcast_to", "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d", "diagonal", "real", "imag",
          "shape", "ndim", "size", "result_type", "can_cast", "shares_memory", "may_share_memory", "isscalar",
          "iscomplexobj", "isrealobj", "isfortran", "min_scalar_type", "split", "array_split", "hsplit", "vsplit",
          "dsplit", "flip", "fliplr", "flipud", "rot90"}


def _run(name, np_fn, args, kwargs):
    ins = inputs_of(args, kwargs)
    if name in _VIEWS:
        hargs, hkwargs = _hosts(args), {k: _hosts(v) for k, v in kwargs.items()}
        wrapped, fresh = wrap(np_fn(*hargs, **hkwargs), ins, f"cupy.{name}")
        if fresh:  # reshape of a non-contiguous array copies: a kernel after all
            unwrap(ins)
            _state.launch(f"cupy.{name}", replay=lambda: refill(fresh, np_fn(*hargs, **hkwargs)), outputs=fresh)
        return wrapped
    out = kwargs.get("out")
    if name in _SYNCING:
        _state.read_back(f"cupy.{name} (its result's size lives on the device)")
    if name in _BLAS and _uses_cublas(name, ins):
        _state.library_call("cuBLAS")  # CuPy's GEMMs set the handle's stream first: refused while capturing
        _state.launch(f"copy for cuBLAS ({name})", _blas_copies(ins))
    hargs, hkwargs = unwrap(args), unwrap_kwargs(kwargs)
    if out is not None:
        _state.run(f"cupy.{name}", lambda: np_fn(*hargs, **hkwargs))
        return out
    with _state.computing():
        result = np_fn(*hargs, **hkwargs)
    if name == "allclose":
        return result  # a Python bool: the sync is counted above
    if isinstance(result, (bool, np.bool_)) and name not in ("isscalar", "can_cast", "iscomplexobj",
                                                              "isrealobj", "isfortran", "shares_memory",
                                                              "may_share_memory"):
        result = np.asarray(result)  # CuPy keeps such answers on the device as 0-d arrays
    wrapped, fresh = wrap(result, ins, f"cupy.{name}")
    if fresh and name not in _NO_LAUNCH:
        _state.launch(f"cupy.{name}", replay=lambda: refill(fresh, np_fn(*hargs, **hkwargs)), outputs=fresh)
    return wrapped


def _hosts(x):
    """Host buffers without the device check (for view-only functions)."""
    if type(x) is ndarray:
        return x._a
    if type(x) in (list, tuple):
        return type(x)(_hosts(v) for v in x)
    return unwrap(x)


def _function(name, np_fn, sig):
    def fn(*args, **kwargs):
        check_kwargs(name, sig, kwargs)
        return _run(name, np_fn, args, kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"cupy.{name} on the simulated device (computed by numpy.{name})."
    return fn


class ufunc:
    """A simulated CuPy ufunc: elementwise over simulated arrays and scalars only (CuPy rejects lists)."""

    def __init__(self, name, np_ufunc, sig):
        self.name, self._np, self._sig = name, np_ufunc, sig
        self.nin, self.nout = np_ufunc.nin, np_ufunc.nout
        self.__name__ = name

    def __repr__(self):
        return f"<ufunc 'cupy_{self.name}' (gpugrad cuda_sim)>"

    def __call__(self, *args, **kwargs):
        check_kwargs(self.name, self._sig, kwargs)
        _check_no_lists(self.name, args)
        out = kwargs.get("out")
        if isinstance(out, tuple) and len(out) == 1:
            kwargs["out"] = out = out[0]
        return _run(self.name, self._np, args, kwargs)

    def _method(self, method, args, kwargs):
        check_kwargs(f"{self.name}.{method}", load()["ufunc_methods"].get(method), kwargs)
        return _run(f"{self.name}.{method}", getattr(self._np, method), args, kwargs)

    def reduce(self, *args, **kwargs):
        return self._method("reduce", args, kwargs)

    def accumulate(self, *args, **kwargs):
        return self._method("accumulate", args, kwargs)

    def outer(self, *args, **kwargs):
        return self._method("outer", args, kwargs)

    def reduceat(self, *args, **kwargs):
        return self._method("reduceat", args, kwargs)

    def at(self, a, indices, b=None):
        key = unwrap(indices)
        key = _wrap_index(key, a.shape) if any(isinstance(k, np.ndarray) for k in
                                               (key if isinstance(key, tuple) else (key,))) else key
        args = (unwrap(a), key) if b is None else (unwrap(a), key, unwrap(b))
        _state.run(f"cupy.{self.name}.at", lambda: self._np.at(*args))


# ---- functions with CuPy semantics of their own ----------------------------------------------------------------
def _to_device(a, dtype=None, copy=None, order=None, what="asarray"):
    """Host data (NumPy arrays, lists, scalars) copied to the current device; simulated arrays on another device
    copied across (a peer copy); arrays already here returned as they are unless a copy or cast is needed."""
    if type(a) is ndarray:
        if a._dev != _state.current_device():
            src = a._a
            host = np.array(src, dtype=dtype, order=order or "K")
            result = new(host, what)
            _state.launch(f"{what}: peer copy from device {a._dev}", replay=lambda: host.__setitem__(Ellipsis, src),
                          outputs=[host])
            return result
        need_cast = dtype is not None and np.dtype(dtype) != a.dtype
        need_order = order in ("C",) and not a._a.flags.c_contiguous or order == "F" and not a._a.flags.f_contiguous
        if copy or need_cast or need_order:
            return _run(what, lambda x: np.array(x, dtype=dtype, order=order or "K"), (a,), {})
        return a
    if _has_device_array(a):
        raise ValueError(f"cupy.{what}: a sequence mixing simulated arrays is not supported by the simulator")
    host = np.array(a, dtype=dtype, order=order or "K")
    if host.dtype == object:
        raise ValueError(f"Unsupported dtype object: cupy.{what} cannot hold Python objects")
    if host.ndim == 0:  # CuPy fills a 0-d array with the value (one kernel, captured like any): no host copy
        value = host.copy()
        result = new(host, f"cupy.{what}")
        _state.launch("ndarray.fill", replay=lambda: host.__setitem__(Ellipsis, value), outputs=[host])
        return result
    _state.h2d(host.nbytes, f"cupy.{what}")  # through pinned staging memory: refused while capturing
    return new(host, f"cupy.{what}")


def _has_device_array(a):
    return type(a) in (list, tuple) and any(type(v) is ndarray or _has_device_array(v) for v in a)


def asarray(a, dtype=None, order=None, *, copy=None, blocking=False):
    return _to_device(a, dtype, copy=bool(copy), order=order, what="asarray")


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    x = _to_device(obj, dtype, copy=copy, order=None if order == "K" else order, what="array")
    return x.reshape((1,) * (ndmin - x.ndim) + x.shape) if ndmin > x.ndim else x


def from_dlpack(array, *, device=None, copy=None):
    """Zero copy from a DLPack producer on the simulated device (see ndarray.__dlpack__). As CuPy's consumer side
    (cupy/_core/dlpack.pyx, from_dlpack), a CUDA producer is handed the current stream (the legacy one as 1) and
    max_version, falling back to ``__dlpack__(stream=)`` for producers that take no more."""
    got = None
    if array.__dlpack_device__()[0] == 2:  # kDLCUDA
        stream = _state.current_stream_ptr() or 1
        try:
            got = array.__dlpack__(stream=stream, max_version=(1, 1), copy=copy)
        except TypeError:
            if copy is not None:
                raise
            got = array.__dlpack__(stream=stream)
    if type(got) is not tuple or got[0] != "cuda_sim":
        raise BufferError("cupy.from_dlpack (gpugrad cuda_sim): only simulated-device producers are supported (a "
                          "torch CUDA tensor's capsule needs a GPU)")
    return got[1].copy() if copy else got[1]


def ascontiguousarray(a, dtype=None):
    return _to_device(a, dtype, order="C", what="ascontiguousarray")


def asfortranarray(a, dtype=None):
    return _to_device(a, dtype, order="F", what="asfortranarray")


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    if type(a) is ndarray:
        return a.get(stream=stream, order=order, out=out)
    return np.asarray(a, order=order)


def get_array_module(*args):
    from gpugrad.testing.cuda_sim import module

    return module() if any(type(a) is ndarray for a in args) else np


def _gather(name, np_fn, a, indices, n, out=None):
    # CuPy wraps out-of-range indices around where NumPy raises: code that relies on NumPy's IndexError for
    # validation is silently wrong on a GPU, and the simulator shows it.
    src, idx = unwrap(a), np.asarray(unwrap(indices))
    idx = idx % n if n else idx
    if out is not None:
        dst = unwrap(out)
        _state.run(f"cupy.{name}", lambda: np_fn(src, idx, out=dst))
        return out
    host = np.asarray(np_fn(src, idx))
    result = new(host, f"cupy.{name}")
    _state.launch(f"cupy.{name}", replay=lambda: host.__setitem__(Ellipsis, np_fn(src, idx)), outputs=[host])
    return result


def take(a, indices, axis=None, out=None):
    n = a.size if axis is None else a.shape[axis]
    return _gather("take", lambda x, i, **kw: np.take(x, i, axis=axis, **kw), a, indices, n, out)


def take_along_axis(a, indices, axis):
    n = a.size if axis is None else a.shape[axis]
    return _gather("take_along_axis", lambda x, i: np.take_along_axis(x, i, axis), a, indices, n)


def where(condition, x=None, y=None):
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("Must provide both 'x' and 'y' or neither.")
    return _run("where", np.where, (condition, x, y), {})


def nonzero(a):
    return _run("nonzero", np.nonzero, (a,), {})


def get_default_memory_pool():
    from gpugrad.testing.cuda_sim.cuda import MemoryPool

    return MemoryPool.default


def get_default_pinned_memory_pool():
    from gpugrad.testing.cuda_sim.cuda import PinnedMemoryPool

    return PinnedMemoryPool.default


_SPECIAL = {f.__name__: f for f in (asarray, array, ascontiguousarray, from_dlpack, asfortranarray, asnumpy, get_array_module,
                                    take, take_along_axis, where, nonzero, get_default_memory_pool,
                                    get_default_pinned_memory_pool)}


def build() -> dict:
    """Every simulated top-level function and ufunc, by name (only names CuPy 14 has)."""
    ns = load()
    for name, spec in ns["ufuncs"].items():
        np_u = getattr(np, name, None)
        if isinstance(np_u, np.ufunc):
            UFUNCS[name] = ufunc(name, np_u, spec["sig"])
    for name, sig in ns["functions"].items():
        if name in _SPECIAL:
            FUNCTIONS[name] = _SPECIAL[name]
        elif callable(getattr(np, name, None)) and not isinstance(getattr(np, name), type):
            FUNCTIONS[name] = _function(name, getattr(np, name), sig)
    return {**FUNCTIONS, **UFUNCS}


def lookup(np_func):
    """The simulated counterpart of a top-level NumPy function reached through ``__array_function__``, or None
    (NumPy then raises TypeError, as it does for a function CuPy lacks)."""
    name = getattr(np_func, "__name__", None)
    return FUNCTIONS.get(name) if getattr(np, name or "", None) is np_func else None
