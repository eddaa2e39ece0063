"""The float16 and bfloat16 kernels (every launcher with instantiations of its own for ``gg::f16`` and ``gg::bf16``,
names.LOW_OPS and LOW_KERNELS): at the kernel table's shapes, under the CPU emulator, each runs its own low-precision
instantiation (no cast to float32 first) and equals its NumPy reference (computed in float32 and rounded with NumPy /
ml_dtypes) to within one rounding of the low dtype; the storage conversions round exactly as NumPy and ml_dtypes do."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpugrad.backend import kernels, reference
from gpugrad.backend.kernels.names import LOW_OPS
from tests.kernel_cases import CASES, TOLERANCE, rng_for

BF16, HALF, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
LOW = {BF16: 2.0 ** -7, HALF: 2.0 ** -10}  # dtype -> its relative rounding step (one ulp at 1)
ROWS = [pytest.param(c, d, s, id=f"{c.id}-{d.name}-{'x'.join(map(str, s))}") for c in CASES if c.name in kernels.NATIVE_LOW
        for d in LOW for s in c.shapes]


@pytest.mark.parametrize("case, dtype, shape", ROWS)
def test_low_precision_kernels_equal_the_float32_reference_rounded(emu, case, dtype, shape):
    args, kwargs = case.make(rng_for(case, dtype, shape), dtype.type, shape)
    assert any(getattr(a, "dtype", None) == dtype for a in args)
    # in-place arguments (accumulate_'s sum, the unscaled gradients and found_inf) each get their own copy, and are
    # compared after the returned values
    r_args = [a.copy() if i in case.inplace and a is not None else a for i, a in enumerate(args)]
    k_args = [a.copy() if i in case.inplace and a is not None else a for i, a in enumerate(args)]
    want = getattr(reference, case.name)(np, *r_args, **kwargs)
    with kernels.use_runtime(emu):
        got = getattr(kernels, case.name)(np, *k_args, **kwargs)
    got, want = (got, want) if isinstance(want, tuple) else ((), ()) if want is None else ((got,), (want,))
    inplace = [i for i in case.inplace if args[i] is not None]
    returned = len(got)
    got, want = (*got, *(k_args[i] for i in inplace)), (*want, *(r_args[i] for i in inplace))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        # the result is in the low dtype; what an op only saves for its backward (lse, layer norm's mean and rstd)
        # stays float32 (reference.opmath); in-place arguments keep their own dtypes
        if k < returned:
            assert w.dtype == dtype if k == 0 else w.dtype in (dtype, F32)
        if w.dtype.kind not in "fV":  # cross-entropy's status words
            np.testing.assert_array_equal(g, w)
            continue
        # both round a float32 value, one ulp of the low dtype apart at most where float32 results differ in their
        # last bits (library exp/tanh) across a rounding boundary; absolutely, the float32 row's own atol (gelu's
        # cancellation); a float32 result has the float32 row's tolerance
        rtol, atol = (case.tolerance or TOLERANCE)[F32]
        np.testing.assert_allclose(g.astype(F32), w.astype(F32), rtol=LOW[dtype] if w.dtype == dtype else rtol,
                                   atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype, ctype", [(BF16, "gg::bf16"), (HALF, "gg::f16")])
def test_contiguous_low_precision_arrays_run_their_instantiation_and_others_are_cast(emu, monkeypatch, dtype, ctype):
    seen = []
    raw = emu.raw_kernel
    monkeypatch.setattr(emu, "raw_kernel", lambda family, name: seen.append(name) or raw(family, name))
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(dtype)
    with kernels.use_runtime(emu):
        kernels.relu_fwd(np, x)
        kernels.relu_fwd(np, x[:, ::2])  # not contiguous: cast to float32 (reference.opmath), the float kernel
        kernels.bias_act_fwd(np, x, np.ones(40, np.float32), "relu")  # two dtypes: cast as well
    assert seen[0] == f"pointwise<ActFwd<{ctype}, pw::relu>>" and ctype not in "".join(seen[1:])
    assert f"ActFwd<{ctype}, pw::relu>" in LOW_OPS


def test_storage_conversion_rounds_as_ml_dtypes(emu):
    """The kernel's float -> bfloat16 rounding (to nearest, ties to even; inf, NaN, overflow) against ml_dtypes':
    leaky_relu's negative side is one float32 product x * slope, exact in IEEE arithmetic on both sides, so only the
    final rounding can differ."""
    rng = np.random.default_rng(3)
    mags = np.abs(rng.standard_normal(100_000)) * 10.0 ** rng.integers(-38, 38, 100_000)
    x = np.concatenate([-mags, [-np.inf, np.nan, -3.3895314e38, -1e-40, 0.0]]).astype(BF16)
    slope = 1.3  # > 1: products past bfloat16's max overflow to -inf
    with kernels.use_runtime(emu):
        y = kernels.leaky_relu_fwd(np, x, slope)
    with np.errstate(over="ignore"):
        want = (x.astype(np.float32) * np.float32(slope)).astype(BF16)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(y.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.isnan(y.astype(np.float32)[nan]).all()


def test_float16_storage_conversion_rounds_as_numpy(emu):
    """The kernel's float -> float16 rounding (to nearest, ties to even; subnormals, overflow to inf, inf, NaN) and
    its widening, against NumPy's, over every float16 bit pattern: leaky_relu's negative side is one float32 product
    x * slope, exact in IEEE arithmetic on both sides, so only the final rounding can differ. Slope 0.5 halves every
    value (exact ties to even where a subnormal's last bit falls off), 1.3 rounds and overflows past 65504, and relu
    of a positive value is its widening narrowed back (the identity)."""
    every = np.arange(2 ** 16, dtype=np.uint16).view(HALF)
    negative = every[np.signbit(every) | np.isnan(every)]
    for slope in (0.5, 1.3):
        with kernels.use_runtime(emu):
            y = kernels.leaky_relu_fwd(np, negative, slope)
        with np.errstate(over="ignore", invalid="ignore"):
            want = (negative.astype(np.float32) * np.float32(slope)).astype(HALF)
        nan = np.isnan(want)
        np.testing.assert_array_equal(y.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
        assert np.isnan(y[nan]).all()
    positive = every[~np.isnan(every) & (every > 0)]
    with kernels.use_runtime(emu):
        np.testing.assert_array_equal(kernels.relu_fwd(np, positive).view(np.uint16), positive.view(np.uint16))
