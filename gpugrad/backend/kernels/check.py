"""Launchers of check.cu: the device-side range check of ids and the NaN/inf check of anomaly mode; the status
words both the range checks and the losses record failures in."""
from __future__ import annotations

from gpugrad.backend.kernels.names import INDEX_CTYPES, _expr
from gpugrad.backend.kernels.runtimes import runtime
from gpugrad.backend.kernels.validate import CALLS, _check_float, _describe
from gpugrad.backend.reference.float16 import opmath_all

# A failed range check is recorded in a device's status words (common.cuh; gpugrad/backend/deferred.py keeps one
# array per device) under a site id, instead of a host sync. status None: a throwaway (nobody reads the record).
STATUS_WORDS = 4  # = gg::STATUS_WORDS
_CHECK_BLOCK = 256  # = check_index's __launch_bounds__; its grid is at most one block's worth of partials


def _check_status(name, status):
    if status is not None and (status.dtype != "int64" or status.shape != (STATUS_WORDS,)
                               or not status.flags.c_contiguous):
        raise ValueError(f"{name}: status must be a C-contiguous int64 array of {STATUS_WORDS} words, "
                         f"got {_describe([status])}")


def _status(rt, status):
    return rt.zeros((STATUS_WORDS,), "int64") if status is None else status

def check_index(xp, ids, n, status, site):
    """Record (site, min, max) in status when an id of ``ids`` (any shape and layout) lies outside [0, n)."""
    name = "check_index"
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer ids, got {_describe([ids])}")
    _check_status(name, status)
    rt = runtime()
    CALLS[name] += 1
    if ids.size == 0:
        return
    if ids.dtype.name not in INDEX_CTYPES:
        ids = ids.astype("int64")
    ids = rt.ascontiguousarray(ids).reshape(-1)
    grid = min(-(-ids.size // _CHECK_BLOCK), _CHECK_BLOCK)
    partial = rt.empty((2 * grid,), "int64")
    rt.raw_kernel("check", _expr(name, INDEX_CTYPES[ids.dtype.name]))(
        (grid,), (_CHECK_BLOCK,), (ids, partial, _status(rt, status), ids.size, int(n), int(site)))



_CF_SLOTS, _CF_BLOCK, _CF_MAX_GRID = 8, 256, 1024  # = GG_CF_SLOTS and check_finite's __launch_bounds__


def _dense(rt, a):
    """A C-contiguous array holding each element of ``a`` exactly once: ``a``, or a view of its memory when ``a``
    is a transpose, a broadcast or a reversal of contiguous data (no launch), else a copy."""
    if a.flags.c_contiguous:
        return a
    v = a[tuple(slice(0, 1) if s == 0 else slice(None, None, -1) if s < 0 else slice(None) for s in a.strides)]
    v = v.transpose(sorted(range(v.ndim), key=lambda i: -v.strides[i]))
    return v if v.flags.c_contiguous else rt.ascontiguousarray(a)


def check_finite(xp, flags, node, epoch, *arrays):
    """Record in row ``node`` of ``flags`` (int64, (nodes, 2)) whether any of ``arrays`` (None allowed) holds a NaN
    (column 0) or +-inf (column 1), as ``epoch`` (> 0) * 2**32 + INT_MAX - the index of the first such array (the
    largest value is kept: a stale epoch loses, as does a later index). One launch per dtype and 8 arrays; no sync."""
    name = "check_finite"
    if flags.dtype != "int64" or flags.ndim != 2 or flags.shape[1] != 2 or not flags.flags.c_contiguous \
            or not 0 <= node < flags.shape[0]:
        raise ValueError(f"{name}: flags must be a C-contiguous int64 (nodes, 2) array with a row {node}, "
                         f"got {_describe([flags])}")
    rt = runtime()
    CALLS[name] += 1
    groups = {}
    for o, a in enumerate(arrays):
        if a is not None and a.size:
            groups.setdefault(_check_float(name, a), []).append((_dense(rt, a), o))
    for ctype, slots in groups.items():
        for c in range(0, len(slots), _CF_SLOTS):
            chunk = slots[c:c + _CF_SLOTS]
            grid = (min(-(-max(a.size for a, _ in chunk) // _CF_BLOCK), _CF_MAX_GRID),)
            args = tuple(x for a, o in chunk for x in (a, a.size, o)) + (None, 0, 0) * (_CF_SLOTS - len(chunk))
            rt.raw_kernel("check", _expr(name, ctype))(grid, (_CF_BLOCK,), (flags, int(node), int(epoch), *args))

opmath_all(globals())  # float16 in float32, exactly as the references (reference.opmath)
