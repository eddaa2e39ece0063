"""Optimizers and learning-rate schedules as torch users drive them, each run with torch and with gpugrad and compared
(tests/compat/harness.py): parameter trajectories of every optimizer and option (float64, so the libraries agree
to rounding), param_groups (per-group options, add_param_group, changing lr by hand), zero_grad, closures,
state_dict / load_state_dict in torch's layout, the schedulers' lr sequences, and the errors torch raises."""
from __future__ import annotations

import numpy as np
import pytest

from tests.compat.harness import check, compat

SHAPES = ((3, 2), (4,))
STEPS = 20


def _params(torch, requires_grad=True):
    rng = np.random.default_rng(0)
    return [torch.tensor(rng.standard_normal(s), requires_grad=requires_grad) for s in SHAPES]


def _grads(torch, step):
    rng = np.random.default_rng(100 + step)
    return [torch.tensor(rng.standard_normal(s)) for s in SHAPES]


def _train(torch, opt, ps, steps=STEPS):
    """``steps`` steps with fixed gradients; the parameters at the end."""
    for step in range(steps):
        opt.zero_grad()
        for p, g in zip(ps, _grads(torch, step)):
            p.grad = g
        opt.step()
    return [p.detach() for p in ps]


def _quadratic_step(torch, opt, ps):
    """One step on a real loss (sum of squares plus a cross term): backward fills the gradients."""
    opt.zero_grad()
    loss = sum((p * p).sum() for p in ps) + (ps[0].sum() * ps[1].sum())
    loss.backward()
    opt.step()
    return loss.detach()


# --- trajectories: 20 steps of every optimizer and option, float64 -----------------------------------------------

CONFIGS = [
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9)), ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01)), ("SGD", dict(lr=0.1, maximize=True)),
    ("Adam", dict()), ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6)), ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)), ("Adam", dict(lr=0.01, maximize=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("AdamW", dict(lr=0.01)), ("AdamW", dict(lr=0.01, amsgrad=True, weight_decay=0.5)),
    ("RMSprop", dict()), ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6)), ("RMSprop", dict(weight_decay=0.1)),
    ("RMSprop", dict(momentum=0.9)), ("RMSprop", dict(centered=True)),
    ("RMSprop", dict(lr=0.005, momentum=0.5, centered=True, weight_decay=0.01, maximize=True)),
    ("Adagrad", dict()), ("Adagrad", dict(lr=0.1, lr_decay=0.01)), ("Adagrad", dict(weight_decay=0.1)),
    ("Adagrad", dict(initial_accumulator_value=0.5, eps=1e-6)), ("Adagrad", dict(lr=0.05, maximize=True)),
]


@pytest.mark.parametrize("name, cfg", CONFIGS, ids=lambda c: c if isinstance(c, str) else
                         ",".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_optimizer_trajectory_matches(name, cfg):
    def snippet(torch):
        ps = _params(torch)
        return _train(torch, getattr(torch.optim, name)(ps, **cfg), ps)

    check(snippet)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_optimizer_on_a_real_loss_with_backward(name):
    def snippet(torch):
        ps = _params(torch)
        opt = getattr(torch.optim, name)(ps, lr=0.05)
        losses = [_quadratic_step(torch, opt, ps) for _ in range(10)]
        return losses, [p.detach() for p in ps]

    check(snippet)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad"])
def test_param_groups_in_state_dict_are_torchs(name):
    """Every option torch keeps in a group (foreach, fused, capturable, ... too), in torch's order."""
    check(lambda torch: getattr(torch.optim, name)(_params(torch), lr=0.01).state_dict()["param_groups"])


@pytest.mark.parametrize("name", ["Adam", "AdamW", "RMSprop", "Adagrad", "SGD"])
def test_state_dict_after_steps(name):
    def snippet(torch):
        ps = _params(torch)
        opt = getattr(torch.optim, name)(ps, lr=0.01, **({"momentum": 0.9} if name in ("SGD", "RMSprop") else {}))
        _train(torch, opt, ps, steps=3)
        return opt.state_dict()

    check(snippet)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad"])
def test_load_state_dict_resumes_the_trajectory(name):
    def snippet(torch):
        ps = _params(torch)
        kw = {"momentum": 0.9} if name in ("SGD", "RMSprop") else {}
        opt = getattr(torch.optim, name)(ps, lr=0.01, **kw)
        _train(torch, opt, ps, steps=4)
        qs = [p.detach().clone().requires_grad_(True) for p in ps]
        opt2 = getattr(torch.optim, name)(qs, lr=0.5, **kw)  # lr too: the loaded groups' options win
        opt2.load_state_dict(opt.state_dict())
        return _train(torch, opt2, qs, steps=4), opt2.param_groups[0]["lr"]

    check(snippet)


# --- param_groups ---------------------------------------------------------------------------------------------------

@compat
def test_per_group_learning_rates(torch):
    a, b = _params(torch)
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)
    return _train(torch, opt, [a, b], steps=5), [g["lr"] for g in opt.param_groups]


@compat
def test_per_group_options_of_adam(torch):
    a, b = _params(torch)
    opt = torch.optim.Adam([{"params": [a], "betas": (0.5, 0.9), "weight_decay": 0.1}, {"params": [b]}], lr=0.01)
    return _train(torch, opt, [a, b], steps=5)


@compat
def test_param_group_keys_and_defaults(torch):
    a, b = _params(torch)
    opt = torch.optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.01})
    g = opt.param_groups[1]
    return len(opt.param_groups), list(g), g["lr"], g["momentum"], g["nesterov"], g["params"][0] is b


@compat
def test_add_param_group_then_train(torch):
    a, b = _params(torch)
    opt = torch.optim.Adam([a], lr=0.01)
    _train(torch, opt, [a, b], steps=2)  # b has a gradient but no group yet: untouched
    opt.add_param_group({"params": [b], "lr": 0.05})
    return _train(torch, opt, [a, b], steps=3)


@compat
def test_changing_lr_by_hand_between_steps(torch):
    ps = _params(torch)
    opt = torch.optim.Adam(ps, lr=0.1)
    _train(torch, opt, ps, steps=2)
    for g in opt.param_groups:
        g["lr"] = 0.001
    return _train(torch, opt, ps, steps=2)


@compat
def test_named_parameters_keep_their_names(torch):
    a, b = _params(torch)
    opt = torch.optim.SGD([("a", a), ("b", b)], lr=0.1)
    return opt.param_groups[0]["param_names"], opt.state_dict()["param_groups"][0]["param_names"]


@compat
def test_defaults_are_the_constructor_options(torch):
    return sorted(torch.optim.RMSprop(_params(torch)).defaults.items())


@compat
def test_optimizer_state_is_empty_before_the_first_step(torch):
    opt = torch.optim.Adam(_params(torch))
    return opt.state_dict()["state"], len(opt.state)


@compat
def test_adagrad_makes_its_state_at_construction(torch):
    return torch.optim.Adagrad(_params(torch), initial_accumulator_value=0.25).state_dict()["state"]


@compat
def test_state_of_a_parameter_without_state_is_empty(torch):
    ps = _params(torch)
    return dict(torch.optim.SGD(ps, lr=0.1).state[ps[0]])


@compat
def test_state_entries_after_a_step(torch):
    ps = _params(torch)
    opt = torch.optim.Adam(ps, amsgrad=True)
    _train(torch, opt, ps, steps=1)
    return sorted(opt.state_dict()["state"][1])


@compat
def test_parameters_without_grad_are_skipped(torch):
    a, b = _params(torch)
    opt = torch.optim.Adam([a, b], lr=0.1)
    a.grad = torch.ones_like(a)
    opt.step()
    return a.detach(), b.detach(), list(opt.state_dict()["state"])


# --- zero_grad and closures ------------------------------------------------------------------------------------------

@compat
def test_zero_grad_sets_grads_to_none(torch):
    ps = _params(torch)
    opt = torch.optim.SGD(ps, lr=0.1)
    _quadratic_step(torch, opt, ps)
    opt.zero_grad()
    return [p.grad for p in ps]


@compat
def test_zero_grad_set_to_none_false_keeps_zeros(torch):
    ps = _params(torch)
    opt = torch.optim.SGD(ps, lr=0.1)
    _quadratic_step(torch, opt, ps)
    opt.zero_grad(set_to_none=False)
    return [p.grad for p in ps]


@compat
def test_step_with_a_closure_returns_its_loss(torch):
    ps = _params(torch)
    opt = torch.optim.SGD(ps, lr=0.1)

    def closure():
        opt.zero_grad()
        loss = sum((p ** 2).sum() for p in ps)
        loss.backward()
        return loss

    return [opt.step(closure).detach() for _ in range(3)], [p.detach() for p in ps]


@compat
def test_training_a_linear_regression(torch):
    x = torch.tensor(np.linspace(-1, 1, 20).reshape(10, 2))
    y = x @ torch.tensor([[2.0], [-1.0]], dtype=x.dtype) + 0.5
    w = torch.zeros(2, 1, dtype=x.dtype, requires_grad=True)
    b = torch.zeros(1, dtype=x.dtype, requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=0.2, momentum=0.5)
    for _ in range(30):
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        opt.step()
    return w.detach(), b.detach(), loss.detach()


# --- errors ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda torch, ps: torch.optim.SGD(ps, lr=-0.1),
    lambda torch, ps: torch.optim.SGD(ps, lr=0.1, momentum=-0.5),
    lambda torch, ps: torch.optim.SGD(ps, lr=0.1, nesterov=True),
    lambda torch, ps: torch.optim.Adam(ps, betas=(1.0, 0.999)),
    lambda torch, ps: torch.optim.Adam(ps, eps=-1.0),
    lambda torch, ps: torch.optim.AdamW(ps, weight_decay=-0.1),
    lambda torch, ps: torch.optim.RMSprop(ps, alpha=-0.1),
    lambda torch, ps: torch.optim.Adagrad(ps, lr_decay=-1.0),
    lambda torch, ps: torch.optim.Adagrad(ps, initial_accumulator_value=-1.0),
    lambda torch, ps: torch.optim.SGD([], lr=0.1),
    lambda torch, ps: torch.optim.SGD(ps[0], lr=0.1),
    lambda torch, ps: torch.optim.SGD([{"params": set(ps)}], lr=0.1),
    lambda torch, ps: torch.optim.SGD([{"params": ps}, {"params": ps[:1]}], lr=0.1),
    lambda torch, ps: torch.optim.SGD([{"params": ps}, [ps[0]]], lr=0.1),
], ids=["sgd-lr", "sgd-momentum", "nesterov-without-momentum", "adam-beta1", "adam-eps", "adamw-weight-decay",
        "rmsprop-alpha", "adagrad-lr-decay", "adagrad-accumulator", "no-params", "a-tensor", "a-set-group",
        "two-groups", "group-not-a-dict"])
def test_bad_optimizer_arguments_raise_as_torch(make):
    check(lambda torch: make(torch, _params(torch)))


@compat
def test_loading_a_state_dict_of_other_groups_fails(torch):
    ps = _params(torch)
    sd = torch.optim.SGD([{"params": ps[:1]}, {"params": ps[1:]}], lr=0.1).state_dict()
    return torch.optim.SGD(ps, lr=0.1).load_state_dict(sd)


@compat
def test_loading_a_state_dict_of_another_group_size_fails(torch):
    ps = _params(torch)
    sd = torch.optim.SGD(ps[:1], lr=0.1).state_dict()
    return torch.optim.SGD(ps, lr=0.1).load_state_dict(sd)


# --- learning-rate schedules ---------------------------------------------------------------------------------------

def _lrs(torch, make, steps=15, kind="SGD", **kw):
    """get_last_lr() before each step, for an optimizer of two groups (lr 0.1 and 0.05)."""
    a, b = _params(torch)
    opt = getattr(torch.optim, kind)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **kw)
    sched, out = make(torch.optim.lr_scheduler, opt), []
    for _ in range(steps):
        out.append(sched.get_last_lr())
        opt.step()
        sched.step()
    return out, sched.last_epoch, [g["lr"] for g in opt.param_groups]


SCHEDULES = {
    "StepLR": lambda s, o: s.StepLR(o, step_size=4, gamma=0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[3, 7, 7], gamma=0.2),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, gamma=0.9),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lr_lambda=lambda e: 1 / (1 + e)),
    "LambdaLR-per-group": lambda s, o: s.LambdaLR(o, lr_lambda=[lambda e: 0.9 ** e, lambda e: min(1.0, e / 5)]),
    "MultiplicativeLR": lambda s, o: s.MultiplicativeLR(o, lr_lambda=lambda e: 0.95),
    "ConstantLR": lambda s, o: s.ConstantLR(o, factor=0.5, total_iters=4),
    "LinearLR": lambda s, o: s.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5),
    "LinearLR-decay": lambda s, o: s.LinearLR(o, start_factor=1.0, end_factor=0.2, total_iters=8),
    "PolynomialLR": lambda s, o: s.PolynomialLR(o, total_iters=10, power=2.0),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=6, eta_min=0.001),
    "CosineAnnealingWarmRestarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=1e-3),
    "OneCycleLR": lambda s, o: s.OneCycleLR(o, max_lr=1.0, total_steps=15),
    "OneCycleLR-linear-three-phase": lambda s, o: s.OneCycleLR(o, max_lr=[1.0, 0.5], epochs=3, steps_per_epoch=5,
                                                               anneal_strategy="linear", three_phase=True),
    "SequentialLR-warmup-then-cosine": lambda s, o: s.SequentialLR(
        o, [s.LinearLR(o, start_factor=0.1, total_iters=3), s.CosineAnnealingLR(o, T_max=10)], milestones=[3]),
    "SequentialLR-three": lambda s, o: s.SequentialLR(
        o, [s.ConstantLR(o, 0.5, 2), s.StepLR(o, 2, 0.5), s.ExponentialLR(o, 0.8)], milestones=[3, 8]),
    "ChainedScheduler": lambda s, o: s.ChainedScheduler([s.ConstantLR(o, 0.5, 3), s.ExponentialLR(o, 0.9)]),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_lrs_match(name):
    check(lambda torch: _lrs(torch, SCHEDULES[name]))


@compat
def test_one_cycle_cycles_sgd_momentum(torch):
    a, _ = _params(torch)
    opt = torch.optim.SGD([a], lr=0.1, momentum=0.9)
    sched, out = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10), []
    for _ in range(9):
        opt.step()
        sched.step()
        out.append((opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]))
    return out, opt.param_groups[0]["max_lr"], opt.param_groups[0]["initial_lr"]


@compat
def test_one_cycle_cycles_adam_beta1_and_trains(torch):
    ps = _params(torch)
    opt = torch.optim.Adam(ps, lr=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=STEPS)
    for step in range(STEPS):
        for p, g in zip(ps, _grads(torch, step)):
            p.grad = g
        opt.step()
        sched.step()
    return [p.detach() for p in ps], opt.param_groups[0]["betas"]


@compat
def test_schedule_drives_the_trajectory(torch):
    ps = _params(torch)
    opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.3)
    for step in range(10):
        for p, g in zip(ps, _grads(torch, step)):
            p.grad = g
        opt.step()
        sched.step()
    return [p.detach() for p in ps]


@compat
def test_reduce_lr_on_plateau(torch):
    a, b = _params(torch)
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2, threshold=0.01,
                                                       cooldown=1, min_lr=[0.01, 0.02])
    out = []
    for metric in [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]:
        sched.step(metric)
        out.append((sched.get_last_lr(), sched.num_bad_epochs, sched.best))
    return out


@compat
def test_reduce_lr_on_plateau_max_mode_absolute_threshold(torch):
    opt = torch.optim.Adam(_params(torch), lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", patience=1, threshold=0.1,
                                                       threshold_mode="abs")
    out = []
    for metric in [0.5, 0.55, 0.56, 0.7, 0.71, 0.72, 0.73]:
        sched.step(torch.tensor(metric))  # a 0-d tensor, as a loss
        out.append(opt.param_groups[0]["lr"])
    return out


@compat
def test_scheduler_state_dict_round_trip(torch):
    a, _ = _params(torch)
    opt = torch.optim.SGD([a], lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)
    for _ in range(3):
        opt.step()
        sched.step()
    sd = sched.state_dict()
    b, _ = _params(torch)
    opt2 = torch.optim.SGD([b], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    sched2 = torch.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=8)
    sched2.load_state_dict(sd)
    out = []
    for _ in range(4):
        opt2.step()
        sched2.step()
        out.append(sched2.get_last_lr())
    return sd["last_epoch"], sd["base_lrs"], out


@compat
def test_scheduler_state_dict_keys(torch):
    a, _ = _params(torch)
    return sorted(torch.optim.lr_scheduler.StepLR(torch.optim.SGD([a], lr=0.1), 2).state_dict())


@compat
def test_plateau_state_dict(torch):
    a, _ = _params(torch)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD([a], lr=0.1), patience=0)
    sched.step(1.0)
    sched.step(2.0)
    return sched.state_dict()


@compat
def test_initial_lr_is_recorded_in_the_groups(torch):
    a, _ = _params(torch)
    opt = torch.optim.SGD([a], lr=0.1)
    torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    return opt.param_groups[0]["initial_lr"], opt.param_groups[0]["lr"]


@compat
def test_deprecated_step_with_an_epoch_uses_the_closed_form(torch):
    import warnings

    a, _ = _params(torch)
    opt = torch.optim.SGD([a], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched.step(5)
    return sched.get_last_lr(), sched.last_epoch


@pytest.mark.parametrize("make", [
    lambda s, o: s.LinearLR(o, start_factor=0.0),
    lambda s, o: s.ConstantLR(o, factor=2.0),
    lambda s, o: s.ReduceLROnPlateau(o, factor=1.0),
    lambda s, o: s.ReduceLROnPlateau(o, mode="up"),
    lambda s, o: s.OneCycleLR(o, max_lr=0.1),
    lambda s, o: s.OneCycleLR(o, max_lr=0.1, total_steps=10, anneal_strategy="exp"),
    lambda s, o: s.SequentialLR(o, [s.ConstantLR(o), s.StepLR(o, 2)], milestones=[]),
    lambda s, o: s.LambdaLR(o, lr_lambda=[lambda e: 1.0, lambda e: 1.0]),
    lambda s, o: s.StepLR(object(), step_size=2),
    lambda s, o: s.StepLR(o, step_size=2, last_epoch=4),
], ids=["linear-start-0", "constant-factor-2", "plateau-factor-1", "plateau-mode", "one-cycle-no-steps",
        "one-cycle-anneal", "sequential-milestones", "lambda-count", "not-an-optimizer", "resume-without-initial-lr"])
def test_bad_scheduler_arguments_raise_as_torch(make):
    def snippet(torch):
        a, _ = _params(torch)
        return make(torch.optim.lr_scheduler, torch.optim.SGD([a], lr=0.1))

    check(snippet)


@compat
def test_one_cycle_past_its_total_steps_raises(torch):
    a, _ = _params(torch)
    opt = torch.optim.SGD([a], lr=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    for _ in range(4):
        opt.step()
        sched.step()
