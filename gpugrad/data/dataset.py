"""Datasets: anything with ``__len__`` and ``__getitem__``; ``TensorDataset`` wraps whole arrays.

>>> ds = TensorDataset(np.zeros((5, 3), np.float32), np.arange(5))
>>> len(ds), [t.shape for t in ds[2]]
(5, [(3,), ()])
"""
from __future__ import annotations

import numpy as np


class Dataset:
    """Map-style dataset: ``dataset[i]`` is one sample (a tuple of fields, or one field) for 0 <= i < len."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__")


class TensorDataset(Dataset):
    """Samples are rows of equally long arrays: ``ds[i] == (a[i], b[i], ...)`` as Tensors.

    Takes NumPy arrays (kept as they are, no copy), array-likes, or gpugrad Tensors (their data, detached, on
    their device).  ``DataLoader`` reads ``arrays`` directly and gathers a whole batch with one fancy index per
    array instead of collating sample by sample.
    """

    def __init__(self, *arrays):
        from gpugrad._tensor import Tensor

        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        self.arrays = tuple(a.detach().data if isinstance(a, Tensor) else np.asarray(a) for a in arrays)
        for i, a in enumerate(self.arrays):
            if a.ndim == 0:
                raise ValueError(f"TensorDataset: array {i} is 0-d; every array needs a leading sample axis")
        lengths = [len(a) for a in self.arrays]
        if len(set(lengths)) > 1:
            raise ValueError(f"TensorDataset: arrays have different lengths {lengths}; they must match")

    def __getitem__(self, index):
        from gpugrad._tensor import Tensor
        from gpugrad.backend import backend_of

        # NOTE: explicit device: a[i] of a 1-d array is a NumPy scalar, which would otherwise go to the default device
        return tuple(Tensor(a[index], device=backend_of(a).device) for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])

    @property
    def nbytes(self):
        return sum(int(a.nbytes) for a in self.arrays)
