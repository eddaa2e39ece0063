"""Argument checks shared by the launchers (run before anything touches the runtime: bad input raises, nothing
is launched), and the count of launcher calls that proves the kernel path ran."""
from __future__ import annotations

import collections

from gpugrad.backend.kernels.names import BF16_CTYPE, CTYPES
from gpugrad.backend.kernels.runtimes import runtime
from gpugrad.backend.reference.float16 import BF16

CALLS: collections.Counter = collections.Counter()  # launcher name -> launches; proves the kernel path ran


def _describe(arrays):
    return ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in arrays)


def _check_float(name, *arrays, bf16=False):
    """All float32 or all float64 (one dtype; float16 arrives here as float32, see reference.opmath), or, for the
    launchers with bfloat16 kernels (``bf16``), all bfloat16; returns the C type name."""
    dt = arrays[0].dtype
    if bf16 and dt == BF16 and all(a.dtype == dt for a in arrays):
        return BF16_CTYPE
    if dt.name not in CTYPES or any(a.dtype != dt for a in arrays):
        raise TypeError(f"{name}: expected float arrays of one dtype (float16, float32 or float64), "
                        f"got {_describe(arrays)}")
    return CTYPES[dt.name]


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

def _rows_in(name, x, like=(), row_vectors=(), col_vectors=()):
    """Validate everything before touching the runtime: a 2-D float x, arrays of its shape (like), per-row (rows,)
    and per-column (cols,) vectors (None allowed) of its dtype. Then count the launch and return the runtime and
    C-contiguous versions, in that order."""
    _check_2d(name, x)
    _check_float(name, x, *like, *row_vectors, *(c for c in col_vectors if c is not None))
    _check_shapes(name, x.shape, *like)
    _check_shapes(name, x.shape[:1], *row_vectors)
    _check_shapes(name, x.shape[1:], *(c for c in col_vectors if c is not None))
    rt = runtime()
    CALLS[name] += 1
    return (rt, *(None if a is None else rt.ascontiguousarray(a) for a in (x, *like, *row_vectors, *col_vectors)))
