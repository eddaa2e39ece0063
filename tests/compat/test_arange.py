"""``arange`` as torch defines it: ceil((end - start) / step) elements (in float64; an int64 range truncates start,
end and step first), torch's dtype rules and errors, and on the CPU torch's values bit for bit.

Those values (backend/ranges.py) are start + i * step as one fused multiply-add in float64, rounded once to the
dtype, except inside torch's vector loop, where each 32-byte vector steps from its first element rounded to the
dtype. The tests below compute that in exact rational arithmetic (an oracle independent of the fma emulation), and
against torch itself."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import gpugrad
from tests.compat.harness import check

RANGES = [(-8.0, 8.0, 0.1), (0, 1, 0.1), (0.0, 1.0, 1 / 3), (1.0, 2.5, 0.1), (-1.0, 1.0, 0.01), (0.0, 3.0, 0.3),
          (10.0, -10.0, -0.7), (0.5, 10, 1.5), (1e8, 1e8 + 100, 0.5), (1.0, 1.3, 0.1), (0, 1e-3, 1e-4)]


def _nearest(value, dtype):
    """The exact rational ``value`` rounded to the nearest ``dtype`` value, ties to even."""
    near = np.asarray(float(value)).astype(dtype)  # float64 first, then dtype: only a neighbour can be nearer
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    top = np.finfo(dtype).max
    candidates = [np.nextafter(near, -top).astype(dtype), near, np.nextafter(near, top).astype(dtype)]
    return min(candidates, key=lambda q: (abs(Fraction(float(q)) - value), int(np.array(q).view(bits)) & 1))


def _exact_arange(start, step, n, dtype):
    """torch's CPU arange values from exact rationals: float64 fma(step, i, start) rounded to the dtype (float32 for
    float16, whose accumulator is float), and in the vector loop (two 32-byte vectors per iteration) each lane k of a
    vector based at element b is fma(step, k, rounded value at b)."""
    acc = np.float32 if dtype == "float16" else np.float64
    first, by = Fraction(float(acc(start))), Fraction(float(acc(step)))
    out = [_nearest(_nearest(first + by * i, acc), dtype) for i in range(n)]
    width = 32 // np.dtype(dtype).itemsize
    for loop in range(0, n - 2 * width + 1, 2 * width):
        for b in (loop, loop + width):
            base = Fraction(float(out[b]))
            for k in range(width):
                out[b + k] = _nearest(_nearest(base + by * k, acc), dtype)
    return np.array(out, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("start, end, step", RANGES)
def test_float_arange_is_torchs_formula_exactly(start, end, step, dtype):
    if dtype == "float16" and end > 65504:
        pytest.skip("beyond float16's range")
    got = gpugrad.arange(start, end, step, dtype=getattr(gpugrad, dtype)).numpy()
    n = math.ceil((end - start) / step)
    assert got.dtype == np.dtype(dtype) and got.shape == (n,)
    np.testing.assert_array_equal(got, _exact_arange(start, step, n, dtype))


def test_the_float32_range_that_used_to_accumulate_rounding():
    """No rounding accumulates from element to element: element 80 of arange(-8, 8, 0.1) is 80 * 0.1 - 8 of the
    double 0.1 exactly (2**-51), and the last one is torch's 7.8999996 (lane 7 of the vector at element 152:
    float32(7.2 - 8e-16) + 7 * 0.1 = 7.89999981 in float64, nearest to the float32 7.89999962)."""
    x = gpugrad.arange(-8.0, 8.0, 0.1)
    assert x.shape == (160,) and x[80].item() == 2.0 ** -51 and x[-1].item() == 7.899999618530273


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("start, end, step", RANGES)
def test_float_arange_has_torchs_length_and_values(start, end, step, dtype, torch):
    ours = gpugrad.arange(start, end, step, dtype=getattr(gpugrad, dtype)).numpy()
    theirs = torch.arange(start, end, step, dtype=getattr(torch, dtype)).numpy()
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


def test_random_ranges_have_torchs_lengths(torch):
    rng = np.random.default_rng(0)
    for _ in range(300):
        start, step = float(np.round(rng.uniform(-10, 10), 3)), float(np.round(rng.uniform(0.001, 1), 4))
        step *= float(rng.choice([-1, 1]))
        end = start + step * int(rng.integers(1, 3000)) + step * rng.uniform(-0.5, 0.5)
        assert gpugrad.arange(start, end, step).shape[0] == torch.arange(start, end, step).shape[0], (start, end, step)


@pytest.mark.parametrize("args, dtype", [
    ((5,), None), ((2, 9, 3), None), ((5, 0, -1), None), ((0, 5, 1.0), None), ((0.5, 3), None), ((0, 0), None),
    ((2**60, 2**60 + 3), None), ((-0.5, 3, 1.2), "int64"), ((5.0, 0, -1.5), "int64"), ((-1.9, 5, 1), "int64"),
    ((0.9, 5, 1), "int64"), ((-2.5, 3.7, 1.5), "int32"), ((0, 10, 2.5), "int16"), ((10,), "uint8"),
    ((-8.0, 8.0, 0.1), "int32"), ((1, 10, 3), "float32"), ((0, 1, 0.1), "float64"),
])
def test_arange_dtypes_and_integer_ranges_as_torch(args, dtype):
    check(lambda t: t.arange(*args, **({} if dtype is None else {"dtype": getattr(t, dtype)})))


@pytest.mark.parametrize("call", [
    lambda t: t.arange(0, 5, -1),
    lambda t: t.arange(0, 5, 0),
    lambda t: t.arange(0.0, 5, 0.0),
    lambda t: t.arange(0.5, 3, 0.7, dtype=t.int64),
    lambda t: t.arange(float("inf")),
    lambda t: t.arange(0, 5, dtype=t.bool),
], ids=["sign", "zero_step", "zero_float_step", "step_truncates_to_zero", "infinite", "bool"])
def test_arange_refuses_as_torch(call):
    check(call)


def test_arange_of_tensor_bounds(torch):
    check(lambda t: (t.arange(t.tensor(3)), t.arange(t.tensor(1.5), 4), t.arange(0, t.tensor(2.0), t.tensor(0.5))))
