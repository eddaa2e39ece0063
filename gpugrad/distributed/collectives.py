"""Collectives on Tensors, as torch.distributed names them: each writes its result into an existing tensor's buffer.

``async_op=True`` returns a :class:`Work` at once (the communication runs while the caller computes); ``wait()``
finishes it. Until then the tensors involved must not be read or written. Like torch's, these are not recorded by
autograd; a tensor they write into counts as changed in place (its version goes up), so a graph that saved it
refuses to backpropagate through the old values.
"""
from __future__ import annotations

import enum

from gpugrad._tensor import Tensor
from gpugrad.backend import on
from gpugrad.core import views as _views
from gpugrad.distributed.group import get_group


class ReduceOp(enum.Enum):
    """How all_reduce / reduce_scatter combine the ranks' values. AVG is SUM divided by the world size."""
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


class Work:
    """A collective started with ``async_op=True``."""
    def __init__(self, pending, finish=None):
        self._pending, self._finish = pending, finish

    def is_completed(self) -> bool:
        """Whether the communication has finished (never blocks; on MPI it also moves it forward)."""
        return self._pending is None or self._pending.test()

    def wait(self, timeout=None) -> bool:
        """Block until done (MPI), or make the current CUDA stream wait for it (NCCL); raises DistBackendError after
        the group's timeout (``timeout`` is accepted as in torch; the group's applies). Then the outputs hold the
        result."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None
        if self._finish is not None:
            self._finish, finish = None, self._finish
            finish()
        return True


def _op(op):
    op = ReduceOp(op.lower()) if isinstance(op, str) else op
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a ReduceOp (SUM, AVG, PRODUCT, MIN, MAX), got {op!r}")
    return op.value


def _written(tensor):
    """Declare an in-place write into ``tensor`` (before it starts, as torch bumps the version at the call)."""
    _views.before_write(tensor)
    tensor._version_counter[0] += 1


def _contiguous(tensor):
    """(the buffer to communicate, a function copying it back into ``tensor`` or None when it is the tensor's)."""
    data = tensor._data
    if data.flags.c_contiguous:
        return data, None
    buf = tensor._backend.xp.ascontiguousarray(data)
    return buf, lambda: tensor._backend.xp.copyto(data, buf)


def _run(tensor, start, finish, async_op):
    with on(tensor._backend):
        work = Work(start(), finish)
    if async_op:
        return work
    with on(tensor._backend):
        work.wait()
    return None


def _check(tensor, what):

    if not isinstance(tensor, Tensor):
        raise TypeError(f"{what}: expected a Tensor, got {type(tensor).__name__}")


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Replace ``tensor`` on every rank by the reduction (``op``) of all ranks' values, in place.

    >>> t = gpugrad.tensor([float(dist.get_rank())]); dist.all_reduce(t)   # 0 + 1 + ... on every rank
    """
    _check(tensor, "all_reduce")
    comm, op = get_group().comm_for(tensor), _op(op)
    if op == "avg" and tensor.dtype.kind not in "fV":
        raise TypeError(f"all_reduce: ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype}")
    buf, back = _contiguous(tensor)
    _written(tensor)
    return _run(tensor, lambda: comm.all_reduce(buf, op), back, async_op)


def broadcast(tensor, src, group=None, async_op=False):
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every other rank."""
    _check(tensor, "broadcast")
    g = get_group()
    if not 0 <= src < g.size:
        raise ValueError(f"broadcast: src must be a rank in [0, {g.size - 1}], got {src}")
    comm = g.comm_for(tensor)
    buf, back = _contiguous(tensor)
    if g.rank != src:
        _written(tensor)
    return _run(tensor, lambda: comm.broadcast(buf, src), back, async_op)


def _same_as(tensors, like, what):
    g = get_group()
    tensors = list(tensors)
    if len(tensors) != g.size:
        raise ValueError(f"{what}: needs one tensor per rank ({g.size}), got {len(tensors)}")
    for i, t in enumerate(tensors):
        _check(t, what)
        if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
            raise ValueError(f"{what}: tensor {i} is {tuple(t.shape)} {t.dtype} on {t.device}; every tensor must be "
                             f"{tuple(like.shape)} {like.dtype} on {like.device}")
    return tensors


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """``tensor_list[r]`` = rank r's ``tensor``, on every rank (the list holds world-size tensors to write into)."""
    _check(tensor, "all_gather")
    outs = _same_as(tensor_list, tensor, "all_gather")
    comm, xp = get_group().comm_for(tensor), tensor._backend.xp
    with on(tensor._backend):
        send = xp.ascontiguousarray(tensor._data)
        recv = xp.empty((len(outs),) + tuple(tensor.shape), tensor.dtype)
    for t in outs:
        _written(t)

    def finish():
        for i, t in enumerate(outs):
            xp.copyto(t._data, recv[i])

    return _run(tensor, lambda: comm.all_gather(send, recv), finish, async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """``output`` on rank r = the reduction over ranks of their ``input_list[r]``."""
    _check(output, "reduce_scatter")
    ins = _same_as(input_list, output, "reduce_scatter")
    comm, op, xp = get_group().comm_for(output), _op(op), output._backend.xp
    if op == "avg" and output.dtype.kind not in "fV":
        raise TypeError(f"reduce_scatter: ReduceOp.AVG needs a floating-point tensor, got {output.dtype}")
    with on(output._backend):
        send = xp.stack([t._data for t in ins])  # a fresh contiguous (world, *shape) buffer
    buf, back = _contiguous(output)
    _written(output)
    return _run(output, lambda: comm.reduce_scatter(send, buf, op), back, async_op)


def all_gather_object(object_list, obj, group=None):
    """``object_list[r]`` = rank r's ``obj`` (pickled over MPI; for metadata, not for tensors)."""
    g = get_group()
    if len(object_list) != g.size:
        raise ValueError(f"all_gather_object: object_list must have one slot per rank ({g.size}), got "
                         f"{len(object_list)}")
    object_list[:] = g.mpi.allgather_object(obj)
