"""float16 and bfloat16 parameters, updated through float32 master weights (optim.optimizer): every optimizer's steps
equal torch's on float32 parameters fed the same low-precision gradients widened, with torch's float32 parameter the
master and its rounding to the low dtype the parameter; updates below half an ulp accumulate instead of vanishing;
a parameter changed outside the optimizer re-seeds its master elementwise; checkpoints carry the master; GradScaler
skips a step with an inf in float16 gradients without touching parameters or masters. The gpu-marked tests run the
same on CUDA (the simulated device in CI) through the low-precision kernel instantiations, and in a captured graph."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import gpugrad
from gpugrad import nn, optim
from gpugrad.optim.optimizer import MASTER

BF16, HALF = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
LOW = {"bfloat16": BF16, "float16": HALF}
SHAPES = [(3, 4), (5,), (2, 3, 2)]
STEPS = 12

# torch's own optimizers, the configurations the issue names
CONFIGS = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.1, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, weight_decay=0.01, amsgrad=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=1e-2)),
    ("RMSprop", dict(lr=1e-2, centered=True, momentum=0.9, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1)),
]


def _low(dtype_name):
    return LOW[dtype_name]


def _values(dtype, seed=0):
    """Initial parameters and per-step gradients, drawn in float64 and rounded to the low dtype."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * 0.5).astype(dtype) for s in SHAPES] for _ in range(STEPS)]
    return init, grads


def _torch_run(torch, name, cfg, init, grads, dtype):
    """torch on float32 parameters (the oracle's masters) fed the low-precision gradients widened; per step the
    float32 parameters and their rounding to ``dtype``."""
    ps = [torch.tensor(v.astype(np.float32), requires_grad=True) for v in init]
    opt = getattr(torch.optim, name)(ps, **cfg)
    out = []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = torch.from_numpy(g.astype(np.float32))
        opt.step()
        f32 = [p.detach().numpy().copy() for p in ps]
        out.append((f32, [a.astype(dtype) for a in f32]))
    return out


def _gpugrad_run(name, cfg, init, grads, dtype, device="cpu"):
    gdt = getattr(gpugrad, dtype.name)
    ps = [nn.Parameter(gpugrad.tensor(v.astype(np.float32), device=device).to(gdt)) for v in init]
    opt = getattr(optim, name)(ps, **cfg)
    out = []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = gpugrad.tensor(g.astype(np.float32), device=device).to(gdt)
        opt.step()
        out.append(([_host(opt.state[p][MASTER]) for p in ps], [p.detach().cpu().numpy().copy() for p in ps]))
    return ps, opt, out


def _host(a):
    return a.get() if hasattr(a, "get") else np.array(a)  # a copy: CPU state is updated in place


def _ulps(a, b, dtype):
    """How many representable low-precision values lie between a and b (same sign region: bit distance)."""
    ia, ib = (np.asarray(x, dtype).view(np.int16).astype(np.int32) for x in (a, b))
    ia, ib = (np.where(i < 0, -32768 - i, i) for i in (ia, ib))  # sign-magnitude to a monotone integer line
    return np.abs(ia - ib)


def _assert_matches_torch(got, want, dtype, what):
    """Masters within float32 rounding of torch's parameters: a few float32 ulps of the parameters' scale (~1), as
    the order of division, sqrt and fma differs from torch's (RMSprop's centered sq - ga^2 cancels, so an element
    near 0 differs by ~2e-7 absolutely after 8 steps). Parameters bit for bit wherever the masters are equal, else
    at most one low-precision ulp apart: masters this close can only straddle one rounding boundary of the low
    dtype."""
    for step, ((masters, params), (f32, rounded)) in enumerate(zip(got, want)):
        for i, (m, p, t, r) in enumerate(zip(masters, params, f32, rounded)):
            assert m.dtype == np.float32 and p.dtype == dtype, f"{what} step {step} param {i}"
            np.testing.assert_allclose(m, t, rtol=4e-6, atol=1e-6, err_msg=f"{what} step {step} master {i}")
            assert _ulps(p, r, dtype).max() <= 1, f"{what} step {step} param {i}: {p} vs {r}"
            exact = np.asarray(m, np.float32) == np.asarray(t, np.float32)
            np.testing.assert_array_equal(p.view(np.uint16)[exact], r.view(np.uint16)[exact],
                                          err_msg=f"{what} step {step} param {i}: equal masters, unequal roundings")


@pytest.mark.parametrize("dtype", sorted(LOW))
@pytest.mark.parametrize("name, cfg", CONFIGS, ids=str)
def test_low_precision_steps_equal_torch_float32_rounded(torch, name, cfg, dtype):
    low = _low(dtype)
    init, grads = _values(low)
    _, opt, got = _gpugrad_run(name, cfg, init, grads, low)
    _assert_matches_torch(got, _torch_run(torch, name, cfg, init, grads, low), low, f"{name} {cfg} {dtype}")
    st = opt.state[opt.param_groups[0]["params"][0]]
    assert all(v.dtype == np.float32 for k, v in st.items() if hasattr(v, "dtype") and k != "step")


@pytest.mark.parametrize("dtype", sorted(LOW))
def test_updates_below_half_an_ulp_accumulate_in_the_master(dtype):
    """lr * g is below half an ulp of 1 (bfloat16: 2^-8, float16: 2^-11): a step in the low dtype would leave p at
    1 forever; through the master, p follows the float32 run (written out) and ends well below 1."""
    low = _low(dtype)
    lr = 1e-3 if low == BF16 else 2e-4
    assert lr < 0.5 * float(np.finfo(low).eps)
    p = nn.Parameter(gpugrad.ones(4).to(getattr(gpugrad, dtype)))
    opt = optim.SGD([p], lr=lr)
    want = np.float32(1)
    for _ in range(200):
        p.grad = gpugrad.ones(4).to(p.dtype)
        opt.step()
        want = np.float32(want - np.float32(lr))  # the float32 run, written out
    np.testing.assert_array_equal(p.detach().numpy().view(np.uint16), np.full(4, want, np.float32).astype(low).view(np.uint16))
    assert float(p.detach().float().numpy()[0]) < 1 - 100 * lr
    np.testing.assert_array_equal(opt.state[p][MASTER], np.full(4, want, np.float32))


def test_a_parameter_changed_in_place_reseeds_its_master_elementwise():
    """The rule: at each step, an element whose value is no longer its master's rounding restarts from that value;
    the others keep their master (with bits below the low dtype's). Oracle: plain SGD written out in float32."""
    lr = 1e-3
    p = nn.Parameter(gpugrad.ones(3).to(gpugrad.bfloat16))
    opt = optim.SGD([p], lr=lr)
    master = np.ones(3, np.float32)
    p.grad = gpugrad.ones(3).to(p.dtype)
    opt.step()
    master -= np.float32(lr)
    np.testing.assert_array_equal(p.detach().float().numpy(), np.ones(3))  # 0.999 rounds to 1 in bfloat16
    new = p.detach().numpy().copy()
    new[1] = 2.5  # through .data: a version counter would not see it
    p.data.copy_(gpugrad.tensor(new))
    p.grad = gpugrad.ones(3).to(p.dtype)
    opt.step()
    master -= np.float32(lr)
    master[1] = np.float32(2.5) - np.float32(lr)
    np.testing.assert_array_equal(opt.state[p][MASTER], master)
    np.testing.assert_array_equal(p.detach().numpy(), master.astype(BF16))


def test_loading_a_models_state_dict_reseeds_the_changed_masters():
    lin = nn.Linear(3, 2).to(gpugrad.float16)
    opt = optim.Adam(lin.parameters(), lr=1e-2)
    for _ in range(2):
        for p in lin.parameters():
            p.grad = gpugrad.ones(p.shape).to(p.dtype)
        opt.step()
    saved = {k: v.detach().numpy().copy() for k, v in lin.state_dict().items()}
    kept = {k: _host(opt.state[p][MASTER]).copy() for k, p in lin.named_parameters()}
    changed = {k: (v.astype(np.float32) + 1).astype(HALF) for k, v in saved.items()}
    lin.load_state_dict({k: gpugrad.tensor(v) for k, v in changed.items()})
    for k, p in lin.named_parameters():  # one more step, with zero gradients: the masters are what it reads
        p.grad = gpugrad.zeros(p.shape).to(p.dtype)
    exp_avg = {k: _host(opt.state[p]["exp_avg"]).copy() for k, p in lin.named_parameters()}
    opt.step()
    for k, p in lin.named_parameters():
        m = _host(opt.state[p][MASTER])
        # Adam with g = 0 still moves by the decayed moments; the master started from the loaded value, not kept[k]
        assert not np.allclose(m, kept[k], atol=0.5)
        np.testing.assert_allclose(m, changed[k].astype(np.float32), atol=0.05)
        assert np.abs(exp_avg[k]).max() > 0


def test_state_dict_round_trip_keeps_the_master_and_a_dict_without_one_reseeds():
    init, grads = _values(BF16)
    ps, opt, _ = _gpugrad_run("AdamW", dict(lr=1e-2), init, grads[:4], BF16)
    sd = opt.state_dict()
    for st in sd["state"].values():
        assert list(st) == ["step", "exp_avg", "exp_avg_sq", MASTER] and st[MASTER].dtype == gpugrad.float32
    ps2 = [nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = optim.AdamW(ps2, lr=1e-2)
    opt2.load_state_dict(sd)
    for p, p2 in zip(ps, ps2):
        np.testing.assert_array_equal(_host(opt2.state[p2][MASTER]), _host(opt.state[p][MASTER]))
    # without the master (torch's layout, or an older gpugrad's), the master starts from the bfloat16 values
    bare = {"param_groups": sd["param_groups"],
            "state": {i: {k: v for k, v in st.items() if k != MASTER} for i, st in sd["state"].items()}}
    ps3 = [nn.Parameter(p.detach().clone()) for p in ps]
    opt3 = optim.AdamW(ps3, lr=0.0, weight_decay=0.0)  # lr 0: the step leaves the master at its seed
    opt3.load_state_dict({**bare, "param_groups": [dict(g, lr=0.0, weight_decay=0.0) for g in bare["param_groups"]]})
    for p in ps3:
        p.grad = gpugrad.zeros(p.shape).to(p.dtype)
    opt3.step()
    for p in ps3:
        np.testing.assert_array_equal(_host(opt3.state[p][MASTER]), p.detach().numpy().astype(np.float32))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
def test_grad_scaler_skips_a_step_with_an_inf_float16_gradient(torch):
    """scaler.step with float16 parameters and gradients: a step whose gradient holds an inf leaves parameters and
    masters as they were; a clean step then equals torch's float32 step on the unscaled gradients, rounded."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(HALF)
    w = nn.Parameter(gpugrad.tensor(w0))
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    scaler = gpugrad.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    g = rng.standard_normal((3, 4)).astype(HALF)
    tw = torch.tensor(w0.astype(np.float32), requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    for k, bad in enumerate((False, True, False)):
        grad = (g.astype(np.float32) * np.float32(scaler.get_scale())).astype(HALF)  # a scaled backward's result
        if bad:
            grad[1, 2] = np.inf
        w.grad = gpugrad.tensor(grad)
        scaler.scale(gpugrad.ones(1))  # the scale exists from the first scale() on, as in a training step
        before = (w.detach().numpy().copy(), _host(opt.state[w][MASTER]).copy() if opt.state.get(w) else None)
        scaler.step(opt)
        scaler.update()
        if bad:
            np.testing.assert_array_equal(w.detach().numpy().view(np.uint16), before[0].view(np.uint16))
            np.testing.assert_array_equal(_host(opt.state[w][MASTER]), before[1])
            continue
        tw.grad = torch.from_numpy(grad.astype(np.float32) / np.float32(2.0 ** 4 if k == 0 else 2.0 ** 3))
        topt.step()
        np.testing.assert_allclose(_host(opt.state[w][MASTER]), tw.detach().numpy(), rtol=1e-6, atol=1e-6)
        assert _ulps(w.detach().numpy(), tw.detach().numpy().astype(HALF), HALF).max() <= 1


def test_a_gradient_of_another_dtype_than_its_parameter_is_refused_by_name():
    q = nn.Parameter(gpugrad.zeros(3, 2, dtype=gpugrad.float16))
    opt = optim.SGD([q], lr=0.1)
    q.grad = gpugrad.zeros(3, 2, dtype=gpugrad.float16)
    q.data = q.data.to(gpugrad.float32)  # cast after its gradient was made (Module.to does this)
    with pytest.raises(TypeError, match=r"^SGD.step\(\): a parameter of shape \(3, 2\) and dtype gpugrad.float32 has "
                                        r"a gradient of dtype float16; .*p.grad = None"):
        opt.step()


def test_outside_the_master_form_the_updates_refuse_low_precision_by_name():
    from gpugrad.backend import kernels, reference

    for module in (reference, kernels):
        p = np.zeros(3, HALF)
        with pytest.raises(TypeError, match=r"^SGD \(sgd_multi_update_\): got an array of shape \(3,\) and dtype "
                                            r"float16; .*low_params="):
            module.sgd_multi_update_(np, np.zeros(6), [True], p, p.copy())
        with pytest.raises(TypeError, match=r"^adam_multi_update_: low_params .* need gradients of their dtype"):
            module.adam_multi_update_(np, np.zeros(6), np.zeros(1, np.uint32), False, False, np.zeros(3, np.float32),
                                      np.zeros(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32),
                                      np.array(0, np.int64), low_params=[p])


# ---- on CUDA (the simulated device in CI) ----------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(LOW))
@pytest.mark.parametrize("name, cfg", CONFIGS[1::2] + CONFIGS[:1], ids=str)
def test_cuda_low_precision_steps_equal_torch_and_use_their_kernels(torch, name, cfg, dtype):
    from gpugrad.testing import cuda_sim

    low = _low(dtype)
    init, grads = _values(low, seed=3)
    ctype = {"bfloat16": "gg::bf16", "float16": "gg::f16"}[dtype]
    kernel = f"{name.lower().removesuffix('w')}_multi_update_<{ctype}>"
    if cuda_sim.enabled():
        with cuda_sim.trace() as events:
            _, _, got = _gpugrad_run(name, cfg, init, grads, low, device="cuda")
        launched = [w for e, w in events if e == "launch" and "_multi_update_" in w]
        assert launched == [kernel] * STEPS, launched
    else:
        _, _, got = _gpugrad_run(name, cfg, init, grads, low, device="cuda")
    _assert_matches_torch(got, _torch_run(torch, name, cfg, init, grads, low), low, f"cuda {name} {cfg} {dtype}")


@pytest.mark.gpu
def test_cuda_stale_rule_and_skipped_step_on_the_device():
    from gpugrad.backend import kernels

    p = nn.Parameter(gpugrad.ones(5, device="cuda").to(gpugrad.float16))
    opt = optim.SGD([p], lr=1e-4)
    calls = kernels.CALLS["sgd_multi_update_"]
    for _ in range(3):
        p.grad = gpugrad.ones(5, device="cuda").to(p.dtype)
        opt.step()
    assert kernels.CALLS["sgd_multi_update_"] == calls + 3
    master = np.float32(1)
    for _ in range(3):
        master = np.float32(master - np.float32(1e-4))
    np.testing.assert_array_equal(_host(opt.state[p][MASTER]), np.full(5, master))
    new = p.detach().cpu().numpy().copy()
    new[1] = 3  # the others written back as they are: they keep their masters
    p.data.copy_(gpugrad.tensor(new, device="cuda"))
    p.grad = gpugrad.ones(5, device="cuda").to(p.dtype)
    opt._found_inf = {p._backend: p._backend.asarray(np.ones(1, np.float32))}  # GradScaler's found_inf: skipped
    opt.step()
    opt._found_inf = None
    np.testing.assert_array_equal(_host(opt.state[p][MASTER]), np.full(5, master))
    opt.step()
    want = np.full(5, master)
    want[1] = np.float32(3)
    want = (want - np.float32(1e-4)).astype(np.float32)
    np.testing.assert_array_equal(_host(opt.state[p][MASTER]), want)
    np.testing.assert_array_equal(p.detach().cpu().numpy(), want.astype(HALF))


@pytest.mark.gpu
def test_cuda_captured_step_with_float16_parameters_replays(torch):
    """Warm-up step, then the step captured as a CUDA graph and replayed: the replays follow torch's float32
    steps, rounded (the masters and moments live in the graph's buffers)."""
    init, grads = _values(HALF, seed=5)
    want = _torch_run(torch, "AdamW", dict(lr=1e-2, weight_decay=0.1), init, [grads[0]] * 5, HALF)
    ps = [nn.Parameter(gpugrad.tensor(v.astype(np.float32), device="cuda").to(gpugrad.float16)) for v in init]
    for p, g in zip(ps, grads[0]):
        p.grad = gpugrad.tensor(g.astype(np.float32), device="cuda").to(gpugrad.float16)
    opt = optim.AdamW(ps, lr=1e-2, weight_decay=0.1)
    opt.step()
    graph = gpugrad.cuda.CUDAGraph()
    with gpugrad.cuda.graph(graph):
        opt.step()
    for _ in range(4):  # capturing runs nothing: the warm-up and 4 replays are 5 steps
        graph.replay()
    got = ([_host(opt.state[p][MASTER]) for p in ps], [p.detach().cpu().numpy() for p in ps])
    _assert_matches_torch([got], [want[4]], HALF, "captured AdamW float16")
