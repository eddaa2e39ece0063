"""vmap over every row of the op table (``tests/op_cases.py``, the pointwise declarations' rows included), each
against a per-sample loop (the stack of fn(x_i), plain gpugrad): every input batched along dim 0, along dim 1,
only the first input batched, and vmap of vmap; which rows run by batching rules and which by the slow per-sample
fallback is pinned down; the gradient of a vmapped loss against the loop's gradient."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpugrad
from gpugrad.func import grad, levels as levels_module, vmap
from tests.op_cases import CASES

B, B2 = 3, 2
ROWS = [pytest.param(case, shapes, id=f"{case.name}-{i}") for case in CASES for i, shapes in enumerate(case.shapes)]
# Rows that take the per-sample fallback (a warning says so): ops without a rule, and frontends that compute on
# the arrays themselves (max(dim), sort, ... find their indices with NumPy).
SLOW = {"median", "max_dim", "min_dim_keepdim", "median_dim", "kthvalue", "mode", "sort", "topk",
        "embedding",
        "linalg_slogdet", "logdet"}  # slogdet's sign leaves the op beside its result, which a rule cannot batch


@pytest.fixture(autouse=True)
def _fresh_warnings():
    levels_module._WARNED.clear()  # each test sees the once-per-op warnings afresh
    yield
    levels_module._WARNED.clear()


def _samples(case, shapes, lead, seed=1):
    """float64 inputs with ``lead`` extra leading dims (one sample per index), as NumPy arrays."""
    rng = np.random.default_rng(seed)
    return [np.stack([case.sample(rng, s) for _ in range(int(np.prod(lead)))]).reshape(lead + tuple(s))
            for s in shapes]


def _close(out, ref):
    assert tuple(out.shape) == tuple(ref.shape)
    assert out.dtype == ref.dtype
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-9, atol=1e-12)


def _run(fn, *args, **kw):
    """(result, whether vmap warned that it ran per sample)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = vmap(fn, **kw)(*args)
    return out, any("vmap:" in str(w.message) and issubclass(w.category, UserWarning) for w in caught)


@pytest.mark.parametrize("case,shapes", ROWS)
def test_vmap_matches_a_loop_over_dim_0(case, shapes):
    xs = [gpugrad.tensor(a) for a in _samples(case, shapes, (B,))]
    ref = gpugrad.stack([case.fn(*[x[i] for x in xs]) for i in range(B)])
    out, slow = _run(case.fn, *xs)
    _close(out, ref)
    assert slow == (case.name in SLOW), "a row changed between its batching rule and the per-sample fallback"


@pytest.mark.parametrize("case,shapes", ROWS)
def test_vmap_matches_a_loop_over_dim_1(case, shapes):
    dims = tuple(min(1, len(s)) for s in shapes)  # a 0-d sample can only be batched along dim 0
    xs = [gpugrad.tensor(np.moveaxis(a, 0, d)) for a, d in zip(_samples(case, shapes, (B,)), dims)]
    ref = gpugrad.stack([case.fn(*[x.select(d, i) for x, d in zip(xs, dims)]) for i in range(B)])
    _close(vmap(case.fn, in_dims=dims)(*xs), ref)


@pytest.mark.parametrize("case,shapes", [r for r in ROWS if len(r.values[1]) > 1])
def test_vmap_with_only_the_first_input_batched(case, shapes):
    first = gpugrad.tensor(_samples(case, shapes[:1], (B,))[0])
    rest = [gpugrad.tensor(a) for a in _samples(case, shapes[1:], (), seed=2)]
    ref = gpugrad.stack([case.fn(first[i], *rest) for i in range(B)])
    _close(vmap(case.fn, in_dims=(0,) + (None,) * len(rest))(first, *rest), ref)


@pytest.mark.parametrize("case,shapes", ROWS)
def test_vmap_of_vmap_matches_a_double_loop(case, shapes):
    xs = [gpugrad.tensor(a) for a in _samples(case, shapes, (B, B2))]
    ref = gpugrad.stack([gpugrad.stack([case.fn(*[x[i, j] for x in xs]) for j in range(B2)]) for i in range(B)])
    _close(vmap(vmap(case.fn))(*xs), ref)


@pytest.mark.parametrize("case,shapes", [r for r in ROWS if r.values[0].grad])
def test_the_gradient_of_a_vmapped_loss_matches_the_loops(case, shapes):
    """grad of Σ w * vmap(fn)(xs) w.r.t. every input: through the batching rules' graph, against plain autograd
    through the loop (whose ops gradcheck checks against finite differences)."""
    xs = [gpugrad.tensor(a) for a in _samples(case, shapes, (B,))]
    out = gpugrad.stack([case.fn(*[x[i] for x in xs]) for i in range(B)])
    if out.dtype.kind != "f":
        pytest.skip("integer output")
    w = gpugrad.tensor(np.random.default_rng(5).standard_normal(tuple(out.shape)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the SLOW rows' fallback
        got = grad(lambda *a: (vmap(case.fn)(*a) * w).sum(), argnums=tuple(range(len(xs))))(*xs)
    leaves = [x.detach().requires_grad_() for x in xs]
    loop = (gpugrad.stack([case.fn(*[x[i] for x in leaves]) for i in range(B)]) * w).sum()
    want = gpugrad.autograd.grad(loop, leaves, allow_unused=True) if loop.requires_grad else [None] * len(xs)
    for g, r, x in zip(got, want, xs):
        _close(g, r if r is not None else gpugrad.zeros_like(x))
