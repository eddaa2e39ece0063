"""DistributedSampler: each rank's share of a dataset's indices, as torch.utils.data.DistributedSampler gives them.

The epoch's order (shuffled or not) is padded by repeating its start until it divides evenly among the ranks (or
cut to a multiple of them with ``drop_last``), then rank r takes every ``num_replicas``-th index from r on; so the
ranks together see every sample of the epoch, some of them twice when padded.

>>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
[[0, 2, 4], [1, 3, 0]]
"""
from __future__ import annotations

import math

import numpy as np


class DistributedSampler:
    """Indices of rank ``rank`` of ``num_replicas`` (default: the process group's). ``shuffle``: epoch e's order is
    ``numpy.random.default_rng((seed, e)).permutation(n)``, the order a shuffling ``DataLoader`` uses (torch draws
    it from its own generator, seeded with seed + e); call ``set_epoch(e)`` before each epoch, or let a
    ``DataLoader(sampler=...)`` do it (it passes its epoch)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from gpugrad import distributed as dist

            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be positive, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last, self.epoch = bool(shuffle), int(seed), bool(drop_last), 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)  # torch's formula: floor(n / replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        order = np.random.default_rng((self.seed, self.epoch)).permutation(n) if self.shuffle else np.arange(n)
        if self.drop_last:
            order = order[:self.total_size]
        elif self.total_size > n:
            order = np.concatenate([order, np.resize(order, self.total_size - n)])  # repeats from the start
        return iter(order[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = int(epoch)
