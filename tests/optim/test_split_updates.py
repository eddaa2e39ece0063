"""A large CPU optimizer update shared among threads (backend/threads.run_split) gives the bits of the one-thread
update, and against torch's optimizers the same values."""
import multiprocessing
import os
import time

import numpy as np
import pytest

import gpugrad
from gpugrad.backend import threads

torch = pytest.importorskip("torch")


@pytest.fixture
def pinned_threads():
    def pin(n):
        threads.POLICY.pinned = n
    saved = threads.POLICY.pinned
    yield pin
    threads.POLICY.pinned = saved


@pytest.mark.parametrize("name, kw", [("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2}),
                                      ("Adam", {"lr": 1e-2}), ("RMSprop", {"lr": 1e-2, "centered": True})])
def test_split_update_matches_one_thread_and_torch(pinned_threads, name, kw):
    rng = np.random.default_rng(3)
    shape = (700, 530)  # 371,000 elements: above SPLIT_ELEMENTS, not a multiple of the piece size
    assert np.prod(shape) >= threads.SPLIT_ELEMENTS
    p0, grads = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal((3, *shape), dtype=np.float32)
    results = []
    for n in (1, 2, 3):
        pinned_threads(n)
        p = gpugrad.tensor(p0, requires_grad=True)
        opt = getattr(gpugrad.optim, name)([p], **kw)
        for g in grads:
            p.grad = gpugrad.tensor(g)
            opt.step()
        results.append(p.detach().numpy())
    tp = torch.tensor(p0, requires_grad=True)
    topt = getattr(torch.optim, name)([tp], **kw)
    for g in grads:
        tp.grad = torch.tensor(g)
        topt.step()
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[2], results[0])
    np.testing.assert_allclose(results[0], tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_split_count_follows_the_pool_and_stays_single_for_small_updates(pinned_threads):
    pinned_threads(2)
    assert threads.split_count(threads.SPLIT_ELEMENTS) == 2
    assert threads.split_count(threads.SPLIT_ELEMENTS - 1) == 1


def test_run_split_covers_every_index_once_and_raises_a_helpers_error():
    seen = []
    threads.run_split(lambda a, b: seen.extend(range(a, b)), 10, 3)
    assert sorted(seen) == list(range(10))

    def fail_late(a, b):
        if a > 0:
            raise ValueError("helper failed")
    with pytest.raises(ValueError, match="helper failed"):
        threads.run_split(fail_late, 10, 2)


def test_run_split_waits_for_every_helper_before_raising():
    ended = []

    def part(a, b):
        if a == 0:
            raise KeyError("caller failed")  # the calling thread's part fails at once
        if a == 2:  # parts start at 0, 2, 5 and 7
            raise ValueError("first helper failed")
        time.sleep(0.2)  # a slow helper: it must still end before run_split raises
        ended.append(a)
    with pytest.raises(KeyError, match="caller failed"):
        threads.run_split(part, 10, 4)
    assert sorted(ended) == [5, 7]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_splits_without_hanging():
    threads.run_split(lambda a, b: None, 4, 2)  # the parent's helper pool exists before the fork
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_split_sum, ()).get(timeout=60) == sum(range(8))


def _split_sum():
    seen = []
    threads.run_split(lambda a, b: seen.extend(range(a, b)), 8, 2)
    return sum(seen)
