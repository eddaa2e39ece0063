"""vmap's semantics against torch.func.vmap on the same float64 inputs: in_dims (None entries, pytree prefixes,
negative dims), out_dims, pytree outputs, the per-sample view inside the function, nesting, chunk_size, randomness,
in-place ops, kwargs, the errors (type and first sentence), the fallback's warning (once per op) and its values."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpugrad
import gpugrad.func as gf
from gpugrad.func import levels as levels_module, vmap
from tests.autograd.test_engine import Cube  # x^3 with a hand-written backward
from tests.func.helpers import assert_same, both, same_error

RNG = np.random.default_rng(0)
X34 = RNG.standard_normal((3, 4))
Y34 = RNG.standard_normal((3, 4))
W45 = RNG.standard_normal((4, 5))
V4 = RNG.standard_normal(4)
X234 = RNG.standard_normal((2, 3, 4))
X253 = RNG.standard_normal((2, 5, 3))
X74 = RNG.standard_normal((7, 4))
W324, B32 = RNG.standard_normal((3, 2, 4)), RNG.standard_normal((3, 2))


@pytest.fixture(autouse=True)
def _fresh_warnings():
    levels_module._WARNED.clear()
    yield
    levels_module._WARNED.clear()


# -- inputs and outputs --------------------------------------------------------------------------------------------
def test_in_dims_with_none_entries_and_pytrees(torch):
    def run(lib, fn):
        def f(params, x, pair):
            return {"y": x @ params["w"] + params["b"], "z": (pair[0] * pair[1]).sum()}
        params = {"w": lib.tensor(W45), "b": lib.tensor(V4[:1])}
        return fn.vmap(f, in_dims=(None, 0, (1, None)))(params, lib.tensor(X34), (lib.tensor(Y34.T), lib.tensor(V4)))
    assert_same(*both(torch, run))


def test_negative_in_dims_and_out_dims(torch):
    def run(lib, fn):
        x = lib.tensor(X234)
        return (fn.vmap(lambda a: a.sum(0), in_dims=-1)(x), fn.vmap(lambda a: a * 2, in_dims=1, out_dims=-1)(x),
                fn.vmap(lambda a: (a, a.sum()), in_dims=2, out_dims=(1, 0))(x))
    assert_same(*both(torch, run))


def test_out_dims_none_and_an_unbatched_output(torch):
    def run(lib, fn):
        w = lib.tensor(V4)
        return fn.vmap(lambda a: (a + 1, w * 2, w), out_dims=(0, 0, None))(lib.tensor(X34))
    ours, theirs = both(torch, run)
    assert_same(ours, theirs)
    assert ours[1].shape == (3, 4)  # an output that does not depend on the batch is broadcast to it, as torch


def test_list_and_dict_outputs(torch):
    def run(lib, fn):
        return fn.vmap(lambda a, b: [a.sin(), {"p": a * b, "q": b.sum()}], out_dims=[0, {"p": 1, "q": 0}])(
            lib.tensor(X34), lib.tensor(Y34))
    assert_same(*both(torch, run))


def test_inside_vmap_tensors_look_like_one_sample(torch):
    def run(lib, fn):
        seen = []

        def f(a):
            seen.append((tuple(a.shape), a.dim(), a.ndim, a.size(0), a.size(-1), len(a), a.numel(), a.is_contiguous()))
            return a
        fn.vmap(f, in_dims=1)(lib.tensor(X253))
        return seen
    ours, theirs = both(torch, run)
    assert ours == theirs == [((2, 3), 2, 2, 2, 3, 2, 6, False)]


def test_kwargs_are_passed_unbatched(torch):
    def run(lib, fn):
        return fn.vmap(lambda a, scale=1.0: a * scale)(lib.tensor(X34), scale=lib.tensor(V4))
    assert_same(*both(torch, run))


def test_nested_vmap_with_in_dims_is_an_outer_product(torch):
    def run(lib, fn):
        dot = fn.vmap(fn.vmap(lambda a, b: (a * b).sum(), in_dims=(None, 0)), in_dims=(0, None))
        return dot(lib.tensor(X34), lib.tensor(Y34[:2]))
    ours, theirs = both(torch, run)
    assert_same(ours, theirs)
    np.testing.assert_allclose(ours.numpy(), X34 @ Y34[:2].T)


def test_vmap_of_a_module_and_of_functional_call(torch):
    def run(lib, fn):
        lib.manual_seed(0)
        model = lib.nn.Linear(4, 2).double()
        with lib.no_grad():
            model.weight.copy_(lib.tensor(W45[:, :2].T))
            model.bias.copy_(lib.tensor(V4[:2]))
        stacked = {"weight": lib.tensor(W324), "bias": lib.tensor(B32)}
        ensemble = fn.vmap(lambda p, x: fn.functional_call(model, p, (x,)), in_dims=(0, None))
        return fn.vmap(model)(lib.tensor(X34)), ensemble(stacked, lib.tensor(X34))
    assert_same(*both(torch, run))


def test_chunk_size_gives_the_unchunked_result(torch):
    def run(lib, fn):
        x = lib.tensor(X74)
        return [fn.vmap(lambda a: (a.exp(), a.sum()), chunk_size=c)(x) for c in (None, 1, 3, 7, 10)]
    ours, theirs = both(torch, run)
    assert_same(ours, theirs)
    for r in ours[1:]:
        assert_same(r, tuple(ours[0]))


def test_gpugrad_vmap_is_the_func_one(torch):
    assert gpugrad.vmap is gf.vmap
    assert torch.vmap is torch.func.vmap


# -- values that vmap refuses, as torch --------------------------------------------------------------------------
def test_item_and_data_dependent_control_flow_raise_as_torch(torch):
    same_error(torch, lambda lib, fn: fn.vmap(lambda a: a.sum().item())(lib.tensor(X34)))
    same_error(torch, lambda lib, fn: fn.vmap(lambda a: a if a.sum() > 0 else -a)(lib.tensor(X34)))


def test_a_batched_tensor_used_after_its_vmap_raises():
    kept = []
    vmap(lambda a: kept.append(a) or a)(gpugrad.tensor(X34))
    with pytest.raises(RuntimeError, match="after the vmap that made it returned"):
        vmap(lambda b: b + kept[0])(gpugrad.tensor(Y34))
    with pytest.raises(RuntimeError, match="after the vmap that made it returned"):
        kept[0].sort()


@pytest.mark.parametrize("call", [
    lambda lib, fn: fn.vmap(lambda a: a, in_dims=[0])(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda: 1)(),
    lambda lib, fn: fn.vmap(lambda a, b: a, in_dims=(0,))(lib.tensor(X34), lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: a, in_dims=2)(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a, n: a, in_dims=(0, 0))(lib.tensor(X34), 3),
    lambda lib, fn: fn.vmap(lambda a: a, in_dims=(1.5,))(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a, b: a + b)(lib.tensor(X34), lib.tensor(W45)),
    lambda lib, fn: fn.vmap(lambda a: a, in_dims=None)(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: a, out_dims="x")(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: a, out_dims=None)(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: (a, a), out_dims=(0, 1, 2))(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: 3)(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: a, randomness="sometimes")(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a: a + lib.randn(4))(lib.tensor(X34)),
    lambda lib, fn: fn.vmap(lambda a, b: a.add_(b), in_dims=(None, 0))(lib.tensor(V4), lib.tensor(X34)),
], ids=["in_dims_list", "no_inputs", "in_dims_structure", "in_dim_range", "non_tensor", "in_dim_type", "sizes",
        "nothing_batched", "out_dims_type", "out_dims_none", "out_dims_structure", "non_tensor_output",
        "randomness_value", "randomness_error", "inplace_into_unbatched"])
def test_errors_match_torch(torch, call):
    same_error(torch, call)


# -- randomness ------------------------------------------------------------------------------------------------
def test_randomness_same_draws_once_for_the_batch():
    out = vmap(lambda a: a * 0 + gpugrad.randn(4), randomness="same")(gpugrad.tensor(X34))
    assert np.array_equal(out[0].numpy(), out[1].numpy()) and np.array_equal(out[0].numpy(), out[2].numpy())


def test_randomness_different_draws_per_sample():
    gpugrad.manual_seed(3)
    with pytest.warns(UserWarning, match="once per sample"):
        out = vmap(lambda a: a * 0 + gpugrad.rand(4), randomness="different")(gpugrad.tensor(X34))
    gpugrad.manual_seed(3)
    loop = gpugrad.stack([gpugrad.rand(4) for _ in range(3)])  # the same draws, one per sample, in order
    np.testing.assert_array_equal(out.numpy(), loop.numpy())
    assert not np.array_equal(out[0].numpy(), out[1].numpy())


def test_dropout_under_randomness_same_uses_one_mask():
    x = gpugrad.ones(3, 50, dtype=gpugrad.float64)
    out = vmap(lambda a: gpugrad.nn.functional.dropout(a, 0.5), randomness="same")(x)
    assert np.array_equal(out[0].numpy(), out[2].numpy()) and set(np.unique(out.numpy())) <= {0.0, 2.0}


# -- in place and indexing ---------------------------------------------------------------------------------------
def test_inplace_ops_inside_vmap_write_into_the_batched_input(torch):
    def run(lib, fn):
        x = lib.tensor(X34)

        def f(a, b):
            a.mul_(2)
            a[1:3] = b[:2]
            a.add_(1.0)
            return a.clone()
        return fn.vmap(f)(x, lib.tensor(Y34)), x
    ours, theirs = both(torch, run)
    assert_same(ours, theirs)


def test_batched_index_tensors(torch):
    def run(lib, fn):
        idx = lib.tensor(np.array([[0, 2], [3, 3], [1, 0]]))
        x = lib.tensor(X34)
        return (fn.vmap(lambda a, i: a[i])(x, idx), fn.vmap(lambda a, i: a.gather(0, i))(x, idx),
                fn.vmap(lambda i: lib.tensor(W45)[i], in_dims=0)(idx))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert_same(*both(torch, run))


# -- the per-sample fallback -----------------------------------------------------------------------------------
def test_an_op_without_a_rule_warns_once_and_gives_the_loops_values():
    x = gpugrad.tensor(X34)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = vmap(lambda a: a.median() * 2)(x)
        again = vmap(lambda a: a.median() + a.sum())(x)
        table = vmap(lambda w: gpugrad.nn.functional.embedding(gpugrad.tensor([1, 0]), w))(x.reshape(3, 2, 2))
    slow = [str(w.message) for w in caught if "vmap:" in str(w.message)]
    assert len(slow) == 2 and "median" in slow[0] and "embedding" in slow[1]
    assert all(w.filename == __file__ for w in caught if "vmap:" in str(w.message))  # points at the caller
    lower_median = np.sort(X34, 1)[:, 1]  # torch's median: the lower of the two middle values
    np.testing.assert_allclose(first.numpy(), 2 * lower_median)
    np.testing.assert_allclose(again.numpy(), lower_median + X34.sum(1))
    np.testing.assert_array_equal(table.numpy(), X34.reshape(3, 2, 2)[:, [1, 0]])


def test_a_frontend_that_reads_arrays_runs_the_function_per_sample():
    with pytest.warns(UserWarning, match="sort reads the values of a batched tensor"):
        out = vmap(lambda a: a.sort(descending=True).values[0] + a.max(0).values)(gpugrad.tensor(X34))
    np.testing.assert_allclose(out.numpy(), 2 * X34.max(1))


def test_rules_cover_most_of_the_op_table():
    """The report's numbers: registry ops with a batching rule vs the per-sample fallback."""
    from gpugrad.core.registry import REGISTRY
    from gpugrad.func.rules import rule_for
    fallback = sorted(n for n, cls in REGISTRY.items() if rule_for(cls) is None)
    assert fallback == ["as_view", "copy_slices", "linalg_slogdet", "median"], fallback


@pytest.mark.parametrize("shape", [(4, 5), (5,), (2, 5, 3)], ids=["rows", "one_row", "nd"])
def test_cross_entropy_with_batched_targets_runs_by_its_rule(shape):
    """Per-sample class ids (a classifier's per-sample loss) take cross-entropy's rule: no per-sample fallback."""
    rng = np.random.default_rng(6)
    x = gpugrad.tensor(rng.standard_normal((3,) + shape))
    t = gpugrad.tensor(rng.integers(0, 5, (3,) + ((shape[0],) + shape[2:] if len(shape) > 1 else ())))
    w = gpugrad.tensor(rng.uniform(0.5, 2, 5))
    for reduction in ("mean", "sum", "none"):
        def loss(a, b, reduction=reduction):
            return gpugrad.nn.functional.cross_entropy(a, b, weight=w, reduction=reduction, label_smoothing=0.1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            out = vmap(loss)(x, t)
        np.testing.assert_allclose(out.numpy(), gpugrad.stack([loss(x[i], t[i]) for i in range(3)]).numpy(), rtol=1e-12)


def test_a_custom_function_inside_vmap_and_grad():
    """Its value runs batched; where its node must record a graph (grad inside vmap), vmap runs per sample, so the
    gradient is its backward's (3 x^2), not a silent zero; jacrev's batched cotangents go through its backward."""
    x = gpugrad.tensor(X34)
    np.testing.assert_allclose(vmap(Cube.apply)(x).numpy(), X34 ** 3)
    with pytest.warns(UserWarning, match="Cube.apply, a custom autograd.Function"):
        per_sample = vmap(gf.grad(lambda a: Cube.apply(a).sum()))(x)
    np.testing.assert_allclose(per_sample.numpy(), 3 * X34 ** 2)
    np.testing.assert_allclose(gf.grad(lambda a: vmap(Cube.apply)(a).sum())(x).numpy(), 3 * X34 ** 2)
    np.testing.assert_allclose(gf.jacrev(Cube.apply)(x[0]).numpy(), np.diag(3 * X34[0] ** 2))


def test_forward_ad_on_a_batched_tensor_refuses_rather_than_dropping_the_tangent():
    def f(a):
        with gpugrad.autograd.forward_ad.dual_level():
            return gpugrad.autograd.forward_ad.make_dual(a, a.cos()).sin()
    with pytest.raises(RuntimeError, match="use gpugrad.func.jvp instead"):
        vmap(f)(gpugrad.tensor(X34))
    jt = vmap(lambda a: gf.jvp(gpugrad.sin, (a,), (a.cos(),))[1])(gpugrad.tensor(X34))
    np.testing.assert_allclose(jt.numpy(), np.cos(X34) ** 2)
