"""Every op case's VJPs against float64 central finite differences (full Jacobian: the shapes are small)."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.autograd import GradcheckError, gradcheck
from tests.op_cases import CASES, case_inputs

PARAMS = [(c, i) for c in CASES if c.grad for i in range(len(c.shapes))]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("case,k", PARAMS, ids=[f"{c.name}-{i}" for c, i in PARAMS])
def test_gradcheck(case, k, layout):
    ins = [gpugrad.tensor(a, requires_grad=True) for a in case_inputs(case, case.shapes[k], layout=layout)]
    if layout == "strided":  # tensor() copies; keep the strided layout the op sees
        for t, a in zip(ins, case_inputs(case, case.shapes[k], layout=layout)):
            t.data = a
    if case.op == "cast":
        fn = lambda a: case.fn(a).double()  # noqa: E731 - float32 output: compare in float64
        assert gradcheck(fn, ins, eps=1e-3, atol=1e-4, rtol=1e-3)
        return
    assert gradcheck(case.fn, ins)


@pytest.mark.parametrize("case,k", PARAMS[::7], ids=[f"{c.name}-{i}" for c, i in PARAMS[::7]])
def test_gradcheck_fast_mode(case, k):
    if case.op == "cast":
        pytest.skip("float32 output")
    ins = [gpugrad.tensor(a, requires_grad=True) for a in case_inputs(case, case.shapes[k], seed=3)]
    assert gradcheck(case.fn, ins, fast_mode=True)


class WrongGrad(gpugrad.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, gy):
        return gy  # wrong on purpose: should be 2 x gy


def test_gradcheck_reports_input_element_and_values():
    x = gpugrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.raises(GradcheckError, match=r"input 0 .*element \(0,\).*numeric 2\.0.*analytic 1\.0"):
        gradcheck(WrongGrad.apply, [x])
    with pytest.raises(GradcheckError, match="fast mode"):
        gradcheck(WrongGrad.apply, [x], fast_mode=True)
    assert gradcheck(WrongGrad.apply, [x], raise_exception=False) is False


def test_gradcheck_needs_float64():
    with pytest.raises(TypeError, match="float64"):
        gradcheck(lambda a: a.exp(), [gpugrad.tensor([1.0], requires_grad=True)])
