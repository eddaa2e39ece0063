"""DataLoader: batches of a dataset as tuples of Tensors on a device, in a seeded, per-epoch shuffled order.

>>> ds = TensorDataset(np.arange(10, dtype=np.float32).reshape(5, 2), np.arange(5))
>>> [y.tolist() for x, y in DataLoader(ds, batch_size=2, device="cpu")]
[[0, 1], [2, 3], [4]]

Fast path: for a ``TensorDataset`` a batch is one ``take`` per array (no per-sample Python loop).  On CUDA a
TensorDataset that fits (``preload``) is copied to the device once and batches are gathered there, so training
moves no data between host and device; otherwise each batch is gathered on the host and copied through the
backend (CuPy's ``asarray`` stages host data through its page-locked pool and copies asynchronously on the
current stream, which is what ``pin_memory`` asks for in PyTorch).  No device code lives here.
"""
from __future__ import annotations

import numpy as np

from gpugrad.backend import CPU, backend_of, get_backend
from gpugrad.data.dataset import TensorDataset

PRELOAD_LIMIT = 1 << 30  # bytes: TensorDatasets up to 1 GiB are copied to the device once ("auto" preload)


def _wrap(array):
    """A Tensor around a freshly gathered batch array: no second copy (the array is ours alone)."""
    from gpugrad.creation import as_tensor

    return as_tensor(array)


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size``; each batch is a tuple of Tensors on ``device``.

    ``shuffle``: epoch ``e`` visits samples in the order ``numpy.random.default_rng((seed, e)).permutation(n)``,
    so every epoch differs and any epoch can be replayed; ``seed=None`` draws one from gpugrad's CPU generator
    (reproducible after ``gpugrad.manual_seed``).  Each ``iter()`` runs the epoch ``self.epoch`` and advances it;
    ``set_epoch(e, start_batch=k)`` jumps to batch ``k`` of epoch ``e`` (resuming mid-epoch).
    ``sampler`` (e.g. a ``DistributedSampler``): the indices to visit instead, in its order (exclusive with
    ``shuffle``); before each epoch the loader calls its ``set_epoch`` with the loader's epoch, if it has one.
    ``drop_last`` drops a final partial batch.  ``device``: where batches go (None: gpugrad's default device).
    ``preload``: copy a TensorDataset to a CUDA device once (None: when it is at most 1 GiB).
    ``pin_memory``: accepted as in PyTorch (None: on for CUDA); host->device copies already go through
    page-locked staging memory asynchronously in the CUDA backend, so there is nothing further to switch.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None, device=None,
                 pin_memory=None, preload=None, sampler=None):
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive integer, got {batch_size!r}")
        self.dataset, self.sampler = dataset, sampler
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if seed is None:
            from gpugrad.random import generator

            seed = int(generator(CPU).integers(2**63)) if shuffle else 0
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"DataLoader: seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)
        self.backend = get_backend(device)
        self.device = self.backend.device
        on_cuda = self.backend.name != "cpu"
        self.pin_memory = on_cuda if pin_memory is None else bool(pin_memory)
        self.preload = preload
        self.epoch = 0
        self._start_batch = 0
        self._device_arrays = None  # the preloaded copies, made on first use

    def __len__(self):
        n, b = len(self.dataset if self.sampler is None else self.sampler), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def set_epoch(self, epoch, start_batch=0):
        """Make the next iteration run epoch ``epoch`` from batch ``start_batch`` on."""
        if not 0 <= start_batch <= len(self):
            raise ValueError(f"set_epoch: start_batch must be in [0, {len(self)}], got {start_batch}")
        self.epoch, self._start_batch = int(epoch), int(start_batch)

    def indices(self, epoch=None):
        """The sample order of ``epoch`` (default: the next one) as an int64 NumPy array."""
        n = len(self.dataset)
        epoch = self.epoch if epoch is None else epoch
        if self.sampler is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            return np.asarray(list(self.sampler), dtype=np.int64)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return np.random.default_rng((self.seed, int(epoch))).permutation(n).astype(np.int64)

    def __iter__(self):
        order, start = self.indices(), self._start_batch
        self.epoch, self._start_batch = self.epoch + 1, 0
        stop = len(self) * self.batch_size if self.drop_last else len(order)
        bounds = [(i, min(i + self.batch_size, stop)) for i in range(start * self.batch_size, stop, self.batch_size)]
        if isinstance(self.dataset, TensorDataset):
            return self._iter_arrays(order, bounds)
        return self._iter_samples(order, bounds)

    # -- TensorDataset: one gather per array per batch -----------------------------------------------------------
    def _sources(self):
        """The arrays to gather from: the dataset's own, or their preloaded copies on the target device."""
        arrays = self.dataset.arrays
        be = self.backend
        if be.name == "cpu" or all(backend_of(a) is be for a in arrays):
            return arrays
        preload = self.preload if self.preload is not None else self.dataset.nbytes <= PRELOAD_LIMIT
        if not preload:
            return arrays
        if self._device_arrays is None:
            self._device_arrays = tuple(a if backend_of(a) is be else be.asarray(a) for a in arrays)
        return self._device_arrays

    def _iter_arrays(self, order, bounds):
        be = self.backend
        sources = self._sources()
        index = {}  # the epoch's order once per backend that holds a source array (one small copy per epoch)
        for a in sources:
            src = backend_of(a)
            if src not in index:
                index[src] = order if src.name == "cpu" else src.asarray(order)
        for lo, hi in bounds:
            batch = []
            for a in sources:
                src = backend_of(a)
                x = src.xp.take(a, index[src][lo:hi], axis=0)
                if src is not be:  # host -> device (or device -> host / device -> device) copy of this batch
                    x = be.asarray(x) if be.name != "cpu" else src.to_host(x)
                batch.append(_wrap(x))
            yield tuple(batch)

    # -- any Dataset: per-sample __getitem__, collated field by field -----------------------------------------
    def _iter_samples(self, order, bounds):
        for lo, hi in bounds:
            yield collate([self.dataset[int(i)] for i in order[lo:hi]], self.backend)


def collate(samples, backend):
    """One batch from a list of samples, as torch's ``default_collate``: numbers, arrays and Tensors are stacked
    into one Tensor (a new leading batch axis); tuples and lists become a tuple with one batch per field, dicts a
    dict with one batch per key, recursively.  Anything else (strings, None, objects) is a TypeError: a batch is
    never an object array."""
    first = samples[0]
    if isinstance(first, dict):
        if any(not isinstance(s, dict) or s.keys() != first.keys() for s in samples):
            raise ValueError(f"DataLoader: dict samples must all have the keys {list(first)}")
        return {k: collate([s[k] for s in samples], backend) for k in first}
    if isinstance(first, (tuple, list)):
        if any(not isinstance(s, (tuple, list)) or len(s) != len(first) for s in samples):
            raise ValueError(f"DataLoader: tuple/list samples must all have {len(first)} fields")
        return tuple(collate(list(field), backend) for field in zip(*samples))
    arrays = [np.asarray(v) for v in samples]
    for v, a in zip(samples, arrays):
        if a.dtype.kind not in "biuf":  # NOTE: str, None, sets ... would become object / string arrays
            raise TypeError(f"DataLoader: cannot collate a sample field of type {type(v).__name__} (as an array: "
                            f"{a.dtype}); fields must be numbers, arrays or Tensors, or tuples, lists, dicts of them")
    return _wrap(backend.asarray(np.stack(arrays)))
