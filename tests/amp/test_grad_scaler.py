"""gpugrad.amp.GradScaler against torch.amp.GradScaler("cpu") over a scripted run of finite and infinite gradients:
the scales, the skipped steps, the parameters and the state dicts all equal torch's."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad

# (step, what the gradient of the first parameter gets): an inf, a NaN, or nothing; growth every 3 clean steps
SCRIPT = {2: np.inf, 3: np.nan, 9: -np.inf}


def _run(lib, opt_name, steps=14, **scaler_kw):
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    xs = rng.standard_normal((steps, 5, 4)).astype(np.float32)
    w = lib.tensor(w0.copy(), requires_grad=True)
    b = lib.tensor(b0.copy(), requires_grad=True)
    opt = getattr(lib.optim, opt_name)([w, b], lr=0.05, **({"momentum": 0.9} if opt_name == "SGD" else {}))
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3, **scaler_kw)
    scales, params = [], []
    for k in range(steps):
        opt.zero_grad()
        loss = ((lib.tensor(xs[k]) @ w.T + b) ** 2).mean()
        if k in SCRIPT:
            loss = loss * float(SCRIPT[k])  # every gradient inf or NaN
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        params.append(w.detach().numpy().copy())
    return scales, params, scaler.state_dict()


# NOTE: NumPy warns about the scripted infs as backward sums them: expected here
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_scales_skips_and_parameters_equal_torchs(opt_name, torch):
    ours, theirs = _run(gpugrad, opt_name), _run(torch, opt_name)
    assert ours[0] == theirs[0]  # the scale sequence: backoff at each inf/NaN, growth after 3 clean steps
    for k, (a, b) in enumerate(zip(ours[1], theirs[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"parameters after step {k}")
    assert ours[2] == theirs[2]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
def test_skipped_steps_leave_the_parameters_unchanged():
    _, params, _ = _run(gpugrad, "Adam")
    for k in SCRIPT:
        np.testing.assert_array_equal(params[k], params[k - 1])


def test_errors_and_disabled_scaler_are_torchs(torch):
    w = gpugrad.ones(2, requires_grad=True)
    opt = gpugrad.optim.SGD([w], lr=0.1)
    s = gpugrad.amp.GradScaler("cpu")
    s.scale(w.sum()).backward()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called"):
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called"):
        s.step(opt)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        s.step(opt, closure=lambda: None)
    s.update()
    with pytest.raises(ValueError, match="growth factor must be > 1.0"):
        gpugrad.amp.GradScaler("cpu", growth_factor=1.0)
    off = gpugrad.amp.GradScaler("cpu", enabled=False)
    assert off.get_scale() == 1.0 and off.state_dict() == {} and not off.is_enabled()
    assert off.scale(w) is w
    t = torch.amp.GradScaler("cpu")
    assert s.get_growth_factor() == t.get_growth_factor() and s.get_growth_interval() == t.get_growth_interval()
    s2 = gpugrad.amp.GradScaler("cpu")
    s2.load_state_dict(s.state_dict())
    assert s2.state_dict() == s.state_dict()
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        s2.load_state_dict({})
    idle = gpugrad.optim.SGD([gpugrad.ones(2, requires_grad=True)], lr=0.1)  # no gradients at all
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        s.step(idle)
    t = torch.amp.GradScaler("cpu")
    t.scale(torch.ones(()))
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        t.step(torch.optim.SGD([torch.ones(2, requires_grad=True)], lr=0.1))
    for lib in (gpugrad, torch):  # stepping before any scale(): torch's message
        with pytest.raises(AssertionError, match=r"Attempted step but _scale is None"):
            lib.amp.GradScaler("cpu").step(lib.optim.SGD([lib.ones(2, requires_grad=True)], lr=0.1))


# Options whose state a skipped step must leave as torch does: SGD's buffer starts as d at the first step that runs
# (dampening shows it), RMSprop's step count is torch's; Adam's and Adagrad's counts live on the device already.
SKIPPED_FIRST = {"SGD": dict(momentum=0.9, dampening=0.5), "SGD-nesterov": dict(momentum=0.9, nesterov=True),
                 "RMSprop": dict(momentum=0.5, centered=True), "Adagrad": dict(lr_decay=0.1),
                 "Adam": dict(amsgrad=True), "AdamW": {}}


def _skipped_first_run(lib, cfg, device, script, steps=8):
    name = cfg.split("-")[0]
    rng = np.random.default_rng(1)
    w = lib.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True, device=device)
    xs = rng.standard_normal((steps, 5, 4)).astype(np.float32)
    opt = getattr(lib.optim, name)([w], lr=0.05, **SKIPPED_FIRST[cfg])
    scaler = lib.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=3)
    params, dicts = [], []
    for k in range(steps):
        opt.zero_grad()
        loss = ((lib.tensor(xs[k], device=device) @ w.T) ** 2).mean()
        if k in script:
            loss = loss * float(script[k])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        params.append(w.detach().cpu().numpy().copy())
        dicts.append({i: {n: np.array(v.detach().cpu().numpy() if hasattr(v, "detach") else v) for n, v in st.items()}
                      for i, st in opt.state_dict()["state"].items()})
    return params, dicts


def _check_skipped_first(cfg, torch, device):
    script = {0: np.inf, 1: np.nan, 4: np.inf}  # the first two steps skipped, then one later
    ours, theirs = _skipped_first_run(gpugrad, cfg, device, script), _skipped_first_run(torch, cfg, "cpu", script)
    for k, (a, b) in enumerate(zip(ours[0], theirs[0])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{cfg}: parameters after step {k}")
    for k, (a, b) in enumerate(zip(ours[1], theirs[1])):
        assert {i: sorted(st) for i, st in a.items()} == {i: sorted(st) for i, st in b.items()}, f"{cfg}: step {k}"
        for i, st in b.items():
            for n, v in st.items():
                np.testing.assert_allclose(a[i][n], v, rtol=1e-5, atol=1e-6, err_msg=f"{cfg}: {n} after step {k}")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("cfg", list(SKIPPED_FIRST))
def test_skipped_first_steps_leave_the_state_torchs(cfg, torch):
    """After steps GradScaler skips (the first ones too) every optimizer's parameters, its state's keys and values
    (step counts, SGD's buffer made at the first step that runs) and its state dict are torch's."""
    _check_skipped_first(cfg, torch, "cpu")


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("cfg", list(SKIPPED_FIRST))
def test_cuda_skipped_first_steps_leave_the_state_torchs(cfg, torch):
    """The same on CUDA, where the skip is decided by the kernels on the device (no sync in step())."""
    _check_skipped_first(cfg, torch, "cuda")
