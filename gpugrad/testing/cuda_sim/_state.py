"""What the simulated device counts, and which device is current.

Counters are process-wide (like a profiler's), the current device is per thread (like CUDA's). ``launches``
counts every unit of device work a real GPU would queue: custom kernels, CuPy ufuncs, reductions and copies,
memsets and cuBLAS calls. ``syncs`` counts every point where the host would wait for the device (device-to-host
transfers, scalar conversions, explicit synchronize calls, data-dependent output shapes).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

FIELDS = ("launches", "syncs", "allocs", "h2d", "d2h", "alloc_bytes", "h2d_bytes", "d2h_bytes", "graph_launches")

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


# ---- CUDA-graph capture: work is recorded, not run (as on a GPU), and replayed by Graph.launch -----------------
capture = None  # the Capture being recorded, or None
allocator = []  # allocators installed by cupy.cuda.using_allocator (innermost last)


class Capture:
    """What a stream capture recorded: each launch as a closure that redoes it on the same buffers, and every
    buffer allocated during capture (the graph's memory: it must outlive the graph)."""

    def __init__(self, stream):
        self.stream, self.ops, self.keep = stream, [], []


def _capture_error(what):
    from gpugrad.testing.cuda_sim.cuda import CUDARuntimeError

    return CUDARuntimeError(f"cudaErrorStreamCaptureUnsupported: {what} is not permitted while a stream is "
                            "capturing a CUDA graph")


def _poison(arrays):
    # Captured work has not run yet: what it will write is garbage until the graph is launched (NaN for floats).
    for a in arrays:
        if a.size:
            a.reshape(-1).view(np.uint8)[...] = 0xFF


def computing():
    """Around host math that only finds a result's shape under capture, where inputs may hold poison (NaN)."""
    return np.errstate(all="ignore") if capture is not None else contextlib.nullcontext()


def launch(what: str, n: int = 1, replay=None, outputs=()) -> None:
    """Count ``n`` launches whose results were already computed into ``outputs`` (fresh host buffers). Under
    capture they are recorded instead: ``replay()`` recomputes into the same buffers when the graph runs."""
    if capture is not None:
        _poison(outputs)
        if n:
            capture.ops.extend([(what, replay)] + [(what, None)] * (n - 1))
        return
    _counts["launches"] += n
    if _trace is not None:
        _trace.extend([("launch", what)] * n)


def run(what: str, fn) -> None:
    """Launch work that writes into existing buffers: now, or recorded for replay under capture."""
    if capture is not None:
        capture.ops.append((what, fn))
        return
    fn()
    _counts["launches"] += 1
    _log("launch", what)


def replay(ops) -> None:
    for what, fn in ops:
        if fn is not None:
            fn()
        _counts["launches"] += 1
        _log("launch", what)
    _counts["graph_launches"] += 1


def sync(what: str) -> None:
    if capture is not None:
        raise _capture_error(f"{what} (a host sync)")
    if _forbid:
        raise SyncForbidden(f"{what} would make the host wait for the GPU (a sync) inside {_forbid[-1]}")
    _counts["syncs"] += 1
    _log("sync", what)


def alloc(nbytes: int, what: str) -> None:
    if capture is not None and not allocator:
        raise _capture_error(f"{what}: an allocation outside a memory pool reserved for the graph "
                             "(cupy.cuda.using_allocator)")
    for fn in allocator[-1:]:
        fn(nbytes)
    _counts["allocs"] += 1
    _counts["alloc_bytes"] += nbytes
    _log("alloc", what)


def h2d(nbytes: int, what: str) -> None:
    if capture is not None:
        raise _capture_error(f"{what}: a copy from pageable host memory")
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
