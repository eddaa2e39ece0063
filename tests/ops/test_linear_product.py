"""Linear's product x @ wᵀ on the CPU: short float32 batches run as (w @ xᵀ)ᵀ copied to rows, everything else as it
is. Both orders against float64 products and torch: values, dtype, C-contiguous rows, gradients."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.backend import reference as R


def _order_used(monkeypatch, x, w):
    """Which order matmul_nt multiplied in: 'transposed' when it called np.matmul(w, xᵀ)."""
    calls = []
    real = np.matmul

    def spy(a, b, *args, **kwargs):
        calls.append("transposed" if a is w else "direct")
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    y = R.matmul_nt(x, w)
    monkeypatch.undo()
    return calls, y


@pytest.mark.parametrize("m, k, n, dtype, order", [
    (64, 784, 1024, np.float32, "transposed"), (8, 1024, 1024, np.float32, "transposed"),
    (2, 256, 512, np.float32, "transposed"), (32, 256, 1024, np.float32, "transposed"),
    (1, 784, 1024, np.float32, "direct"),  # a vector-matrix product: no gain
    (128, 1024, 1024, np.float32, "direct"),  # past SHORT_BATCH
    (64, 1024, 10, np.float32, "direct"),  # a narrow layer: the reversed order costs ~1.1-2x
    (64, 256, 1024, np.float32, "direct"),  # m > k / 8
    (64, 784, 1024, np.float64, "direct"),  # DGEMM gains nothing
])
def test_short_batch_product_order_and_values(m, k, n, dtype, order, monkeypatch):
    rng = np.random.default_rng(m + k + n)
    x, w = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    calls, y = _order_used(monkeypatch, x, w)
    assert calls == [order]
    assert y.shape == (m, n) and y.dtype == dtype and y.flags.c_contiguous
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y, exact, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-3 if dtype == np.float32 else 1e-10)


@pytest.mark.parametrize("m", [8, 64])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_a_short_batch_matches_torch_forward_and_backward(m, bias, torch):
    rng = np.random.default_rng(m)
    arrays = [rng.standard_normal((m, 784)).astype(np.float32), rng.standard_normal((1024, 784)).astype(np.float32) / 28,
              rng.standard_normal(1024).astype(np.float32)]
    ours = [gpugrad.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = F.linear(*ours[:2], ours[2] if bias else None)
    ty = torch.nn.functional.linear(*theirs[:2], theirs[2] if bias else None)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    assert y.is_contiguous() and y.detach().numpy().flags.c_contiguous
    u = rng.standard_normal((m, 1024)).astype(np.float32)
    y.backward(gpugrad.tensor(u))
    ty.backward(torch.tensor(u))
    for a, b in zip(ours if bias else ours[:2], theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_a_strided_short_batch_gives_the_same_rows(monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 2048)).astype(np.float32)[:, ::2]  # not contiguous
    w = rng.standard_normal((1024, 1024)).astype(np.float32)
    calls, y = _order_used(monkeypatch, x, w)
    assert calls == ["transposed"] and y.flags.c_contiguous
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-4, atol=1e-3)
