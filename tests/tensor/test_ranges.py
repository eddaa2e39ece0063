"""The range factories on the CPU give torch's values bit for bit (backend/ranges.py): arange, linspace and logspace
in every dtype, at lengths that take torch's scalar loop, its vector loop and its threads, and histogram's edges,
which are a linspace. The fused multiply-add underneath is checked against exact rational arithmetic."""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import gpugrad
from gpugrad.backend import ranges, threads

DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8")
FLOATS = DTYPES[:4]
LENGTHS = (0, 1, 2, 3, 17, 64, 255, 1000, 4099, 40_001, 70_000)


def _exact_fma(a, b, c, dtype):
    """a * b + c in exact rationals, rounded to the nearest value of ``dtype`` (ties to even)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = dtype(float(exact))  # float64 first: only a neighbour can be nearer
    t = np.finfo(dtype)
    candidates = (np.nextafter(near, dtype(-t.max)), near, np.nextafter(near, dtype(t.max)))
    bits = np.uint32 if dtype == np.float32 else np.uint64
    return min(candidates, key=lambda q: (abs(Fraction(float(q)) - exact), int(np.array(q).view(bits)) & 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_multiply_add_is_rounded_once(dtype):
    rng = np.random.default_rng(0)
    n = 3000
    a, b, c = rng.standard_normal(n).astype(dtype), rng.integers(0, 5000, n).astype(dtype), rng.standard_normal(n)
    c = c.astype(dtype)
    eps = np.finfo(dtype).eps
    # products that land a half unit from a representable sum: the ties a twice-rounded sum gets wrong
    a[:1000], b[:1000], c[:1000] = dtype(0.5) + np.arange(1000) * dtype(eps), dtype(3), dtype(1)
    a[1000:1100], b[1000:1100] = dtype(1) + dtype(eps), dtype(1) + np.arange(100) * dtype(eps)
    c[1000:1100] = -dtype(1)
    got = ranges.fused_multiply_add(a, b, c, dtype)
    want = np.array([_exact_fma(*v, dtype) for v in zip(a, b, c)], dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.view(np.uint32 if dtype == np.float32 else np.uint64),
                                  want.view(np.uint32 if dtype == np.float32 else np.uint64))


def test_fused_multiply_add_differs_from_the_rounded_product():
    """The case that tells them apart: (1 + eps) * (1 - eps) - 1 is -eps² exactly, 0 when the product is rounded."""
    eps = float(np.finfo(np.float64).eps)
    assert ranges.fused_multiply_add(1 + eps, 1 - eps, -1.0, np.float64) == -eps * eps
    assert (1 + eps) * (1 - eps) - 1.0 == 0.0


def _host(t):
    return t.float().numpy() if str(t.dtype) == "torch.bfloat16" else t.numpy()


def _mine(t):
    a = np.asarray(t)
    return a.astype(np.float32) if a.dtype == ml_dtypes.bfloat16 else a


def _same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("steps", LENGTHS)
def test_linspace_is_torchs(torch, name, steps):
    rng = np.random.default_rng(steps)
    for _ in range(4):
        lo, hi = (float(v) for v in rng.uniform(0 if name == "uint8" else -3, 3, 2) * (40 if "int" in name else 1))
        _same(_mine(gpugrad.linspace(lo, hi, steps, dtype=getattr(gpugrad, name))),
              _host(torch.linspace(lo, hi, steps, dtype=getattr(torch, name))))


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("length", LENGTHS[1:])
def test_arange_is_torchs(torch, name, length):
    """Long ranges cross torch's vector loop (its lanes step from a rounded base) and its threads' shares."""
    rng = np.random.default_rng(length)
    for _ in range(4):
        start = float(rng.uniform(-3, 3))
        step = float(rng.uniform(0.5, 1.5)) * 6 / length * (1 if rng.random() < 0.5 else -1)
        end = start + step * (length - 0.5)
        want = _host(torch.arange(start, end, step, dtype=getattr(torch, name)))
        _same(_mine(gpugrad.arange(start, end, step, dtype=getattr(gpugrad, name))), want)


def test_arange_shares_follow_the_thread_count(torch, monkeypatch):
    """Beyond 32,768 elements torch's threads each restart the vector loop at their share: gpugrad takes the count
    that get_num_threads reports, torch's."""
    start, step, n = 0.1, 3e-5, 70_001
    before = torch.get_num_threads()
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            monkeypatch.setattr(threads.POLICY, "pinned", count)  # set_num_threads without resizing BLAS's pool
            assert gpugrad.get_num_threads() == count
            _same(_mine(gpugrad.arange(start, start + step * n, step)),
                  _host(torch.arange(start, start + step * n, step)))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("steps", LENGTHS[:-1])
def test_logspace_is_torchs(torch, name, steps):
    rng = np.random.default_rng(steps + 1)
    for base in (10.0, 2.0, float(rng.uniform(0.5, 4))):
        if "int" in name:
            lo, hi, base = float(rng.uniform(0, 2.5)), float(rng.uniform(0, 2.5)), 2.0  # (no overflow)
        else:
            lo, hi = (float(v) for v in rng.uniform(-3, 3, 2))
        _same(_mine(gpugrad.logspace(lo, hi, steps, base, dtype=getattr(gpugrad, name))),
              _host(torch.logspace(lo, hi, steps, base, dtype=getattr(torch, name))))


@pytest.mark.parametrize("name", ("float32", "float64"))
def test_histogram_edges_and_counts_are_torchs(torch, name):
    """Edges are linspace's; a value on an edge counts in the bin to its right, as in torch (the fuzzer found one
    counted in the bin beside it while the edges were a float64 linspace rounded once)."""
    rng = np.random.default_rng(5)
    for trial in range(200):
        x = rng.standard_normal(int(rng.integers(1, 60))).astype(name)
        if trial % 2:
            x = np.round(x * 4) / 4
        bins = int(rng.integers(1, 12))
        rng_arg = None if trial % 3 == 0 else tuple(sorted(float(v) for v in rng.uniform(-2, 2, 2)))
        if rng_arg is not None and trial % 3 == 1:
            edges = ranges.linspace(*rng_arg, bins + 1, np.dtype(name))
            x = np.concatenate([x, edges, np.nextafter(edges, np.inf).astype(name)])  # on and beside every edge
        want = torch.histogram(torch.from_numpy(x), bins=bins, range=rng_arg)
        got = gpugrad.histogram(gpugrad.tensor(x), bins=bins, range=rng_arg)
        _same(np.asarray(got.bin_edges), want.bin_edges.numpy())
        _same(np.asarray(got.hist), want.hist.numpy())


def test_linspace_closed_forms():
    """Values that need no oracle: exact steps, a single step, integer truncation toward zero, the empty range."""
    np.testing.assert_array_equal(np.asarray(gpugrad.linspace(0, 1, 5)), [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_array_equal(np.asarray(gpugrad.linspace(-2.5, 7, 1)), [-2.5])
    np.testing.assert_array_equal(np.asarray(gpugrad.linspace(-3, 3, 4, dtype=gpugrad.int64)), [-3, -1, 1, 3])
    np.testing.assert_array_equal(np.asarray(gpugrad.linspace(0, 1, 4, dtype=gpugrad.int32)), [0, 0, 0, 1])
    assert gpugrad.linspace(0, 1, 0).shape == (0,)
    np.testing.assert_array_equal(np.asarray(gpugrad.logspace(0, 3, 4, dtype=gpugrad.float64)), [1, 10, 100, 1000])
