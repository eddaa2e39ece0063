"""gpugrad.data: DataLoader batching and shuffling, TensorDataset, the embedded digits, the IDX reader/writer."""
from __future__ import annotations

import gzip
import re

import numpy as np
import pytest

import gpugrad
from gpugrad.data import DataLoader, Dataset, IdxError, TensorDataset, digits_split, load_digits, load_idx_dir
from gpugrad.data.idx import read_idx, write_idx, write_idx_dir
from tests import bad_files


def _dataset(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return TensorDataset(x, np.arange(n, dtype=np.int64))


def _labels(loader):
    return [y.numpy().tolist() for _, y in loader]


# -- DataLoader ----------------------------------------------------------------------------------------------------
def test_batches_in_order_with_a_last_partial_batch():
    loader = DataLoader(_dataset(10), batch_size=4, device="cpu")
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    assert _labels(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    x, y = batches[2]
    assert isinstance(x, gpugrad.Tensor) and x.shape == (2, 3) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(x.numpy(), [[24, 25, 26], [27, 28, 29]])
    assert str(x.device) == "cpu" and not x.requires_grad


def test_drop_last_drops_the_partial_batch():
    loader = DataLoader(_dataset(10), batch_size=4, drop_last=True, device="cpu")
    assert len(loader) == 2 and _labels(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    exact = DataLoader(_dataset(8), batch_size=4, drop_last=True, device="cpu")
    assert len(exact) == 2 and len(list(exact)) == 2
    assert list(DataLoader(_dataset(3), batch_size=4, drop_last=True, device="cpu")) == []


def test_shuffle_is_a_seeded_permutation_per_epoch():
    a = DataLoader(_dataset(50), batch_size=8, shuffle=True, seed=7, device="cpu")
    b = DataLoader(_dataset(50), batch_size=8, shuffle=True, seed=7, device="cpu")
    epochs_a = [sum(_labels(a), []) for _ in range(3)]
    epochs_b = [sum(_labels(b), []) for _ in range(3)]
    assert epochs_a == epochs_b  # same seed: same order, epoch by epoch
    for order in epochs_a:
        assert sorted(order) == list(range(50))  # each epoch visits every sample once
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]  # and each epoch has its own order
    assert epochs_a[0] == np.random.default_rng((7, 0)).permutation(50).tolist()
    c = DataLoader(_dataset(50), batch_size=8, shuffle=True, seed=8, device="cpu")
    assert sum(_labels(c), []) != epochs_a[0]


def test_set_epoch_replays_an_epoch_and_resumes_mid_epoch():
    loader = DataLoader(_dataset(20), batch_size=3, shuffle=True, seed=1, device="cpu")
    full = [_labels(loader) for _ in range(2)]
    loader.set_epoch(1)
    assert _labels(loader) == full[1]
    loader.set_epoch(1, start_batch=4)
    assert _labels(loader) == full[1][4:]
    assert loader.epoch == 2
    assert loader.indices(1).tolist() == sum(full[1], [])
    with pytest.raises(ValueError, match="start_batch"):
        loader.set_epoch(0, start_batch=99)


def test_unseeded_shuffle_follows_manual_seed():
    gpugrad.manual_seed(3)
    a = _labels(DataLoader(_dataset(30), batch_size=30, shuffle=True, device="cpu"))
    gpugrad.manual_seed(3)
    b = _labels(DataLoader(_dataset(30), batch_size=30, shuffle=True, device="cpu"))
    assert a == b


def test_batches_own_their_memory():
    x = np.zeros((6, 2), np.float32)
    loader = DataLoader(TensorDataset(x, np.arange(6)), batch_size=6, device="cpu")
    (xb, _), = list(loader)
    xb.data[...] = 5  # writing into a batch never reaches the dataset
    assert not x.any()


def test_tensor_dataset_accepts_tensors_and_checks_lengths():
    ds = TensorDataset(gpugrad.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True), [5, 6])
    assert len(ds) == 2 and ds.nbytes == 16 + 16
    x, y = ds[1]
    assert x.tolist() == [3.0, 4.0] and y.item() == 6 and not x.requires_grad
    with pytest.raises(ValueError, match="different lengths"):
        TensorDataset(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(np.float32(1.0))
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()


def test_generic_dataset_is_collated_field_by_field():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.full(2, i, np.float32), i * i

    loader = DataLoader(Squares(), batch_size=2, device="cpu")
    batches = list(loader)
    assert [b[1].tolist() for b in batches] == [[0, 1], [4, 9], [16]]
    assert batches[0][0].shape == (2, 2) and batches[0][0].dtype == np.float32

    class Plain(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return float(i)

    assert [t.tolist() for t in DataLoader(Plain(), batch_size=2, device="cpu")] == [[0.0, 1.0], [2.0]]


def test_dict_and_nested_samples_are_collated_like_torch():
    class Records(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(3, i, np.float32), "y": i, "pair": (np.float32(i), [i, 2 * i])}

    batches = list(DataLoader(Records(), batch_size=2, device="cpu"))
    b = batches[0]
    assert set(b) == {"x", "y", "pair"} and isinstance(b["x"], gpugrad.Tensor)
    assert b["x"].shape == (2, 3) and b["x"].dtype == np.float32 and b["y"].tolist() == [0, 1]
    assert b["pair"][0].tolist() == [0.0, 1.0] and [t.tolist() for t in b["pair"][1]] == [[0, 1], [0, 2]]
    assert batches[-1]["y"].tolist() == [4]


@pytest.mark.parametrize("field", [None, {1, 2}, np.array(["a", "b"])], ids=["None", "set", "str-array"])
def test_fields_that_cannot_be_collated_are_a_type_error(field):
    class Odd(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return np.zeros(2, np.float32), field

    with pytest.raises(TypeError, match="default_collate: batch must contain tensors, numpy arrays, numbers"):
        next(iter(DataLoader(Odd(), batch_size=2, device="cpu")))


def test_strings_are_collated_into_lists_as_torch_does():
    class Named(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return f"s{i}", i

    assert [b[0] for b in DataLoader(Named(), batch_size=2)] == [["s0", "s1"], ["s2"]]


def test_loader_rejects_bad_arguments():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            DataLoader(_dataset(), batch_size=bad)
    with pytest.raises(ValueError, match="seed"):
        DataLoader(_dataset(), shuffle=True, seed=-1)


def test_base_dataset_must_be_subclassed():
    with pytest.raises(NotImplementedError):
        Dataset()[0]
    with pytest.raises(TypeError):  # no __len__, as torch's
        len(Dataset())


@pytest.mark.gpu
def test_cuda_batches_match_cpu_batches():
    ds = _dataset(37)
    for preload in (True, False):
        cpu = DataLoader(ds, batch_size=8, shuffle=True, seed=2, device="cpu")
        cuda = DataLoader(ds, batch_size=8, shuffle=True, seed=2, device="cuda", preload=preload)
        for (xc, yc), (xg, yg) in zip(cpu, cuda):
            assert xg.is_cuda and yg.is_cuda
            np.testing.assert_array_equal(xg.cpu().numpy(), xc.numpy())
            np.testing.assert_array_equal(yg.cpu().numpy(), yc.numpy())
    on_device = TensorDataset(gpugrad.tensor(ds.arrays[0], device="cuda"), ds.arrays[1])
    batches = list(DataLoader(on_device, batch_size=8, device="cpu"))
    assert not batches[0][0].is_cuda and batches[-1][1].tolist() == list(range(32, 37))


@pytest.mark.gpu
def test_default_collated_batches_go_to_the_loaders_device():
    class Pairs(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(3, i, np.float32), "y": i}

    for workers in (0, 2):
        batches = list(DataLoader(Pairs(), batch_size=2, device="cuda", num_workers=workers))
        assert all(b["x"].is_cuda and b["y"].is_cuda for b in batches)
        assert [b["y"].cpu().tolist() for b in batches] == [[0, 1], [2, 3], [4]]


# -- gpugrad.utils.data: torch's home of it; samplers, splits, worker processes ---------------------------------------
def test_gpugrad_data_is_an_alias_of_gpugrad_utils_data():
    import gpugrad.data as alias
    from gpugrad.utils import data

    assert gpugrad.utils.data is data
    for name in data.__all__:
        assert getattr(alias, name) is getattr(data, name), name
    assert {"load_digits", "read_idx", "DistributedSampler", "random_split", "get_worker_info"} <= set(alias.__all__)


class Draws(Dataset):
    """Each sample: who drew it and what the worker's seeded generators give (Python's, NumPy's, gpugrad's)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import random

        info = gpugrad.utils.data.get_worker_info()
        return {"id": info.id, "seed": info.seed, "random": random.random(), "numpy": np.random.random(),
                "gpugrad": gpugrad.rand(1).item(), "device": str(gpugrad.zeros(1).device)}


def _draws(seed, **kw):
    gen = gpugrad.Generator().manual_seed(seed)
    return list(DataLoader(Draws(), batch_size=2, num_workers=2, generator=gen, **kw))


def test_workers_are_seeded_as_torch_seeds_them():
    a, b, c = _draws(1), _draws(1), _draws(2)
    ids = [b_["id"].tolist() for b_ in a]
    assert ids == [[0, 0], [1, 1], [0, 0], [1, 1]]  # batches round robin over the workers
    seeds = {(i, s) for b_ in a for i, s in zip(b_["id"].tolist(), b_["seed"].tolist())}
    (i0, s0), (i1, s1) = sorted(seeds)
    assert s1 - s0 == 1  # base_seed + worker_id
    for key in ("random", "numpy", "gpugrad"):
        mine = [b_[key].tolist() for b_ in a]
        assert mine == [b_[key].tolist() for b_ in b]  # the generator's seed fixes every worker's streams
        assert mine != [b_[key].tolist() for b_ in c]
        assert mine[0] != mine[1]  # and the two workers draw different numbers
    assert {d for b_ in a for d in b_["device"]} == {"cpu"}  # workers compute on the CPU


def test_a_worker_that_dies_is_a_runtime_error():
    class Dies(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            import os

            os._exit(3)

    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly"):
        list(DataLoader(Dies(), num_workers=1))


def test_a_slow_batch_times_out():
    class Slow(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            import time

            time.sleep(5)
            return i

    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.3 seconds"):
        list(DataLoader(Slow(), num_workers=1, timeout=0.3))


def test_an_error_in_worker_init_fn_is_raised_with_its_type():
    def init(worker_id):
        raise ValueError(f"bad init {worker_id}")

    with pytest.raises(ValueError, match="(?s)Caught ValueError in DataLoader worker process 0.*bad init 0"):
        list(DataLoader(_dataset(), num_workers=1, collate_fn=lambda b: b, worker_init_fn=init))


def test_persistent_workers_drop_an_abandoned_epochs_batches():
    class Items(Dataset):
        def __len__(self):
            return 20

        def __getitem__(self, i):
            return i

    loader = DataLoader(Items(), batch_size=2, num_workers=2, persistent_workers=True, prefetch_factor=4)
    for i, _ in enumerate(loader):
        if i == 1:
            break  # batches 2.. are in flight when the next epoch starts
    assert [b.tolist() for b in loader] == [[2 * k, 2 * k + 1] for k in range(10)]
    procs = loader._pool.procs
    assert [b.tolist() for b in loader][-1] == [18, 19] and loader._pool.procs is procs  # the same workers


class Squares(Dataset):
    """Module level, so that spawned workers can unpickle it."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return i * i


@pytest.mark.slow
def test_spawned_workers():
    loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    assert [b.tolist() for b in loader] == [[0, 1], [4, 9], [16]]


def test_a_tensor_dataset_is_gathered_in_the_main_process_whatever_num_workers():
    ds = _dataset(7)
    assert _labels(DataLoader(ds, batch_size=3, num_workers=2)) == [[0, 1, 2], [3, 4, 5], [6]]


def test_random_sampler_epochs_are_seeded_and_replayable():
    from gpugrad.utils.data import RandomSampler

    s = RandomSampler(range(10), generator=gpugrad.Generator().manual_seed(0))
    first, second = list(s), list(s)
    assert sorted(first) == sorted(second) == list(range(10)) and first != second
    s.set_epoch(0)
    assert list(s) == first
    assert np.random.default_rng((s.seed, 1)).permutation(10).tolist() == second


def test_random_split_and_samplers_check_their_arguments():
    from gpugrad.utils.data import RandomSampler, WeightedRandomSampler, random_split

    with pytest.raises(ValueError, match="Fraction at index 1 is not between 0 and 1"):
        random_split(range(4), [0.25, -0.25, 1.0])
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        random_split(range(1), [0.5, 0.5])
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError, match="replacement should be a boolean"):
        RandomSampler(range(3), replacement=1)
    with pytest.raises(ValueError, match="weights should be a 1d sequence"):
        WeightedRandomSampler([[1.0]], 2)
    with pytest.raises(RuntimeError, match="weights must be finite, non-negative"):
        WeightedRandomSampler([1.0, -1.0], 2)


# -- the embedded digits -------------------------------------------------------------------------------------------
def test_digits_shapes_values_and_classes():
    x, y = load_digits()
    assert x.shape == (1797, 64) and x.dtype == np.uint8 and y.shape == (1797,) and y.dtype == np.int64
    assert x.min() == 0 and x.max() == 16 and sorted(set(y.tolist())) == list(range(10))
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert y[:10].tolist() == list(range(10))  # the file's first rows are 0..9 in order
    xs, _ = load_digits(scale=True)
    assert xs.dtype == np.float32 and xs.max() == 1.0 and np.allclose(xs * 16, x)
    x[...] = 0  # callers get copies, never the cached arrays
    assert load_digits()[0].max() == 16


def test_digits_split_is_fixed_stratified_and_disjoint():
    x_train, y_train, x_test, y_test = digits_split()
    assert x_train.shape == (1437, 64) and x_test.shape == (360, 64)
    assert x_train.dtype == np.float32 and 0 <= x_train.min() and x_train.max() <= 1
    assert np.bincount(y_test).tolist() == [36, 37, 35, 37, 36, 36, 36, 36, 35, 36]  # ~20% of every class
    again = digits_split()
    for a, b in zip((x_train, y_train, x_test, y_test), again):
        np.testing.assert_array_equal(a, b)
    rows = {r.tobytes() for r in x_train}
    assert len(x_train) + len(x_test) == 1797
    other = digits_split(seed=1)
    assert not np.array_equal(other[3], y_test) or not np.array_equal(other[2], x_test)
    raw = digits_split(scale=False)
    assert raw[0].dtype == np.uint8
    assert sum(r.tobytes() in rows for r in x_test) < 10  # (a few digits are exact duplicates across the split)


def test_stratified_split_validates_test_size():
    from gpugrad.data.digits import stratified_split

    train, test = stratified_split(np.array([0, 0, 1, 1, 1, 1]), 3)
    assert len(test) == 3 and sorted(np.concatenate([train, test]).tolist()) == list(range(6))
    with pytest.raises(ValueError, match="test_size"):
        stratified_split(np.arange(5), 5)


# -- IDX files -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path, dtype, suffix):
    a = (np.arange(2 * 3 * 4) - 5).astype(dtype).reshape(2, 3, 4)
    if dtype == np.uint8:
        a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4) * 10
    path = write_idx(tmp_path / f"a.idx{suffix}", a)
    b = read_idx(path)
    assert b.dtype == np.dtype(dtype) and b.shape == a.shape and b.dtype.isnative
    np.testing.assert_array_equal(a, b)
    raw = path.read_bytes()
    if suffix:
        assert raw[:2] == b"\x1f\x8b"
        raw = gzip.decompress(raw)
    assert raw[:4] == bytes([0, 0, {np.uint8: 8, np.int8: 9, np.int16: 0xB, np.int32: 0xC, np.float32: 0xD,
                                    np.float64: 0xE}[dtype], 3])
    assert raw[4:16] == b"\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04"  # big-endian dims


def test_idx_gz_is_detected_by_content_and_reproducible(tmp_path):
    a = np.arange(6, dtype=np.uint8)
    write_idx(tmp_path / "x.gz", a)
    (tmp_path / "renamed").write_bytes((tmp_path / "x.gz").read_bytes())
    np.testing.assert_array_equal(read_idx(tmp_path / "renamed"), a)
    assert write_idx(tmp_path / "y.gz", a).read_bytes() == (tmp_path / "x.gz").read_bytes()


def test_write_idx_rejects_unsupported_arrays(tmp_path):
    with pytest.raises(TypeError, match="element type"):
        write_idx(tmp_path / "a", np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="dimensions"):
        write_idx(tmp_path / "a", np.uint8(3))


def _mnist_like(n_train=12, n_test=5, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8), rng.integers(0, 10, n_train).astype(np.uint8),
            rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8), rng.integers(0, 10, n_test).astype(np.uint8))


@pytest.mark.parametrize("gz", [False, True])
def test_load_idx_dir(tmp_path, gz):
    arrays = _mnist_like()
    write_idx_dir(tmp_path, *arrays, gz=gz)
    x_train, y_train, x_test, y_test = load_idx_dir(tmp_path)
    assert x_train.shape == (12, 784) and x_test.shape == (5, 784)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int64
    np.testing.assert_allclose(x_train, arrays[0].reshape(12, -1) / 255)
    assert 0 <= x_train.min() and x_train.max() <= 1
    np.testing.assert_array_equal(y_test, arrays[3])


def test_load_idx_dir_mixes_raw_and_gz_and_accepts_a_str_path(tmp_path):
    x_train, y_train, x_test, y_test = _mnist_like()
    write_idx_dir(tmp_path, x_train, y_train, x_test, y_test)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", x_test)
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    assert load_idx_dir(str(tmp_path))[2].shape == (5, 784)


def _corrupt(tmp_path, name, data):
    write_idx_dir(tmp_path, *_mnist_like())
    (tmp_path / name).write_bytes(data)


def test_missing_directory_and_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_idx_dir(tmp_path / "nope")
    write_idx_dir(tmp_path, *_mnist_like())
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match=r"train-labels-idx1-ubyte \(or train-labels-idx1-ubyte.gz\)"):
        load_idx_dir(tmp_path)


def test_wrong_magic_names_the_file(tmp_path):
    _corrupt(tmp_path, "train-images-idx3-ubyte", b"\x12\x34\x08\x03" + b"\x00" * 20)
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte: bad magic number 0x12340803"):
        load_idx_dir(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x07\x01\x00\x00\x00\x01\x00")
    with pytest.raises(IdxError, match="bad magic number 0x00000701"):
        load_idx_dir(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x00")
    with pytest.raises(IdxError, match="0 dimensions"):
        load_idx_dir(tmp_path)


def test_truncated_header_and_data(tmp_path):
    _corrupt(tmp_path, "t10k-labels-idx1-ubyte", b"\x00\x00")
    with pytest.raises(IdxError, match=r"t10k-labels-idx1-ubyte: truncated header"):
        load_idx_dir(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x03\x00\x00\x00\x05")
    with pytest.raises(IdxError, match="3 dimensions need 16 bytes"):
        load_idx_dir(tmp_path)
    full = (tmp_path / "train-images-idx3-ubyte").read_bytes()
    (tmp_path / "train-images-idx3-ubyte").write_bytes(full[:-100])
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte: truncated data: shape \(12, 28, 28\)"):
        load_idx_dir(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(full + b"xx")
    with pytest.raises(IdxError, match="2 unexpected trailing bytes"):
        load_idx_dir(tmp_path)


def test_truncated_and_corrupt_gzip(tmp_path):
    write_idx_dir(tmp_path, *_mnist_like(), gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    full = path.read_bytes()
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte.gz: corrupt gzip data"):
        load_idx_dir(tmp_path)
    path.write_bytes(full[:10] + bytes(len(full) - 10))
    with pytest.raises(IdxError, match="corrupt gzip data"):
        load_idx_dir(tmp_path)


def test_mismatched_counts_and_shapes(tmp_path):
    x_train, y_train, x_test, y_test = _mnist_like()
    write_idx_dir(tmp_path, x_train, y_train[:-1], x_test, y_test)
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte has 12 images but .*train-labels-idx1-ubyte has 11"):
        load_idx_dir(tmp_path)
    write_idx_dir(tmp_path, x_train, y_train, x_test[:, :20, :20], y_test)
    with pytest.raises(IdxError, match="train images have 784 values each but test images have 400"):
        load_idx_dir(tmp_path)
    write_idx_dir(tmp_path, x_train, y_train.reshape(12, 1), x_test, y_test)
    with pytest.raises(IdxError, match=r"labels need 1 dimension \(N,\), got shape \(12, 1\)"):
        load_idx_dir(tmp_path)
    write_idx_dir(tmp_path, x_train[:, 0, 0], y_train, x_test, y_test)
    with pytest.raises(IdxError, match="images need at least 2 dimensions"):
        load_idx_dir(tmp_path)
    write_idx_dir(tmp_path, x_train, y_train.astype(np.float32), x_test, y_test)
    with pytest.raises(IdxError, match="labels must be integers"):
        load_idx_dir(tmp_path)
    write_idx_dir(tmp_path, x_train, y_train.astype(np.int8) - 1, x_test, y_test)
    with pytest.raises(IdxError, match="negative label"):
        load_idx_dir(tmp_path)


def test_empty_splits_are_named_errors(tmp_path):
    from gpugrad.data.idx import load_idx_pair

    x_train, y_train, x_test, y_test = _mnist_like()
    write_idx_dir(tmp_path, x_train[:0], y_train[:0], x_test, y_test)
    x, y = load_idx_pair(tmp_path, "train")  # a pair on its own may be empty: (0, 784), not a reshape error
    assert x.shape == (0, 784) and x.dtype == np.float32 and y.shape == (0,)
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte: no images; the train split needs at least one"):
        load_idx_dir(tmp_path)
    write_idx_dir(tmp_path, x_train, y_train, x_test[:0], y_test[:0])
    with pytest.raises(IdxError, match=r"t10k-images-idx3-ubyte: no images; the test split needs at least one"):
        load_idx_dir(tmp_path)


def test_a_size_that_overflows_int64_is_reported_as_truncated(tmp_path):
    path = tmp_path / "huge-idx"
    path.write_bytes(b"\x00\x00\x08\x04" + np.full(4, 65536, ">u4").tobytes())  # 65536**4 == 2**64 bytes
    with pytest.raises(IdxError, match=r"huge-idx: truncated data: .* needs 18446744073709551616 bytes"):
        read_idx(path)


def test_float_images_are_taken_as_scaled(tmp_path):
    x_train, y_train, x_test, y_test = _mnist_like()
    write_idx_dir(tmp_path, x_train / 255.0, y_train, (x_test / 255.0).astype(np.float32), y_test)
    out = load_idx_dir(tmp_path)
    np.testing.assert_allclose(out[0], x_train.reshape(12, -1) / 255.0, rtol=1e-6)
    assert out[0].dtype == out[2].dtype == np.float32


# -- malformed and oversized IDX files -----------------------------------------------------------------------------
@pytest.mark.parametrize("dims, fragment", [
    ((1,) * 255, "declares 255 dimensions; gpugrad reads at most 32"),        # NumPy cannot even reshape to that
    ((0,) * 33, "declares 33 dimensions"),
    ((65536,) * 4, "truncated data: shape (65536, 65536, 65536, 65536) of uint8 needs 18446744073709551616 bytes"),
    ((2**32 - 1, 2**32 - 1), "needs 18446744065119617025 bytes"),
    ((3, 4), "truncated data: shape (3, 4) of uint8 needs 12 bytes after the header, the file has 5"),
])
@pytest.mark.parametrize("gz", [False, True])
def test_every_malformed_header_is_an_idx_error_naming_the_file(tmp_path, dims, fragment, gz):
    path = tmp_path / ("x.gz" if gz else "x")
    body = bad_files.idx_header(dims) + b"\x01" * 5
    path.write_bytes(gzip.compress(body) if gz else body)
    if gz and "18446744" in fragment:  # a stream's length is unknown up front: the cap refuses it first
        fragment = "bytes of data, more than the limit of 1,073,741,824"
    with pytest.raises(IdxError, match=re.escape(f"{path}: ") + ".*" + re.escape(fragment)):
        read_idx(path)


def test_gzip_is_decompressed_with_a_limit(tmp_path, monkeypatch):
    import tracemalloc

    from gpugrad.data import idx

    big = 64 << 20
    declared = bad_files.gzip_file(tmp_path / "declared.gz", bad_files.idx_header((big,)), 1000)
    trailing = bad_files.gzip_file(tmp_path / "trailing.gz", bad_files.idx_header((10,)), big)  # ~64 KiB
    assert trailing.stat().st_size < big // 500
    tracemalloc.start()
    try:
        with pytest.raises(IdxError, match=r"declared.gz: shape \(67108864,\) of uint8 declares 67,108,864 bytes of "
                           r"data, more than the limit of 16,777,216; .*GPUGRAD_MAX_IDX_BYTES=<bytes>"):
            read_idx(declared, max_bytes=16 << 20)
        with pytest.raises(IdxError, match=r"trailing.gz: unexpected trailing bytes after the data of shape \(10,\)"):
            read_idx(trailing)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20  # neither the declared 64 MiB nor the 64 MiB stream was ever held
    assert idx.MAX_BYTES == 1 << 30  # the documented default
    monkeypatch.setenv("GPUGRAD_MAX_IDX_BYTES", "100")
    x_train, y_train, x_test, y_test = _mnist_like()
    write_idx_dir(tmp_path / "d", x_train, y_train, x_test, y_test, gz=True)
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte.gz: .* more than the limit of 100;"):
        load_idx_dir(tmp_path / "d")
    assert load_idx_dir(tmp_path / "d", max_bytes=1 << 20)[0].shape == (12, 784)  # the argument wins
    monkeypatch.setenv("GPUGRAD_MAX_IDX_BYTES", "1GB")
    with pytest.raises(IdxError, match="GPUGRAD_MAX_IDX_BYTES='1GB': expected a whole number of bytes"):
        read_idx(tmp_path / "d" / "train-labels-idx1-ubyte.gz")


def test_big_endian_types_are_read_in_place_and_correctly(tmp_path):
    values = np.array([[-2, 300], [32767, -32768]], np.int16)
    out = read_idx(write_idx(tmp_path / "x", values))
    assert out.dtype == np.int16 and out.dtype.isnative and out.flags.writeable
    np.testing.assert_array_equal(out, values)


@pytest.mark.parametrize("bad, fragment", [
    (np.nan, "NaN or infinite (the first in image 3)"),
    (np.inf, "NaN or infinite (the first in image 3)"),
    (1e300, "NaN, infinite or beyond float32's range (the first in image 3)"),  # float64 only
])
def test_non_finite_pixels_are_rejected_up_front(tmp_path, bad, fragment):
    x_train, y_train, x_test, y_test = _mnist_like()
    x = x_train.astype(np.float64) / 255
    x[3, 4, 5] = bad
    x[7, 0, 0] = bad
    write_idx_dir(tmp_path, x if bad == 1e300 else x.astype(np.float32), y_train, x_test, y_test)
    with pytest.raises(IdxError, match=r"train-images-idx3-ubyte: 2 pixel value\(s\) are " + re.escape(fragment)):
        load_idx_dir(tmp_path)
