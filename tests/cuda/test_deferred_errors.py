"""Out-of-range class targets, embedding ids and gather indices (gpugrad/backend/deferred.py): an IndexError at once
on the CPU; on CUDA a kernel records the failure without a host sync and the next read of that device raises the
same error. GPU tests are marked gpu (GPUGRAD_CUDA_SIM=1 in CI); the sync counts need the simulated device.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import gpugrad
import gpugrad.nn as nn
import gpugrad.nn.functional as F
from gpugrad.backend import CPU, deferred, kernels, reference
from gpugrad.testing import cuda_sim

needs_sim = pytest.mark.skipif(not cuda_sim.enabled(), reason="sync counts exist on the simulated device only "
                                                              "(GPUGRAD_CUDA_SIM=1)")
XENT = r"cross_entropy: target ids must lie in \[0, 3\) for logits \(4, 3\), got min -1 and max 5"
EMB = r"embedding: id 5 is out of range for a table of 5 rows \(valid: 0..4\)"
GATHER = r"gather\(\): index 4 is out of bounds for dimension 1 with size 4"  # torch's RuntimeError (issue #21)
INDEX_SELECT = r"index_select\(\): index out of range in self: ids must lie in \[0, 3\)"
BCE = r"binary_cross_entropy: all elements of target should be between 0 and 1"
OPS = ["cross_entropy", "token_logprob", "embedding", "gather", "index_select", "binary_cross_entropy"]


def _bad_ops(device):
    """name -> (a call that runs an op with an out-of-range id or value, the message and type it must raise)."""
    logits = gpugrad.zeros(4, 3, device=device, requires_grad=True)
    emb = nn.Embedding(5, 2).to(device)
    probs = gpugrad.full((3,), 0.5, device=device, requires_grad=True)
    return {
        "cross_entropy": (lambda: F.cross_entropy(logits, gpugrad.tensor([0, -1, 2, 5], device=device)), XENT,
                          IndexError),
        "token_logprob": (lambda: F.token_logprob(logits, gpugrad.tensor([0, -1, 2, 5], device=device)),
                          XENT.replace("cross_entropy", "token_logprob"), IndexError),
        "embedding": (lambda: emb(gpugrad.tensor([[0, 5]], device=device)), EMB, IndexError),
        "gather": (lambda: gpugrad.zeros(3, 4, device=device).gather(1, gpugrad.tensor([[0, 4]] * 3, device=device)),
                   GATHER, RuntimeError),
        "index_select": (lambda: gpugrad.zeros(3, 4, device=device).index_select(0, gpugrad.tensor([0, -1],
                                                                                                    device=device)),
                         INDEX_SELECT, IndexError),
        "binary_cross_entropy": (lambda: F.binary_cross_entropy(probs, gpugrad.tensor([0.0, 2.0, float("nan")],
                                                                                      device=device)),
                                 BCE, RuntimeError),
    }


# ---- CPU: checked at the call ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", OPS)
def test_cpu_raises_at_the_call(op):
    call, message, error = _bad_ops("cpu")[op]
    with pytest.raises(error, match=message):
        call()
    deferred.raise_pending(CPU)  # nothing is ever pending on the CPU


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cpu_cross_entropy_reductions_match_numpy(reduction):
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    rows = np.log(np.exp(x).sum(1)) - x[np.arange(6), t]
    want = {"mean": rows.mean(), "sum": rows.sum(), "none": rows}[reduction]
    xt = gpugrad.tensor(x, requires_grad=True)
    loss = F.cross_entropy(xt, gpugrad.tensor(t), reduction=reduction)
    np.testing.assert_allclose(loss.detach().numpy(), want, rtol=1e-12)
    loss.sum().backward()
    p = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    grad = (p - np.eye(4)[t]) / (6 if reduction == "mean" else 1)
    np.testing.assert_allclose(xt.grad.numpy(), grad, rtol=1e-12, atol=1e-15)


def test_references_keep_the_first_failure():
    status = np.zeros(kernels.STATUS_WORDS, np.int64)
    reference.check_index(np, np.array([[1, 2], [3, 4]]), 5, status, 9)
    assert status.tolist() == [0, 0, 0, 0]  # all in range: nothing recorded
    x = np.zeros((3, 4))
    loss, _, _ = reference.softmax_xent_fwd(np, x, np.array([0, 7, -2]), "mean", status, 4)
    assert np.isnan(loss) and status.tolist() == [4, -2, 7, 0]
    reference.check_index(np, np.array([9]), 5, status, 9)
    assert status.tolist() == [4, -2, 7, 0]  # a later failure leaves the first one


@pytest.mark.parametrize("name, args, error", [
    ("softmax_xent_fwd", (np.zeros((2, 3)), np.zeros(2, np.int64), "avg"), ValueError),
    ("softmax_xent_fwd", (np.zeros((2, 3)), np.zeros(2, np.int64), "mean", np.zeros(3, np.int64), 1),
     ValueError),
    ("softmax_xent_bwd", (np.zeros((2, 3)), np.zeros(2, np.int64), np.zeros(2), np.ones(2), "mean"), ValueError),
    ("softmax_xent_bwd", (np.zeros((2, 3)), np.zeros(2, np.int64), np.zeros(2), np.ones((), np.float32), "sum"),
     TypeError),
    ("check_index", (np.zeros(3), 5, np.zeros(4, np.int64), 1), TypeError),
    ("check_index", (np.zeros(3, np.int64), 5, np.zeros(4, np.int32), 1), ValueError),
])
def test_launchers_reject_bad_reductions_gradients_and_status_by_name(name, args, error):
    with pytest.raises(error, match=name):
        getattr(kernels, name)(np, *args)


# ---- CUDA: recorded on the device, raised at the next read -------------------------------------------------------
READS = {
    "item": lambda t: t.sum().item(),
    "float": lambda t: float(t.sum()),
    "bool": lambda t: bool(t.sum() > 0),
    "numpy": lambda t: t.detach().numpy(force=True),  # numpy() of a CUDA tensor refuses, as torch's
    "tolist": lambda t: t.tolist(),
    "cpu": lambda t: t.cpu(),
    "to('cpu')": lambda t: t.to("cpu"),
    "repr": repr,
    "str": str,
    "np.asarray": lambda t: np.asarray(t.detach().cpu()),
    "pickle": lambda t: pickle.dumps(t.detach()),
    "synchronize": lambda t: gpugrad.cuda.synchronize(),
}


@pytest.mark.gpu
@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("op", OPS)
def test_cuda_raises_at_the_next_read(op, read):
    call, message, error = _bad_ops("cuda")[op]
    out = call()  # queued: no error yet, and no sync (test_bad_ids_cost_no_sync)
    with pytest.raises(error, match=message):
        READS[read](out)
    READS[read](out)  # raised once: the device is clean again


@pytest.mark.gpu
@needs_sim
@pytest.mark.parametrize("op", OPS)
def test_bad_ids_cost_no_sync(op):
    call, message, error = _bad_ops("cuda")[op]
    with cuda_sim.forbid_syncs("an op with out-of-range ids"):
        out = call()
        if out.requires_grad:
            out.sum().backward()
    with pytest.raises(error, match=message):
        out.tolist()


@pytest.mark.gpu
def test_bad_rows_are_nan_until_the_check_fires():
    x = gpugrad.randn(4, 3, device="cuda", requires_grad=True)
    loss = F.cross_entropy(x, gpugrad.tensor([0, -1, 2, 5], device="cuda"), reduction="none")
    loss.sum().backward()
    rows = loss._data.get()  # the raw device array: not a checked read
    grad = x.grad._data.get()
    assert np.isnan(rows[[1, 3]]).all() and np.isfinite(rows[[0, 2]]).all()
    assert np.isnan(grad[[1, 3]]).all() and np.isfinite(grad[[0, 2]]).all()
    with pytest.raises(IndexError, match=r"got min -1 and max 5"):
        loss.sum().item()


@pytest.mark.gpu
def test_an_unread_loss_still_fails_the_next_read_of_its_device():
    gpugrad.manual_seed(0)
    model = nn.Linear(5, 3).to("cuda")
    opt = gpugrad.optim.SGD(model.parameters(), lr=0.1)
    x = gpugrad.randn(4, 5, device="cuda")
    F.cross_entropy(model(x), gpugrad.tensor([0, 1, 2, 3], device="cuda")).backward()  # the loss is never read
    opt.step()
    for _ in range(3):  # later, valid steps do not hide it
        opt.zero_grad()
        F.cross_entropy(model(x), gpugrad.tensor([0, 1, 2, 0], device="cuda")).backward()
        opt.step()
    with pytest.raises(IndexError, match=r"\[0, 3\).*got min 0 and max 3"):
        model.weight.detach().cpu()  # a different tensor on the same device
    assert np.isnan(model.weight.detach().cpu().numpy()).all()  # the bad step's NaN gradient reached the weights


@pytest.mark.gpu
def test_the_first_failure_is_reported():
    ops = _bad_ops("cuda")
    ops["embedding"][0]()
    ops["gather"][0]()
    with pytest.raises(IndexError, match=EMB):
        gpugrad.cuda.synchronize()
    gpugrad.cuda.synchronize()  # the gather's failure was not kept: one error per look


@pytest.mark.gpu
@needs_sim
def test_a_read_looks_at_the_status_only_after_a_check():
    x, t = gpugrad.randn(8, 3, device="cuda"), gpugrad.tensor([0, 1, 2, 0, 1, 2, 0, 1], device="cuda")
    loss = F.cross_entropy(x, t)
    cuda_sim.reset_counters()
    loss.item()
    assert cuda_sim.counters()["syncs"] == 2  # the status words, then the value
    loss.item()
    assert cuda_sim.counters()["syncs"] == 3  # no check ran since: the value only


@pytest.mark.gpu
def test_a_failure_on_one_device_is_raised_by_reads_of_that_device(two_devices):
    _bad_ops("cuda:1")["embedding"][0]()
    gpugrad.ones(2, device="cuda:0").tolist()  # another device: nothing to raise
    with pytest.raises(IndexError, match=EMB):
        gpugrad.ones(2, device="cuda:1").tolist()


@pytest.mark.gpu
@needs_sim
def test_gpugrad_train_reads_the_device_a_few_times_per_epoch_not_per_step():
    from gpugrad.cli import main

    def syncs(epochs):
        cuda_sim.reset_counters()
        assert main(["train", "--hidden", "16", "--epochs", str(epochs), "--quiet", "--device", "cuda"]) == 0
        return cuda_sim.counters()["syncs"]

    gpugrad.cuda.synchronize()  # nothing left over from earlier tests (a pending check, the device probe)
    per_epoch = syncs(2) - syncs(1)  # 23 training batches of 64 digits per epoch
    # train loss, test loss and test accuracy: one read each, the first two after a look at the status words
    assert per_epoch <= 5, per_epoch


from tests.cuda.test_cuda_path import two_devices  # noqa: E402,F401  (the fixture: a second simulated device)
