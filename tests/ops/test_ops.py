"""Forward values of every op case against its NumPy reference, float32 and float64, contiguous and strided."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.ops import REGISTRY
from tests.op_cases import CASES, case_inputs

PARAMS = [(c, i) for c in CASES for i in range(len(c.shapes))]
IDS = [f"{c.name}-{i}" for c, i in PARAMS]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def test_every_op_has_a_case():
    covered = {c.op for c in CASES}
    missing = set(REGISTRY) - covered
    assert not missing, f"registered ops without a row in tests/op_cases.py: {sorted(missing)}"


def _graph_ops(out):
    seen, stack, ops = set(), [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is not None and id(node) not in seen:
            seen.add(id(node))
            ops.add(type(node))
            stack.extend(n for n, _ in node.next_functions)
    return ops


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_row_records_its_op(case):
    """A row covers ``case.op`` only if its graph holds that op's node: a row labelled with an op it no longer runs
    (a basic-key setitem once named index_place, now copy_ into a view) would leave the op without a case."""
    ins = [gpugrad.tensor(a, requires_grad=True) for a in case_inputs(case, case.shapes[0])]
    ops = _graph_ops(case.fn(*ins))
    assert REGISTRY[case.op] in ops, f"{case.name}: no {REGISTRY[case.op].__name__} in {sorted(o.__name__ for o in ops)}"


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case,k", PARAMS, ids=IDS)
def test_forward_matches_reference(case, k, dtype, layout):
    arrays = case_inputs(case, case.shapes[k], dtype, layout=layout)
    out = case.fn(*[gpugrad.tensor(a) for a in arrays])
    expected = case.ref(*[a.astype(np.float64) for a in arrays])
    assert out.shape == np.shape(expected)
    want_dtype = np.float32 if case.op == "cast" else dtype
    assert out.dtype == want_dtype
    tol = dict(TOL[dtype], rtol=max(TOL[dtype]["rtol"], case.rtol32 if dtype == np.float32 else 0))
    np.testing.assert_allclose(out.numpy(), expected, **tol)


@pytest.mark.parametrize("case,k", PARAMS, ids=IDS)
def test_grad_fn_recorded(case, k):
    arrays = case_inputs(case, case.shapes[k])
    ins = [gpugrad.tensor(a, requires_grad=True) for a in arrays]
    out = case.fn(*ins)
    assert out.requires_grad and out.grad_fn is not None
    assert out.grad_fn.name().endswith(("Backward0", "Backward1", "Backward2")) or out.grad_fn.name() == "CopySlices"  # torch names
    with gpugrad.no_grad():
        assert case.fn(*ins).grad_fn is None
