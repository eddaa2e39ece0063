"""The bfloat16 kernels (elementwise.cu's activations, their backward and bias + activation instantiated for
``gg::bf16``): at the kernel table's shapes, under the CPU emulator, each runs its own bfloat16 instantiation (no
cast to float32 first) and equals its NumPy reference (computed in float32 and rounded to bfloat16 with ml_dtypes) to
within one bfloat16 rounding; the storage conversions round exactly as ml_dtypes does."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpugrad.backend import kernels, reference
from gpugrad.backend.kernels.elementwise import NATIVE_BF16
from gpugrad.backend.kernels.names import BF16_OPS
from tests.kernel_cases import CASES, TOLERANCE, rng_for

try:
    from gpugrad.testing.cuda_emu import EmuRuntime, compiler_available
except ImportError as e:  # pragma: no cover
    EmuRuntime, _MISSING = None, f"CPU emulator not importable: {e}"
else:
    _MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"

BF16 = np.dtype(ml_dtypes.bfloat16)
ROWS = [pytest.param(c, s, id=f"{c.id}-{'x'.join(map(str, s))}") for c in CASES if c.name in NATIVE_BF16
        for s in c.shapes]


@pytest.fixture(scope="module")
def emu():
    if _MISSING:
        pytest.skip(_MISSING)
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())])


@pytest.mark.parametrize("case, shape", ROWS)
def test_bf16_kernels_equal_the_float32_reference_rounded(emu, case, shape):
    args, kwargs = case.make(rng_for(case, BF16, shape), BF16.type, shape)
    assert any(getattr(a, "dtype", None) == BF16 for a in args)
    want = getattr(reference, case.name)(np, *args, **kwargs)
    with kernels.use_runtime(emu):
        got = getattr(kernels, case.name)(np, *args, **kwargs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == BF16 and g.shape == w.shape
        # both round a float32 value, one bfloat16 ulp apart at most where float32 results differ in their last bits
        # (library exp/tanh) across a rounding boundary; absolutely, the float32 row's own atol (gelu's cancellation)
        atol = (case.tolerance or TOLERANCE)[np.dtype(np.float32)][1]
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2.0 ** -7, atol=atol,
                                   equal_nan=True)


def test_contiguous_bf16_arrays_run_the_bf16_instantiation_and_others_are_cast(emu, monkeypatch):
    seen = []
    raw = emu.raw_kernel
    monkeypatch.setattr(emu, "raw_kernel", lambda family, name: seen.append(name) or raw(family, name))
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(BF16)
    with kernels.use_runtime(emu):
        kernels.relu_fwd(np, x)
        kernels.relu_fwd(np, x[:, ::2])  # not contiguous: cast to float32 (reference.opmath), the float kernel
    assert seen[0] == "pointwise<ActFwd<gg::bf16, pw::relu>>" and "gg::bf16" not in "".join(seen[1:])
    assert "ActFwd<gg::bf16, pw::relu>" in BF16_OPS


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
