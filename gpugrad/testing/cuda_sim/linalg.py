"""``cupy.linalg`` on the simulated device: NumPy's linalg computes, CuPy 14.2's rules decide what is allowed.

The rules (RULES.md, "cupy.linalg"): every routine calls cuSOLVER (or cuBLAS's batched LU), whose ``setStream``
refuses a capturing stream; float16 is refused; ``solve`` does not broadcast batch dims; and a singular matrix
raises nothing, since CuPy checks cuSOLVER's status only when ``cupyx.errstate(linalg='raise')`` asks it to (the
default is 'ignore'): the result is then whatever the factorization produced, NaN here (to confirm on a GPU).
"""
from __future__ import annotations

import types

import numpy as np

from gpugrad.testing.cuda_sim import _state
from gpugrad.testing.cuda_sim.array import ndarray
from gpugrad.testing.cuda_sim.functions import _run, check_kwargs
from gpugrad.testing.cuda_sim.namespace import load

IMPLEMENTED = ("inv", "solve", "det", "slogdet", "svd", "qr")


def _checked(name, arrays):
    for a in arrays:
        if type(a) is not ndarray:  # cupy/linalg/_util.py:18-22 (_assert_cupy_array)
            raise np.linalg.LinAlgError("cupy.linalg only supports cupy.ndarray")
        if a.dtype == np.float16:  # cupy/linalg/_util.py:75-77 (linalg_common_type)
            raise TypeError("float16 is unsupported in linalg")
    _state.library_call("cuSOLVER")  # cupy_backends/cuda/libs/cusolver.pyx:1495-1501 (setStream)


def _numpy(fn, shape_of):
    """NumPy's routine with CuPy's results: plain tuples (not NumPy's named ones), and NaN for a singular matrix
    where CuPy (linalg='ignore') raises nothing (``shape_of``: the result's shape; None: NumPy never raises)."""
    def run(*arrays, **kwargs):
        try:
            out = fn(*arrays, **kwargs)
        except np.linalg.LinAlgError:
            if shape_of is None:
                raise
            dtype = np.result_type(*arrays, np.float32) if all(a.dtype.kind == "f" for a in arrays) else np.float64
            return np.full(shape_of(*arrays), np.nan, dtype=dtype)
        return tuple(out) if isinstance(out, tuple) else out  # NumPy's named results: CuPy returns plain tuples
    return run


def _routine(name, fn, shape_of=None):
    def routine(*args, **kwargs):
        check_kwargs(f"linalg.{name}", load()["linalg"][name], kwargs)
        _checked(name, [a for a in args if not isinstance(a, (str, bool))])
        if name == "solve":
            a, b = args
            if b.ndim == 1 and a.shape[-1] != b.size:  # cupy/linalg/_solve.py:46-54
                raise ValueError("a must have (..., M, M) shape and b must have (M,) for one-dimensional b")
            if b.ndim > 1 and a.shape[:-1] != b.shape[:-1]:  # no broadcasting of the batch dims
                raise ValueError("a must have (..., M, M) shape and b must have (..., M, K) for multidimensional b")
        return _run(f"linalg.{name}", _numpy(fn, shape_of), args, kwargs)

    routine.__name__ = routine.__qualname__ = name
    routine.__doc__ = f"cupy.linalg.{name} on the simulated device (computed by numpy.linalg.{name})."
    return routine


class _Linalg(types.ModuleType):
    def __getattr__(self, name):
        if name in load()["linalg"]:
            raise AttributeError(f"cupy.linalg.{name} exists in CuPy but gpugrad's simulated device does not "
                                 "implement it (add it to gpugrad/testing/cuda_sim/linalg.py)")
        raise AttributeError(f"module 'cupy.linalg' has no attribute {name!r}")


def build() -> types.ModuleType:
    mod = _Linalg("cupy.linalg", "cupy.linalg on gpugrad's simulated device")
    mod.LinAlgError = np.linalg.LinAlgError  # cupy/linalg/__init__.py re-exports NumPy's
    mod.inv = _routine("inv", np.linalg.inv, lambda a: a.shape)
    mod.solve = _routine("solve", np.linalg.solve, lambda a, b: b.shape)
    mod.det = _routine("det", np.linalg.det)
    mod.slogdet = _routine("slogdet", np.linalg.slogdet)
    mod.svd = _routine("svd", np.linalg.svd)
    mod.qr = _routine("qr", np.linalg.qr)
    return mod
