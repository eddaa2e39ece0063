"""torch.utils.data as torch users use it, each run with torch and with gpugrad and compared
(tests/compat/harness.py): TensorDataset, map-style and iterable datasets, what default_collate makes of every kind
of sample, samplers and batch samplers, Subset / ConcatDataset / random_split, worker processes (the same batches in
the same order, get_worker_info, exceptions re-raised with their type), and the errors torch raises for bad
arguments. Shuffled orders come from different generators in the two libraries: those snippets compare what a
shuffle keeps (the samples, the batch sizes, reproducibility with a seeded generator)."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from tests.compat.harness import check, compat

Pair = collections.namedtuple("Pair", "x y")


def _tensors(torch, n=10):
    return torch.arange(n * 2, dtype=torch.float32).reshape(n, 2), torch.arange(n)


def _ds(torch, n=10):
    return torch.utils.data.TensorDataset(*_tensors(torch, n))


class Samples:
    """A map-style dataset whose samples are ``make(i)``; subclasses the library's Dataset when built by _samples."""


def _samples(torch, make, n=5):
    class D(torch.utils.data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return make(i)

    return D()


def _stream(torch, n=10):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            start, step = (0, 1) if info is None else (info.id, info.num_workers)  # each worker its own share
            return iter(range(start, n, step))

    return Stream()


def _batches(loader):
    return [b for b in loader]


# --- TensorDataset and DataLoader basics --------------------------------------------------------------------------

@compat
def test_tensor_dataset_len_and_item(torch):
    ds = _ds(torch)
    return len(ds), ds[3], type(ds[3]).__name__


@compat
def test_tensor_dataset_slice(torch):
    return _ds(torch)[2:5]


@compat
def test_tensor_dataset_tensors(torch):
    return _ds(torch, 4).tensors


@compat
def test_loader_batches_of_a_tensor_dataset(torch):
    return _batches(torch.utils.data.DataLoader(_ds(torch), batch_size=4))


@compat
def test_loader_default_batch_size_is_one(torch):
    return _batches(torch.utils.data.DataLoader(_ds(torch, 3)))


@compat
def test_loader_drop_last(torch):
    loader = torch.utils.data.DataLoader(_ds(torch), batch_size=4, drop_last=True)
    return len(loader), _batches(loader)


@compat
def test_loader_len(torch):
    return [len(torch.utils.data.DataLoader(_ds(torch, n), batch_size=b)) for n in (1, 9, 10, 11) for b in (1, 3, 10)]


@compat
def test_unpacking_batches_in_a_training_loop(torch):
    total = 0
    for step, (x, y) in enumerate(torch.utils.data.DataLoader(_ds(torch), batch_size=3)):
        total = total + (x.sum(dim=1) * y).sum()
    return step, total


@compat
def test_loader_attributes(torch):
    ds = _ds(torch)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, drop_last=True)
    return loader.dataset is ds, loader.batch_size, loader.drop_last, loader.num_workers, \
        type(loader.sampler).__name__, type(loader.batch_sampler).__name__


@compat
def test_shuffle_visits_every_sample_once(torch):
    torch.manual_seed(0)
    batches = _batches(torch.utils.data.DataLoader(_ds(torch), batch_size=3, shuffle=True))
    return [len(y) for _, y in batches], sorted(torch.cat([y for _, y in batches]).tolist())


@compat
def test_shuffle_keeps_rows_together(torch):
    torch.manual_seed(0)
    return all(bool((x[:, 0] == 2 * y).all()) for x, y in torch.utils.data.DataLoader(_ds(torch), 4, shuffle=True))


@compat
def test_shuffle_with_a_seeded_generator_is_reproducible(torch):
    def order():
        gen = torch.Generator().manual_seed(42)
        loader = torch.utils.data.DataLoader(_ds(torch, 20), batch_size=5, shuffle=True, generator=gen)
        return [y.tolist() for _, y in loader]

    return order() == order()


@compat
def test_each_epoch_has_its_own_order(torch):
    torch.manual_seed(1)
    loader = torch.utils.data.DataLoader(_ds(torch, 30), batch_size=30, shuffle=True)
    first, second = ([y.tolist() for _, y in loader] for _ in range(2))
    return first != second, sorted(first[0]) == sorted(second[0])


@compat
def test_loader_over_a_plain_list(torch):
    return _batches(torch.utils.data.DataLoader([1.5, 2.5, 3.5], batch_size=2))


@compat
def test_loader_over_a_list_of_pairs(torch):
    return _batches(torch.utils.data.DataLoader([(1, 2.0), (3, 4.0), (5, 6.0)], batch_size=2))


@compat
def test_pin_memory_on_the_cpu_changes_nothing(torch):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that there is no accelerator to pin for
        return _batches(torch.utils.data.DataLoader(_ds(torch, 5), batch_size=2, pin_memory=True))


# --- default_collate: what a batch of each kind of sample is ------------------------------------------------------

SAMPLES = {
    "tensors": lambda torch, i: torch.full((2,), float(i)),
    "tensor-and-int": lambda torch, i: (torch.tensor([i, i + 1]), i),
    "python-floats": lambda torch, i: i / 2,
    "python-ints": lambda torch, i: i,
    "bools": lambda torch, i: i % 2 == 0,
    "strings": lambda torch, i: f"item{i}",
    "numpy-float32": lambda torch, i: np.full(3, i, np.float32),
    "numpy-float64-scalars": lambda torch, i: np.float64(i) / 4,
    "numpy-int-scalars": lambda torch, i: np.int32(i),
    "dicts": lambda torch, i: {"image": torch.ones(2, 2) * i, "label": i, "name": str(i)},
    "nested": lambda torch, i: {"pair": (i, [float(i), 2.0 * i]), "meta": {"id": i}},
    "lists": lambda torch, i: [i, i * 2, i * 3],
    "named-tuples": lambda torch, i: Pair(torch.tensor(float(i)), i),
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_default_collate_of(kind):
    check(lambda torch: _batches(torch.utils.data.DataLoader(
        _samples(torch, lambda i: SAMPLES[kind](torch, i)), batch_size=2)))


@compat
def test_default_collate_called_directly(torch):
    return torch.utils.data.default_collate([(torch.tensor([1.0]), 0), (torch.tensor([2.0]), 1)])


@compat
def test_default_collate_of_none_raises(torch):
    return torch.utils.data.default_collate([None, None])


@compat
def test_default_collate_of_unequal_lists_raises(torch):
    return torch.utils.data.default_collate([[1, 2], [3]])


@compat
def test_default_collate_of_unequal_tensors_raises(torch):
    return torch.utils.data.default_collate([torch.ones(2), torch.ones(3)])


@compat
def test_custom_collate_fn(torch):
    def pad(batch):
        longest = max(len(s) for s in batch)
        return torch.stack([torch.cat([s, torch.zeros(longest - len(s))]) for s in batch])

    data = _samples(torch, lambda i: torch.ones(i + 1), n=4)
    return _batches(torch.utils.data.DataLoader(data, batch_size=3, collate_fn=pad))


@compat
def test_identity_collate_fn_gives_lists_of_samples(torch):
    return _batches(torch.utils.data.DataLoader(_ds(torch, 3), batch_size=2, collate_fn=lambda b: b))


@compat
def test_batch_size_none_disables_batching(torch):
    data = _samples(torch, lambda i: (np.full(2, i, np.float32), i), n=3)
    return _batches(torch.utils.data.DataLoader(data, batch_size=None))


# --- samplers --------------------------------------------------------------------------------------------------------

@compat
def test_sequential_sampler(torch):
    return list(torch.utils.data.SequentialSampler(range(5))), len(torch.utils.data.SequentialSampler(range(5)))


@compat
def test_batch_sampler(torch):
    s = torch.utils.data.SequentialSampler(range(7))
    return [list(torch.utils.data.BatchSampler(s, 3, drop_last=d)) for d in (False, True)], \
        len(torch.utils.data.BatchSampler(s, 3, drop_last=False))


@compat
def test_random_sampler_is_a_permutation(torch):
    torch.manual_seed(0)
    s = torch.utils.data.RandomSampler(range(9))
    return len(s), sorted(s)


@compat
def test_random_sampler_with_replacement(torch):
    s = torch.utils.data.RandomSampler(range(5), replacement=True, num_samples=12)
    drawn = list(s)
    return len(s), len(drawn), all(0 <= i < 5 for i in drawn)


@compat
def test_random_sampler_num_samples_past_the_dataset(torch):
    drawn = list(torch.utils.data.RandomSampler(range(4), num_samples=10))
    return len(drawn), sorted(drawn[:4]), sorted(drawn[4:8])


@compat
def test_subset_random_sampler(torch):
    s = torch.utils.data.SubsetRandomSampler([7, 3, 9, 1])
    return len(s), sorted(s)


@compat
def test_weighted_random_sampler_never_draws_weight_zero(torch):
    s = torch.utils.data.WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], num_samples=50)
    return len(s), sorted(set(s)) <= [1, 3]


@compat
def test_weighted_random_sampler_without_replacement(torch):
    return sorted(torch.utils.data.WeightedRandomSampler([1.0, 2.0, 3.0], 3, replacement=False))


@compat
def test_loader_with_a_sampler(torch):
    loader = torch.utils.data.DataLoader(_ds(torch), batch_size=2, sampler=[9, 0, 4, 4, 2])
    return len(loader), _batches(loader)


@compat
def test_loader_with_a_batch_sampler(torch):
    loader = torch.utils.data.DataLoader(_ds(torch), batch_sampler=[[3, 1], [0], [2, 5, 7]])
    return len(loader), _batches(loader)


@compat
def test_loader_with_a_batch_sampler_object(torch):
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(5)), 2, drop_last=True)
    return _batches(torch.utils.data.DataLoader(_ds(torch), batch_sampler=sampler))


# --- Subset, ConcatDataset, random_split ---------------------------------------------------------------------------

@compat
def test_subset(torch):
    sub = torch.utils.data.Subset(_ds(torch), [5, 1, 8])
    return len(sub), sub[0], _batches(torch.utils.data.DataLoader(sub, batch_size=2))


@compat
def test_subset_of_a_subset(torch):
    sub = torch.utils.data.Subset(torch.utils.data.Subset(_ds(torch), [5, 1, 8, 3]), [3, 0])
    return [sub[i] for i in range(len(sub))]


@compat
def test_concat_dataset(torch):
    cat = torch.utils.data.ConcatDataset([_ds(torch, 3), _ds(torch, 4)])
    return len(cat), cat.cumulative_sizes, cat[3], cat[-1], _batches(torch.utils.data.DataLoader(cat, batch_size=4))


@compat
def test_adding_datasets_concatenates(torch):
    both = _ds(torch, 2) + _ds(torch, 3)
    return type(both).__name__, len(both), both[4]


@compat
def test_random_split_by_lengths(torch):
    parts = torch.utils.data.random_split(range(10), [3, 7], generator=torch.Generator().manual_seed(0))
    return [len(p) for p in parts], sorted(list(parts[0]) + list(parts[1])), type(parts[0]).__name__


@compat
def test_random_split_by_fractions(torch):
    parts = torch.utils.data.random_split(range(11), [0.5, 0.3, 0.2])
    return [len(p) for p in parts], sorted(i for p in parts for i in p)


@compat
def test_random_split_of_a_tensor_dataset_feeds_loaders(torch):
    train, val = torch.utils.data.random_split(_ds(torch), [0.8, 0.2], generator=torch.Generator().manual_seed(3))
    loaders = [torch.utils.data.DataLoader(d, batch_size=4) for d in (train, val)]
    return [len(d) for d in loaders], sorted(torch.cat([y for ld in loaders for _, y in ld]).tolist())


@compat
def test_random_split_with_a_wrong_total_raises(torch):
    return torch.utils.data.random_split(range(10), [3, 3])


# --- iterable datasets ---------------------------------------------------------------------------------------------

@compat
def test_iterable_dataset_batches(torch):
    return _batches(torch.utils.data.DataLoader(_stream(torch), batch_size=4))


@compat
def test_iterable_dataset_drop_last(torch):
    return _batches(torch.utils.data.DataLoader(_stream(torch), batch_size=4, drop_last=True))


@compat
def test_iterable_dataset_without_batching(torch):
    return _batches(torch.utils.data.DataLoader(_stream(torch, 3), batch_size=None))


@compat
def test_iterable_dataset_refuses_shuffle(torch):
    return torch.utils.data.DataLoader(_stream(torch), shuffle=True)


@compat
def test_chained_iterable_datasets(torch):
    return list(_stream(torch, 3) + _stream(torch, 2))


# --- worker processes ----------------------------------------------------------------------------------------------

@compat
def test_workers_give_the_same_batches_in_order(torch):
    data = _samples(torch, lambda i: {"x": torch.full((2,), float(i)), "i": i}, n=9)
    return [_batches(torch.utils.data.DataLoader(data, batch_size=2, num_workers=w)) for w in (0, 2)]


@compat
def test_workers_over_a_tensor_dataset(torch):
    return _batches(torch.utils.data.DataLoader(_ds(torch), batch_size=3, num_workers=2))


@compat
def test_worker_info_in_the_workers_and_none_in_the_main_process(torch):
    def who(i):
        info = torch.utils.data.get_worker_info()
        return (info.id, info.num_workers)

    loader = torch.utils.data.DataLoader(_samples(torch, who, n=8), batch_size=2, num_workers=2)
    return torch.utils.data.get_worker_info(), _batches(loader)


@compat
def test_iterable_dataset_sharded_across_workers(torch):
    return _batches(torch.utils.data.DataLoader(_stream(torch, 11), batch_size=3, num_workers=2))


@compat
def test_persistent_workers_serve_every_epoch(torch):
    loader = torch.utils.data.DataLoader(_ds(torch, 6), batch_size=4, num_workers=2, persistent_workers=True)
    return [_batches(loader) for _ in range(3)]


@compat
def test_workers_with_prefetch_factor_and_timeout(torch):
    return _batches(torch.utils.data.DataLoader(_ds(torch, 7), batch_size=2, num_workers=1, prefetch_factor=1,
                                                timeout=60))


@compat
def test_worker_init_fn_runs_in_each_worker(torch):
    def init(worker_id):
        torch.utils.data.get_worker_info().dataset.offset = 100 * worker_id

    class Offset(torch.utils.data.Dataset):
        offset = -1

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i + self.offset

    return _batches(torch.utils.data.DataLoader(Offset(), batch_size=1, num_workers=2, worker_init_fn=init))


@compat
def test_an_error_in_a_worker_keeps_its_type(torch):
    def fail(i):
        if i == 3:
            raise KeyError(f"no sample {i}")
        return i

    return _batches(torch.utils.data.DataLoader(_samples(torch, fail, n=6), batch_size=2, num_workers=2))


@compat
def test_an_error_in_the_main_process_keeps_its_type(torch):
    return _batches(torch.utils.data.DataLoader(_samples(torch, lambda i: [1, 2][i], n=3), batch_size=1))


# --- errors ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(batch_size=0), dict(batch_size=-2), dict(batch_size=2.5), dict(sampler=[0, 1], shuffle=True),
    dict(batch_sampler=[[0]], batch_size=2), dict(batch_sampler=[[0]], drop_last=True),
    dict(batch_size=None, drop_last=True), dict(num_workers=-1), dict(persistent_workers=True),
    dict(prefetch_factor=2), dict(timeout=-1),
], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_bad_loader_arguments_raise_as_torch(kwargs):
    check(lambda torch: torch.utils.data.DataLoader(_ds(torch), **kwargs))


@compat
def test_tensor_dataset_of_unequal_lengths_raises(torch):
    return torch.utils.data.TensorDataset(torch.ones(3), torch.ones(4))


@compat
def test_concat_of_no_datasets_raises(torch):
    return torch.utils.data.ConcatDataset([])


@compat
def test_base_dataset_needs_getitem(torch):
    return torch.utils.data.Dataset()[0]


@compat
def test_batch_sampler_checks_its_arguments(torch):
    return torch.utils.data.BatchSampler(range(3), batch_size=2, drop_last="no")
