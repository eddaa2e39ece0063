"""optim: SGD / Adam / AdamW trajectories against PyTorch and hand-written NumPy formulas, one multi-tensor launch
per group and (device, dtype), hyperparameters and step counts read from device arrays (copied only when changed),
in-place buffers that never move or grow, checkpoints that resume exactly, schedulers (also against torch), the
multi-tensor kernels on the emulator past one grid stride, and error messages. The gpu-marked tests at the end run
the same on CUDA (the simulated device in CI) and count transfers."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import gpugrad
from gpugrad import nn, optim
from gpugrad.backend import kernels, reference
from gpugrad.nn import functional as F
from gpugrad.optim.lr_scheduler import CosineAnnealingLR, StepLR
from tests.cuda.test_cuda_path import replay_matches_torch  # a step captured as a CUDA graph, replayed against torch

CPU = "cpu"
STEPS = 20
SHAPES = [(3, 4), (4,), (2, 3, 2)]


def host(t):
    return t.detach().numpy()


def initial_values(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


def grad_sequence(seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(STEPS)]


def run_gpugrad(make, groups_of, device=CPU, skip=()):
    """Trajectory of the parameters over STEPS steps with given gradients; groups_of(params) -> param_groups;
    ``skip``: (step, parameter index) pairs that get no gradient (None) at that step."""
    ps = [nn.Parameter(gpugrad.tensor(v, device=device)) for v in initial_values()]
    opt = make(groups_of(ps))
    out = []
    for step, grads in enumerate(grad_sequence()):
        for i, (p, g) in enumerate(zip(ps, grads)):
            p.grad = None if (step, i) in skip else gpugrad.tensor(g, device=device)
        opt.step()
        out.append([p.detach().cpu().numpy().copy() for p in ps])
    return out


# ---- oracles ---------------------------------------------------------------------------------------------------------
def sgd_numpy(p, grads, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
    """torch.optim.SGD, written out."""
    p, buf, out = p.copy(), None, []
    for g in grads:
        d = g + weight_decay * p
        if momentum:
            buf = d.copy() if buf is None else momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p = p - lr * d
        out.append(p)
    return out


def adam_numpy(p, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled=False):
    """torch.optim.Adam / AdamW, written out."""
    (b1, b2), p, m, v, out = betas, p.copy(), 0.0, 0.0, []
    for t, g in enumerate(grads, 1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1**t) * m / (np.sqrt(v) / math.sqrt(1 - b2**t) + eps)
        out.append(p)
    return out


SGD_CONFIGS = [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3),
               dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), dict(lr=0.1, weight_decay=0.1)]
ADAM_CONFIGS = [("Adam", dict()), ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
                ("AdamW", dict(lr=0.01)), ("AdamW", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.1))]


def two_groups(cfg):
    """Parameter 0 alone with its own lr, the rest with the defaults: per-group options are honoured."""
    return lambda ps: [{"params": ps[:1], "lr": cfg.get("lr", 1e-3) * 0.5}, {"params": ps[1:]}]


def per_group_cfg(cfg, i):
    return dict(cfg, lr=cfg.get("lr", 1e-3) * 0.5) if i == 0 else cfg


@pytest.mark.parametrize("cfg", SGD_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_sgd_matches_numpy_formula(cfg):
    got = run_gpugrad(lambda g: optim.SGD(g, **cfg), two_groups(cfg))
    grads = grad_sequence()
    for i, p0 in enumerate(initial_values()):
        want = sgd_numpy(p0, [g[i] for g in grads], **per_group_cfg(cfg, i))
        for step in range(STEPS):
            np.testing.assert_allclose(got[step][i], want[step], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,cfg", ADAM_CONFIGS, ids=lambda c: str(c))
def test_adam_matches_numpy_formula(name, cfg):
    got = run_gpugrad(lambda g: getattr(optim, name)(g, **cfg), two_groups(cfg))
    grads = grad_sequence()
    decoupled = name == "AdamW"
    for i, p0 in enumerate(initial_values()):
        c = per_group_cfg(cfg, i)
        if decoupled:
            c.setdefault("weight_decay", 1e-2)
        want = adam_numpy(p0, [g[i] for g in grads], decoupled=decoupled, **c)
        for step in range(STEPS):
            np.testing.assert_allclose(got[step][i], want[step], rtol=1e-10, atol=1e-12)


def run_torch(torch, name, cfg, groups_of, skip=()):
    ps = [torch.tensor(v, requires_grad=True) for v in initial_values()]
    opt = getattr(torch.optim, name)(groups_of(ps), **cfg)
    out = []
    for step, grads in enumerate(grad_sequence()):
        for i, (p, g) in enumerate(zip(ps, grads)):
            p.grad = None if (step, i) in skip else torch.from_numpy(g.copy())
        opt.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


NEW_CONFIGS = [("Adam", dict(lr=0.01, amsgrad=True)), ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True)),
               ("Adam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
               ("SGD", dict(lr=0.05, momentum=0.9, maximize=True, weight_decay=0.01)),
               ("RMSprop", dict()), ("RMSprop", dict(alpha=0.9, eps=1e-6, weight_decay=0.1)),
               ("RMSprop", dict(momentum=0.9)), ("RMSprop", dict(centered=True, maximize=True)),
               ("RMSprop", dict(lr=0.005, momentum=0.5, centered=True, weight_decay=0.01)),
               ("Adagrad", dict()), ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, eps=1e-6)),
               ("Adagrad", dict(initial_accumulator_value=0.5, maximize=True))]
TORCH_CONFIGS = [("SGD", c) for c in SGD_CONFIGS] + ADAM_CONFIGS + NEW_CONFIGS
# parameter 1 misses steps 0 and 4 (its first momentum / Adam step comes later, its step count lags), parameter 2
# step 7: every parameter keeps its own state, as torch's per-parameter state does
SKIPS = {(0, 1), (4, 1), (7, 2)}


@pytest.mark.parametrize("name,cfg", TORCH_CONFIGS, ids=str)
def test_matches_torch_optim(torch, name, cfg):
    want = run_torch(torch, name, cfg, two_groups(cfg), SKIPS)
    got = run_gpugrad(lambda g: getattr(optim, name)(g, **cfg), two_groups(cfg), skip=SKIPS)
    for step in range(STEPS):
        for a, b in zip(got[step], want[step]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name,cfg", TORCH_CONFIGS, ids=str)
def test_large_parameters_match_torch_optim(monkeypatch, torch, name, cfg):
    """Parameters past the CPU update's pieces (reference/optim.py _PIECE elements: a ragged last piece, and one
    exactly two pieces long, which is updated whole) step as torch's."""
    piece = reference.optim._PIECE
    monkeypatch.setitem(globals(), "SHAPES", ((3, piece + 1001), (2 * piece,), (5,)))
    want = run_torch(torch, name, cfg, two_groups(cfg))
    got = run_gpugrad(lambda g: getattr(optim, name)(g, **cfg), two_groups(cfg))
    for step in range(STEPS):
        for a, b in zip(got[step], want[step]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


# ---- semantics and errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: optim.Adam(ps)])
def test_params_without_grad_are_skipped(make):
    a, b = nn.Parameter(gpugrad.ones(3, device=CPU)), nn.Parameter(gpugrad.ones(3, device=CPU))
    opt = make([a, b])
    a.grad = gpugrad.ones(3, device=CPU)
    opt.step()
    assert (host(a) < 1).all() and (host(b) == 1).all()
    assert b not in opt.state and a in opt.state


def test_hyperparameters_are_validated():
    p = [nn.Parameter(gpugrad.ones(2))]
    cases = [(lambda: optim.SGD(p, lr=-0.1), "Invalid learning rate: -0.1"),
             (lambda: optim.SGD(p, lr=0.1, momentum=-1), "Invalid momentum value: -1"),
             (lambda: optim.SGD(p, lr=0.1, weight_decay=-1), "Invalid weight_decay value: -1"),
             (lambda: optim.SGD(p, lr=0.1, nesterov=True), "Nesterov momentum requires a momentum and zero damp"),
             (lambda: optim.Adam(p, lr=-1), "Invalid learning rate: -1"),
             (lambda: optim.Adam(p, eps=-1e-8), "Invalid epsilon value: -1e-08"),
             (lambda: optim.Adam(p, betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
             (lambda: optim.AdamW(p, betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
             (lambda: optim.SGD([{"params": p, "lr": -2}], lr=0.1), "Invalid learning rate: -2"),
             (lambda: optim.SGD([], lr=0.1), "empty parameter list"),
             (lambda: optim.SGD(p + p, lr=0.1), "duplicate parameters"),
             (lambda: optim.SGD([{"params": p}, {"params": p}], lr=0.1), "more than one parameter group")]
    for make, msg in cases:
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(".", r"\.")):
            make()
    x = gpugrad.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([x * 2], lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD(set(p), lr=0.1)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([np.ones(2)], lr=0.1)


def test_step_bumps_versions_so_stale_graphs_fail():
    lin = nn.Linear(3, 2, device=CPU)
    opt = optim.SGD(lin.parameters(), lr=0.1)
    lin(gpugrad.ones(1, 3, device=CPU)).sum().backward()
    x = gpugrad.ones(1, 3, device=CPU, requires_grad=True)
    stale = lin(x).sum()  # saved the weight (for x's gradient) before the update below
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        stale.backward()


def test_add_param_group_and_defaults():
    a, b = nn.Parameter(gpugrad.ones(2)), nn.Parameter(gpugrad.ones(2))
    opt = optim.SGD([a], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": b, "lr": 0.01})
    g = opt.param_groups[1]
    assert g["params"][0] is b and g["lr"] == 0.01 and g["momentum"] == 0.5 and g["nesterov"] is False


# ---- buffers reused in place, memory flat ----------------------------------------------------------------------------
def tiny_problem(seed=0, sizes=(12, 32, 32, 4)):
    gpugrad.manual_seed(seed)
    model = nn.MLP(list(sizes), device=CPU)
    rng = np.random.default_rng(seed)
    x = gpugrad.tensor(rng.standard_normal((16, sizes[0])).astype(np.float32), device=CPU)
    y = gpugrad.tensor(rng.integers(0, sizes[-1], 16), device=CPU)
    return model, x, y


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=False)
    F.cross_entropy(model(x), y).backward()
    opt.step()


MAKERS = {"sgd": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
          "adam": lambda ps: optim.Adam(ps, lr=1e-2, weight_decay=1e-3),
          "adamw": lambda ps: optim.AdamW(ps, lr=1e-2)}
MORE_MAKERS = {"amsgrad": lambda ps: optim.AdamW(ps, lr=1e-2, amsgrad=True),
               "rmsprop": lambda ps: optim.RMSprop(ps, lr=1e-3, momentum=0.9, centered=True, weight_decay=1e-3),
               "adagrad": lambda ps: optim.Adagrad(ps, lr=1e-2, lr_decay=1e-3, initial_accumulator_value=0.1)}


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_buffers_stay_put_and_memory_stays_flat(name):
    model, x, y = tiny_problem()
    opt = MAKERS[name](model.parameters())
    train_step(model, opt, x, y)
    ps = list(model.parameters())
    ids = [(p.grad, p.grad._data.ctypes.data, p._data.ctypes.data) for p in ps]
    state_ptrs = [v.ctypes.data for p in ps for v in opt.state[p].values() if isinstance(v, np.ndarray)]
    before = host(ps[0]).copy()
    # NOTE: CPython 3.11 puts every freed 20-item tuple on a free list that allocation never takes from (up to 2000
    # of them, ~400 KB, until a full gc.collect()): an SGD step over 6 parameters passes 20 arguments, so fill the
    # list first. (Likewise tuple(generator) is built by resizing, outside the free lists: the step avoids it.)
    del [tuple(range(i, i + 20)) for i in range(2000)][:]
    tracemalloc.start()
    try:
        for _ in range(10):  # warm-up: caches, first-time allocations
            train_step(model, opt, x, y)
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(20):
            train_step(model, opt, x, y)
        _, peak_early = tracemalloc.get_traced_memory()
        for _ in range(180):
            train_step(model, opt, x, y)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current - base < 32 * 1024, f"memory grew by {current - base} bytes over 200 steps"
    assert peak - peak_early < 32 * 1024, f"peak grew by {peak - peak_early} bytes"
    assert not np.array_equal(host(ps[0]), before)  # it did train
    for p, (g, gptr, dptr) in zip(ps, ids):
        assert p.grad is g and p.grad._data.ctypes.data == gptr and p._data.ctypes.data == dptr
    assert state_ptrs == [v.ctypes.data for p in ps for v in opt.state[p].values() if isinstance(v, np.ndarray)]


def test_zero_grad_modes():
    model, x, y = tiny_problem()
    opt = optim.SGD(model.parameters(), lr=0.1)
    F.cross_entropy(model(x), y).backward()
    g = model[0].weight.grad
    opt.zero_grad(set_to_none=False)
    assert model[0].weight.grad is g and not g.data.any()
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def groups_by_kind(model):
    """Weights and biases in separate groups with different options."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights}, {"params": biases, "lr": 0.02, "weight_decay": 0.0}]


# ---- checkpoints -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MAKERS) + sorted(MORE_MAKERS))
def test_resumed_training_is_bit_identical(name):
    make = {**MAKERS, **MORE_MAKERS}[name]
    model, x, y = tiny_problem()
    opt = make(model.parameters())
    for _ in range(10):
        train_step(model, opt, x, y)
    want = [host(p).copy() for p in model.parameters()]

    model, x, y = tiny_problem()
    opt = make(model.parameters())
    for _ in range(5):
        train_step(model, opt, x, y)
    msd, osd = model.state_dict(), opt.state_dict()
    model2, _, _ = tiny_problem(seed=7)  # different initial values, then overwritten
    opt2 = make(model2.parameters())
    model2.load_state_dict(msd)
    opt2.load_state_dict(osd)
    for _ in range(5):
        train_step(model2, opt2, x, y)
    for a, b in zip(want, model2.parameters()):
        np.testing.assert_array_equal(host(b), a)


def test_optimizer_state_dict_contents_and_errors():
    model, x, y = tiny_problem()
    opt = optim.Adam(groups_by_kind(model), lr=1e-3)
    train_step(model, opt, x, y)
    train_step(model, opt, x, y)
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1, 2], [3, 4, 5]]
    assert sd["param_groups"][1]["lr"] == 0.02 and sd["param_groups"][0]["betas"] == (0.9, 0.999)
    st = sd["state"][0]
    assert list(st) == ["step", "exp_avg", "exp_avg_sq"] and st["step"].item() == 2  # torch's names and order
    assert isinstance(st["exp_avg"], gpugrad.Tensor) and st["exp_avg"].dtype == np.float32
    live = opt.state[model[0].weight]["exp_avg"]
    assert not np.shares_memory(st["exp_avg"].numpy(), live)  # a copy, not the live buffer
    with pytest.raises(ValueError, match="2 parameter groups, the optimizer has 1"):
        optim.Adam(model.parameters()).load_state_dict(sd)
    bad = {"state": sd["state"], "param_groups": [dict(sd["param_groups"][0], params=[0, 1]),
                                                  sd["param_groups"][1]]}
    with pytest.raises(ValueError, match="doesn't match the size"):
        optim.Adam(groups_by_kind(model)).load_state_dict(bad)
    bad = {"state": {0: dict(st, exp_avg=gpugrad.zeros(3))}, "param_groups": sd["param_groups"]}
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 0 has shape \(3,\), but the parameter has shape"):
        optim.Adam(groups_by_kind(model)).load_state_dict(bad)


# ---- schedulers ------------------------------------------------------------------------------------------------------
def lrs_of(make_sched, opt, n):
    sched, out = make_sched(opt), []
    for _ in range(n):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def test_step_lr():
    opt = optim.SGD([nn.Parameter(gpugrad.ones(1))], lr=0.8)
    got = lrs_of(lambda o: StepLR(o, step_size=3, gamma=0.5), opt, 10)
    np.testing.assert_allclose(got, [0.8 * 0.5 ** (e // 3) for e in range(10)], rtol=1e-15)
    with pytest.raises(ValueError, match="step_size must be a positive integer"):
        StepLR(opt, 0)


def test_cosine_annealing_lr():
    opt = optim.SGD([nn.Parameter(gpugrad.ones(1))], lr=0.1)
    got = lrs_of(lambda o: CosineAnnealingLR(o, T_max=4, eta_min=0.01), opt, 13)  # past T_max: it rises again
    want = [0.01 + 0.09 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(13)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="T_max must be a positive integer"):
        CosineAnnealingLR(opt, T_max=0)


def test_schedulers_match_torch_and_resume(torch):
    for make, tmake in [(lambda o: StepLR(o, 2, 0.3), lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.3)),
                        (lambda o: CosineAnnealingLR(o, 5, 0.001),
                         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 5, 0.001))]:
        opt = optim.SGD([nn.Parameter(gpugrad.ones(1))], lr=0.1)
        topt = torch.optim.SGD([torch.ones(1, requires_grad=True)], lr=0.1)
        np.testing.assert_allclose(lrs_of(make, opt, 14), lrs_of(tmake, topt, 14), rtol=1e-13)
        # resume: a fresh scheduler loaded from a state_dict continues the same schedule
        opt = optim.SGD([nn.Parameter(gpugrad.ones(1))], lr=0.1)
        sched = make(opt)
        for _ in range(3):
            sched.step()
        sd, osd = sched.state_dict(), opt.state_dict()
        rest = []
        for _ in range(4):
            sched.step()
            rest.append(sched.get_last_lr())
        opt2 = optim.SGD([nn.Parameter(gpugrad.ones(1))], lr=0.1)
        opt2.load_state_dict(osd)
        sched2 = make(opt2)
        sched2.load_state_dict(sd)
        again = []
        for _ in range(4):
            sched2.step()
            again.append(sched2.get_last_lr())
        assert again == rest


@pytest.mark.parametrize("make", [lambda ps: optim.AdamW(ps, lr=0.1, weight_decay=0.1),
                                  lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1)])
def test_frozen_and_unused_parameters_are_never_touched(make):
    gpugrad.manual_seed(0)
    used, unused = nn.Linear(3, 2), nn.Linear(3, 2)
    used.bias.requires_grad_(False)
    params = list(used.parameters()) + list(unused.parameters())
    frozen_before = used.bias.detach().numpy().copy()
    unused_before = [p.detach().numpy().copy() for p in unused.parameters()]
    opt = make(params)
    for _ in range(3):
        opt.zero_grad()
        used(gpugrad.ones(4, 3)).sum().backward()
        opt.step()
    np.testing.assert_array_equal(used.bias.detach().numpy(), frozen_before)
    assert used.bias.grad is None
    for p, before in zip(unused.parameters(), unused_before):  # torch skips parameters whose grad is None
        np.testing.assert_array_equal(p.detach().numpy(), before)
    assert not np.array_equal(used.weight.detach().numpy(), unused_before[0])


# ---- one launch per group and (device, dtype); options and step counts in device arrays ------------------------------
def record_calls(monkeypatch, name):
    """The argument tuples of every call of reference.<name> (what the CPU backend's optimizers launch)."""
    calls, real = [], getattr(reference, name)
    monkeypatch.setattr(reference, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_step_is_one_update_per_group_and_dtype(monkeypatch, name):
    model, x, y = tiny_problem()
    model[2].double()  # float32 layer 0, float64 layers 2 and 4
    model[4].double()
    opt = MAKERS[name](groups_by_kind(model))
    calls = record_calls(monkeypatch, "sgd_multi_update_" if name == "sgd" else "adam_multi_update_")
    h = model[0](x).relu()
    F.cross_entropy(model[4](model[3](model[2](h.double()))), y).backward()
    opt.step()
    # weights and biases (2 groups) x float32 and float64: 4 updates, each over all its parameters
    tensors = sorted(len(c[2]) if name == "sgd" else (len(c) - 5) // 5 for c in calls)
    assert tensors == [1, 1, 2, 2]


def test_flat_storage_is_gone():
    model, _, _ = tiny_problem()
    with pytest.raises(TypeError, match="flat"):
        optim.AdamW(model.parameters(), lr=1e-2, flat=True)  # torch has no such option either


def test_options_are_copied_to_the_device_only_when_they_change(monkeypatch):
    model, x, y = tiny_problem()
    opt = optim.Adam(groups_by_kind(model), lr=1e-2, betas=(0.8, 0.99))
    sets = record_calls(monkeypatch, "set_hyper_")
    for _ in range(3):
        train_step(model, opt, x, y)
    assert sets == []  # made at the first step, untouched since
    hyper = {gi: arr for (gi, _), (_, arr) in opt._hyper.items()}
    np.testing.assert_array_equal(hyper[1], [0.02, 0.8, 0.99, 1e-8, 0.0, 0.0])
    opt.param_groups[1]["lr"] = 0.5
    train_step(model, opt, x, y)
    assert len(sets) == 1 and hyper[1][0] == 0.5 and hyper[0][0] == 1e-2  # that group only, in place
    sched = StepLR(opt, step_size=1, gamma=0.1)
    assert len(sets) == 1  # constructing it changes no lr
    sched.step()  # both groups, copied right away: a replayed CUDA graph of step() would see them
    assert len(sets) == 3 and hyper[0][0] == pytest.approx(1e-3) and hyper[1][0] == pytest.approx(0.05)
    train_step(model, opt, x, y)
    assert len(sets) == 3


def test_adam_step_counts_are_arrays_the_update_advances():
    model, x, y = tiny_problem()
    opt = optim.Adam(model.parameters())
    for _ in range(3):
        train_step(model, opt, x, y)
    step = opt.state[model[0].weight]["step"]
    assert type(step) is np.ndarray and step.dtype == np.int64 and step.shape == () and int(step) == 3
    saved = opt.state_dict()["state"][0]["step"]
    assert isinstance(saved, gpugrad.Tensor) and saved.dtype == np.float32 and saved.item() == 3  # as torch's
    opt2 = optim.Adam(model.parameters())
    opt2.load_state_dict({**opt.state_dict(), "state": {i: dict(st, step=np.array(st["step"]))
                                                        for i, st in opt.state_dict()["state"].items()}})
    train_step(model, opt2, x, y)  # a count loaded as a 0-d array continues too
    assert int(opt2.state[model[0].weight]["step"]) == 4


def test_lr_schedules_match_torch(torch):
    """lr changed by StepLR / CosineAnnealingLR between steps (copied to the device array by the scheduler)."""
    for name, cfg in [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)), ("Adam", dict(lr=0.05)),
                      ("AdamW", dict(lr=0.05, weight_decay=0.1))]:
        for sched, tsched in [(lambda o: StepLR(o, 3, 0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5)),
                              (lambda o: CosineAnnealingLR(o, 4, 1e-3),
                               lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 4, 1e-3))]:
            ps = [nn.Parameter(gpugrad.tensor(v, device=CPU)) for v in initial_values()]
            tps = [torch.tensor(v, requires_grad=True) for v in initial_values()]
            opt, topt = getattr(optim, name)(ps, **cfg), getattr(torch.optim, name)(tps, **cfg)
            s, ts = sched(opt), tsched(topt)
            for grads in grad_sequence():
                for p, tp, g in zip(ps, tps, grads):
                    p.grad, tp.grad = gpugrad.tensor(g, device=CPU), torch.from_numpy(g.copy())
                opt.step()
                topt.step()
                s.step()
                ts.step()
                for p, tp in zip(ps, tps):
                    np.testing.assert_allclose(host(p), tp.detach().numpy(), rtol=1e-6, atol=1e-9)


# ---- the multi-tensor kernels on the CPU emulator, past one grid stride ----------------------------------------------
class Launches:
    """A kernel runtime that records each launch's (kernel, grid) and forwards it."""

    def __init__(self, rt):
        self.rt, self.xp, self.seen = rt, rt.xp, []

    def raw_kernel(self, family, name_expr):
        k = self.rt.raw_kernel(family, name_expr)
        return lambda grid, block, args, shared_mem=0: (self.seen.append((name_expr, tuple(grid))),
                                                        k(grid, block, args, shared_mem=shared_mem))

    def __getattr__(self, attr):
        return getattr(self.rt, attr)


STRIDE_SIZES = (700, 0, 1, 513, 1300, 3, 0, 511, 512, 2, 1, 1, 0, 1025, 7, 1, 5, 300)  # 18 tensors: 2 launches


@pytest.fixture
def two_blocks(monkeypatch):
    """The CPU emulator, with the optimizer kernels' grid capped at 2 blocks (512 threads)."""
    emu = pytest.importorskip("gpugrad.testing.cuda_emu")
    if not emu.compiler_available():
        pytest.skip("CPU emulator: no C++ compiler found")
    monkeypatch.setattr(kernels.optim, "_OPTIM_MAX_GRID", 2)
    return emu


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sgd_multi_update_", "adam_multi_update_", "rmsprop_multi_update_",
                                  "adagrad_multi_update_"])
def test_multi_tensor_kernels_stride_across_tensors(two_blocks, name, dtype):
    """The grid capped at 2 blocks (512 threads): tensors start past the first stride, large ones take several
    turns, and 18 tensors take two launches (16 + 2); under the emulator's random schedule, as the reference."""
    emu, sizes = two_blocks, STRIDE_SIZES
    rng = np.random.default_rng(0)

    def arrays(scale=1.0, positive=False):
        out = [(rng.standard_normal(k) * scale).astype(dtype) for k in sizes]
        return [np.abs(a) for a in out] if positive else out

    counts = [np.array(i % 5, np.int64) for i in range(len(sizes))]
    if name == "sgd_multi_update_":
        args = (np.array([0.1, 0.9, 0.1, 0.01, 0.0, 0.0]), [i % 4 == 0 for i in range(len(sizes))],
                *arrays(), *arrays(), *arrays(0.1))
    elif name == "adam_multi_update_":
        args = (np.array([1e-2, 0.9, 0.999, 1e-8, 0.01, 0.0]), np.zeros(1, np.uint32), True, True, *arrays(),
                *arrays(), *arrays(0.1), *arrays(0.01, positive=True), *arrays(0.01, positive=True), *counts)
    elif name == "rmsprop_multi_update_":
        args = (np.array([1e-2, 0.9, 1e-8, 0.01, 0.9, 1.0]), np.zeros(1, np.uint32), True, True, *arrays(),
                *arrays(), *[a + 1 for a in arrays(positive=True)], *arrays(0.1), *arrays(0.1), *counts)
    else:
        args = (np.array([1e-2, 0.1, 0.01, 1e-10, 0.0]), np.zeros(1, np.uint32), *arrays(), *arrays(),
                *arrays(positive=True), *counts)
    copy = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    rt = Launches(emu.EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())],
                                 schedule="random", seed=3))
    with kernels.use_runtime(rt):
        getattr(kernels, name)(np, *args)
    getattr(reference, name)(np, *copy)
    assert [grid for _, grid in rt.seen] == [(2,), (2,)]
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-15)
    for got, want in zip(args, copy):
        if isinstance(want, np.ndarray):
            np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("found", [0.0, 1.0])
def test_sgd_unwritten_buffers_start_as_d_until_a_step_runs(two_blocks, found):
    """SGD's buffers made for a step GradScaler may skip: while a flag is set the kernel starts the buffer as d (as
    torch, which makes it at the first step that runs), and the last of the launch's blocks clears every flag; a
    skipped step leaves all as they were. Under the emulator's random schedule with 2 blocks and 18 tensors (two
    launches), against the reference and against the closed form b = d = g + wd * p."""
    emu, sizes = two_blocks, STRIDE_SIZES
    rng = np.random.default_rng(1)
    ps, gs, bufs = ([rng.standard_normal(k) for k in sizes] for _ in range(3))
    flags = [np.array([i % 3 == 0], np.int32) if i % 3 != 2 else None for i in range(len(sizes))]
    hyper = np.array([0.1, 0.9, 0.5, 0.01, 0.0, 0.0])
    first = [False] * len(sizes)
    runs, want = ([[None if a is None else a.copy() for a in run] for run in (ps, gs, bufs, flags)] for _ in range(2))
    rt = Launches(emu.EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())],
                                 schedule="random", seed=5))
    ticket, skip = np.zeros(1, np.uint32), np.array([found], np.float32)
    with kernels.use_runtime(rt):
        kernels.sgd_multi_update_(np, hyper, first, *runs[0], *runs[1], *runs[2], skip=skip, unwritten=runs[3],
                                  ticket=ticket)
    reference.sgd_multi_update_(np, hyper, first, *want[0], *want[1], *want[2], skip=skip, unwritten=want[3])
    assert ticket[0] == 0 and len(rt.seen) == 2  # launched either way: a skip is the kernel's own decision
    for got, ref in zip((*runs[0], *runs[2], *runs[3]), (*want[0], *want[2], *want[3])):
        if ref is not None:
            np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)
    for i, f in enumerate(flags):
        d = gs[i] + 0.01 * ps[i]
        if found:
            np.testing.assert_array_equal(runs[2][i], bufs[i])
            assert f is None or runs[3][i][0] == f[0]
        else:
            started = f is not None and f[0] != 0
            np.testing.assert_allclose(runs[2][i], d if started else 0.9 * bufs[i] + 0.5 * d, rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(runs[0][i], ps[i] - 0.1 * runs[2][i], rtol=1e-13, atol=1e-15)
            assert f is None or runs[3][i][0] == 0


# ---- on CUDA (the simulated device in CI) ----------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name,cfg", TORCH_CONFIGS, ids=str)
def test_cuda_trajectories_match_the_cpu(name, cfg):
    """Two groups, parameters that miss steps: the device's step counts and options give the CPU's values."""
    make = lambda g: getattr(optim, name)(g, **cfg)  # noqa: E731
    want = run_gpugrad(make, two_groups(cfg), skip=SKIPS)
    got = run_gpugrad(make, two_groups(cfg), device="cuda", skip=SKIPS)
    for step in range(STEPS):
        for a, b in zip(got[step], want[step]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.gpu
def test_cuda_state_lives_on_the_device_and_checkpoints_as_on_the_cpu():
    sds = []
    for device in (CPU, "cuda"):
        gpugrad.manual_seed(0)
        ps = [nn.Parameter(gpugrad.tensor(v, device=device)) for v in initial_values()]
        opt = optim.Adam(ps, lr=1e-2)
        for grads in grad_sequence()[:4]:
            for p, g in zip(ps, grads):
                p.grad = gpugrad.tensor(g, device=device)
            opt.step()
        if device == "cuda":
            st = opt.state[ps[0]]
            assert all(not isinstance(v, np.ndarray) for v in st.values())  # step, exp_avg, exp_avg_sq on the GPU
        sds.append(opt.state_dict())
    for i, st in sds[0]["state"].items():
        assert sds[1]["state"][i]["step"] == st["step"] == 4
        np.testing.assert_allclose(sds[1]["state"][i]["exp_avg"].cpu().numpy(), st["exp_avg"].numpy(), rtol=1e-12)


@pytest.mark.gpu
def test_cuda_more_parameters_than_one_launch_takes():
    from gpugrad.testing import cuda_sim

    results = []
    for device in (CPU, "cuda"):
        gpugrad.manual_seed(0)
        model = nn.MLP([5] + [7] * 10 + [3], device=device)  # 22 parameters: two launches (16 + 6)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = gpugrad.tensor(np.random.default_rng(0).standard_normal((4, 5)), dtype=np.float32, device=device)
        for step in range(3):
            opt.zero_grad()
            model(x).square().sum().backward()
            if device == "cuda" and cuda_sim.enabled() and step:  # (the first step makes the buffers)
                with cuda_sim.trace() as events:
                    opt.step()
                assert [w for e, w in events if e == "launch"] == ["sgd_multi_update_<float>"] * 2
            else:
                opt.step()
        results.append([p.detach().cpu().numpy() for p in model.parameters()])
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


# ---- RMSprop, Adagrad, AMSGrad and maximize: validation, state layout, one launch per step on the device -----------
def test_new_options_are_validated_with_torchs_messages():
    p = [nn.Parameter(gpugrad.ones(2))]
    cases = [(lambda: optim.RMSprop(p, lr=-1), "Invalid learning rate: -1"),
             (lambda: optim.RMSprop(p, alpha=-0.5), "Invalid alpha value: -0.5"),
             (lambda: optim.RMSprop(p, momentum=-0.1), "Invalid momentum value: -0.1"),
             (lambda: optim.RMSprop(p, eps=-1.0), "Invalid epsilon value: -1.0"),
             (lambda: optim.Adagrad(p, lr_decay=-1), "Invalid lr_decay value: -1"),
             (lambda: optim.Adagrad(p, initial_accumulator_value=-2), "Invalid initial_accumulator_value value: -2"),
             (lambda: optim.Adagrad(p, weight_decay=-3), "Invalid weight_decay value: -3"),
             (lambda: optim.Adam(p, differentiable=True), "differentiable=True .* is not supported")]
    for make, msg in cases:
        with pytest.raises(ValueError, match=msg):
            make()


@pytest.mark.parametrize("make, keys", [
    (lambda ps: optim.Adam(ps, amsgrad=True), ["step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]),
    (lambda ps: optim.RMSprop(ps, momentum=0.9, centered=True), ["step", "square_avg", "momentum_buffer",
                                                                   "grad_avg"]),
    (lambda ps: optim.Adagrad(ps), ["step", "sum"]),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), ["momentum_buffer"]),
])
def test_state_dict_entries_are_torchs(make, keys):
    ps = [nn.Parameter(gpugrad.ones(3)), nn.Parameter(gpugrad.ones(2))]
    opt = make(ps)
    for _ in range(2):
        for p in ps:
            p.grad = gpugrad.ones(p.shape)
        opt.step()
    st = opt.state_dict()["state"][1]
    assert list(st) == keys
    if "step" in st:
        assert st["step"].dtype == np.float32 and st["step"].shape == () and st["step"].item() == 2


def test_schedules_that_change_betas_or_momentum_reach_the_kernels():
    from gpugrad.optim.lr_scheduler import OneCycleLR

    for make, index in ((lambda ps: optim.Adam(ps, lr=0.01), 1), (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), 1)):
        p = nn.Parameter(gpugrad.ones(2))
        opt = make([p])
        p.grad = gpugrad.ones(2)
        opt.step()
        sched = OneCycleLR(opt, max_lr=1.0, total_steps=10)
        for _ in range(3):
            opt.step()
            sched.step()
        (_, hyper), = opt._hyper.values()
        g = opt.param_groups[0]
        assert hyper[0] == g["lr"] and hyper[index] == (g["betas"][0] if "betas" in g else g["momentum"])


NEW_MAKERS = {"adam-amsgrad": lambda ps: optim.Adam(ps, lr=0.05, amsgrad=True, maximize=True),
              "rmsprop": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True, weight_decay=0.01),
              "adagrad": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.05, weight_decay=0.01),
              "sgd-maximize": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, maximize=True)}
TORCH_MAKERS = {"adam-amsgrad": lambda t, ps: t.optim.Adam(ps, lr=0.05, amsgrad=True, maximize=True),
                "rmsprop": lambda t, ps: t.optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True, weight_decay=0.01),
                "adagrad": lambda t, ps: t.optim.Adagrad(ps, lr=0.1, lr_decay=0.05, weight_decay=0.01),
                "sgd-maximize": lambda t, ps: t.optim.SGD(ps, lr=0.1, momentum=0.9, maximize=True)}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(NEW_MAKERS))
def test_cuda_step_is_one_launch_without_syncs_or_transfers(name):
    from gpugrad.optim.lr_scheduler import StepLR
    from gpugrad.testing import cuda_sim

    if not cuda_sim.enabled():
        pytest.skip("counts launches on the simulated device")
    ps = [nn.Parameter(gpugrad.tensor(v, dtype=np.float32, device="cuda")) for v in initial_values()]
    opt = NEW_MAKERS[name](ps)
    for p in ps:
        p.grad = gpugrad.ones(p.shape, device="cuda")
    opt.step()  # the first step makes the state, the options' device copy and the counts
    sched = StepLR(opt, 1, 0.5)
    for _ in range(2):
        cuda_sim.reset_counters()
        with cuda_sim.forbid_syncs(f"{name} step()"), cuda_sim.trace() as events:
            opt.step()
        kernel = name.split("-")[0] + "_multi_update_<float>"
        assert [w for e, w in events if e == "launch"] == [kernel]
        counts = cuda_sim.counters()
        assert (counts["launches"], counts["syncs"], counts["allocs"], counts["h2d"]) == (1, 0, 0, 0), counts
        sched.step()


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(NEW_MAKERS))
def test_cuda_captured_step_replays_with_its_lr_schedule(torch, name):
    """As test_cuda_path's test for SGD and AdamW: the graph reads options and advances step counts on the device."""
    from gpugrad.backend import cuda as cuda_backend
    from gpugrad.optim.lr_scheduler import StepLR

    cupy = cuda_backend.cupy_module()
    init, grads = initial_values(), grad_sequence()[0]
    ps = [nn.Parameter(gpugrad.tensor(v, device="cuda")) for v in init]
    tps = [torch.tensor(v, requires_grad=True) for v in init]
    for p, tp, g in zip(ps, tps, grads):
        p.grad, tp.grad = gpugrad.tensor(g, device="cuda"), torch.from_numpy(g.copy())
    opt, topt = NEW_MAKERS[name](ps), TORCH_MAKERS[name](torch, tps)
    replay_matches_torch(opt, topt, ps, tps, cupy, torch, rtol=1e-10, atol=1e-12)
