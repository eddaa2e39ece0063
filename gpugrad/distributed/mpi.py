"""The "mpi" backend: collectives on contiguous NumPy arrays through mpi4py.

Every collective is MPI's nonblocking form (``Iallreduce``, ``Ibcast``, ...) and is waited for by polling
``Test``: a blocking ``Allreduce`` whose peer died would wait forever, while polling can give up after the group's
timeout and say which peer is gone. Polling also drives MPI's progress while DistributedDataParallel's buckets are
in flight during backward (MPICH moves nonblocking collectives forward only inside MPI calls).
"""
from __future__ import annotations

import os
import pickle
import time

import numpy as np

# NOTE: MPICH moves a collective forward only inside MPI calls (Test), so a sleeping poller stalls big messages: for
# SPIN_S, poll back to back (yielding the core between polls); only a wait that long (a slow or dead peer) sleeps,
# doubling up to MAX_PAUSE_S, to leave the core to the others.
SPIN_S = 1.0
MAX_PAUSE_S = 1e-2


_yield = getattr(os, "sched_yield", lambda: None)


class MpiComm:
    def __init__(self, MPI, comm, timeout):
        self.MPI, self.comm, self.timeout = MPI, comm, timeout
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.ops = {"sum": MPI.SUM, "avg": MPI.SUM, "product": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
        self.timeout_error = lambda what: TimeoutError(f"{what} timed out after {timeout:g} s")

    def wait(self, request, what):
        """Poll ``request`` until it completes; past the timeout, raise the group's timeout error."""
        start = time.monotonic()
        pause = 0.0
        while not request.Test():
            waited = time.monotonic() - start
            if waited > self.timeout:
                raise self.timeout_error(what)
            if waited < SPIN_S:
                _yield()  # NOTE: not time.sleep(0), which takes ~70 µs
            else:
                time.sleep(pause)
                pause = min(pause * 2 or 1e-4, MAX_PAUSE_S)

    def _started(self, request, what, then=None):
        return _Pending(self, request, what, then)

    # -- collectives on arrays: each returns a pending operation (test() / wait()) ---------------------------------
    def all_reduce(self, buf, op):
        then = (lambda: np.divide(buf, self.size, out=buf)) if op == "avg" and self.size > 1 else None
        return self._started(self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.ops[op]), "all_reduce", then)

    def broadcast(self, buf, src):
        return self._started(self.comm.Ibcast(buf, root=src), "broadcast")

    def all_gather(self, send, recv):
        return self._started(self.comm.Iallgather(send, recv), "all_gather")

    def reduce_scatter(self, send, recv, op):
        then = (lambda: np.divide(recv, self.size, out=recv)) if op == "avg" and self.size > 1 else None
        request = self.comm.Ireduce_scatter_block(send, recv, op=self.ops[op])
        return self._started(request, "reduce_scatter", then)

    def barrier(self):
        self.wait(self.comm.Ibarrier(), "barrier")

    # -- Python objects (pickled), for metadata: shapes, NCCL's unique id ------------------------------------------
    def allgather_object(self, obj):
        data = np.frombuffer(pickle.dumps(obj), np.uint8)
        sizes = np.empty(self.size, np.int64)
        self.wait(self.comm.Iallgather(np.array([data.size], np.int64), sizes), "all_gather_object")
        out = np.empty(int(sizes.sum()), np.uint8)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.wait(self.comm.Iallgatherv(data, [out, sizes, offsets, self.MPI.BYTE]), "all_gather_object")
        return [pickle.loads(out[o:o + n].tobytes()) for o, n in zip(offsets, sizes)]

    def broadcast_object(self, obj, src):
        data = np.frombuffer(pickle.dumps(obj), np.uint8) if self.rank == src else None
        size = np.array([0 if data is None else data.size], np.int64)
        self.wait(self.comm.Ibcast(size, root=src), "broadcast_object")
        buf = data.copy() if data is not None else np.empty(int(size[0]), np.uint8)
        self.wait(self.comm.Ibcast(buf, root=src), "broadcast_object")
        return pickle.loads(buf.tobytes())

    def abort(self, code):
        self.MPI.COMM_WORLD.Abort(code)

    def free(self):
        self.comm.Free()


class _Pending:
    """A started MPI collective: ``test()`` without blocking, ``wait()`` until done (then its ``then``, once)."""

    def __init__(self, comm, request, what, then):
        self.comm, self.request, self.what, self.then = comm, request, what, then

    def test(self):
        return bool(self.request.Test())

    def wait(self):
        self.comm.wait(self.request, self.what)
        if self.then is not None:
            self.then, then = None, self.then
            then()
