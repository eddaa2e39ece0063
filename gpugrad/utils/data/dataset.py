"""Datasets, as torch.utils.data's: map-style (``__getitem__`` and ``__len__``), iterable, Tensor rows, subsets,
concatenations and random splits.

>>> ds = TensorDataset(np.zeros((5, 3), np.float32), np.arange(5))
>>> len(ds), [tuple(t.shape) for t in ds[2]]
(5, [(3,), ()])
>>> train, val = random_split(ds, [0.8, 0.2], generator=gpugrad.Generator().manual_seed(0))
"""
from __future__ import annotations

import bisect
import itertools
import math
import warnings

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of
from gpugrad.core.tensor import new
from gpugrad.utils.data.sampler import _rng


class _SizeMismatch(ValueError, AssertionError):
    """torch raises AssertionError here; a ValueError is what it is."""


class _NoTensors(ValueError, IndexError):
    """torch raises IndexError here (tensors[0] of none); a ValueError is what it is."""


class Dataset:
    """Map-style dataset: ``dataset[i]`` is one sample for 0 <= i < len(dataset); ``a + b`` concatenates."""
    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples (``__iter__``). With DataLoader workers, each worker iterates its own copy: split the
    work with ``get_worker_info()`` (id, num_workers), as in torch."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other):
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """The samples of several IterableDatasets, one after the other."""
    def __init__(self, datasets):
        self.datasets = datasets

    def _each(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield d

    def __iter__(self):
        return itertools.chain.from_iterable(self._each())

    def __len__(self):
        return sum(len(d) for d in self._each())


class TensorDataset(Dataset):
    """Samples are rows of equally long arrays: ``ds[i] == (a[i], b[i], ...)`` as Tensors.

    Takes Tensors (their data, detached, on their device), NumPy arrays (kept as they are, no copy) or array-likes;
    ``tensors`` gives them as Tensors, ``arrays`` as arrays. ``DataLoader`` gathers a whole batch of a
    TensorDataset with one ``take`` per array instead of collating sample by sample.
    """

    def __init__(self, *tensors):

        if not tensors:
            raise _NoTensors("TensorDataset needs at least one array")
        self.arrays = tuple(a.detach()._data if isinstance(a, Tensor) else np.asarray(a) for a in tensors)
        for i, a in enumerate(self.arrays):
            if a.ndim == 0:
                raise _SizeMismatch(f"TensorDataset: array {i} is 0-d; every array needs a leading sample axis")
        lengths = [len(a) for a in self.arrays]
        if len(set(lengths)) > 1:
            raise _SizeMismatch(f"Size mismatch between tensors: TensorDataset got arrays of different lengths "
                                f"{lengths}; they must match")

    @property
    def tensors(self):

        return tuple(Tensor._wrap(a) for a in self.arrays)

    def __getitem__(self, index):

        # NOTE: explicit device: a[i] of a 1-d array is a NumPy scalar, which would otherwise go to the default device
        return tuple(new(a[index], device=backend_of(a).device) for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])

    @property
    def nbytes(self):
        return sum(int(a.nbytes) for a in self.arrays)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after the other (``cumulative_sizes`` ends each)."""
    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[d][idx - (self.cumulative_sizes[d - 1] if d else 0)]


def random_split(dataset, lengths, generator=None):
    """Non-overlapping Subsets of the given lengths (or fractions summing to 1: floor(n * f) each, the remainder
    handed out one by one from the first split), from one random permutation drawn from ``generator``."""

    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        sizes = [math.floor(n * f) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, k in enumerate(sizes):
            if k == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.",
                              stacklevel=2)
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = _rng(generator).permutation(n).tolist()
    return [Subset(dataset, order[end - k:end]) for end, k in zip(itertools.accumulate(lengths), lengths)]
