"""Mixed precision on CUDA (pytest -m gpu; the simulated device in CI): a bfloat16 autocast MLP step equals the CPU's,
a GradScaler step makes no host sync (its launches counted), a scaled step captured in a CUDA graph replays as the
eager steps do, bfloat16 GEMMs go to cuBLAS as CUDA_R_16BF with float32 compute, and TF32 is cuBLAS's compute type."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.backend import cublas
from gpugrad.testing import cuda_sim

pytestmark = pytest.mark.gpu
STEPS, BAD = 8, {3}  # the step whose gradients overflow


OPTIMIZERS = {"AdamW": dict(lr=3e-3), "SGD": dict(lr=0.05, momentum=0.9, dampening=0.3)}


def _setup(dev, seed=0, opt="AdamW"):
    gpugrad.manual_seed(seed)
    model = gpugrad.nn.MLP([12, 32, 32, 5]).to(dev)
    opt = getattr(gpugrad.optim, opt)(model.parameters(), **OPTIMIZERS[opt])
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((16, 12)).astype(np.float32), rng.integers(0, 5, 16)) for _ in range(STEPS)]
    return model, opt, data


def _step(model, opt, scaler, x, y, blow_up, amp="bfloat16"):
    opt.zero_grad(set_to_none=False)
    with gpugrad.autocast(x.device.type, dtype=getattr(gpugrad, amp)):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss * blow_up).backward()  # blow_up: 1, or inf for an overflowing step (a tensor: capturable)
    scaler.step(opt)
    scaler.update()
    return loss


def _train(dev):
    model, opt, data = _setup(dev)
    scaler = gpugrad.amp.GradScaler(dev, init_scale=2.0 ** 12, growth_interval=2)
    scales = []
    for k, (xb, yb) in enumerate(data):
        blow = gpugrad.tensor(np.inf if k in BAD else 1.0, device=dev)
        _step(model, opt, scaler, gpugrad.tensor(xb, device=dev), gpugrad.tensor(yb, device=dev), blow)
        scales.append(scaler.get_scale())
    return scales, [p.detach().cpu().numpy() for p in model.parameters()]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
def test_an_autocast_bf16_scaled_training_equals_the_cpus():
    (cpu_scales, cpu), (gpu_scales, gpu) = _train("cpu"), _train("cuda")
    assert gpu_scales == cpu_scales and gpu_scales[3] == gpu_scales[2] / 2  # the overflow backed the scale off
    for a, b in zip(gpu, cpu):
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-3)  # bfloat16 products: a few ulps apart at most


def test_bf16_products_are_cublas_gemms_in_float32_compute():
    a = gpugrad.randn(4, 8, device="cuda").bfloat16()
    b = gpugrad.randn(8, 3, device="cuda").bfloat16()
    cuda_sim.cublas_library().calls.clear()
    y = a @ b
    (name, args), = cuda_sim.cublas_library().calls
    assert y.dtype == gpugrad.bfloat16 and args["compute"] == cublas.CUBLAS_COMPUTE_32F
    want = a.float().cpu().numpy() @ b.float().cpu().numpy()  # float32 accumulation, one rounding at the end
    np.testing.assert_array_equal(y.float().cpu().numpy(), want.astype(gpugrad.bfloat16.dtype).astype(np.float32))


def test_tf32_switches_float32_gemms_to_the_fast_compute_type(torch):
    a = gpugrad.randn(16, 64, device="cuda")
    b = gpugrad.randn(64, 8, device="cuda")
    calls = cuda_sim.cublas_library().calls
    try:
        gpugrad.backends.cuda.matmul.allow_tf32 = True
        assert gpugrad.get_float32_matmul_precision() == "high"
        calls.clear()
        fast = (a @ b).cpu().numpy()
        assert calls[-1][1]["compute"] == cublas.CUBLAS_COMPUTE_32F_FAST_TF32
        gpugrad.set_float32_matmul_precision("highest")
        assert not gpugrad.backends.cuda.matmul.allow_tf32
        calls.clear()
        exact = (a @ b).cpu().numpy()
        assert calls[-1][1]["compute"] == cublas.CUBLAS_COMPUTE_32F
    finally:
        gpugrad.set_float32_matmul_precision("highest")
    want = a.cpu().numpy().astype(np.float64) @ b.cpu().numpy().astype(np.float64)
    assert np.abs(exact - want).max() < np.abs(fast - want).max() < 2e-2 * np.abs(want).max()  # TF32: 10 bits
    with pytest.raises(RuntimeError, match="Invalid precision"):
        gpugrad.set_float32_matmul_precision("low")
    # torch ties the two switches the same way (its CPU build accepts them and ignores them, as gpugrad's CPU does)
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("opt_name,warm_up", [("AdamW", 1.0), ("SGD", np.inf)])
def test_a_scaled_step_makes_no_host_sync(opt_name, warm_up):
    model, opt, data = _setup("cuda", opt=opt_name)
    scaler = gpugrad.amp.GradScaler("cuda", init_scale=2.0 ** 12, growth_interval=2)
    x, y = gpugrad.tensor(data[0][0], device="cuda"), gpugrad.tensor(data[0][1], device="cuda")
    blow = gpugrad.tensor(warm_up, device="cuda")
    _step(model, opt, scaler, x, y, blow)  # warm-up: optimizer state, gradient buffers, the scale on the device
    for value in (1.0, np.inf):  # a clean step and a skipped one: neither reads anything back
        blow.copy_(gpugrad.tensor(value, device="cuda"))
        cuda_sim.reset_counters()
        with cuda_sim.forbid_syncs("a GradScaler step"):
            _step(model, opt, scaler, x, y, blow)
        counts = cuda_sim.counters()
        assert counts["syncs"] == 0 and counts["d2h"] == 0 and counts["h2d"] == 0
        what = "overflow" if value > 1 else "clean"
        print(f"\nGradScaler step (bf16 autocast MLP 12-32-32-5, {opt_name}, {what}) on "
              f"the simulated device: {counts['launches']} launches, {counts['syncs']} syncs, {counts['d2h']} "
              "reads back")
    # grown after 2 clean steps, halved by the overflow (an overflowing warm-up: halved twice), on the device
    assert scaler.get_scale() == (2.0 ** 12 if warm_up == 1 else 2.0 ** 10)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("opt_name,warm_up", [("AdamW", 1.0), ("SGD", 1.0), ("SGD", np.inf)])
def test_a_captured_scaled_step_replays_as_eager_steps(opt_name, warm_up):
    """warm_up inf: the step before the capture overflows, so SGD's momentum buffers exist but no step has written
    them (their device flags are set): the first replay that runs starts them as d, as the eager step does."""
    runs = []
    for captured in (False, True):
        model, opt, data = _setup("cuda", opt=opt_name)
        scaler = gpugrad.amp.GradScaler("cuda", init_scale=2.0 ** 12, growth_interval=2)
        x, y = gpugrad.tensor(data[0][0], device="cuda"), gpugrad.tensor(data[0][1], device="cuda")
        blow = gpugrad.tensor(warm_up, device="cuda")
        _step(model, opt, scaler, x, y, blow)  # warm-up (step 0)
        if captured:
            g = gpugrad.cuda.CUDAGraph()
            with gpugrad.cuda.graph(g):
                _step(model, opt, scaler, x, y, blow)
        scales = []
        for k, (xb, yb) in enumerate(data[1:], start=1):
            x.copy_(gpugrad.tensor(xb, device="cuda"))
            y.copy_(gpugrad.tensor(yb, device="cuda"))
            blow.copy_(gpugrad.tensor(np.inf if k in BAD else 1.0, device="cuda"))
            g.replay() if captured else _step(model, opt, scaler, x, y, blow)
            scales.append(scaler.get_scale())
        runs.append((scales, [p.detach().cpu().numpy() for p in model.parameters()]))
    (eager_scales, eager), (replay_scales, replayed) = runs
    assert replay_scales == eager_scales and any(b < a for a, b in zip(eager_scales, eager_scales[1:]))
    for a, b in zip(replayed, eager):
        np.testing.assert_array_equal(a, b) if cuda_sim.enabled() else np.testing.assert_allclose(a, b, rtol=1e-5)
