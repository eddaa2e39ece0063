"""Argument checks shared by the launchers (run before anything touches the runtime: bad input raises, nothing
is launched), and the count of launcher calls that proves the kernel path ran."""
from __future__ import annotations

import collections

import numpy as np

from gpugrad.backend.kernels.names import CTYPES, LOW_CTYPES
from gpugrad.backend.kernels.runtimes import runtime

CALLS: collections.Counter = collections.Counter()  # launcher name -> launches; proves the kernel path ran


def _describe(arrays):
    return ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in arrays)


def _check_float(name, *arrays, low=False):
    """All float32 or all float64 (one dtype; float16 and bfloat16 arrive here as float32, see reference.opmath), or,
    for the launchers with kernels of their own for those (``low``), all of one of them; returns the C type name."""
    dt = arrays[0].dtype
    if low and dt.name in LOW_CTYPES and all(a.dtype == dt for a in arrays):
        return LOW_CTYPES[dt.name]
    if dt.name not in CTYPES or any(a.dtype != dt for a in arrays):
        raise TypeError(f"{name}: expected float arrays of one dtype (float16, bfloat16, float32 or float64), "
                        f"got {_describe(arrays)}")
    return CTYPES[dt.name]


def _math_dtype(x):
    """The dtype the kernels compute x's rows in and read their float vectors in (common.cuh gg::math_t): float32 for
    float16 and bfloat16, else x's own."""
    return np.dtype(np.float32) if x.dtype.name in LOW_CTYPES else x.dtype


def _in_math(a, x):
    """``a`` in x's math dtype: a float16 / bfloat16 vector (saved statistics, weights, an upstream gradient) widened
    exactly, anything else as it is."""
    dt = _math_dtype(x)
    return a if a.dtype == dt else a.astype(dt)


def _check_shapes(name, shape, *arrays):
    if any(tuple(a.shape) != tuple(shape) for a in arrays):
        raise ValueError(f"{name}: expected arrays of shape {tuple(shape)}, got {_describe(arrays)}")


def _check_2d(name, x):
    if x.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D (rows, cols) array, got {_describe([x])}")
    if x.shape[0] > 2**31 - 1 or x.shape[1] > 2**31 - 1:
        raise ValueError(f"{name}: at most 2**31 - 1 rows (grid.x) and columns (int indices), got {x.shape}")


def _contiguous(*arrays):
    return all(a.flags.c_contiguous for a in arrays)

def _rows_in(name, x, like=(), row_vectors=(), col_vectors=(), low=False):
    """Validate everything before touching the runtime: a 2-D float x, arrays of its shape (like), per-row (rows,)
    and per-column (cols,) vectors (None allowed) of its dtype. With ``low`` (launchers with float16 / bfloat16 kernels
    of their own) x and like may also be all float16 or all bfloat16, and then each vector either x's dtype or
    float32, the dtype those kernels compute in (saved statistics, float32 weights). Then count the launch and return
    the runtime and C-contiguous versions, in that order."""
    _check_2d(name, x)
    vectors = [a for a in (*row_vectors, *col_vectors) if a is not None]
    if low and x.dtype.name in LOW_CTYPES:
        _check_float(name, x, *like, low=True)
        odd = [a for a in vectors if a.dtype != x.dtype and a.dtype.name != "float32"]
        if odd:
            raise TypeError(f"{name}: the per-row and per-column vectors of a {x.dtype} x must be {x.dtype} or "
                            f"float32, got x {_describe([x])} and {_describe(odd)}; cast them with .astype")
    else:
        _check_float(name, x, *like, *vectors)
    _check_shapes(name, x.shape, *like)
    _check_shapes(name, x.shape[:1], *row_vectors)
    _check_shapes(name, x.shape[1:], *(c for c in col_vectors if c is not None))
    rt = runtime()
    CALLS[name] += 1
    return (rt, *(None if a is None else rt.ascontiguousarray(a) for a in (x, *like, *row_vectors, *col_vectors)))
