"""gpugrad.distributed's single-process pieces: the post-accumulate-grad hook and end-of-backward callbacks DDP is
built on, bucket assignment, DistributedSampler against torch's, and the errors without mpi4py or a group.
(Several ranks: tests/distributed/test_distributed_mpi.py.)"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import gpugrad
import gpugrad.distributed as dist
from gpugrad import nn
from gpugrad.core import engine
from gpugrad.data import DataLoader, DistributedSampler, TensorDataset
from gpugrad.nn.parallel.distributed import assign_buckets


# -- Tensor.register_post_accumulate_grad_hook, engine.queue_callback ------------------------------------------------
def _hooked_grads(lib, make, steps):
    """The .grad each post-accumulate hook call saw, for ``steps`` (functions of (w, v) returning a loss)."""
    w = make([1.0, -2.0, 3.0])
    v = make([0.5, 0.5, 0.5])
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.detach().numpy().copy()))
    for i, step in enumerate(steps):
        if i == len(steps) - 1:
            handle.remove()  # the last pass runs without the hook
        step(w, v).backward()
    return seen


@pytest.mark.parametrize("case", ["square", "twice", "accumulate"])
def test_post_accumulate_grad_hook_matches_torch(case, torch):
    steps = {"square": [lambda w, v: (w * w).sum()] * 2,
             "twice": [lambda w, v: (w * v).sum() + (w * w * v).sum()] * 3,  # w used twice: one call per pass
             "accumulate": [lambda w, v: (w * 3).sum(), lambda w, v: (w * w).sum(), lambda w, v: w.sum()]}[case]
    ours = _hooked_grads(gpugrad, lambda x: gpugrad.tensor(x, dtype=gpugrad.float64, requires_grad=True), steps)
    theirs = _hooked_grads(torch, lambda x: torch.tensor(x, dtype=torch.float64, requires_grad=True), steps)
    assert len(ours) == len(theirs) == len(steps) - 1
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_post_accumulate_grad_hook_errors_as_torch():
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        (gpugrad.ones(2, requires_grad=True) * 2).register_post_accumulate_grad_hook(print)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        gpugrad.ones(2).register_post_accumulate_grad_hook(print)


def test_post_accumulate_grad_hook_not_run_by_autograd_grad():
    w = gpugrad.ones(2, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(seen.append)
    gpugrad.autograd.grad((w * 2).sum(), w)  # captures the gradient; .grad is not accumulated, so no hook (torch)
    assert seen == [] and w.grad is None


def test_queued_callback_runs_after_the_whole_backward():
    a, b = gpugrad.ones(2, requires_grad=True), gpugrad.ones(3, requires_grad=True)
    seen = []

    def hook(t):  # the first leaf done queues the callback: by the time it runs, every leaf has its .grad
        if not seen:
            engine.queue_callback(lambda: seen.append((a.grad is not None, b.grad is not None)))
        seen.append("hook")

    a.register_post_accumulate_grad_hook(hook)
    b.register_post_accumulate_grad_hook(hook)
    ((a * 2).sum() + (b * 3).sum()).backward()
    assert seen == ["hook", "hook", (True, True)]
    with pytest.raises(RuntimeError, match="no backward pass is running"):
        engine.queue_callback(print)


def test_queued_callback_dropped_when_backward_fails():
    a = gpugrad.ones(2, requires_grad=True)
    ran = []
    a.register_post_accumulate_grad_hook(lambda t: engine.queue_callback(lambda: ran.append(1)))

    def boom(g):
        raise ValueError("boom")

    h = a * 2
    h.register_hook(boom)
    with pytest.raises(ValueError):
        (h.sum() + (a * 3).sum()).backward()
    (a * 3).sum().backward()  # a later pass runs only its own callbacks
    assert ran == [1]


# -- DDP's bucket assignment ------------------------------------------------------------------------------------------
def test_buckets_reverse_order_first_small_then_cap():
    f32 = [gpugrad.zeros(n) for n in (1000, 300_000, 10, 200_000, 50)]  # 4 bytes each
    # reversed: 50 (200 B) + 200,000 (800,200 B) + 10 -> 800,240 B < 1 MiB; + 300,000 -> 2 MB >= 1 MiB: closes;
    # then the cap (2 MB) holds the rest, still open at the end
    assert assign_buckets(f32, cap_bytes=2 << 20) == [[4, 3, 2, 1], [0]]
    # a bucket closes once it holds at least the limit: 40 B (10 floats) wait for the next parameter
    assert assign_buckets(f32, cap_bytes=100) == [[4], [3], [2, 1], [0]]
    mixed = [gpugrad.zeros(4, dtype=gpugrad.float64), gpugrad.zeros(4), gpugrad.zeros(4, dtype=gpugrad.float64)]
    assert assign_buckets(mixed, cap_bytes=1 << 20) == [[2, 0], [1]]  # one dtype per flat buffer


def test_ddp_needs_a_process_group():
    with pytest.raises(ValueError, match="process group has not been initialized"):
        nn.parallel.DistributedDataParallel(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="process group has not been initialized"):
        dist.get_rank()
    assert not dist.is_initialized()


# -- no mpi4py ------------------------------------------------------------------------------------------------------
def test_without_mpi4py_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
    assert not dist.is_available()
    with pytest.raises(RuntimeError, match=r"pip install 'gpugrad\[distributed\]'"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()


def test_unknown_backend_and_bad_timeout():
    with pytest.raises(ValueError, match="unknown backend 'gloo'"):
        dist.init_process_group("gloo")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        dist.init_process_group("mpi", timeout=0)


# -- DistributedSampler: torch's index semantics -----------------------------------------------------------------------
SIZES = [(0, 2), (1, 3), (5, 2), (7, 3), (10, 4), (2, 5), (12, 3), (3, 8)]


@pytest.mark.parametrize("n,replicas", SIZES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_matches_torch(n, replicas, drop_last, torch):
    TorchSampler = torch.utils.data.DistributedSampler
    for rank in range(replicas):
        theirs = TorchSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        ours = DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
        # shuffled: the same padding and striding applied to our epoch order (torch draws its own permutation)
        for epoch in (0, 3):
            order = np.random.default_rng((7, epoch)).permutation(n)
            shuffled = DistributedSampler(range(n), replicas, rank, shuffle=True, seed=7, drop_last=drop_last)
            shuffled.set_epoch(epoch)
            assert list(shuffled) == [int(order[i]) for i in theirs]


def test_sampler_errors_as_torch():
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"):
        DistributedSampler(range(3), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="process group has not been initialized"):
        DistributedSampler(range(3))  # no group to ask


def test_loader_with_sampler_takes_its_indices_per_epoch():
    x = np.arange(22, dtype=np.float32).reshape(11, 2)
    ds = TensorDataset(x, np.arange(11))
    sampler = DistributedSampler(ds, num_replicas=3, rank=2, seed=5)
    loader = DataLoader(ds, batch_size=2, sampler=sampler, device="cpu")
    assert len(loader) == 2  # ceil(11 / 3) = 4 indices
    for epoch in range(2):  # the loader passes its epoch to the sampler
        sampler_view = DistributedSampler(ds, num_replicas=3, rank=2, seed=5)
        sampler_view.set_epoch(epoch)
        want = list(sampler_view)
        got = [(xb.numpy(), yb.tolist()) for xb, yb in loader]
        assert sum((ys for _, ys in got), []) == want
        np.testing.assert_array_equal(np.concatenate([xs for xs, _ in got]), x[want])
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=sampler, shuffle=True)
