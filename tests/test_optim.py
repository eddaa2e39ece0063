"""optim: SGD / Adam / AdamW trajectories against PyTorch and hand-written NumPy formulas, flat buffers equal to
the per-parameter path bit for bit, in-place buffers that never move or grow, checkpoints that resume exactly,
schedulers, and error messages."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import gpugrad
from gpugrad import nn, optim
from gpugrad.backend import reference
from gpugrad.nn import functional as F
from gpugrad.optim.lr_scheduler import CosineAnnealingLR, StepLR

CPU = "cpu"
STEPS = 10
SHAPES = [(3, 4), (4,), (2, 3, 2)]


def host(t):
    return t.detach().numpy()


def initial_values(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


def grad_sequence(seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(STEPS)]


def run_gpugrad(make, groups_of, flat=False):
    """Trajectory of the parameters over STEPS steps with given gradients; groups_of(params) -> param_groups."""
    ps = [nn.Parameter(gpugrad.tensor(v, device=CPU)) for v in initial_values()]
    opt = make(groups_of(ps), flat)
    out = []
    for grads in grad_sequence():
        for p, g in zip(ps, grads):
            p.grad = gpugrad.tensor(g, device=CPU)
        opt.step()
        out.append([host(p).copy() for p in ps])
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


@pytest.mark.parametrize("flat", [False, True], ids=["per-param", "flat"])
@pytest.mark.parametrize("cfg", SGD_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_sgd_matches_numpy_formula(cfg, flat):
    got = run_gpugrad(lambda g, f: optim.SGD(g, flat=f, **cfg), two_groups(cfg), flat)
    grads = grad_sequence()
    for i, p0 in enumerate(initial_values()):
        want = sgd_numpy(p0, [g[i] for g in grads], **per_group_cfg(cfg, i))
        for step in range(STEPS):
            np.testing.assert_allclose(got[step][i], want[step], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("flat", [False, True], ids=["per-param", "flat"])
@pytest.mark.parametrize("name,cfg", ADAM_CONFIGS, ids=lambda c: str(c))
def test_adam_matches_numpy_formula(name, cfg, flat):
    got = run_gpugrad(lambda g, f: getattr(optim, name)(g, flat=f, **cfg), two_groups(cfg), flat)
    grads = grad_sequence()
    decoupled = name == "AdamW"
    for i, p0 in enumerate(initial_values()):
        c = per_group_cfg(cfg, i)
        if decoupled:
            c.setdefault("weight_decay", 1e-2)
        want = adam_numpy(p0, [g[i] for g in grads], decoupled=decoupled, **c)
        for step in range(STEPS):
            np.testing.assert_allclose(got[step][i], want[step], rtol=1e-10, atol=1e-12)


def run_torch(torch, name, cfg, groups_of):
    ps = [torch.tensor(v, requires_grad=True) for v in initial_values()]
    opt = getattr(torch.optim, name)(groups_of(ps), **cfg)
    out = []
    for grads in grad_sequence():
        for p, g in zip(ps, grads):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


@pytest.mark.parametrize("name,cfg", [("SGD", c) for c in SGD_CONFIGS] + ADAM_CONFIGS, ids=str)
def test_matches_torch_optim(torch, name, cfg):
    want = run_torch(torch, name, cfg, two_groups(cfg))
    for flat in (False, True):
        got = run_gpugrad(lambda g, f: getattr(optim, name)(g, flat=f, **cfg), two_groups(cfg), flat)
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


@pytest.mark.parametrize("flat", [False, True], ids=["per-param", "flat"])
def test_step_bumps_versions_so_stale_graphs_fail(flat):
    lin = nn.Linear(3, 2, device=CPU)
    opt = optim.SGD(lin.parameters(), lr=0.1, flat=flat)
    lin(gpugrad.ones(1, 3, device=CPU)).sum().backward()
    x = gpugrad.ones(1, 3, device=CPU, requires_grad=True)
    stale = lin(x).sum()  # saved the weight (for x's gradient) before the update below
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
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


MAKERS = {"sgd": lambda ps, flat: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3, flat=flat),
          "adam": lambda ps, flat: optim.Adam(ps, lr=1e-2, weight_decay=1e-3, flat=flat),
          "adamw": lambda ps, flat: optim.AdamW(ps, lr=1e-2, flat=flat)}


@pytest.mark.parametrize("flat", [False, True], ids=["per-param", "flat"])
@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_buffers_stay_put_and_memory_stays_flat(name, flat):
    model, x, y = tiny_problem()
    opt = MAKERS[name](model.parameters(), flat)
    train_step(model, opt, x, y)
    ps = list(model.parameters())
    ids = [(p.grad, p.grad.data.ctypes.data, p.data.ctypes.data) for p in ps]
    state_ptrs = [v.ctypes.data for p in ps for v in opt.state[p].values() if isinstance(v, np.ndarray)]
    before = host(ps[0]).copy()
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
        assert p.grad is g and p.grad.data.ctypes.data == gptr and p.data.ctypes.data == dptr
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


# ---- flat buffers ----------------------------------------------------------------------------------------------------
def groups_by_kind(model):
    """Weights and biases in separate groups with different options: one flat run per group."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights}, {"params": biases, "lr": 0.02, "weight_decay": 0.0}]


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_flat_equals_per_param_exactly(name):
    results = []
    for flat in (False, True):
        model, x, y = tiny_problem()
        opt = MAKERS[name](groups_by_kind(model), flat)
        for _ in range(8):
            train_step(model, opt, x, y)
        results.append(([host(p).copy() for p in model.parameters()], opt.state_dict()))
    (pa, sa), (pb, sb) = results
    for a, b in zip(pa, pb):
        np.testing.assert_array_equal(a, b)  # bit for bit: the same arithmetic, just fewer launches
    for i in sa["state"]:
        for k, v in sa["state"][i].items():
            np.testing.assert_array_equal(sb["state"][i][k], v)


def test_flat_buffers_are_views_and_steps_are_single_launches(monkeypatch):
    model, x, y = tiny_problem()
    model[2].double()  # a second dtype: a second buffer
    model[4].double()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, flat=True)
    assert set(opt.flat.buffers) == {(gpugrad.device("cpu"), np.dtype(np.float32)),
                                     (gpugrad.device("cpu"), np.dtype(np.float64))}
    for p, slot in opt.flat.slots.items():
        data, grad = opt.flat.buffers[slot.key]
        item = data.itemsize
        assert p.data.ctypes.data == data.ctypes.data + slot.start * item and p.data.base is data
        assert p.grad.data.ctypes.data == grad.ctypes.data + slot.start * item and p.grad.data.base is grad
    calls = []
    real = reference.sgd_update_
    monkeypatch.setattr(reference, "sgd_update_", lambda xp, p, *a: calls.append(p.size) or real(xp, p, *a))
    h = model[0](x).relu()
    loss = F.cross_entropy(model[4](model[3](model[2](h.double()))), y)
    loss.backward()
    opt.step()
    sizes = sorted(d.size for d, _ in opt.flat.buffers.values())
    assert sorted(calls) == sizes  # one launch per buffer, covering all of it
    for p in model.parameters():  # backward accumulated straight into the views
        slot = opt.flat.slots[p]
        assert p.grad is slot.grad and p.grad.data.base is opt.flat.buffers[slot.key][1]
        assert opt.state[p]["momentum_buffer"].base is opt._flat_state["momentum_buffer", slot.key]
    opt.zero_grad()
    assert all(not g.any() for _, g in opt.flat.buffers.values())


def test_flat_survives_dropped_grads_and_skips_missing_ones():
    """module.zero_grad() (set_to_none) drops the views; the next step copies fresh gradients back in and
    matches the per-parameter optimizer; a parameter that gets no gradient is skipped like there."""
    runs = []
    for flat in (False, True):
        model, x, y = tiny_problem()
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, flat=flat)
        for step in range(4):
            model.zero_grad()  # set_to_none=True
            F.cross_entropy(model(x), y).backward()
            if step == 2:
                model[4].bias.grad = None  # unused this step: no update, no momentum
            opt.step()
        runs.append([host(p).copy() for p in model.parameters()])
        if flat:
            assert all(p.grad is opt.flat.slots[p].grad for p in model.parameters() if p.grad is not None)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_flatten_parameters_helper():
    model, x, y = tiny_problem()
    values = [host(p).copy() for p in model.parameters()]
    ps = list(model.parameters())
    flat = optim.flatten_parameters(model)
    assert all(a is b for a, b in zip(model.parameters(), ps))  # the same Parameter objects
    for p, v in zip(model.parameters(), values):
        np.testing.assert_array_equal(host(p), v)
        assert not p.grad.data.any()
    F.cross_entropy(model(x), y).backward()
    ((_, grad),) = flat.buffers.values()
    assert grad.any() and np.array_equal(grad[:ps[0].numel()], ps[0].grad.data.ravel())
    flat.zero_grad()
    assert not grad.any()
    assert [(s.start, s.stop) for s in flat.segments(ps)] == [(0, grad.size)]
    with pytest.raises(ValueError, match="no parameters"):
        optim.flatten_parameters([])


# ---- checkpoints -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("save_flat,load_flat", [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_resumed_training_is_bit_identical(name, save_flat, load_flat):
    model, x, y = tiny_problem()
    opt = MAKERS[name](model.parameters(), save_flat)
    for _ in range(10):
        train_step(model, opt, x, y)
    want = [host(p).copy() for p in model.parameters()]

    model, x, y = tiny_problem()
    opt = MAKERS[name](model.parameters(), save_flat)
    for _ in range(5):
        train_step(model, opt, x, y)
    msd, osd = model.state_dict(), opt.state_dict()
    model2, _, _ = tiny_problem(seed=7)  # different initial values, then overwritten
    opt2 = MAKERS[name](model2.parameters(), load_flat)
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
    assert st["step"] == 2 and type(st["exp_avg"]) is np.ndarray
    live = opt.state[model[0].weight]["exp_avg"]
    assert not np.shares_memory(st["exp_avg"], live)  # a copy, not the live buffer
    with pytest.raises(ValueError, match="2 parameter groups, the optimizer has 1"):
        optim.Adam(model.parameters()).load_state_dict(sd)
    bad = {"state": sd["state"], "param_groups": [dict(sd["param_groups"][0], params=[0, 1]),
                                                  sd["param_groups"][1]]}
    with pytest.raises(ValueError, match="doesn't match the size"):
        optim.Adam(groups_by_kind(model)).load_state_dict(bad)
    bad = {"state": {0: dict(st, exp_avg=np.zeros(3))}, "param_groups": sd["param_groups"]}
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


@pytest.mark.parametrize("make", [lambda ps: optim.AdamW(ps, lr=0.1, weight_decay=0.1, flat=True),
                                  lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1, flat=True)])
def test_flat_mode_never_touches_frozen_or_unused_parameters(make):
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
