"""The process group: which rank this process is, how many there are, and what happens when one of them fails.

There is one group per process (torch's default group). MPI starts the processes (``mpiexec -n N``) and numbers
them; ``init_process_group`` wraps a private copy of ``MPI.COMM_WORLD``, and for ``backend="nccl"`` also an NCCL
communicator for this rank's GPU, bootstrapped by broadcasting NCCL's unique id over MPI.

A failing rank must not leave the others waiting forever. Two guards do it:

* an uncaught exception on any rank prints its traceback and the rank, then calls ``MPI_Abort``, which ends every
  rank (``sys.excepthook``, installed by ``init_process_group``);
* every collective is nonblocking underneath and waited for by polling, so a rank whose peer died (killed, or
  exited without aborting) raises :class:`DistBackendError` after ``timeout`` seconds, naming the peers that are
  gone, and then aborts through the same hook.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import socket
import sys
import time

from gpugrad.distributed.mpi import MpiComm
from gpugrad.distributed.nccl import NcclComm, nccl_available

INSTALL_HINT = "pip install 'gpugrad[distributed]' (mpi4py and the MPICH library; start ranks with mpiexec -n N)"
DEFAULT_TIMEOUT = 300.0  # seconds a collective may wait for its peers (torch's default for NCCL is 10 min)
BACKENDS = ("mpi", "nccl")
ABORT_GRACE_S = 0.2
NOT_INITIALIZED = "Default process group has not been initialized, please make sure to call init_process_group."


class DistBackendError(RuntimeError):
    """A collective failed or timed out waiting for its peers (as torch.distributed.DistBackendError)."""


class _Group:
    def __init__(self, backend, mpi, timeout):
        self.backend, self.mpi, self.timeout, self.nccl = backend, mpi, timeout, None
        self.rank, self.size = mpi.rank, mpi.size
        self.peers = [(socket.gethostname(), os.getpid())]  # (host, pid) per rank, gathered at init
        self.local_rank = 0

    def comm_for(self, tensor):
        """The communicator for ``tensor``'s device: MPI for CPU tensors, this rank's NCCL one for its GPU."""
        if tensor._backend.name == "cpu":
            return self.mpi
        if self.nccl is None:
            raise RuntimeError(f"the '{self.backend}' process group communicates CPU tensors; this one is on "
                               f"{tensor.device}: init_process_group('nccl') for CUDA tensors")
        if tensor.device != self.nccl.device:
            raise ValueError(f"a tensor on {tensor.device}, but this rank's NCCL communicator is on "
                             f"{self.nccl.device} (init_process_group's device_id)")
        return self.nccl

    def timeout_error(self, what):
        """The error for ``what`` waiting longer than the timeout: which peers on this host have exited."""
        here = socket.gethostname()
        gone = [f"rank {r} (pid {pid} on {host})" for r, (host, pid) in enumerate(self.peers)
                if host == here and r != self.rank and _exited(pid)]
        elsewhere = sorted({host for host, _ in self.peers} - {here})
        why = (f"{', '.join(gone)} {'has' if len(gone) == 1 else 'have'} exited" if gone else
               "no rank on this host has exited, so a rank is stuck outside this collective"
               + (f" or has failed on {', '.join(elsewhere)}" if elsewhere else ""))
        return DistBackendError(f"{what} timed out after {self.timeout:g} s on rank {self.rank} of {self.size}: "
                                f"{why} (init_process_group(timeout=...) sets the limit)")


_group: _Group | None = None
_previous_hook = None


def _exited(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # NOTE: a dead child that the launcher has not reaped yet still answers kill(0): read its state (Linux)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def mpi_module():
    """mpi4py's ``MPI`` (importing it initializes MPI), or a RuntimeError that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(f"gpugrad.distributed needs mpi4py and an MPI library: {INSTALL_HINT} ({e})") from None
    return MPI


def is_available() -> bool:
    """Whether mpi4py is installed (checked without importing it, so MPI is not initialized here)."""
    try:
        return importlib.util.find_spec("mpi4py") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["mpi4py"] is None (an import that is blocked)
        return False


is_mpi_available = is_available


def is_nccl_available() -> bool:
    """Whether the "nccl" backend can run here: mpi4py, a CUDA device and CuPy's NCCL bindings."""
    return is_available() and nccl_available()


def init_process_group(backend=None, timeout=None, device_id=None, world_size=-1, rank=-1):
    """Join the ranks ``mpiexec`` started: ``backend`` "mpi" (default; CPU tensors) or "nccl" (CUDA tensors, one
    GPU per rank: ``device_id``, default ``cuda:<local rank % GPUs>``). ``timeout`` (seconds or a timedelta) bounds
    every wait for peers. ``world_size`` and ``rank``, if given, must agree with MPI's."""
    global _group, _previous_hook
    if _group is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    backend = "mpi" if backend is None else str(backend).lower()
    if backend not in BACKENDS:
        raise ValueError(f"init_process_group: unknown backend {backend!r}; gpugrad.distributed has 'mpi' (CPU "
                         "tensors) and 'nccl' (CUDA tensors)")
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else \
        DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"init_process_group: timeout must be a positive number of seconds, got {timeout!r}")

    MPI = mpi_module()
    comm = MpiComm(MPI, MPI.COMM_WORLD.Dup(), seconds)
    for name, given, actual in (("world_size", world_size, comm.size), ("rank", rank, comm.rank)):
        if given not in (None, -1, actual):
            comm.free()
            raise ValueError(f"init_process_group: {name}={given}, but MPI started this process with {name} {actual} "
                             "(mpiexec -n N decides both)")
    group = _Group(backend, comm, seconds)
    comm.timeout_error = group.timeout_error
    try:
        group.peers = comm.allgather_object(group.peers[0])
        here = group.peers[group.rank][0]
        group.local_rank = sum(host == here for host, _ in group.peers[:group.rank])
        if backend == "nccl":

            group.nccl = NcclComm(comm, device_id, group)
    except BaseException:
        comm.free()
        raise
    _group = group
    if sys.excepthook is not _abort_on_exception:
        _previous_hook, sys.excepthook = sys.excepthook, _abort_on_exception


def _abort_on_exception(kind, value, tb):
    """sys.excepthook while a group exists: the usual traceback, then (with peers) MPI_Abort, so no rank waits for
    this one forever."""
    sys.stderr = sys.__stderr__  # NOTE: the program may have silenced this rank; its failure must still show
    (_previous_hook or sys.__excepthook__)(kind, value, tb)
    group = _group
    if group is not None and group.size > 1:
        print(f"gpugrad.distributed: rank {group.rank} of {group.size} failed ({kind.__name__}); aborting all ranks",
              file=sys.stderr, flush=True)
        abort(1)


def destroy_process_group():
    """Free the communicators (MPI itself stays initialized until exit; a new group may be made)."""
    global _group
    group = get_group()
    _group = None
    if group.nccl is not None:
        group.nccl.destroy()
    group.mpi.free()
    if sys.excepthook is _abort_on_exception:
        sys.excepthook = _previous_hook or sys.__excepthook__


def abort(code=1):
    """End every rank at once with exit status ``code`` (MPI_Abort); for errors some ranks may not see."""
    group = get_group()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)  # NOTE: else the launcher may kill us before it has forwarded our last words
    group.mpi.abort(code)


def get_group() -> _Group:
    if _group is None:
        raise ValueError(NOT_INITIALIZED)
    return _group


def is_initialized() -> bool:
    return _group is not None


def get_rank() -> int:
    return get_group().rank


def get_world_size() -> int:
    return get_group().size


def get_node_local_rank() -> int:
    """This rank's index among the ranks on its host (pick a GPU with it: local rank % device count)."""
    return get_group().local_rank


def get_backend() -> str:
    return get_group().backend


def barrier():
    """Wait until every rank has called barrier() (or the timeout)."""
    get_group().mpi.barrier()
