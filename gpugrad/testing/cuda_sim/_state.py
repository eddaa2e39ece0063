"""What the simulated device counts, and which device is current.

Counters are process-wide (like a profiler's), the current device is per thread (like CUDA's). ``launches``
counts every unit of device work a real GPU would queue: custom kernels, CuPy ufuncs, reductions and copies,
memsets and cuBLAS calls. ``syncs`` counts every point where the host would wait for the device (device-to-host
transfers, scalar conversions, explicit synchronize calls, data-dependent output shapes).
"""
from __future__ import annotations

import contextlib
import threading
import weakref

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
streams: list = []  # the cupy.cuda.Stream objects made current (innermost last; none: the legacy stream)


def current_stream_ptr() -> int:
    return streams[-1].ptr if streams else 0
allocator = []  # allocators installed by cupy.cuda.using_allocator (innermost last)


class Capture:
    """What a stream capture recorded: each launch as a closure that redoes it on the same buffers, and every
    buffer allocated during capture (the graph's memory: it must outlive the graph). ``invalidated`` says why CUDA
    invalidated the capture (an illegal call on the capturing stream), else None."""

    def __init__(self, stream):
        self.stream, self.ops, self.keep, self.invalidated = stream, [], [], None


class CUDARuntimeError(RuntimeError):
    """cupy.cuda.runtime.CUDARuntimeError (re-exported by cupy.cuda.runtime)."""


def _invalidate(what):
    # CUDA, not CuPy: a synchronising call on a capturing stream fails and invalidates the capture, so that
    # cudaStreamEndCapture fails too (RULES.md: "a sync invalidates the capture"; to confirm on a GPU).
    capture.invalidated = capture.invalidated or what
    return CUDARuntimeError(f"cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing "
                            f"({what})")


def _transfer_refused(direction):
    # CuPy's own check, before any CUDA call (cupy/cuda/memory.pyx, MemoryPointer.copy_*_async): the capture stays
    # valid (RULES.md: "host transfers during capture").
    return RuntimeError(f"the current stream is capturing, so {direction} transfers are disallowed")


def library_call(library: str) -> None:
    """A CUDA library's ``setStream`` as CuPy wraps it (cuBLAS, cuRAND, cuSOLVER, cuSPARSE): refused on a
    capturing stream with CuPy's message (cupy_backends/cuda/libs/<library>.pyx, setStream)."""
    if capture is not None:
        raise NotImplementedError(f"calling {library} API during stream capture is currently unsupported")


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
    """An explicit wait for the device (Stream/Event/Device.synchronize): on a capturing stream CUDA refuses it and
    invalidates the capture."""
    if capture is not None:
        raise _invalidate(f"{what} (a host sync)")
    if _forbid:
        raise SyncForbidden(f"{what} would make the host wait for the GPU (a sync) inside {_forbid[-1]}")
    _counts["syncs"] += 1
    _log("sync", what)


def alloc(nbytes: int, what: str) -> None:
    # NOTE: allowed during capture, from any pool: CuPy captures in relaxed mode so that its pool may cudaMalloc
    # (cupy/cuda/stream.pyx, Stream.begin_capture); gpugrad.cuda.graph() installs the graph's own pool.
    for fn in allocator[-1:]:
        fn(nbytes)
    _counts["allocs"] += 1
    _counts["alloc_bytes"] += nbytes
    _log("alloc", what)


def read_back(what: str) -> None:
    """The host reads what the device computed (a data-dependent size, a count): CuPy copies it to the host, which
    it refuses while capturing (copy_to_host_async), and otherwise the host waits (a sync)."""
    if capture is not None:
        raise _transfer_refused("D2H")
    sync(what)


# ---- live allocations by address, for calls that take raw pointers (the cuBLAS stand-in) ------------------------
class Allocation:
    """A live simulated allocation: its host buffer, device, and the capture it was made in (None: eager)."""

    __slots__ = ("start", "nbytes", "buffer", "device", "capture", "__weakref__")

    def __init__(self, buffer, device):
        self.start, self.nbytes = buffer.__array_interface__["data"][0], buffer.nbytes
        self.buffer, self.device, self.capture = weakref.ref(buffer), device, capture


_allocations: dict[int, Allocation] = {}


def register(buffer, device) -> None:
    """Note a fresh allocation (array.new): raw pointers into it are recognised until its buffer is freed."""
    a = Allocation(buffer, device)
    _allocations[a.start] = a
    weakref.finalize(buffer, _allocations.pop, a.start, None)


def allocation_at(ptr: int, nbytes: int):
    """The live allocation holding [ptr, ptr + nbytes), or None."""
    for a in _allocations.values():
        if a.start <= ptr and ptr + nbytes <= a.start + a.nbytes and a.buffer() is not None:
            return a
    return None


def h2d(nbytes: int, what: str) -> None:
    if capture is not None:
        raise _transfer_refused("H2D")
    _counts["h2d"] += 1
    _counts["h2d_bytes"] += nbytes
    _log("h2d", what)


def d2h(nbytes: int, what: str) -> None:
    """A device-to-host copy: the host waits for the device first, so it is a sync too. Refused by CuPy itself
    while capturing (its copy_to_host_async)."""
    if capture is not None:
        raise _transfer_refused("D2H")
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
        raise CUDARuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {index} "
                               f"({device_count} simulated device(s))")
    _local.device = index
