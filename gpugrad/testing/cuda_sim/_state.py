"""What the simulated device counts, and which device is current.

Counters are process-wide (like a profiler's), the current device is per thread (like CUDA's). ``launches``
counts every unit of device work a real GPU would queue: custom kernels, CuPy ufuncs, reductions and copies,
memsets and cuBLAS calls. ``syncs`` counts every point where the host would wait for the device (device-to-host
transfers, scalar conversions, explicit synchronize calls, data-dependent output shapes).
"""
from __future__ import annotations

import contextlib
import threading

FIELDS = ("launches", "syncs", "allocs", "h2d", "d2h", "alloc_bytes", "h2d_bytes", "d2h_bytes")

_counts = dict.fromkeys(FIELDS, 0)
_trace: list | None = None  # (event, what) pairs while a trace() is open
_forbid: list[str] = []  # reasons: while non-empty, a sync raises instead of being counted
_local = threading.local()
device_count = 1  # set by module(n)
pool_used = [0]  # bytes held by live simulated allocations


class SyncForbidden(RuntimeError):
    """A host sync happened where the caller declared there must be none."""


def counters() -> dict:
    return dict(_counts)


def reset_counters() -> None:
    for k in FIELDS:
        _counts[k] = 0


def _log(event, what):
    if _trace is not None:
        _trace.append((event, what))


def launch(what: str, n: int = 1) -> None:
    _counts["launches"] += n
    if _trace is not None:
        _trace.extend([("launch", what)] * n)


def sync(what: str) -> None:
    if _forbid:
        raise SyncForbidden(f"{what} would make the host wait for the GPU (a sync) inside {_forbid[-1]}")
    _counts["syncs"] += 1
    _log("sync", what)


def alloc(nbytes: int, what: str) -> None:
    _counts["allocs"] += 1
    _counts["alloc_bytes"] += nbytes
    _log("alloc", what)


def h2d(nbytes: int, what: str) -> None:
    _counts["h2d"] += 1
    _counts["h2d_bytes"] += nbytes
    _log("h2d", what)


def d2h(nbytes: int, what: str) -> None:
    """A device-to-host copy: the host waits for the device first, so it is a sync too."""
    sync(what)
    _counts["d2h"] += 1
    _counts["d2h_bytes"] += nbytes


@contextlib.contextmanager
def trace():
    """Record every launch, sync, alloc and transfer as (event, what) pairs: ``with trace() as events: ...``."""
    global _trace
    outer, _trace = _trace, []
    events = _trace
    try:
        yield events
    finally:
        _trace = outer
        if outer is not None:
            outer.extend(events)


@contextlib.contextmanager
def forbid_syncs(where: str = "a region that must not sync"):
    """Raise :class:`SyncForbidden` at the first host sync inside the block (what CUDA-graph capture demands)."""
    _forbid.append(where)
    try:
        yield
    finally:
        _forbid.pop()


def current_device() -> int:
    return getattr(_local, "device", 0)


def set_current_device(index: int) -> None:
    if not 0 <= index < device_count:
        from gpugrad.testing.cuda_sim.cuda import CUDARuntimeError

        raise CUDARuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {index} "
                               f"({device_count} simulated device(s))")
    _local.device = index
