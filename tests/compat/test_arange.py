"""``arange`` as torch defines it: ceil((end - start) / step) elements (in float64; an int64 range truncates start,
end and step first), element i = start + i * step in float64 rounded once to the dtype, torch's dtype rules and
errors.

torch's own CPU kernel rounds some elements differently in the last bit (it steps from a float32 base inside each
SIMD vector, so its values depend on the CPU's vector width): gpugrad's values are checked exactly against the
float64 formula, and against torch to within one ulp of the range's largest value (a listed difference)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gpugrad
from tests.compat.harness import check

RANGES = [(-8.0, 8.0, 0.1), (0, 1, 0.1), (0.0, 1.0, 1 / 3), (1.0, 2.5, 0.1), (-1.0, 1.0, 0.01), (0.0, 3.0, 0.3),
          (10.0, -10.0, -0.7), (0.5, 10, 1.5), (1e8, 1e8 + 100, 0.5), (1.0, 1.3, 0.1), (0, 1e-3, 1e-4)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("start, end, step", RANGES)
def test_float_arange_is_start_plus_i_step_rounded_once(start, end, step, dtype):
    if dtype == "float16" and end > 65504:
        pytest.skip("beyond float16's range")
    got = gpugrad.arange(start, end, step, dtype=getattr(gpugrad, dtype)).numpy()
    n = math.ceil((end - start) / step)
    want = (np.float64(start) + np.arange(n, dtype=np.float64) * np.float64(step)).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


def test_the_float32_range_that_used_to_accumulate_rounding_ends_at_7_9():
    x = gpugrad.arange(-8.0, 8.0, 0.1)
    assert x.shape == (160,) and x[-1].item() == np.float32(7.9) and x[80].item() == np.float32(-8.0 + 80 * 0.1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("start, end, step", RANGES)
def test_float_arange_has_torchs_length_and_values_to_one_ulp(start, end, step, dtype, torch):
    ours = gpugrad.arange(start, end, step, dtype=getattr(gpugrad, dtype)).numpy()
    theirs = torch.arange(start, end, step, dtype=getattr(torch, dtype)).numpy()
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_array_less(np.abs(ours.astype(np.float64) - theirs), np.spacing(np.abs(theirs).max()) * 1.01)


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
