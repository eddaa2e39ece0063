"""The distributions ``nn.init`` draws from, by statistics of many draws with fixed seeds (gpugrad's streams are
not torch's): Kolmogorov-Smirnov distances to the exact CDFs (uniform, normal, truncated normal), the bounds and
standard deviations the Xavier and Kaiming rules prescribe, orthogonality and the Haar sign convention, sparse
columns, and the same draws on the (simulated) GPU.

The KS bound 1.95 / sqrt(n) is the 0.999 quantile of the statistic: with a fixed seed each test is deterministic,
and a wrong scale or shape (a std off by a few percent, a truncation at the wrong point) lands far beyond it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import gpugrad

init = gpugrad.nn.init
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
N = 40000


def _phi(x):
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def assert_ks(samples, cdf):
    x = np.sort(np.asarray(samples, np.float64).ravel())
    n = len(x)
    f = cdf(x)
    d = max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))
    assert d < 1.95 / math.sqrt(n), f"Kolmogorov-Smirnov distance {d:.4f} over {n} samples"


def _draw(fill, shape=(200, 200), device="cpu", dtype=gpugrad.float32):
    t = gpugrad.empty(*shape, device=device, dtype=dtype)
    assert fill(t) is t
    return t.cpu().numpy()


@pytest.mark.parametrize("device", DEVICES)
def test_uniform_and_normal(device):
    assert_ks(_draw(lambda t: init.uniform_(t, -2.0, 3.0), device=device), lambda x: np.clip((x + 2) / 5, 0, 1))
    assert_ks(_draw(lambda t: init.normal_(t, 1.5, 0.5), device=device), lambda x: _phi((x - 1.5) / 0.5))


@pytest.mark.filterwarnings("ignore:mean is more than 2 std")  # the tail window: torch's warning, on purpose
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (1.0, 2.0, -1.0, 2.5), (0.0, 0.02, -0.04, 0.04),
                                             (0.0, 1.0, 2.5, 4.0)])  # the last: a window in the tail
def test_trunc_normal_is_the_normal_conditioned_on_the_window(device, mean, std, a, b):
    x = _draw(lambda t: init.trunc_normal_(t, mean, std, a, b), device=device, dtype=gpugrad.float64)
    assert x.min() >= a and x.max() <= b
    lo, hi = _phi((a - mean) / std), _phi((b - mean) / std)
    assert_ks(x, lambda v: (_phi((v - mean) / std) - lo) / (hi - lo))


def test_trunc_normal_in_float32_and_a_generator():
    x = _draw(lambda t: init.trunc_normal_(t, generator=gpugrad.Generator().manual_seed(2)))
    assert x.dtype == np.float32 and x.min() >= -2 and x.max() <= 2
    lo = _phi(-2.0)
    assert_ks(x, lambda v: (_phi(v) - lo) / (1 - 2 * lo))
    y = _draw(lambda t: init.trunc_normal_(t, generator=gpugrad.Generator().manual_seed(2)))
    np.testing.assert_array_equal(x, y)


def test_xavier_and_kaiming_scales():
    fan_in, fan_out = 300, 200
    shape = (fan_out, fan_in)
    bound = math.sqrt(6 / (fan_in + fan_out)) * 1.5
    x = _draw(lambda t: init.xavier_uniform_(t, gain=1.5), shape)
    assert_ks(x, lambda v: np.clip((v + bound) / (2 * bound), 0, 1))
    std = math.sqrt(2 / (fan_in + fan_out))
    assert_ks(_draw(lambda t: init.xavier_normal_(t), shape), lambda v: _phi(v / std))
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 5)) / math.sqrt(fan_in)  # nn.Linear's a = sqrt(5): 1 / sqrt(fan_in)
    assert abs(bound - 1 / math.sqrt(fan_in)) < 1e-12
    assert_ks(_draw(lambda t: init.kaiming_uniform_(t, a=math.sqrt(5)), shape),
              lambda v: np.clip((v + bound) / (2 * bound), 0, 1))
    std = math.sqrt(2) / math.sqrt(fan_out)
    assert_ks(_draw(lambda t: init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu"), shape),
              lambda v: _phi(v / std))


@pytest.mark.parametrize("device", DEVICES)
def test_orthogonal_is_orthonormal_and_haar_distributed(device):
    q = _draw(lambda t: init.orthogonal_(t, gain=3.0), (5, 8), device, gpugrad.float64)
    np.testing.assert_allclose(q @ q.T, 9 * np.eye(5), atol=1e-10)
    tall = _draw(lambda t: init.orthogonal_(t), (8, 5), device, gpugrad.float64)
    np.testing.assert_allclose(tall.T @ tall, np.eye(5), atol=1e-10)
    # Haar: each entry of a random orthogonal n x n matrix has mean 0 and variance 1/n; the sign fix matters here
    entries = np.stack([_draw(lambda t: init.orthogonal_(t), (4, 4), device, gpugrad.float64)[0, 0]
                        for _ in range(3000)])
    assert abs(entries.mean()) < 4 * math.sqrt(0.25 / 3000) and abs(entries.var() - 0.25) < 0.02


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_columns(device):
    w = _draw(lambda t: init.sparse_(t, sparsity=0.3, std=0.1), (50, 400), device)
    assert ((w == 0).sum(0) == 15).all()  # ceil(0.3 * 50) per column, the rest drawn from N(0, 0.01)
    assert_ks(w[w != 0], lambda v: _phi(v / 0.1))
    rows_hit = (w == 0).sum(1)  # the zeros' rows are uniform over the column: each row ~ Binomial(400, 0.3)
    assert abs(rows_hit.mean() - 120) < 1e-9 and rows_hit.std() < 2 * math.sqrt(400 * 0.3 * 0.7)
