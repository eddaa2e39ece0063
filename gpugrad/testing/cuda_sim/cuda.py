"""``cupy.cuda`` on the simulated device: devices, streams, events, the runtime API and the memory pools.

Work runs synchronously on the host, so streams and events only keep order and time; what they are for here is
accounting: ``Stream.synchronize``, ``Event.synchronize`` and ``Device.synchronize`` count host syncs.
"""
from __future__ import annotations

import time
import types

from gpugrad.testing.cuda_sim import _state, cublas, nccl
from gpugrad.testing.cuda_sim._state import CUDARuntimeError
from gpugrad.testing.cuda_sim.array import MemoryPointer

NAME = "Simulated NVIDIA H200 (gpugrad cuda_sim)"
TOTAL_MEMORY = 141 * 2**30


class CompileException(Exception):
    """cupy.cuda.compiler.CompileException: a kernel failed to compile (here: under the emulator's g++)."""


class Device:
    """cupy.cuda.Device: a context manager that makes ``id`` the current device."""

    def __init__(self, device=None):
        self.id = _state.current_device() if device is None else int(device)
        if not 0 <= self.id < _state.device_count:
            raise CUDARuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {self.id} "
                                   f"({_state.device_count} simulated device(s))")
        self._prev = []

    def __enter__(self):
        self._prev.append(_state.current_device())
        _state.set_current_device(self.id)
        return self

    def __exit__(self, *exc):
        _state.set_current_device(self._prev.pop())

    def use(self):
        _state.set_current_device(self.id)

    def synchronize(self):
        _state.sync(f"Device({self.id}).synchronize()")

    def __int__(self):
        return self.id

    __index__ = __int__

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("cuda_sim.Device", self.id))

    def __repr__(self):
        return f"<CUDA Device {self.id}>"

    @property
    def compute_capability(self):
        return "90"

    @property
    def mem_info(self):
        return TOTAL_MEMORY - _state.pool_used[0], TOTAL_MEMORY


class Stream:
    """cupy.cuda.Stream. ``null`` is the legacy default stream."""

    _current = _state.streams  # the streams entered (innermost last); shared with the cuBLAS stand-in

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.null, self.non_blocking = null, non_blocking
        self.device_id = _state.current_device()
        self.ptr = 0 if null else id(self)

    def __enter__(self):
        Stream._current.append(self)
        return self

    def __exit__(self, *exc):
        Stream._current.pop()

    def use(self):
        Stream._current[:] = [self]
        return self

    def synchronize(self):
        _state.sync("Stream.synchronize()")

    @property
    def done(self):
        return True  # work ran synchronously; querying does not block

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event):
        pass  # order is already total on the simulator

    # -- CUDA-graph capture: launches are recorded instead of run; end_capture hands back the Graph ----------------
    def begin_capture(self, mode=None):
        if self.ptr in (0, 1):  # CuPy's check and message (cupy/cuda/stream.pyx, Stream.begin_capture)
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if _state.capture is not None:
            raise CUDARuntimeError("cudaErrorIllegalState: a stream is already capturing")
        if get_current_stream() is not self:
            raise CUDARuntimeError("gpugrad cuda_sim: begin_capture on a stream that is not the current one")
        _state.capture = _state.Capture(self)

    def end_capture(self):
        cap = _state.capture
        if cap is None or cap.stream is not self:
            raise CUDARuntimeError("cudaErrorIllegalState: end_capture on a stream that is not capturing")
        _state.capture = None
        if cap.invalidated:  # CUDA: an illegal call during capture makes cudaStreamEndCapture fail
            raise CUDARuntimeError(f"cudaErrorStreamCaptureInvalidated: operation failed due to a previous error "
                                   f"during capture ({cap.invalidated})")
        return Graph(cap)

    def is_capturing(self):
        return _state.capture is not None and _state.capture.stream is self

    def __repr__(self):
        return f"<Stream {self.ptr} (device {self.device_id})>"


Stream.null = Stream(null=True)


def get_current_stream(device_id=None):
    return Stream._current[-1] if Stream._current else Stream.null


class Graph:
    """A captured CUDA graph: ``launch()`` replays every recorded kernel, in order, on the buffers captured."""

    def __init__(self, capture):
        self._ops, self._keep = capture.ops, capture.keep

    def upload(self, stream=None):
        pass

    def launch(self, stream=None):
        if _state.capture is not None:
            raise CUDARuntimeError("gpugrad cuda_sim: launching a graph inside a capture is not simulated")
        _state.replay(self._ops)


class Event:
    """cupy.cuda.Event: records the host clock (work is synchronous, so it is the device's clock too)."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.disable_timing = disable_timing
        self._time = None

    def record(self, stream=None):
        self._time = time.perf_counter()

    def synchronize(self):
        _state.sync("Event.synchronize()")

    @property
    def done(self):
        return self._time is not None


def get_elapsed_time(start_event, end_event):
    if start_event._time is None or end_event._time is None:
        raise CUDARuntimeError("cudaErrorInvalidResourceHandle: both events must be recorded")
    if start_event.disable_timing or end_event.disable_timing:
        raise CUDARuntimeError("cudaErrorInvalidResourceHandle: an event was created with disable_timing=True")
    return (end_event._time - start_event._time) * 1e3


class MemoryPool:
    """The device memory pool: how many bytes live simulated arrays hold. ``malloc`` serves as an allocator for
    ``using_allocator`` (a private pool, e.g. for CUDA-graph capture)."""

    def malloc(self, size):
        return MemoryPointer(0, Device())

    def used_bytes(self):
        return _state.pool_used[0]

    def total_bytes(self):
        return _state.pool_used[0]

    def free_bytes(self):
        return 0

    def n_free_blocks(self):
        return 0

    def free_all_blocks(self, stream=None):
        pass

    def set_limit(self, size=None, fraction=None):
        pass

    def get_limit(self):
        return TOTAL_MEMORY


class PinnedMemoryPool:
    def n_free_blocks(self):
        return 0

    def free_all_blocks(self):
        pass


MemoryPool.default = MemoryPool()
PinnedMemoryPool.default = PinnedMemoryPool()


class using_allocator:
    """cupy.cuda.using_allocator: allocations in the block go through ``allocator`` (here: are attributed to it)."""

    def __init__(self, allocator=None):
        self.allocator = allocator or (lambda size: None)

    def __enter__(self):
        _state.allocator.append(self.allocator)
        return self

    def __exit__(self, *exc):
        _state.allocator.pop()


def _properties(device):
    Device(device)  # validates the ordinal
    return {"name": NAME.encode(), "major": 9, "minor": 0, "totalGlobalMem": TOTAL_MEMORY,
            "multiProcessorCount": 132, "maxThreadsPerBlock": 1024, "warpSize": 32,
            "sharedMemPerBlock": 48 * 1024, "sharedMemPerMultiprocessor": 228 * 1024, "regsPerBlock": 65536,
            "clockRate": 1980000, "memoryClockRate": 2619000, "memoryBusWidth": 6144, "l2CacheSize": 50 * 2**20,
            "pciBusID": device}


def _set_device(device):
    _state.set_current_device(int(device))


runtime = types.SimpleNamespace(
    CUDARuntimeError=CUDARuntimeError,
    getDeviceCount=lambda: _state.device_count,
    getDevice=_state.current_device,
    setDevice=_set_device,
    getDeviceProperties=_properties,
    deviceSynchronize=lambda: _state.sync("cudaDeviceSynchronize"),
    runtimeGetVersion=lambda: 13000,
    driverGetVersion=lambda: 13000,
    memGetInfo=lambda: (TOTAL_MEMORY - _state.pool_used[0], TOTAL_MEMORY),
    deviceCanAccessPeer=lambda device, peer: 0,
    is_hip=False,
)
compiler = types.SimpleNamespace(CompileException=CompileException)


def _library(name, label):
    """``cupy.cuda.<name>`` (cupy_backends.cuda.libs.<name>): only ``setStream``, which refuses a capturing stream."""
    lib = types.ModuleType(f"cupy.cuda.{name}", f"{label} on gpugrad's simulated device: setStream only")

    def setStream(handle, stream):  # noqa: N802 - CuPy's name
        if _state.capture is not None and _state.capture.stream.ptr == stream:
            _state.library_call(label)

    lib.setStream = setStream
    return lib


def build() -> types.ModuleType:
    cuda = types.ModuleType("cupy.cuda", "cupy.cuda on gpugrad's simulated device")
    for name in ("Device", "Stream", "Event", "Graph", "MemoryPool", "PinnedMemoryPool", "get_current_stream",
                 "get_elapsed_time", "using_allocator", "runtime", "compiler"):
        setattr(cuda, name, globals()[name])
    cuda.get_device_id = _state.current_device
    cuda.nccl = nccl  # one rank only (world size 1)
    for name, label in (("cublas", "cuBLAS"), ("curand", "cuRAND"), ("cusolver", "cuSOLVER"),
                        ("cusparse", "cuSPARSE")):
        setattr(cuda, name, _library(name, label))
    cuda.device = types.ModuleType("cupy.cuda.device", "cupy.cuda.device on gpugrad's simulated device")
    cuda.device.get_cublas_handle = cuda.get_cublas_handle = cublas.handle_of_current_device
    cuda.device.get_device_id = _state.current_device
    cuda.is_available = lambda: True
    return cuda
