"""Every kernel case (tests/kernel_cases.py) through the real CUDA path: the launcher in backend/kernels/ with
the default runtime, i.e. ``CupyRuntime`` and CuPy's RawModule / ElementwiseKernel (pytest -m gpu).

On a GPU this is NVRTC-compiled code on the device; under ``GPUGRAD_CUDA_SIM=1`` it is the same CupyRuntime code
on the simulated device, whose kernels run the exact .cu source on the CPU emulator. Every row runs at all its
shapes, including the ones that exercise cross-warp reductions and second chunks (4097 and 8200 columns), row
chunks of the column kernels (bias gradients of 300 and 1000 rows), and the SGD-momentum and Adam updates; the
vectorized kernels also with misaligned (offset) views. Plus proof that each pointwise launcher takes the vectorized
raw kernel for contiguous arrays and the ElementwiseKernel for strided ones.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpugrad.backend import get_backend, kernels, reference
from gpugrad.testing import cuda_sim
from tests.kernel_cases import CASES, DTYPES, OFFSET_SHAPES, offset, rng_for, strided
from tests.kernels.test_kernel_emulated import Recorder, assert_matches, vectorized

pytestmark = pytest.mark.gpu


def _instances():
    for case in CASES:
        for dtype in DTYPES:
            for shape in case.shapes:
                layouts = ("C", "strided") if case.strided else ("C",)
                layouts += ("offset",) if shape in OFFSET_SHAPES and vectorized(case) else ()
                for layout in layouts:
                    yield pytest.param(case, dtype, shape, layout,
                                       id=f"{case.id}-{np.dtype(dtype).name}-{'x'.join(map(str, shape))}-{layout}")


def _device(xp, a, layout, inplace):
    """The host argument on the device; strided layouts are made there (arrays updated in place stay contiguous),
    offset ones too (for every array: a misaligned view of a fresh device buffer)."""
    if not isinstance(a, np.ndarray):
        return a
    if layout == "offset":
        return offset(xp.asarray(a), xp)
    return strided(xp.asarray(a), xp) if layout == "strided" and not inplace else xp.asarray(a)


def _host(xp, out):
    if isinstance(out, tuple):
        return tuple(_host(xp, o) for o in out)
    return None if out is None else xp.asnumpy(out)


@pytest.mark.parametrize("case, dtype, shape, layout", list(_instances()))
def test_kernel_on_cuda_matches_reference(case, dtype, shape, layout):
    xp = get_backend("cuda").xp
    args, kwargs = case.make(rng_for(case, dtype, shape), np.dtype(dtype).type, shape)
    d_args = [_device(xp, a, layout, i in case.inplace) for i, a in enumerate(args)]
    # The reference gets the contiguous values: NumPy sums strided rows in another order, which in float32 over
    # 8200 columns moves a layer norm by more than the tolerance; the layout is the launcher's test here.
    r_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    calls = kernels.CALLS[case.name]
    got = _host(xp, getattr(kernels, case.name)(xp, *d_args, **kwargs))
    want = getattr(reference, case.name)(np, *r_args, **kwargs)
    what = f"{case.id} {np.dtype(dtype).name} {shape} {layout}"
    assert kernels.CALLS[case.name] == calls + 1, f"{what}: the CUDA launcher did not run"
    assert_matches(got, want, dtype, what, case.tolerance)
    for i in (i for i in case.inplace if args[i] is not None):
        assert_matches(xp.asnumpy(d_args[i]), r_args[i], dtype, f"{what} in-place argument {i}", case.tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pointwise_launchers_take_the_vectorized_kernel_for_contiguous_arrays(dtype):
    """Contiguous and offset (misaligned) arrays: one launch of pointwise<Op>; strided ones: the ElementwiseKernel.
    Recorded at the runtime (any device) and, on the simulated one, in its launch trace too."""
    xp = get_backend("cuda").xp
    c = kernels.CTYPES[np.dtype(dtype).name]
    x = xp.asarray(np.linspace(-2, 2, 8 * 36, dtype=dtype).reshape(8, 36))
    ones = xp.ones((8, 36), dtype)
    runs = {  # launcher: (args; which are updated in place; the raw kernel; the ElementwiseKernel)
        "gelu_fwd": ((x,), (), f"pointwise<ActFwd<{c}, pw::gelu>>", "gg_gelu_fwd"),
        "relu_bwd": ((x, ones), (), f"pointwise<ActBwd<{c}, pw::relu>>", "gg_relu_bwd"),
        "bias_act_fwd": ((x, x[0], "relu"), (), f"pointwise<BiasActFwd<{c}, pw::relu, false>>", "gg_bias_relu_fwd"),
        "dropout_fwd": ((x, 0.25, ones * 0.5), (), f"pointwise<DropoutFwd<{c}, {c}>>", "gg_dropout_fwd"),
        "dropout_bwd": ((x, x > 0, 0.25), (), f"pointwise<DropoutBwd<{c}>>", "gg_dropout_bwd"),
        "accumulate_": ((ones, x), (0,), f"pointwise<Accumulate<{c}>>", "gg_accumulate_"),
        "copy_": ((ones, x), (0,), f"pointwise<ActFwd<{c}, pw::identity>>", "gg_copy_"),
    }
    for name, (args, inplace, raw, ew) in runs.items():
        for layout, want in (("C", raw), ("offset", raw), ("strided", ew)):
            laid = [a.copy() if i in inplace and layout != "offset" else
                    offset(a, xp) if layout == "offset" else strided(a, xp) if layout == "strided" else a
                    for i, a in enumerate(args)]
            rec = Recorder(kernels.runtime())
            with kernels.use_runtime(rec), cuda_sim.trace() as events:
                getattr(kernels, name)(xp, *laid)
            assert rec.names == [want], f"{name} {layout}: launched {rec.names}"
            if get_backend("cuda").simulated:
                assert [w for e, w in events if e == "launch"] == [want], f"{name} {layout}: trace {events}"


def test_bench_peak_is_the_larger_of_memcpy_and_the_float4_copy_kernel():
    """On a CUDA device ``gpugrad bench`` times gpugrad's float4 copy (kernels.copy_) beside the cudaMemcpy copy and
    holds the kernels to the faster; the CPU keeps its one copy peak."""
    from gpugrad.bench import report
    from gpugrad.bench.timing import timer_for
    from gpugrad.bench.workloads.inputs import Inputs
    from gpugrad.bench.workloads.kernels import KERNEL_BY_ID, peak_copy, peak_vector_copy, run_kernels

    be = get_backend("cuda")
    assert peak_vector_copy(get_backend("cpu"), 960) is None
    fn, moved = peak_vector_copy(be, 960)
    assert moved == 2 * 960
    calls = kernels.CALLS["copy_"]
    rows, peak = run_kernels(Inputs(be, 6, 40), timer_for(be, repeats=2, min_sample_s=1e-5),
                                    peak_copy(be, 960), cases=[KERNEL_BY_ID["relu_fwd"]],
                                    vector_copy=(fn, moved))
    assert kernels.CALLS["copy_"] > calls  # the kernel launcher ran
    assert peak["gbs"] == max(peak["memcpy"]["gbs"], peak["vector_copy"]["gbs"]) > 0
    assert peak["source"] in ("memcpy", "vector_copy") and peak["copy_bytes"] == 960
    assert rows[0]["fraction_of_peak"] == rows[0]["gbs"] / peak["gbs"]
    line = report._format_kernels({"device": "cuda", "peak_bandwidth": peak, "kernels": rows,
                                   "config": {"shape": [6, 40]}})[0]
    assert "cudaMemcpy" in line and "float4 copy kernel" in line
