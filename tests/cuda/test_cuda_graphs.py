"""CUDA-graph capture and replay of a whole training step (pytest -m gpu; the simulated device in CI, where
capture records the launch sequence with its arguments and replay re-executes it on the captured buffers)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import gpugrad
import gpugrad.nn as nn
import gpugrad.nn.functional as F
from gpugrad.testing import cuda_sim

pytestmark = pytest.mark.gpu
STEPS, LR_CHANGE = 50, 25


def _setup(opt_name):
    gpugrad.manual_seed(0)
    model = nn.MLP([12, 32, 32, 5]).to("cuda")
    opt = (gpugrad.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
           if opt_name == "sgd" else gpugrad.optim.AdamW(model.parameters(), lr=3e-3))
    sched = gpugrad.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((16, 12)).astype(np.float32), rng.integers(0, 5, 16)) for _ in range(STEPS)]
    return model, opt, sched, data


def _state(model, opt):
    params = [p.detach().cpu().numpy() for p in model.parameters()]
    state = opt.state_dict()["state"]
    arrays = [np.asarray(v.cpu().numpy() if hasattr(v, "cpu") else v) for s in state.values() for v in s.values()]
    return params, arrays


def _eager(opt_name):
    model, opt, sched, data = _setup(opt_name)
    for i, (xb, yb) in enumerate(data):
        opt.zero_grad()
        F.cross_entropy(model(gpugrad.tensor(xb, device="cuda")), gpugrad.tensor(yb, device="cuda")).backward()
        opt.step()
        if i == LR_CHANGE:
            sched.step()
    return _state(model, opt)


def _replayed(opt_name):
    model, opt, sched, data = _setup(opt_name)
    static_x, static_y = gpugrad.zeros(16, 12, device="cuda"), gpugrad.zeros(16, device="cuda", dtype="int64")

    def step():
        opt.zero_grad(set_to_none=False)  # the gradient buffers the graph writes into stay the same
        loss = F.cross_entropy(model(static_x), static_y)
        loss.backward()
        opt.step()
        return loss

    static_x.copy_(gpugrad.tensor(data[0][0], device="cuda"))
    static_y.copy_(gpugrad.tensor(data[0][1], device="cuda"))
    step()  # warm-up (step 0): optimizer state and gradient buffers exist before capture
    g = gpugrad.cuda.CUDAGraph()
    with gpugrad.cuda.graph(g):
        static_loss = step()
    for i, (xb, yb) in enumerate(data[1:], start=1):
        if i - 1 == LR_CHANGE:
            sched.step()
        static_x.copy_(gpugrad.tensor(xb, device="cuda"))
        static_y.copy_(gpugrad.tensor(yb, device="cuda"))
        g.replay()
    if i == LR_CHANGE:
        sched.step()
    assert np.isfinite(static_loss.item())
    return _state(model, opt)


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_replayed_steps_equal_eager_steps(opt_name):
    eager, replayed = _eager(opt_name), _replayed(opt_name)
    exact = cuda_sim.enabled()  # the simulator replays the very same arithmetic; a GPU may reassociate sums
    for e, r in zip(eager[0] + eager[1], replayed[0] + replayed[1]):
        if exact:
            np.testing.assert_array_equal(r, e)
        else:
            np.testing.assert_allclose(r, e, rtol=1e-5, atol=1e-6)


def test_replay_is_one_graph_launch_without_syncs_or_allocations():
    model, opt, sched, data = _setup("sgd")
    x, y = gpugrad.tensor(data[0][0], device="cuda"), gpugrad.tensor(data[0][1], device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    cuda_sim.reset_counters()
    step()
    eager_launches = cuda_sim.counters()["launches"]
    g = gpugrad.cuda.CUDAGraph()
    with gpugrad.cuda.graph(g) as capture:
        step()
    if cuda_sim.enabled():
        assert not capture.stream.null  # captured on a non-default stream
        gc.collect()  # the step's temporaries are gone on the host side; the graph keeps their memory
        cuda_sim.reset_counters()
        g.replay()
        counts = cuda_sim.counters()
        assert counts["graph_launches"] == 1 and counts["syncs"] == 0 and counts["allocs"] == 0
        assert counts["h2d"] == 0 and counts["launches"] == eager_launches  # the same kernels, one host call
    else:
        g.replay()


def test_capture_errors_name_the_op():
    x = gpugrad.randn(4, 3, device="cuda", requires_grad=True)
    g = gpugrad.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=r"Index.*cannot be captured.*CUDA graph"):
        with gpugrad.cuda.graph(g):
            x[x > 0].sum()  # a boolean mask: the result's size must be read back (a sync)
    with pytest.raises(Exception, match="capturing|capture"):
        with gpugrad.cuda.graph(g):
            (x * 2).sum().item()
    with pytest.raises(RuntimeError, match="nothing has been captured"):
        gpugrad.cuda.CUDAGraph().replay()
    y = (x * 2).sum()  # after failed captures the device works as before
    assert np.isfinite(y.item())


def test_capture_without_warm_up_names_the_optimizer():
    model = nn.MLP([4, 8, 2]).to("cuda")
    opt = gpugrad.optim.Adam(model.parameters())
    x, t = gpugrad.randn(3, 4, device="cuda"), gpugrad.randint(0, 2, size=(3,), device="cuda")
    with pytest.raises(RuntimeError, match=r"Adam\.step\(\) cannot be captured into a CUDA graph: .* does not exist "
                                           r"yet.*warm-up steps"):
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            F.cross_entropy(model(x), t).backward()
            opt.step()  # its state would be made (copied from the host) inside the capture


def test_gradients_set_to_none_inside_the_capture_live_in_the_graph():
    model, opt, _, data = _setup("adamw")
    sx, sy = gpugrad.tensor(data[0][0], device="cuda"), gpugrad.tensor(data[0][1], device="cuda")

    def step():
        opt.zero_grad()  # to None: backward makes the gradients inside the capture, in the graph's pool
        F.cross_entropy(model(sx), sy).backward()
        opt.step()

    step()
    g = gpugrad.cuda.CUDAGraph()
    with gpugrad.cuda.graph(g):
        step()
    for xb, yb in data[1:4]:
        sx.copy_(gpugrad.tensor(xb, device="cuda"))
        sy.copy_(gpugrad.tensor(yb, device="cuda"))
        g.replay()
    replayed = [p.detach().cpu().numpy() for p in model.parameters()]
    model, opt, _, data = _setup("adamw")
    for xb, yb in data[:4]:
        sx.copy_(gpugrad.tensor(xb, device="cuda"))
        sy.copy_(gpugrad.tensor(yb, device="cuda"))
        step()
    for r, e in zip(replayed, [p.detach().cpu().numpy() for p in model.parameters()]):
        np.testing.assert_allclose(r, e, rtol=0 if cuda_sim.enabled() else 1e-5, atol=0 if cuda_sim.enabled() else 1e-6)


def test_gpugrad_train_cuda_graph_matches_eager(tmp_path):
    import json

    from gpugrad.cli import main

    args = ["train", "--device", "cuda", "--hidden", "32", "--epochs", "2", "--seed", "2", "--quiet"]
    assert main([*args, "--metrics-json", str(tmp_path / "e.json")]) == 0
    assert main([*args, "--cuda-graph", "--metrics-json", str(tmp_path / "g.json")]) == 0
    eager, graphed = (json.loads((tmp_path / n).read_text())["epochs"] for n in ("e.json", "g.json"))
    for e, g in zip(eager, graphed):
        if cuda_sim.enabled():  # the same arithmetic, replayed
            assert (g["train_loss"], g["test_acc"]) == (e["train_loss"], e["test_acc"])
        else:
            assert g["train_loss"] == pytest.approx(e["train_loss"], rel=1e-4)


def test_gpugrad_train_cuda_graph_refuses_the_cpu(capsys):
    from gpugrad.cli import main

    assert main(["train", "--device", "cpu", "--cuda-graph", "--epochs", "1", "--quiet"]) != 0
    assert "--cuda-graph needs a CUDA device" in capsys.readouterr().err


def test_the_benchs_graphed_step_replays_as_eager_after_its_builder_returned():
    # The bench's graphed step (gpugrad/bench/workloads/mlp.py) holds the model its graph writes into: freed, that
    # memory went to other tensors and replays read garbage (losses of 1e24, then NaN), while the first replay could
    # still look right
    from gpugrad.backend import get_backend
    from gpugrad.bench.workloads.mlp import _gpugrad_mlp_step, _graphed_mlp_step

    rng = np.random.default_rng(0)
    sizes = [20, 32, 32, 10]
    host = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        host += [rng.standard_normal((o, i)).astype(np.float32) * 0.1, np.zeros(o, np.float32)]
    x, t = rng.standard_normal((16, 20)).astype(np.float32), rng.integers(0, 10, 16)
    be = get_backend("cuda")
    eager, _ = _gpugrad_mlp_step(be, host, sizes, x, t, 0.01)
    want = [eager().item() for _ in range(3)]
    replay = _graphed_mlp_step(be, host, sizes, x, t, 0.01)
    gc.collect()
    clutter = [gpugrad.randn(64, 64, device="cuda") for _ in range(8)]  # memory a freed model would hand out
    got = [replay().item() for _ in range(3)]
    del clutter
    np.testing.assert_allclose(got, want, rtol=1e-5)
