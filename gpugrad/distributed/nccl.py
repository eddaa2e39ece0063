"""The "nccl" backend: collectives on CUDA arrays through CuPy's NCCL bindings (``cupy.cuda.nccl``), one GPU per rank.

Bootstrap: rank 0 makes NCCL's unique id and MPI broadcasts it; each rank then joins the communicator on its GPU.
Collectives run on a stream of their own, after the work already queued on the current stream (an event orders
them), so a bucket's all-reduce overlaps the rest of backward; ``wait()`` makes the current stream wait for it
without blocking the host, as torch's NCCL ``Work.wait()`` does. A watchdog thread (torch has one too) checks the
oldest collective in flight: past the group's timeout, or on an NCCL error, it names the peers that are gone and
aborts every rank, because the host may be blocked elsewhere (a read of the loss) when a peer dies.
"""
from __future__ import annotations

import collections
import sys
import threading
import time

from gpugrad.backend import cuda, get_backend, on
from gpugrad.backend.device import Device, parse_device

INSTALL_HINT = ("CuPy's NCCL bindings need the NCCL library: pip install 'nvidia-nccl-cu13>=2.27.7,<3' (with "
                "gpugrad[cuda])")
DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "int8": "NCCL_INT8",
          "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32", "int64": "NCCL_INT64",
          "uint64": "NCCL_UINT64"}
OPS = {"sum": "NCCL_SUM", "avg": "NCCL_AVG", "product": "NCCL_PROD", "min": "NCCL_MIN", "max": "NCCL_MAX"}


def nccl_module(cupy):
    """``cupy.cuda.nccl`` of the CuPy in use (the simulated device brings its own, for one rank)."""
    if getattr(cupy, "simulated", False):
        return cupy.cuda.nccl
    from cupy.cuda import nccl  # NOTE: lazy, as CuPy itself: it loads libnccl

    return nccl


def nccl_available() -> bool:
    if not cuda.is_available():
        return False
    try:
        return bool(nccl_module(cuda.cupy_module()).available)
    except ImportError:
        return False


class NcclComm:
    def __init__(self, mpi, device_id, group):
        if not cuda.is_available():
            raise RuntimeError(f"init_process_group('nccl') needs a CUDA device: {cuda.unavailable_reason()}")
        here = group.peers[group.rank][0]
        local, gpus = sum(host == here for host, _ in group.peers), cuda.device_count()
        if local > gpus:  # NOTE: NCCL 2.12+ refuses two ranks of one communicator on one GPU ("Duplicate GPU")
            raise RuntimeError(f"init_process_group('nccl'): {local} ranks on {here} but {gpus} CUDA device(s): NCCL "
                               "needs one GPU per rank. Start at most one rank per GPU (mpiexec -n "
                               f"{gpus}), or use the 'mpi' backend (CPU tensors) for more ranks than GPUs")
        if device_id is None:  # the local rank picks its GPU
            device_id = group.local_rank
        self.backend = be = get_backend(Device("cuda", device_id) if isinstance(device_id, int) else
                                        parse_device(device_id))
        self.device, self.cupy = be.device, be.xp
        self.nccl = nccl = nccl_module(self.cupy)
        if not nccl.available:
            raise RuntimeError(f"init_process_group('nccl'): {INSTALL_HINT}")
        uid = mpi.broadcast_object(nccl.get_unique_id() if mpi.rank == 0 else None, 0)
        with on(be):
            self.comm = nccl.NcclCommunicator(mpi.size, uid, mpi.rank)
            self.stream = self.cupy.cuda.Stream(non_blocking=True)
        self.watchdog = _Watchdog(self, group)

    def _type(self, array):
        name = DTYPES.get(str(array.dtype))
        if name is None:
            raise TypeError(f"NCCL cannot communicate {array.dtype} (it takes {', '.join(DTYPES)})")
        return getattr(self.nccl, name)

    def _start(self, what, launch, arrays):
        """Run ``launch(stream pointer)`` on the communication stream after the current stream's work."""
        cuda = self.cupy.cuda
        self.stream.wait_event(cuda.get_current_stream().record())
        launch(self.stream.ptr)
        return self.watchdog.started(_Pending(self, self.stream.record(), what, arrays))

    def all_reduce(self, buf, op):
        ptr, t = buf.data.ptr, self._type(buf)
        op = getattr(self.nccl, OPS[op])
        return self._start("all_reduce", lambda s: self.comm.allReduce(ptr, ptr, buf.size, t, op, s), [buf])

    def broadcast(self, buf, src):
        ptr, t = buf.data.ptr, self._type(buf)
        return self._start("broadcast", lambda s: self.comm.bcast(ptr, buf.size, t, src, s), [buf])

    def all_gather(self, send, recv):
        t = self._type(send)
        return self._start("all_gather", lambda s: self.comm.allGather(send.data.ptr, recv.data.ptr, send.size, t, s),
                           [send, recv])

    def reduce_scatter(self, send, recv, op):
        t, op = self._type(send), getattr(self.nccl, OPS[op])
        return self._start("reduce_scatter",
                           lambda s: self.comm.reduceScatter(send.data.ptr, recv.data.ptr, recv.size, t, op, s),
                           [send, recv])

    def destroy(self):
        self.watchdog.stop()
        self.comm.destroy()


class _Pending:
    """A collective queued on the communication stream; its arrays stay referenced until it is done, so the memory
    pool cannot hand their memory to other work meanwhile."""

    def __init__(self, comm, event, what, arrays):
        self.comm, self.event, self.what, self.arrays = comm, event, what, arrays
        self.started = time.monotonic()

    def test(self):
        return bool(self.event.done)

    def wait(self):
        self.comm.cupy.cuda.get_current_stream().wait_event(self.event)  # the device waits; the host goes on


class _Watchdog:
    """Watches the collectives in flight (they finish in order on one stream, so the oldest is the one to watch)."""

    def __init__(self, comm, group):
        self.comm, self.group, self.pending = comm, group, collections.deque()
        self.period = min(0.1, group.timeout / 10)
        self.halt = threading.Event()
        self.thread = None

    def started(self, pending):
        self.pending.append(pending)
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="gpugrad-nccl-watchdog", daemon=True)
            self.thread.start()
        return pending

    def _run(self):
        with on(self.comm.backend):  # CUDA calls from this thread go to its rank's device
            self._watch()

    def _watch(self):
        while not self.halt.wait(self.period):
            try:
                self.comm.comm.check_async_error()
                while self.pending and self.pending[0].test():
                    self.pending.popleft()
                late = self.pending and time.monotonic() - self.pending[0].started > self.group.timeout
                error = self.group.timeout_error(f"NCCL {self.pending[0].what}") if late else None
            except Exception as e:  # an NCCL error reported by the communicator
                error = e
            if error is not None:
                print(f"gpugrad.distributed: {error}; aborting all ranks", file=sys.stderr, flush=True)
                self.comm.comm.abort()
                self.group.mpi.abort(1)

    def stop(self):
        self.halt.set()
