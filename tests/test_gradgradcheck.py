"""Second derivatives: every op that supports create_graph=True, checked by finite differences of its VJP.

An op opts in with ``double_backward = True`` (its VJP uses only Tensor-safe operations) or a ``backward_graph``;
the others must refuse create_graph with an error naming them (never give a wrong higher-order gradient).
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.autograd import gradcheck
from gpugrad.ops import REGISTRY
from op_cases import CASES, case_inputs


def supports_create_graph(op):
    cls = REGISTRY[op]
    return cls.double_backward or hasattr(cls, "backward_graph")


SUPPORTED = [(c, i) for c in CASES for i in range(len(c.shapes))
             if supports_create_graph(c.op) and c.op != "cast" and all(np.prod(s) > 0 for s in c.shapes[i])]
REFUSED = [c for c in CASES if not supports_create_graph(c.op)]


def vjp(case):
    """(x..., u) -> the VJP u ↦ uᵀJ(x), computed with create_graph so it can be differentiated again.
    Differentiating w.r.t. u as well covers linear ops, whose VJPs do not depend on x."""
    def fn(*args):
        *xs, u = args
        grads = gpugrad.autograd.grad((case.fn(*xs) * u).sum(), xs, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return fn


@pytest.mark.parametrize("case,k", SUPPORTED, ids=[f"{c.name}-{i}" for c, i in SUPPORTED])
def test_second_derivative(case, k):
    arrays = case_inputs(case, case.shapes[k], seed=11)
    ins = [gpugrad.tensor(a, requires_grad=True) for a in arrays]
    out_shape = case.fn(*ins).shape
    u = gpugrad.tensor(np.random.default_rng(2).standard_normal(out_shape), requires_grad=True)
    assert gradcheck(vjp(case), ins + [u], atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("case", REFUSED[:1] + [c for c in REFUSED if c.op in ("softmax", "gather", "layer_norm")],
                         ids=lambda c: c.name)
def test_unsupported_ops_refuse_create_graph(case):
    ins = [gpugrad.tensor(a, requires_grad=True) for a in case_inputs(case, case.shapes[0])]
    with pytest.raises(RuntimeError, match=r"Backward\d? does not support create_graph=True"):
        gpugrad.autograd.grad(case.fn(*ins).sum(), ins, create_graph=True, allow_unused=True)
