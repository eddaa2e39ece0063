"""Forward values of every registered op against exact closed forms (tests/exact_op_cases.py), without torch.

The op table's ``ref`` for a declared pointwise op is gpugrad's own NumPy reference (what the CPU runs), and the
torch oracle is optional: these rows are the independent check of forward values in every run.  The same rows run
on CUDA (-m gpu; on the simulated device, GPUGRAD_CUDA_SIM=1, the .cu kernels run on the CPU emulator), which holds
the kernels themselves to the closed forms.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.ops import REGISTRY
from gpugrad.testing import cuda_sim
from tests.exact import assert_exact
from tests.exact_op_cases import ROWS
from tests.ops.test_ops import _graph_ops

PARAMS = [pytest.param(row, dtype, id=f"{row.name}-{np.dtype(dtype).name}") for row in ROWS for dtype in row.dtypes]
# Known bugs of the simulated device (not of CuPy): rows that fail only there.
SIM_BUGS = {
    "binary_cross_entropy": "cuda_sim computes CuPy ufuncs with NumPy outside np.errstate, so log(0) (x = 0 or 1, "
                            "clamped to -100 as torch) raises a RuntimeWarning where CuPy is silent; "
                            "BinaryCrossEntropy's R._quiet(xp) is a no-op for CuPy (no errstate)",
}
CUDA_PARAMS = [pytest.param(*p.values, id=p.id, marks=pytest.mark.xfail(strict=True, reason=SIM_BUGS[p.values[0].name]))
               if cuda_sim.enabled() and p.values[0].name in SIM_BUGS else p for p in PARAMS]


def _check(row, dtype, device):
    ins = [gpugrad.tensor(np.asarray(a, dtype=dtype), device=device) for a in row.inputs]
    out = row.call(*ins)
    want_dtype = np.dtype(row.dtype or dtype)
    assert out.dtype == want_dtype, f"{row.name}: dtype {out.dtype}, expected {want_dtype}"
    assert_exact(out.detach().cpu().numpy(), row.expected(dtype), want_dtype, row.tol, f"{row.name} {device}")


@pytest.mark.parametrize("row, dtype", PARAMS)
def test_forward_matches_closed_form(row, dtype):
    _check(row, dtype, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("row, dtype", CUDA_PARAMS)
def test_cuda_forward_matches_closed_form(row, dtype, monkeypatch):
    monkeypatch.setenv("GPUGRAD_DEVICE", "cuda")  # side inputs the rows make (targets, masks, ids) go there too
    _check(row, dtype, "cuda")


def test_every_registered_op_has_a_closed_form():
    missing = sorted(set(REGISTRY) - {row.op for row in ROWS})
    assert not missing, f"registered ops without a closed-form row in tests/exact_op_cases.py: {missing}"
    unknown = sorted({row.op for row in ROWS} - set(REGISTRY))
    assert not unknown, f"closed-form rows naming ops that are not registered: {unknown}"


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_row_records_its_op(row):
    """A row covers its op only if the graph it records holds that op's node (not merely an op that computes the
    same values): otherwise a meta-test satisfied by a mislabelled row would leave the op unchecked."""
    ins = [gpugrad.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in row.inputs]
    ops = _graph_ops(row.call(*ins))
    assert REGISTRY[row.op] in ops, f"{row.name}: no {REGISTRY[row.op].__name__} node in {sorted(o.__name__ for o in ops)}"
