"""GPU vs CPU: every op case, forward and every input gradient, contiguous and strided (pytest -m gpu).

The CPU result in float64 is the reference.  A counting hook (``kernels.CALLS``) proves that each op's custom
kernel actually ran on CUDA, so parity cannot pass by silently falling back to generic CuPy code.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.backend import kernels
from tests.op_cases import CASES, case_inputs

pytestmark = pytest.mark.gpu

PARAMS = [(c, i) for c in CASES for i in range(len(c.shapes))]
# NOTE: CuPy compiles every kernel with -ftz=true, so the GPU flushes float32 denormals (< 2**-126 ~ 1.2e-38, inputs
# and results) to zero where the CPU keeps them. Not modelled on purpose: that moves a kernel's output by ~1e-38
# times its slope, far inside the float32 atol (shown for every kernel by test_dtype_layout.py's
# test_flush_to_zero_stays_inside_the_float32_tolerance); the samples here are never denormal. float64 isn't flushed.
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-11)}


def _run(case, arrays, device, monkeypatch):
    monkeypatch.setenv("GPUGRAD_DEVICE", device)  # side inputs the case makes (targets, masks, ids) go there too
    ins = [gpugrad.tensor(a, device=device, requires_grad=True) for a in arrays]
    if device == "cuda":  # keep the strided layout on the device too
        for t, a in zip(ins, arrays):
            if not a.flags.c_contiguous:
                wide = t._backend.xp.zeros(a.shape[:-1] + (a.shape[-1] * 2,), dtype=a.dtype)
                wide[..., ::2] = t._data
                t.data = wide[..., ::2]
    out = case.fn(*ins)
    u = np.random.default_rng(5).standard_normal(out.shape).astype(out.dtype)
    out.backward(gpugrad.tensor(u, device=device))
    return out.detach().cpu().numpy(), [t.grad.cpu().numpy() if t.grad is not None else None for t in ins]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case,k", PARAMS, ids=[f"{c.name}-{i}" for c, i in PARAMS])
def test_cuda_matches_cpu(case, k, dtype, layout, monkeypatch):
    arrays = case_inputs(case, case.shapes[k], dtype, layout=layout)
    ref_out, ref_grads = _run(case, [a.astype(np.float64) for a in arrays], "cpu", monkeypatch)
    kernels.CALLS.clear()
    out, grads = _run(case, arrays, "cuda", monkeypatch)
    np.testing.assert_allclose(out, ref_out, **TOL[dtype])
    for g, r in zip(grads, ref_grads):
        if r is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, r, **TOL[dtype])
    ran = {name for name in case.gpu_kernels if kernels.CALLS[name] > 0}
    assert ran == set(case.gpu_kernels), f"custom kernels that did not run on CUDA: {set(case.gpu_kernels) - ran}"


def test_cuda_round_trip_and_default_device(monkeypatch):
    x = gpugrad.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    assert str(x.device) == "cuda:0" and x.is_cuda
    y = (x.cpu() * 3).cuda().sum()
    y.backward()
    assert str(x.grad.device) == "cuda:0"
    np.testing.assert_array_equal(x.grad.cpu().numpy(), [3.0, 3.0])
    monkeypatch.delenv("GPUGRAD_DEVICE", raising=False)
    assert str(gpugrad.default_device()) == "cuda:0"


def test_leaf_grad_accumulates_in_place_on_cuda():
    w = gpugrad.tensor(np.ones((64, 64), np.float32), device="cuda", requires_grad=True)
    x = gpugrad.tensor(np.ones((8, 64), np.float32), device="cuda")
    (x @ w).sum().backward()
    ptr = w.grad._data.data.ptr
    kernels.CALLS.clear()
    (x @ w).sum().backward()
    assert w.grad._data.data.ptr == ptr and kernels.CALLS["accumulate_"] == 1
    np.testing.assert_allclose(w.grad.cpu().numpy(), 16.0)
