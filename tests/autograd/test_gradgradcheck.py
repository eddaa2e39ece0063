"""Second derivatives of every op, checked by finite differences of its VJP computed with create_graph=True.

An op's VJP runs on Tensors when ``double_backward = True`` (it uses only Tensor-safe operations), through its
``backward_graph``, or, for a linear op, as the ``Transposed`` op; no op refuses create_graph.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.autograd import gradcheck
from gpugrad.ops import REGISTRY
from tests.op_cases import CASES, case_inputs


def supports_create_graph(op):
    cls = REGISTRY[op]
    return cls.double_backward or hasattr(cls, "backward_graph") or cls.linear


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


def test_every_op_supports_create_graph():
    assert REFUSED == []


# rows whose torch twin cannot take a second derivative (gpugrad's are checked by finite differences above)
TORCH_CANNOT = {"layer_norm_bias_only": "torch 2.13's layer_norm double backward without a weight raises ('Expected "
                                        "a proper Tensor but got None'; tests/fuzz_known_differences.py)"}
TORCH = [(c, i) for c, i in SUPPORTED if c.torch_fn is not None and c.name not in TORCH_CANNOT]


@pytest.mark.parametrize("case,k", TORCH, ids=[f"{c.name}-{i}" for c, i in TORCH])
def test_second_derivative_matches_torch(case, k):
    """d/dx <v, ∇_x <u, f(x)>> (create_graph) against torch's, for every case with a torch twin."""
    torch = pytest.importorskip("torch")
    arrays = case_inputs(case, case.shapes[k], seed=12)
    rng = np.random.default_rng(13)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    results = []
    for lib, fn in ((gpugrad, case.fn), (torch, case.torch_fn)):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        y = fn(*xs)
        u = lib.tensor(np.random.default_rng(14).standard_normal(tuple(y.shape)))
        gs = lib.autograd.grad((y * u).sum(), xs, create_graph=True, allow_unused=True)
        inner = sum((g * lib.tensor(v)).sum() for g, v in zip(gs, vs) if g is not None and g.requires_grad)
        if not isinstance(inner, (int, float)):
            hs = lib.autograd.grad(inner, xs, allow_unused=True)
        else:  # every first derivative is constant (a linear op): the second derivatives are 0
            hs = [None] * len(xs)
        results.append([np.zeros(a.shape) if h is None else  # torch's zero tensors need force to leave it
                        (h.detach().numpy(force=True) if lib is torch else h.numpy()) for h, a in zip(hs, arrays)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-10)
