"""DataLoader: batches of a dataset, as torch.utils.data.DataLoader gives them, optionally from worker processes.

>>> ds = TensorDataset(np.arange(10, dtype=np.float32).reshape(5, 2), np.arange(5))
>>> [y.tolist() for x, y in DataLoader(ds, batch_size=2)]
[[0, 1], [2, 3], [4]]

Indices come from a sampler (``SequentialSampler``, or ``RandomSampler`` with ``shuffle=True``) grouped by a
``BatchSampler``; each batch is ``collate_fn([dataset[i] for i in batch])`` (``default_collate``: Tensors stacked,
numbers to Tensors, dicts / lists / tuples field by field). ``num_workers > 0`` fetches and collates in worker
processes (:mod:`gpugrad.utils.data._worker`), seeded as torch seeds them.

gpugrad's own: ``device`` (None: where the data is, as torch) is where default-collated batches go; ``seed`` fixes the
shuffled order of every epoch (epoch e: ``numpy.random.default_rng((seed, e)).permutation(n)``) and
``set_epoch(e, start_batch=k)`` resumes epoch e at batch k. A ``TensorDataset`` with the default collate takes a
fast path in the main process whatever ``num_workers``: one ``take`` per array per batch, no per-sample Python; on
CUDA one that fits (``preload``) is copied to the device once and batches are gathered there. Host-to-device copies
go through CuPy's page-locked staging pool asynchronously, which is what ``pin_memory`` asks for in PyTorch.
"""
from __future__ import annotations

import collections.abc as abc
import itertools

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of, get_backend
from gpugrad.creation import as_tensor, tensor
from gpugrad.ops.movement import Stack
from gpugrad.utils.data import _worker
from gpugrad.utils.data._worker import get_worker_info  # noqa: F401  (torch's home of it)
from gpugrad.utils.data.dataset import IterableDataset, TensorDataset
from gpugrad.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler

PRELOAD_LIMIT = 1 << 30  # bytes: TensorDatasets up to 1 GiB are copied to the device once ("auto" preload)
ORDER_CHUNK = 1 << 16  # sample indices a TensorDataset's loader reads from its sampler (and copies) at a time
_COLLATE_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def default_collate(batch):
    """One batch from a list of samples, as torch's: Tensors (and NumPy arrays) stacked along a new first axis,
    Python floats to a float64 Tensor, ints to int64 (bools to bool), strings kept as a list, dicts and named tuples
    field by field, other sequences as a list of per-field batches (samples must have equal lengths)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        bad = next((i for i, t in enumerate(batch) if t.shape != elem.shape), None)
        if bad is not None:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(elem.shape)} at entry 0 "
                               f"and {list(batch[bad].shape)} at entry {bad}")
        return Stack.stack(batch)
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        if elem.dtype.kind in "OSUVM":  # would need an object Tensor
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        return default_collate([as_tensor(b) for b in batch])
    if isinstance(elem, float):
        return tensor(batch, dtype=np.float64)
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, abc.Mapping):
        fields = {k: default_collate([d[k] for d in batch]) for k in elem}
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
        return type(elem)(*(default_collate(list(f)) for f in zip(*batch)))
    if isinstance(elem, abc.Sequence):
        if any(len(s) != len(elem) for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(f)) for f in zip(*batch)]
        if isinstance(elem, (tuple, list)):  # NOTE: a tuple's batch is a list, as torch's
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


def default_convert(data):
    """``collate_fn`` without batching (``batch_size=None``): NumPy arrays to Tensors, containers field by field."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OSUVM" or isinstance(data, np.number):
        return as_tensor(data)
    if isinstance(data, abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return [default_convert(d) for d in data]  # NOTE: a tuple too becomes a list, as torch's
    return data


def _to(tree, backend):
    """``tree`` with its Tensors on ``backend`` (default collate's batches go to the loader's device)."""
    if isinstance(tree, Tensor):
        return tree if tree._backend is backend else tree.to(backend.device)
    if isinstance(tree, dict):
        return type(tree)({k: _to(v, backend) for k, v in tree.items()})
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_to(v, backend) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to(v, backend) for v in tree)
    return tree


class _Fetch:
    """What a worker (or the main process) does with one batch of indices: read the samples, collate them. A
    module-level class so that it pickles into spawned workers."""

    def __init__(self, dataset, collate_fn, batch_size, drop_last):
        self.dataset, self.collate_fn, self.batch_size, self.drop_last = dataset, collate_fn, batch_size, drop_last

    def __call__(self, indices, stream=None):
        if stream is not None:  # an IterableDataset's iterator: the next batch, StopIteration at the end
            if self.batch_size is None:
                return self.collate_fn(next(stream))
            samples = list(itertools.islice(stream, self.batch_size))
            if not samples or len(samples) < self.batch_size and self.drop_last:
                raise StopIteration
            return self.collate_fn(samples)
        if self.batch_size is None:
            return self.collate_fn(self.dataset[indices])
        get = getattr(self.dataset, "__getitems__", None)
        return self.collate_fn(get(indices) if callable(get) else [self.dataset[i] for i in indices])


class DataLoader:
    """Iterate over ``dataset`` in batches, as torch.utils.data.DataLoader (same arguments and defaults), plus
    gpugrad's ``seed``, ``device`` and ``preload`` (see the module docstring)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True, seed=None, device=None, preload=None):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable:
            for name, v in (("shuffle", shuffle not in (None, False) and shuffle), ("sampler", sampler),
                            ("batch_sampler", batch_sampler)):
                if v:
                    raise ValueError(f"DataLoader with IterableDataset: expected unspecified {name} option, but got "
                                     f"{name}={v}")
        elif sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"DataLoader: seed must be a non-negative integer, got {seed!r}")
        if sampler is None and not self.iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            if shuffle and seed is not None:
                sampler.seed = int(seed)
        if batch_size is not None and batch_sampler is None and not self.iterable:
            batch_sampler = BatchSampler(sampler, batch_size, bool(drop_last))
        elif batch_size is not None and self.iterable and (isinstance(batch_size, bool) or batch_size <= 0
                                                           or not isinstance(batch_size, int)):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, bool(drop_last)
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self.multiprocessing_context, self.persistent_workers = multiprocessing_context, persistent_workers
        self.prefetch_factor = 2 if num_workers and prefetch_factor is None else prefetch_factor
        self.pin_memory, self.pin_memory_device, self.in_order = bool(pin_memory), pin_memory_device, in_order
        self._auto_collation = batch_size is not None or batch_sampler is not None
        self._default_collate = collate_fn is None
        self.collate_fn = collate_fn or (default_collate if self._auto_collation else default_convert)
        self.backend = None if device is None else get_backend(device)
        self.device, self.preload = self.backend and self.backend.device, preload
        self.epoch, self._start_batch = 0, 0
        self._device_arrays = None  # a TensorDataset's preloaded copies, made on first use
        self._pool = None  # persistent workers

    @property
    def seed(self):
        return getattr(self.sampler, "seed", None)

    def __len__(self):
        if self.iterable:
            n = len(self.dataset)  # a TypeError when it has no length, as torch's
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self._auto_collation else self.sampler)

    def set_epoch(self, epoch, start_batch=0):
        """Make the next iteration run epoch ``epoch`` from batch ``start_batch`` on."""
        if not 0 <= start_batch <= len(self):
            raise ValueError(f"set_epoch: start_batch must be in [0, {len(self)}], got {start_batch}")
        self.epoch, self._start_batch = int(epoch), int(start_batch)

    def indices(self, epoch=None):
        """The sample order of ``epoch`` (default: the next one) as an int64 NumPy array."""
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch if epoch is None else epoch)
        return np.asarray(list(self.sampler), dtype=np.int64)

    def __iter__(self):
        epoch, start = self.epoch, self._start_batch
        self.epoch, self._start_batch = epoch + 1, 0
        if self.iterable:
            tasks = itertools.repeat(None)
        else:
            if hasattr(self.sampler, "set_epoch"):  # RandomSampler, DistributedSampler: the loader's epoch
                self.sampler.set_epoch(epoch)
            if self._fast():
                return self._iter_arrays(start)
            tasks = iter(self.batch_sampler if self._auto_collation else self.sampler)
        tasks = itertools.islice(tasks, start, None)
        fetch = _Fetch(self.dataset, self.collate_fn, self.batch_size, self.drop_last)
        batches = _worker.run(self, fetch, tasks) if self.num_workers else self._in_process(fetch, tasks)
        return (_to(b, self.backend) for b in batches) if self._default_collate and self.backend else batches

    def _in_process(self, fetch, tasks):
        stream = iter(self.dataset) if self.iterable else None
        for indices in tasks:
            try:
                yield fetch(indices, stream)
            except StopIteration:  # the IterableDataset's end
                return

    # -- TensorDataset: one gather per array per batch -----------------------------------------------------------
    def _fast(self):
        return (isinstance(self.dataset, TensorDataset) and self._default_collate and self._auto_collation
                and type(self.dataset).__getitem__ is TensorDataset.__getitem__)

    def _sources(self):
        """The arrays to gather from: the dataset's own, or their preloaded copies on the target device."""
        arrays, be = self.dataset.arrays, self.backend
        if be is None or be.name == "cpu" or all(backend_of(a) is be for a in arrays):
            return arrays
        if not (self.preload if self.preload is not None else self.dataset.nbytes <= PRELOAD_LIMIT):
            return arrays
        if self._device_arrays is None:
            self._device_arrays = tuple(a if backend_of(a) is be else be.asarray(a) for a in arrays)
        return self._device_arrays

    def _order_chunks(self, start):
        """The epoch's sample order from batch ``start`` on, as (indices, [(lo, hi) of each batch]) pieces of about
        ORDER_CHUNK indices: one copy per device per piece, and an endless sampler streams."""
        if isinstance(self.batch_sampler, BatchSampler) and self.batch_sampler.sampler is self.sampler:
            b = self.batch_size
            it, per = itertools.islice(iter(self.sampler), start * b, None), max(1, ORDER_CHUNK // b) * b
            while True:
                order = np.fromiter(itertools.islice(it, per), dtype=np.int64)
                stop = len(order) // b * b if self.drop_last and len(order) < per else len(order)
                if stop:
                    yield order[:stop], [(i, min(i + b, stop)) for i in range(0, stop, b)]
                if len(order) < per:
                    return
        it = itertools.islice(iter(self.batch_sampler), start, None)  # a batch sampler of the user's: 1024 at a time
        while batches := list(itertools.islice(it, 1024)):
            ends = list(itertools.accumulate(len(x) for x in batches))
            yield np.fromiter(itertools.chain.from_iterable(batches), dtype=np.int64), list(zip([0] + ends[:-1], ends))

    def _iter_arrays(self, start):

        be, sources = self.backend, self._sources()
        for order, bounds in self._order_chunks(start):
            index = {}
            for a in sources:  # the order once per backend that holds a source array
                src = backend_of(a)
                if src not in index:
                    index[src] = order if src.name == "cpu" else src.asarray(order)
            for lo, hi in bounds:
                batch = []
                for a in sources:
                    src = backend_of(a)
                    x = src.xp.take(a, index[src][lo:hi], axis=0)
                    if be is not None and src is not be:  # host -> device (or device -> host / -> device) copy
                        x = be.asarray(x) if be.name != "cpu" else src.to_host(x)
                    batch.append(as_tensor(x))  # no second copy: the gathered array is the batch's alone
                yield batch

    def __del__(self):
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown()
