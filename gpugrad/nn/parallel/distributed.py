"""DistributedDataParallel: the same model on every rank, each rank's gradient averaged over all ranks in backward.

Gradients are all-reduced in buckets, as torch's Reducer does: parameters are grouped in reverse registration order
(roughly the order backward produces their gradients) into flat buffers of about ``bucket_cap_mb`` (the first one
smaller, 1 MiB, so communication starts early), one buffer per dtype and device. Each parameter's ``.grad`` becomes a
view into its bucket, so backward accumulates straight into the flat buffer, the all-reduce averages it in place,
and nothing is copied back. A post-accumulate-grad hook on every parameter counts what is ready; a bucket's
all-reduce starts (asynchronously) once all its gradients are in and every earlier bucket has started: buckets
start in the same order on every rank, as collectives must. The rest of backward runs meanwhile; a callback queued
on the engine waits for the buckets when backward ends.
"""
from __future__ import annotations

import contextlib

import numpy as np

from gpugrad import distributed as dist
from gpugrad._tensor import Tensor
from gpugrad.backend import on
from gpugrad.core import engine
from gpugrad.core.grad_mode import is_grad_enabled, no_grad
from gpugrad.nn.module import Module

FIRST_BUCKET_BYTES = 1 << 20  # torch's dist._DEFAULT_FIRST_BUCKET_BYTES
UNUSED = ("Expected to have finished reduction in the prior iteration before starting a new one. This error indicates "
          "that your module has parameters that were not used in producing loss. You can enable unused parameter "
          "detection by passing the keyword argument `find_unused_parameters=True` to "
          "`gpugrad.nn.parallel.DistributedDataParallel`, and by making sure all `forward` function outputs "
          "participate in calculating loss.")


def assign_buckets(params, cap_bytes, first_bytes=FIRST_BUCKET_BYTES):
    """Lists of indices into ``params`` (as torch's ``compute_bucket_assignment_by_size``): walking the parameters
    backwards, a bucket per (dtype, device) closes once it holds at least its limit (``first_bytes`` for the first
    bucket of each kind, then ``cap_bytes``); buckets come out in the order backward should fill them."""
    open_, closed = {}, []
    for i in reversed(range(len(params))):
        p = params[i]
        key = (str(p.dtype), str(p.device))
        indices, size, limit = open_.get(key, ([], 0, min(first_bytes, cap_bytes)))
        indices.append(i)
        size += p.numel() * p.dtype.itemsize
        if size >= limit:
            closed.append(indices)
            open_[key] = ([], 0, cap_bytes)
        else:
            open_[key] = (indices, size, limit)
    closed += [indices for indices, _, _ in open_.values() if indices]
    return sorted(closed, key=lambda b: -b[0])  # the bucket holding the last parameters first


class _Bucket:
    def __init__(self, params):
        be, dtype = params[0]._backend, params[0].dtype
        sizes = [p.numel() for p in params]
        with on(be):
            self.flat = Tensor._wrap(be.xp.zeros(sum(sizes), dtype), be)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        self.views = {p: self.flat._data[a:b].reshape(p.shape) for p, a, b in zip(params, offsets, offsets[1:])}
        self.missing, self.work = len(params), None


class DistributedDataParallel(Module):
    """Wrap ``module`` (already on this rank's device) for data-parallel training over the process group.

    Rank 0's parameters and buffers are broadcast at construction, so every rank starts from the same model; after
    each ``backward`` every rank holds the same averaged gradients, so the same optimizer step keeps them equal.
    ``no_sync()`` skips the all-reduce (gradients accumulate locally) for forwards run inside it.
    ``find_unused_parameters=True`` lets a forward leave parameters out: their local gradient counts as zero
    (``.grad`` then holds zeros where torch leaves None for a parameter no rank used).

    >>> model = nn.parallel.DistributedDataParallel(nn.MLP([64, 512, 10]))
    >>> F.cross_entropy(model(x), y).backward()   # .grad: the mean over all ranks' batches
    """

    def __init__(self, module, bucket_cap_mb=25, find_unused_parameters=False):

        super().__init__()
        if not dist.is_initialized():
            raise ValueError("DistributedDataParallel: " + dist.group.NOT_INITIALIZED)
        if not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        self.find_unused_parameters = bool(find_unused_parameters)
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        _check_same_parameters(named, dist)
        with no_grad():
            for t in [p for _, p in named] + list(module.buffers()):
                dist.broadcast(t, 0)
        self._names = {p: n for n, p in named}
        params = [p for _, p in named]
        self._buckets = [_Bucket([params[i] for i in b]) for b in assign_buckets(params, bucket_cap_mb * 2**20)]
        self._bucket_of = {p: b for b in self._buckets for p in b.views}
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in params]
        self._reset()

    def _reset(self):
        self._ready, self._next, self._finishing, self._sync = set(), 0, False, False
        for b in self._buckets:
            b.missing, b.work = len(b.views), None

    def forward(self, *args, **kwargs):
        if self._ready or self._finishing:
            raise RuntimeError("DistributedDataParallel: the previous backward stopped before its gradients were "
                               "all-reduced (an error inside backward?); the ranks may now disagree: start over")
        # NOTE: as torch, whether this iteration syncs is decided at forward (no_sync() around the forward)
        self._sync = self.require_backward_grad_sync and is_grad_enabled()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards inside accumulate gradients locally; the first backward after leaving averages the sum."""
        old, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # -- backward: hooks fill buckets, buckets start in order, the end-of-backward callback waits ----------------------
    def _into_bucket(self, p):
        """Make ``p.grad`` the bucket's view of it (copying a gradient that lives elsewhere; zeros if none)."""
        view = self._bucket_of[p].views[p]
        g = p._grad
        if g is not None and g._data is view:
            return
        if g is not None and g._grad_fn is not None:
            raise RuntimeError("DistributedDataParallel does not support create_graph=True (higher-order gradients)")
        with on(p._backend):
            if g is None:
                view.fill(0)
            else:
                p._backend.xp.copyto(view, g._data)
        p._grad = Tensor._wrap(view, p._backend)

    def _on_grad(self, p):
        self._into_bucket(p)
        if not self._sync:
            return
        if not self._finishing:
            engine.queue_callback(self._finish)
            self._finishing = True
        if p in self._ready:
            raise RuntimeError(f"DistributedDataParallel: parameter {self._names[p]} got its gradient twice in one "
                               "backward (Expected to mark a variable ready only once); a second backward through "
                               "the same forward needs no_sync() or a new forward")
        self._ready.add(p)
        self._bucket_of[p].missing -= 1
        self._start_ready()

    def _start_ready(self):

        for b in self._buckets[:self._next]:
            b.work.is_completed()  # NOTE: MPI moves nonblocking collectives only inside MPI calls: poke them
        while self._next < len(self._buckets) and self._buckets[self._next].missing == 0:
            b = self._buckets[self._next]
            b.work = dist.all_reduce(b.flat, dist.ReduceOp.AVG, async_op=True)
            self._next += 1

    def _finish(self):

        unused = [p for p in self._names if p not in self._ready]  # registration order
        if unused and not self.find_unused_parameters:
            names = ", ".join(self._names[p] for p in unused)
            self._reset()
            raise RuntimeError(f"{UNUSED}\nParameters which did not receive grad for rank {dist.get_rank()}: {names}")
        for p in unused:
            self._on_grad(p)  # its local gradient counts as zero (or what no_sync() accumulated)
        try:
            for b in self._buckets:
                with on(b.flat._backend):
                    b.work.wait()
        finally:
            self._reset()


def _check_same_parameters(named, dist):
    """Every rank must hold the same parameters (names, shapes, dtypes): else the buckets would not line up."""
    mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in named]
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    for r, theirs in enumerate(ranks):
        if theirs == mine:
            continue
        if len(theirs) != len(mine):
            raise RuntimeError(f"DistributedDataParallel: ranks disagree on the model: rank {dist.get_rank()} has "
                               f"{len(mine)} parameters, rank {r} has {len(theirs)}; every rank must build the same "
                               "model")
        i = next(i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b)
        per_rank = "; ".join(f"rank {k}: {x[i][0]} {x[i][1]} {x[i][2]}" for k, x in enumerate(ranks) if len(x) > i)
        raise RuntimeError(f"DistributedDataParallel: ranks disagree on parameter {i} ({mine[i][0]}): {per_rank}; "
                           "every rank must build the same model")
