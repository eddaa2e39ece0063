"""Level-1 BLAS (axpy, scal) of NumPy's own OpenBLAS, for CPU optimizer updates: ``y += a * x`` in one pass over
memory, as one fused multiply-add per element, on the BLAS pool's threads.

NumPy has no fused ``y += a * x``: ``p -= lr * g`` reads and writes memory twice, rounds twice and runs on one
thread. SGD over the MLP's 1.86M float32 parameters took 1.0 ms so and 0.20 ms as saxpy on 2 cores (torch 0.22 ms),
and saxpy's fused multiply-add rounds as torch's ``add_(x, alpha=a)`` does, bit for bit.

NumPy's wheels bundle OpenBLAS under a symbol prefix (``scipy_cblas_saxpy64_``: ``64_``, 64-bit integers);
threadpoolctl finds the library NumPy loaded. Where there is none (another BLAS, an unknown build) :func:`level1`
returns None and the caller keeps its NumPy formula.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from gpugrad.backend.threads import blas_libraries

# (prefix, suffix) of the CBLAS symbols, in the order tried: NumPy 2's scipy-openblas (ILP64, then LP64), NumPy
# 1's openblas64_, a plain OpenBLAS
SYMBOLS = (("scipy_cblas_", "64_"), ("scipy_cblas_", ""), ("cblas_", "64_"), ("cblas_", ""))
_TYPES = {np.dtype(np.float32): ("s", ctypes.c_float), np.dtype(np.float64): ("d", ctypes.c_double)}
# An OpenBLAS axpy kernel runs whole vectors of up to 64 elements as fused multiply-adds and the few elements past
# the last whole one in a scalar loop that rounds product and sum apart; a threaded call cuts its length into one
# part per thread (driver/others/blas_l1_thread.c), each with such a tail. So every call here has a length that
# is a multiple of BLOCK per thread, and the remainder goes through a zero-padded copy: every element is fused,
# whatever the thread count.
BLOCK = 64
SINGLE = 10000  # interface/axpy.c runs an axpy of at most this many elements on the calling thread


def numpy_openblas(libraries):
    """The ctypes handle of the OpenBLAS that NumPy's wheel bundles (its path lies under numpy), or None."""
    for lib in libraries:
        if lib.internal_api == "openblas" and "/numpy" in lib.filepath.replace("\\", "/"):
            return ctypes.CDLL(lib.filepath)
    return None


def bind(handle):
    """(threads, {dtype: (axpy, scal)}) from a BLAS handle's symbols (``threads()``: its pool's thread count), or
    None when it has none of SYMBOLS."""
    for prefix, suffix in SYMBOLS:
        count = getattr(handle, f"{prefix[:-len('cblas_')]}openblas_get_num_threads{suffix}", None)
        if count is None or not hasattr(handle, f"{prefix}saxpy{suffix}"):
            continue
        index = ctypes.c_int64 if suffix == "64_" else ctypes.c_int
        count.argtypes, count.restype = [], ctypes.c_int
        routines = {}
        for dtype, (letter, scalar) in _TYPES.items():
            axpy, scal = getattr(handle, f"{prefix}{letter}axpy{suffix}"), getattr(handle, f"{prefix}{letter}scal{suffix}")
            axpy.argtypes = [index, scalar, ctypes.c_void_p, index, ctypes.c_void_p, index]
            scal.argtypes = [index, scalar, ctypes.c_void_p, index]
            axpy.restype = scal.restype = None
            routines[dtype] = (axpy, scal)
        return count, routines
    return None


class Level1:
    """The routines, found at first use (scanning the loaded libraries takes ~2 ms, which import need not pay)."""

    def __init__(self, find=lambda: numpy_openblas(blas_libraries())):
        self.find, self.bound, self.lock = find, None, threading.Lock()

    def get(self, dtype):
        """(threads, axpy, scal) for ``dtype``, or None."""
        if self.bound is None:
            with self.lock:
                if self.bound is None:
                    handle = self.find()
                    self.bound = (bind(handle) if handle is not None else None) or (None, {})
        count, routines = self.bound
        return None if dtype not in routines else (count, *routines[dtype])


LEVEL1 = Level1()


def level1(*arrays):
    """(axpy, scal) for host arrays that BLAS can update in place (one float32 or float64 dtype, C-contiguous, one
    size, the first writeable), else None. ``axpy(a, x, y)``: ``y += a * x``, each element one fused multiply-add
    with ``a`` rounded to their dtype, as torch's ``y.add_(x, alpha=a)``; ``scal(a, x)``: ``x *= a``. ``a`` must
    not be 0: OpenBLAS then skips the pass or writes zeros, where ``y + 0 * x`` and ``0 * x`` would carry NaNs."""
    first = arrays[0]
    found = LEVEL1.get(first.dtype) if type(first) is np.ndarray and first.dtype in _TYPES else None
    if found is None or not (first.flags.writeable and all(
            type(a) is np.ndarray and a.dtype == first.dtype and a.size == first.size and a.flags.c_contiguous
            for a in arrays)):
        return None
    count, blas_axpy, blas_scal = found

    def axpy(a, x, y):
        n = y.size
        bulk = n - n % (BLOCK * (count() if n > SINGLE else 1))
        if bulk:
            blas_axpy(bulk, a, x.ctypes.data, 1, y.ctypes.data, 1)
        if bulk < n:
            rest = (n - bulk + BLOCK - 1) // BLOCK * BLOCK
            xs, ys = np.zeros(rest, y.dtype), np.zeros(rest, y.dtype)
            xs[:n - bulk], ys[:n - bulk] = x.reshape(-1)[bulk:], y.reshape(-1)[bulk:]
            blas_axpy(rest, a, xs.ctypes.data, 1, ys.ctypes.data, 1)
            y.reshape(-1)[bulk:] = ys[:n - bulk]

    return axpy, lambda a, x: blas_scal(x.size, a, x.ctypes.data, 1)
