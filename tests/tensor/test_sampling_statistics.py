"""The distributions of gpugrad's random sampling, by statistics of many draws with fixed seeds (the streams are not
torch's, so values cannot be compared with torch's): multinomial with and without replacement against the exact
probabilities of the categories drawn first and second, bernoulli frequencies, reproducibility from a Generator,
and the same draws on the (simulated) GPU.

Chi-square bounds are the 0.999 quantiles: with a fixed seed each test is deterministic, and a wrong distribution
(a category off by a few percent of its weight) lands far beyond them.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad

P = np.array([0.1, 0.2, 0.3, 0.4])
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}  # chi-square 0.999 quantiles by degrees of freedom


def chi2(counts, probs):
    n = counts.sum()
    expected = n * probs
    keep = expected > 0
    assert counts[~keep].sum() == 0, f"draws of zero-probability categories: {counts}"
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum()), int(keep.sum()) - 1


def assert_fits(counts, probs):
    stat, dof = chi2(np.asarray(counts, np.float64), np.asarray(probs, np.float64))
    if dof == 0:  # one possible category: chi2 checked that every draw is it
        return
    assert stat < CHI2_999[dof], f"chi-square {stat:.1f} over {dof} degrees of freedom: counts {counts}, probs {probs}"


def second_draw(p):
    """P(the second draw without replacement is j) = sum over i != j of p_i p_j / (1 - p_i)."""
    return np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(len(p)) if i != j) for j in range(len(p))])


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
def test_multinomial_with_replacement_draws_each_category_with_its_weight(device):
    g = gpugrad.Generator(device).manual_seed(1)
    weights = gpugrad.tensor(P * 7, device=device)  # unnormalized: divided by the row's sum
    draws = gpugrad.multinomial(weights, 20000, replacement=True, generator=g)
    assert draws.dtype == gpugrad.int64 and draws.shape == (20000,)
    assert_fits(np.bincount(draws.cpu().numpy(), minlength=4), P)


@pytest.mark.parametrize("device", DEVICES)
def test_multinomial_rows_are_separate_distributions(device):
    rows = np.array([[0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25], P[::-1]])
    draws = gpugrad.tensor(rows, device=device).multinomial(8000, True).cpu().numpy()
    assert draws.shape == (4, 8000)
    for row, d in zip(rows, draws):
        assert_fits(np.bincount(d, minlength=4), row)


@pytest.mark.parametrize("device", DEVICES)
def test_multinomial_without_replacement_draws_first_and_second_as_successive_draws(device):
    g = gpugrad.Generator(device).manual_seed(2)
    draws = gpugrad.multinomial(gpugrad.tensor(np.tile(P, (20000, 1)), dtype=gpugrad.float32, device=device), 2,
                                generator=g).cpu().numpy()
    assert (draws[:, 0] != draws[:, 1]).all()
    assert_fits(np.bincount(draws[:, 0], minlength=4), P)
    assert_fits(np.bincount(draws[:, 1], minlength=4), second_draw(P))


def test_multinomial_of_one_sample_without_replacement_is_a_draw_with_the_weights():
    draws = gpugrad.multinomial(gpugrad.tensor(np.tile(P, (20000, 1))), 1)[:, 0].numpy()
    assert_fits(np.bincount(draws, minlength=4), P)


def test_multinomial_without_replacement_of_every_category_is_a_permutation():
    draws = gpugrad.multinomial(gpugrad.tensor(np.tile(P, (500, 1))), 4).numpy()
    assert (np.sort(draws, 1) == np.arange(4)).all()


def test_multinomial_with_a_rare_category_and_many_categories():
    p = np.full(1000, 1.0)
    p[7] = 1000.0  # half of the mass
    draws = gpugrad.multinomial(gpugrad.tensor(p), 10000, True).numpy()
    frac = (draws == 7).mean()
    assert abs(frac - 0.5) < 4 * np.sqrt(0.25 / 10000), frac
    assert draws.min() >= 0 and draws.max() < 1000


def test_a_generator_reproduces_its_draws_and_the_default_one_follows_manual_seed():
    w = gpugrad.tensor([P, P])
    a = gpugrad.multinomial(w, 10, True, generator=gpugrad.Generator().manual_seed(9))
    b = gpugrad.multinomial(w, 10, True, generator=gpugrad.Generator().manual_seed(9))
    assert a.tolist() == b.tolist()
    gpugrad.manual_seed(4)
    c = gpugrad.multinomial(w, 10, True)
    gpugrad.manual_seed(4)
    assert c.tolist() == gpugrad.multinomial(w, 10, True).tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_bernoulli_draws_ones_with_each_elements_probability(device):
    p = np.linspace(0.0, 1.0, 11)
    g = gpugrad.Generator(device).manual_seed(3)
    draws = gpugrad.bernoulli(gpugrad.tensor(np.tile(p, (4000, 1)), device=device), generator=g).cpu().numpy()
    assert set(np.unique(draws)) <= {0.0, 1.0}
    freq = draws.mean(0)
    assert freq[0] == 0 and freq[-1] == 1
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / 4000) + 1e-12), freq


@pytest.mark.parametrize("device", DEVICES)
def test_bernoulli_in_place_draws_with_p(device):
    x = gpugrad.empty(200, 100, device=device)
    assert x.bernoulli_(0.3) is x
    assert abs(x.cpu().numpy().mean() - 0.3) < 4 * np.sqrt(0.21 / 20000)
    y = gpugrad.zeros(4000, 3, dtype=gpugrad.int64, device=device).bernoulli_(gpugrad.tensor([0.1, 0.5, 0.9],
                                                                                                device=device))
    assert y.dtype == gpugrad.int64
    assert np.all(np.abs(y.cpu().numpy().mean(0) - [0.1, 0.5, 0.9]) < 4 * np.sqrt(0.25 / 4000))


def test_bernoulli_of_a_number_p_ignores_the_values():
    freq = gpugrad.bernoulli(gpugrad.full((100, 100), 7.0), 0.25).numpy().mean()
    assert abs(freq - 0.25) < 4 * np.sqrt(0.1875 / 10000)


@pytest.mark.gpu
def test_bad_weights_on_the_gpu_raise_at_the_next_read():
    """On CUDA the weights are checked on the device: no sync at the call, torch's error at the next host read."""
    draws = gpugrad.multinomial(gpugrad.tensor([0.5, -0.5], device="cuda"), 1)
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        draws.item()
    out = gpugrad.bernoulli(gpugrad.tensor([1.5], device="cuda"))
    with pytest.raises(RuntimeError, match="p_in >= 0"):
        out.cpu()
