"""``gpugrad train --distributed``: N MPI ranks that train exactly as one process with N times the batch.

    mpiexec -n 2 gpugrad train --distributed --epochs 3     # the same run as: gpugrad train --batch-size 128 ...

``--batch-size`` is per rank; the checkpoint records the global batch (per rank x ranks), so a run resumes with any
number of ranks. Every rank draws the same global batch (the loader's order depends only on (seed, epoch)) and
takes rows r, r + N, r + 2N, ... of it. Its loss is the sum over its rows times N / (rows in the global batch), so
DistributedDataParallel's average over ranks is the single process's mean, the last, short batch included (a rank
left without rows contributes zero). Stopping (Ctrl-C) is agreed on at batch boundaries, so all ranks stop after
the same step. Only rank 0 prints, plots and writes files; the others are silent unless they fail.
"""
from __future__ import annotations

import os
import sys

import gpugrad
from gpugrad import distributed as dist
from gpugrad.nn import functional as F
from gpugrad.nn.parallel import DistributedDataParallel


class DataParallel:
    """This rank's place in the run: ``rank``, ``size``, ``device``, and the collective pieces of a step."""

    def __init__(self, args, resolve_device, error):
        device = resolve_device(args.device)
        explicit = args.device is not None and ":" in args.device  # cuda:N pins the GPU; plain cuda picks by rank
        try:
            dist.init_process_group("nccl" if device.type == "cuda" else "mpi", timeout=args.dist_timeout,
                                    device_id=device.index if explicit else None)
        except (RuntimeError, ValueError) as e:
            raise error(f"--distributed: {e}") from None
        self.dist, self.rank, self.size = dist, dist.get_rank(), dist.get_world_size()
        group = dist.group.get_group()
        self.device = group.nccl.device if group.nccl is not None else device
        # NOTE: ranks sharing a host's cores need no thread setting: each sees the others' load and sizes its BLAS
        # pool to the cores they leave free (backend/threads.py)
        if self.rank:
            sys.stdout = sys.stderr = open(os.devnull, "w")  # rank 0 alone reports; failures restore stderr

    def check_same(self, settings, describe, error):
        """Raise ``error`` unless every rank has the same ``settings`` (a dict; every rank calls this at the same
        point), naming the first field that differs, each value (``describe(key, value)``) and the ranks holding it."""
        every = [None] * self.size
        self.dist.all_gather_object(every, settings)
        for key in settings:
            ranks = {}  # value -> the ranks that have it, in rank order
            for r, theirs in enumerate(every):
                ranks.setdefault(repr(theirs.get(key)), (theirs.get(key), []))[1].append(r)
            if len(ranks) > 1:
                said = "; ".join(f"{describe(key, v)} on rank{'s' * (len(rs) > 1)} {', '.join(map(str, rs))}"
                                 for v, rs in ranks.values())
                raise error(f"--distributed: the ranks were started with different options: {said}; start every "
                            "rank with the same options")

    def wrap(self, model):
        return DistributedDataParallel(model)

    def loss(self, model, xb, yb):
        """(this rank's loss to backpropagate, its rows' summed loss): rows rank::size of the global batch."""
        total = len(yb)
        xb, yb = xb[self.rank::self.size], yb[self.rank::self.size]
        summed = F.cross_entropy(model(xb), yb, reduction="sum")
        return summed * (self.size / total), summed.detach()

    def total(self, loss_sum, model):
        """The sum over ranks of per-rank loss sums (a new 0-d tensor; None counts as zero: every rank must join)."""
        p = next(model.parameters())
        out = gpugrad.zeros((), dtype=p.dtype, device=p.device) if loss_sum is None else loss_sum.detach().clone()
        self.dist.all_reduce(out)
        return out

    def any(self, flag):
        """Whether any rank's ``flag`` is set (every rank must ask at the same point)."""
        t = gpugrad.tensor([int(flag)], device="cpu")
        self.dist.all_reduce(t, self.dist.ReduceOp.MAX)
        return bool(t.item())

    def abort(self, code):
        """End every rank (an error some ranks may not have seen must not leave the others waiting)."""
        if self.size > 1:
            self.dist.abort(code)
        return code
