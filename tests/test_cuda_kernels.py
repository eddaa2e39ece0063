"""Every kernel case (tests/kernel_cases.py) through the real CUDA path: the launcher in backend/kernels.py with
the default runtime, i.e. ``CupyRuntime`` and CuPy's RawModule / ElementwiseKernel (pytest -m gpu).

On a GPU this is NVRTC-compiled code on the device; under ``GPUGRAD_CUDA_SIM=1`` it is the same CupyRuntime code
on the simulated device, whose kernels run the exact .cu source on the CPU emulator. Every row runs at all its
shapes, including the ones that exercise cross-warp reductions and second chunks (4097 and 8200 columns), row
chunks of the column kernels (bias gradients of 300 and 1000 rows), and the SGD-momentum and Adam updates.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpugrad.backend import get_backend, kernels, reference
from kernel_cases import CASES, DTYPES, rng_for, strided
from test_kernel_emulated import assert_matches

pytestmark = pytest.mark.gpu


def _instances():
    for case in CASES:
        for dtype in DTYPES:
            for shape in case.shapes:
                for layout in (("C", "strided") if case.strided else ("C",)):
                    yield pytest.param(case, dtype, shape, layout,
                                       id=f"{case.id}-{np.dtype(dtype).name}-{'x'.join(map(str, shape))}-{layout}")


def _device(xp, a, layout, inplace):
    """The host argument on the device; strided layouts are made there (arrays updated in place stay contiguous)."""
    if not isinstance(a, np.ndarray):
        return a
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
