"""Ops that gave wrong numbers without an error, or raised where torch computes (issue #21, second pass): copies
that were views, range checks torch makes, NaN values and bounds, integer construction, and the op-level findings of
the registry-wide fuzzer (tests/fuzz). Each value is a closed form, checked against torch where the fixture exists."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F

NAN, INF = float("nan"), float("inf")


def _values(t):
    return t.detach().numpy()


# -- 2. repeat, tile and repeat_interleave return new storage -----------------------------------------------------------
COPIES = {  # each on inputs whose repeats NumPy can express as a view (a stride 0): a (1,) and a (2, 1) tensor
    "repeat": lambda x: x.repeat(*(3,) * x.ndim),
    "tile": lambda x: x.tile((1, 3) if x.ndim == 2 else (3,)),
    "repeat_interleave": lambda x: x.repeat_interleave(3),
    "repeat_interleave_dim": lambda x: x.repeat_interleave(3, dim=x.ndim - 1),
    "repeat_interleave_tensor": lambda x: x.repeat_interleave(gpugrad.tensor([3] * x.shape[0]), dim=0),
}
INPUTS = [[1.0], [[1.0], [2.0]]]


@pytest.mark.parametrize("values", INPUTS, ids=["1", "2x1"])
@pytest.mark.parametrize("name", list(COPIES))
def test_repeats_are_copies(name, values):
    x = gpugrad.tensor(values)
    r = COPIES[name](x)
    flat = r.reshape(-1)
    before = _values(r).copy()
    r[(0,) * r.ndim] = 5.0  # one element, not every copy of x[0]
    assert _values(r).reshape(-1)[0] == 5.0 and (_values(r).reshape(-1)[1:] == before.reshape(-1)[1:]).all()
    assert _values(x).tolist() == values
    x.add_(1.0)  # the input's later change does not reach the copy
    assert (_values(r).reshape(-1)[1:] == before.reshape(-1)[1:]).all()
    r.add_(1.0)  # and the copy can be written in place
    assert _values(r).reshape(-1)[0] == 6.0 and flat.shape == (r.numel(),)


@pytest.mark.parametrize("values", INPUTS, ids=["1", "2x1"])
@pytest.mark.parametrize("name", list(COPIES))
def test_repeats_are_copies_like_torch(torch, name, values):
    tx, gx = torch.tensor(values), gpugrad.tensor(values)
    if name == "repeat_interleave_tensor":
        tr = tx.repeat_interleave(torch.tensor([3] * tx.shape[0]), dim=0)
    else:
        tr = COPIES[name](tx)
    gr = COPIES[name](gx)
    tr[(0,) * tr.dim()], gr[(0,) * gr.ndim] = 5.0, 5.0
    tx.add_(1.0)
    gx.add_(1.0)
    tr.add_(1.0)
    gr.add_(1.0)
    np.testing.assert_array_equal(_values(gr), tr.numpy())


def test_repeat_keeps_its_gradient_and_node_name():
    x = gpugrad.tensor([1.0, 2.0], requires_grad=True)
    r = x.repeat(3)
    assert r.grad_fn.name() == "RepeatBackward0"
    (r * gpugrad.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])).sum().backward()
    assert x.grad.tolist() == [9.0, 12.0]  # 1 + 3 + 5, 2 + 4 + 6


def test_repeat_interleave_of_an_empty_tensor_is_empty(torch):
    got = gpugrad.zeros(2, 4, 0).repeat_interleave(2, dim=0)
    assert tuple(got.shape) == tuple(torch.zeros(2, 4, 0).repeat_interleave(2, dim=0).shape) == (4, 4, 0)


def test_flatten_of_an_empty_tensor_keeps_its_sizes(torch):
    for shape, args in (((2, 0, 3), (0, 1)), ((0, 4), ()), ((3, 0), (1,))):
        assert tuple(gpugrad.zeros(*shape).flatten(*args).shape) == tuple(torch.zeros(*shape).flatten(*args).shape)


# -- 3. a complex cast of a tensor that requires grad ---------------------------------------------------------------------
def test_complex_cast_of_a_tensor_that_requires_grad_is_refused():
    x = gpugrad.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="complex"):
        x.to(gpugrad.complex64)
    with gpugrad.no_grad():
        assert x.to(gpugrad.complex64).dtype == gpugrad.complex64  # no graph asked for: the cast is fine
    assert x.detach().to(gpugrad.complex128).tolist() == [1 + 0j, 2 + 0j]
    for f in (lambda t: t * 1j, lambda t: t + gpugrad.tensor([1j, 2j])):  # promotion into complex, too
        with pytest.raises(RuntimeError, match="complex"):
            f(x)
        assert f(x.detach()).dtype == gpugrad.complex64 or f(x.detach()).dtype == gpugrad.complex128


# -- 4. range checks torch makes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", [2.0, NAN, -0.5])
def test_binary_cross_entropy_refuses_a_target_outside_0_1(target):
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(gpugrad.tensor([0.5, 0.5]), gpugrad.tensor([target, 0.0]))


@pytest.mark.parametrize("target", [2.0, NAN, -0.5])
def test_binary_cross_entropy_target_check_like_torch(torch, target):
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor([0.5, 0.5]), torch.tensor([target, 0.0]))


def test_binary_cross_entropy_refuses_a_nan_input():
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(gpugrad.tensor([NAN]), gpugrad.tensor([0.0]))


def test_binary_cross_entropy_at_the_edges_of_the_range_matches_torch(torch):
    x, t = [0.0, 1.0, 0.25], [0.0, 1.0, 1.0]
    got = F.binary_cross_entropy(gpugrad.tensor(x), gpugrad.tensor(t), reduction="none")
    want = torch.nn.functional.binary_cross_entropy(torch.tensor(x), torch.tensor(t), reduction="none")
    np.testing.assert_allclose(_values(got), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("ids", [[-1], [3], [0, -2]])
def test_index_select_refuses_ids_out_of_range(ids):
    with pytest.raises(IndexError, match="index out of range"):
        gpugrad.tensor([1.0, 2.0, 3.0]).index_select(0, gpugrad.tensor(ids))


def test_index_select_refuses_ids_out_of_range_like_torch(torch):
    with pytest.raises(IndexError, match="index out of range"):
        torch.tensor([1.0, 2.0, 3.0]).index_select(0, torch.tensor([-1]))


def test_kl_div_of_a_negative_target_is_nan(torch):
    x, t = [-1.0, -2.0], [-0.5, 0.5]
    got = F.kl_div(gpugrad.tensor(x), gpugrad.tensor(t), reduction="none")
    want = torch.nn.functional.kl_div(torch.tensor(x), torch.tensor(t), reduction="none")
    assert math.isnan(_values(got)[0]) and math.isnan(want[0].item())
    assert _values(got)[1] == pytest.approx(0.5 * (math.log(0.5) + 2.0)) == pytest.approx(want[1].item())
    assert _values(F.kl_div(gpugrad.tensor([-1.0]), gpugrad.tensor([0.0]), reduction="sum")) == 0.0  # 0 log 0 = 0


def test_tensor_of_ints_beyond_int64_raises():
    with pytest.raises(ValueError, match="Overflow"):
        gpugrad.tensor([2 ** 62 + 1, 2 ** 63])
    with pytest.raises(ValueError, match="Overflow"):
        gpugrad.tensor([[1], [-2 ** 63 - 1]])


def test_tensor_of_ints_that_fit_keeps_every_digit(torch):
    values = [2 ** 62 + 1, -2 ** 63, 2 ** 63 - 1]
    t = gpugrad.tensor(values)
    assert t.dtype == gpugrad.int64 and t.tolist() == values == torch.tensor(values).tolist()
    assert gpugrad.tensor([2 ** 62 + 1, 1.5]).dtype == torch_float(torch, [2 ** 62 + 1, 1.5])


def torch_float(torch, values):
    return {torch.float32: gpugrad.float32, torch.float64: gpugrad.float64}[torch.tensor(values).dtype]


# -- NaN values and bounds ------------------------------------------------------------------------------------------------
def test_clamp_with_a_nan_tensor_bound_gives_nan(torch):
    x, hi, lo = [1.0, -2.0, 0.5], [NAN, 0.0, 1.0], [-1.0, NAN, 0.0]
    for kw in ({"max": hi}, {"min": lo}, {"min": lo, "max": hi}):
        got = gpugrad.tensor(x).clamp(**{k: gpugrad.tensor(v) for k, v in kw.items()})
        want = torch.tensor(x).clamp(**{k: torch.tensor(v) for k, v in kw.items()})
        np.testing.assert_array_equal(_values(got), want.numpy())
    assert np.isnan(_values(gpugrad.tensor(x).clamp(max=gpugrad.tensor(hi)))[0])


def test_clamp_with_a_nan_bound_sends_the_gradient_to_the_bound(torch):
    x, hi = [1.0, -2.0], [NAN, 0.0]
    gx, gh = gpugrad.tensor(x, requires_grad=True), gpugrad.tensor(hi, requires_grad=True)
    tx, th = torch.tensor(x, requires_grad=True), torch.tensor(hi, requires_grad=True)
    gx.clamp(max=gh).sum().backward()
    tx.clamp(max=th).sum().backward()
    np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(gh.grad.numpy(), th.grad.numpy())


def test_sign_of_nan_is_zero_and_of_integers_their_sign(torch):
    x = [NAN, -2.5, 0.0, 3.0, -0.0]
    assert _values(gpugrad.tensor(x).sign()).tolist() == [0.0, -1.0, 0.0, 1.0, 0.0] == torch.tensor(x).sign().tolist()
    ints = [-3, 0, 2]
    got = gpugrad.tensor(ints).sign()
    assert got.dtype == gpugrad.int64 and got.tolist() == [-1, 0, 1] == torch.tensor(ints).sign().tolist()


def test_nll_loss_ignores_a_row_holding_nan(torch):
    x, t = [[NAN, 0.0], [1.0, 2.0]], [-100, 1]
    for reduction in ("mean", "sum", "none"):
        got = F.nll_loss(gpugrad.tensor(x), gpugrad.tensor(t), reduction=reduction)
        want = torch.nn.functional.nll_loss(torch.tensor(x), torch.tensor(t), reduction=reduction)
        np.testing.assert_array_equal(_values(got), want.numpy())
    assert F.nll_loss(gpugrad.tensor(x), gpugrad.tensor(t)).item() == -2.0


def test_logsumexp_over_a_tuple_of_dims(torch):
    a = np.random.default_rng(0).standard_normal((2, 3, 4))
    for d, keep in (((0, 1), False), ((0, 2), True), ((-1, 0), False)):
        got = gpugrad.tensor(a).logsumexp(d, keep)
        want = torch.tensor(a).logsumexp(d, keep)
        np.testing.assert_allclose(_values(got), want.numpy(), rtol=1e-12)
    x = gpugrad.tensor(a, requires_grad=True)
    x.logsumexp((0, 1)).sum().backward()  # d/dx lse over (0, 1) = softmax over those axes
    e = np.exp(a - a.max((0, 1), keepdims=True))
    np.testing.assert_allclose(x.grad.numpy(), e / e.sum((0, 1), keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("name", ["abs_", "neg_"])
def test_abs_and_neg_in_place(torch, name):
    g, t = gpugrad.tensor([-1.5, 0.0, 2.0]), torch.tensor([-1.5, 0.0, 2.0])
    assert getattr(g, name)() is g
    getattr(t, name)()
    assert g.tolist() == t.tolist() == ([1.5, 0.0, 2.0] if name == "abs_" else [1.5, -0.0, -2.0])
    x = gpugrad.tensor([-1.5, 2.0], requires_grad=True)
    y = x * 1.0
    getattr(y, name)()
    y.sum().backward()
    assert x.grad.tolist() == ([-1.0, 1.0] if name == "abs_" else [-1.0, -1.0])


# -- what the registry-wide fuzzer found: the same call in both libraries, the same value or the same error type -------
def _ints(lib, values):
    return lib.tensor(values)


SAME_AS_TORCH = {
    "cat_ranks": lambda lib: lib.cat([lib.zeros(2, 3), lib.zeros(2, 3, 1)]),
    "cat_sizes": lambda lib: lib.cat([lib.zeros(2, 3), lib.zeros(3, 4)], 1),
    "cat_0d": lambda lib: lib.cat([lib.tensor(1.0), lib.tensor(2.0)]),
    "cat_legacy_empty": lambda lib: lib.cat([lib.zeros(0), lib.ones(2, 3)]),
    "stack_sizes": lambda lib: lib.stack([lib.zeros(2, 3), lib.zeros(3, 2)]),
    "hstack_0d": lambda lib: lib.hstack([lib.tensor(1.0), lib.tensor([2.0, 3.0])]),
    "gather_out_of_range": lambda lib: lib.zeros(3).gather(0, _ints(lib, [5])),
    "gather_empty_index": lambda lib: lib.zeros(3, 0, 2).gather(0, lib.zeros(0, 1, 1, dtype=lib.int64)),
    "scatter_out_of_range": lambda lib: lib.zeros(3).scatter(0, _ints(lib, [5]), lib.ones(1)),
    "index_add_out_of_range": lambda lib: lib.zeros(3).index_add(0, _ints(lib, [-1]), lib.ones(1)),
    "index_select_empty_dim": lambda lib: lib.zeros(1, 0).index_select(1, _ints(lib, [0])),
    "index_select_0d": lambda lib: lib.tensor(5.0).index_select(0, _ints(lib, [0, 0])),
    "int_floor_divide_by_zero": lambda lib: _ints(lib, [1, 2]) // _ints(lib, [0, 1]),
    "int_remainder_by_zero": lambda lib: _ints(lib, [1, 2]) % 0,
    "int_fmod_by_zero": lambda lib: lib.fmod(_ints(lib, [1, 2]), 0),
    "float_floor_divide_by_zero": lambda lib: lib.tensor([1.0, -1.0, 0.0]) // 0.0,
    "take_along_dim_broadcasts": lambda lib: lib.take_along_dim(lib.arange(24.0).reshape(1, 2, 3, 4),
                                                                lib.zeros(1, 2, 1, 1, dtype=lib.int64), -4),
    "take_along_dim_0d": lambda lib: lib.tensor(1.0).take_along_dim(lib.tensor(0), 0),
    "take_along_dim_negative": lambda lib: lib.take_along_dim(lib.arange(6.0).reshape(2, 3),
                                                              _ints(lib, [[-1, 0], [-3, 2]]), 1),
    "take_along_dim_flat_negative": lambda lib: lib.take_along_dim(lib.arange(6.0), _ints(lib, [-1]), None),
    "clamp_int_float_bounds": lambda lib: _ints(lib, [1, 2, -3]).clamp(-0.5, 0.5),
    "clamp_int_float_min": lambda lib: _ints(lib, [1, 2, -3]).clamp(min=-0.5),
    "clamp_int_int_bounds": lambda lib: _ints(lib, [1, 2, -3]).clamp(0, 1),
    "clamp_bool_int_bounds": lambda lib: lib.tensor([True, False]).clamp(0, 1),
    "clamp_int32_int_bounds": lambda lib: lib.tensor([1, 5], dtype=lib.int32).clamp(0, 3),
    "clamp_in_place_int_float_bounds": lambda lib: _ints(lib, [1, 2]).clamp_(-0.5, 0.5),
    "clamp_in_place_int_int_bound": lambda lib: _ints(lib, [1, 2]).clamp_(max=1),
    "median_empty": lambda lib: lib.zeros(0).median(),
    "einsum_mixed_dtypes": lambda lib: lib.einsum("i,i->i", lib.ones(2, dtype=lib.float64), lib.ones(2)),
    "permute_no_dims": lambda lib: lib.ones(2).permute(),
    "repeat_no_sizes": lambda lib: lib.ones(2).repeat(),
    "unflatten_empty": lambda lib: lib.zeros(0, 0).unflatten(0, (-1,)),
    "unique_zero_sized_dims": lambda lib: lib.zeros(2, 0).unique(dim=0),
    "index_select_then_view": lambda lib: lib.arange(12.0).reshape(2, 2, 3).index_select(1, _ints(lib, [1, 0]))
    .view(-1, 3, 1),
    "topk_0_of_0d": lambda lib: lib.tensor(5.0).topk(0).values,
    "t_of_3d": lambda lib: lib.zeros(2, 3, 4).t(),
    "flipud_0d": lambda lib: lib.tensor(1.0).flipud(),
    "fliplr_1d": lambda lib: lib.ones(3).fliplr(),
    "isclose_dtypes": lambda lib: lib.ones(2).isclose(lib.ones(2, dtype=lib.float64)),
    "movedim_0d": lambda lib: lib.tensor(1.0).movedim(-1, 0),
    "transpose_0d": lambda lib: lib.tensor(1.0).transpose(0, -1),
    "flatten_start_after_end": lambda lib: lib.zeros(2, 3).flatten(1, 0),
    "sub_alpha_keeps_the_promoted_dtype": lambda lib: lib.tensor(1.0, dtype=lib.float64).sub(_ints(lib, [2]),
                                                                                              alpha=-0.5),
    "add_float_alpha_of_ints": lambda lib: _ints(lib, [1, 2]).add(_ints(lib, [1, 1]), alpha=2.5),
    "sub_bool": lambda lib: lib.tensor([1.0]) - lib.tensor([True]),
    "sub_two_bools": lambda lib: lib.tensor([True]) - lib.tensor([False]),
    "neg_bool": lambda lib: -lib.tensor([True]),
    "norm_inf_of_empty": lambda lib: lib.zeros(0).norm(INF),
    "pow_halves_at_minus_inf": lambda lib: lib.tensor([-INF, INF, 4.0, 0.0]).pow(-0.5),
    "pow_half_at_minus_inf": lambda lib: lib.tensor([-INF, INF, 4.0]).pow(0.5),
    "einsum_elementwise_promotes": lambda lib: lib.einsum("ij,ij->ij", lib.ones(2, 3, dtype=lib.float64),
                                                          lib.ones(2, 3)),
    "einsum_contraction_refuses": lambda lib: lib.einsum("ij,jk->ik", lib.ones(2, 3, dtype=lib.float64),
                                                         lib.ones(3, 2)),
    "unflatten_bad_sizes": lambda lib: lib.zeros(2, 3).unflatten(1, (2,)),
    "hstack_ranks": lambda lib: lib.hstack([lib.ones(2), lib.ones(2, 2)]),
    "index_select_empty_1d": lambda lib: lib.zeros(0).index_select(0, _ints(lib, [0])),
    "norm_negative_p_at_zero": lambda lib: lib.tensor(0.0).norm(-1),
}


def _outcome(lib, fn):
    try:
        return fn(lib), None
    except Exception as e:  # noqa: BLE001 - compared with the other library's
        return None, e


@pytest.mark.parametrize("name", list(SAME_AS_TORCH))
def test_registry_findings_match_torch(torch, name):
    got, gerr = _outcome(gpugrad, SAME_AS_TORCH[name])
    want, terr = _outcome(torch, SAME_AS_TORCH[name])
    if terr is not None:
        assert gerr is not None and type(gerr) is type(terr), f"torch raised {terr!r}, gpugrad {gerr!r}"
        return
    assert gerr is None, f"gpugrad raised {gerr!r} where torch gives {want!r}"
    a, b = got.detach().numpy(), want.detach().numpy()
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


def test_integer_division_by_zero_names_torchs_error():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        gpugrad.tensor([4, 2]) // gpugrad.tensor([2, 0])
    assert (gpugrad.tensor([4, 2]) // gpugrad.tensor([2, 1])).tolist() == [2, 2]


@pytest.mark.parametrize("split", [lambda x: x.unbind(0), lambda x: x.split(1), lambda x: x.chunk(2),
                                   lambda x: x.split([1, 1])], ids=["unbind", "split", "chunk", "split_sizes"])
def test_outputs_of_multi_view_ops_refuse_in_place_writes_with_a_graph(torch, split):
    for lib in (gpugrad, torch):
        pieces = split(lib.ones(2, 3, requires_grad=True) * 1)
        with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
            pieces[0].add_(1)
        plain = split(lib.ones(2, 3))  # no graph: allowed
        plain[1].add_(1)
        assert plain[1].reshape(-1).tolist() == [2.0, 2.0, 2.0]
    assert gpugrad.ones(2, 3, requires_grad=True).mul(1).tensor_split(2)[0].add_(1) is not None  # as torch's


def test_index_put_does_not_cast(torch):
    for lib in (gpugrad, torch):
        t = lib.zeros(3)
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            t[lib.tensor([0, 1])] = lib.ones(2, dtype=lib.float64)
        t[0:2] = lib.ones(2, dtype=lib.float64)  # a basic key is copy_, which casts
        assert t.tolist() == [1.0, 1.0, 0.0]


def test_diag_of_a_matrix_is_a_copy_and_diagonal_a_view(torch):
    for lib in (gpugrad, torch):
        x = lib.ones(3, 3)
        d, v = lib.diag(x), x.diagonal()
        x.add_(1)
        assert d.tolist() == [1.0] * 3 and v.tolist() == [2.0] * 3


def test_prod_along_a_dim_is_its_own_contiguous_tensor(torch):
    for lib in (gpugrad, torch):
        p = lib.arange(1.0, 7.0).reshape(2, 3).requires_grad_().prod(1, keepdim=True)
        assert p.is_contiguous() and p.view(-1).tolist() == [6.0, 120.0]  # not a slice of the cumulative products
