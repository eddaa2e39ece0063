"""Samplers, as torch.utils.data's: which sample indices a DataLoader visits, and in which batches.

Random samplers draw from gpugrad's generators (NumPy's PCG64 on the CPU), so their orders are not torch's for the
same seed. A ``RandomSampler`` is epoch-seeded: iteration e visits ``numpy.random.default_rng((seed, e))``'s
permutation, ``seed`` drawn once from ``generator`` (or the default generator) unless given, so every epoch differs
(as torch's), any epoch can be replayed (``set_epoch``), and a DataLoader can resume one mid-way.

>>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
[[0, 1], [2, 3], [4]]
>>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
[[0, 2, 4], [1, 3, 0]]
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from gpugrad import distributed as dist
from gpugrad.backend import CPU
from gpugrad.random import generator as rng_of


def _rng(generator=None):
    """The NumPy generator behind a gpugrad CPU ``Generator`` (None: the default one)."""
    return rng_of(CPU, generator)


def _positive(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={v}")


class Sampler:
    """Base class: an iterable of indices (or of index lists, for a batch sampler), with ``__len__`` where known."""
    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


_DRAW_CHUNK = 1 << 14  # indices a RandomSampler draws at a time (with replacement)


class RandomSampler(Sampler):
    """A random permutation per iteration (``replacement=False``; ``num_samples`` past len(data_source) chains
    permutations), or ``num_samples`` indices drawn with replacement. Indices are drawn as they are consumed, a
    chunk or a permutation at a time, so ``num_samples`` may be endless for practical purposes (makemore's
    ``RandomSampler(ds, replacement=True, num_samples=int(1e10))``), as with torch."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement, self._num_samples, self.generator = \
            data_source, replacement, num_samples, generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        _positive("num_samples", self.num_samples)
        self.seed, self.epoch = None, 0  # seed: drawn from the generator at the first iteration

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __iter__(self):
        if self.seed is None:
            self.seed = int(_rng(self.generator).integers(2**63))
        rng, n, k = np.random.default_rng((self.seed, self.epoch)), len(self.data_source), self.num_samples
        self.epoch += 1
        return self._draws(rng, n, k)

    def _draws(self, rng, n, k):
        """``k`` indices below ``n``, drawn lazily (the same values as drawing them at once, for k up to a chunk)."""
        chunk = _DRAW_CHUNK if self.replacement else n
        return itertools.chain.from_iterable(  # NOTE: chain, not a generator: the indices pass at C speed
            (rng.integers(0, n, min(chunk, k - start)) if self.replacement else rng.permutation(n)[:k - start]).tolist()
            for start in range(0, k, chunk))

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order."""
    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        return (self.indices[i] for i in _rng(self.generator).permutation(len(self.indices)).tolist())

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices i drawn with probability weights[i] / sum(weights) (with or without replacement)."""
    def __init__(self, weights, num_samples, replacement=True, generator=None):
        _positive("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise RuntimeError("WeightedRandomSampler: weights must be finite, non-negative and not all zero")
        if not replacement and num_samples > np.count_nonzero(w):
            raise RuntimeError("WeightedRandomSampler: cannot sample n_sample > prob_dist.size(-1) samples "
                               "without replacement")
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        p = self.weights / self.weights.sum()
        return iter(_rng(self.generator).choice(len(p), self.num_samples, replace=self.replacement, p=p).tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``; the last one shorter unless ``drop_last``."""
    def __init__(self, sampler, batch_size, drop_last):
        _positive("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self):
        n, b = len(self.sampler), self.batch_size
        return n // b if self.drop_last else -(-n // b)


class DistributedSampler(Sampler):
    """Indices of rank ``rank`` of ``num_replicas`` (default: the process group's), as torch's.

    The epoch's order (shuffled or not) is padded by repeating its start until it divides evenly among the ranks (or
    cut to a multiple of them with ``drop_last``), then rank r takes every ``num_replicas``-th index from r on; so the
    ranks together see every sample of the epoch, some of them twice when padded. ``shuffle``: epoch e's order is
    ``numpy.random.default_rng((seed, e)).permutation(n)`` (torch draws it from its own generator, seeded with
    seed + e); call ``set_epoch(e)`` before each epoch, or let a ``DataLoader(sampler=...)`` do it."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:

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
