"""The Tensor surface as torch has it, each habit run with torch and with gpugrad and compared (harness.py): dim /
keepdim (and NumPy's axis / keepdims) on reductions, (values, indices) named tuples, sorting and selecting along a
dim with their gradients, shape functions, rounding divisions, casts, tests of values and products (mm, einsum)."""
from __future__ import annotations

import pytest

from tests.compat.harness import check, compat


def _m(torch):
    return torch.tensor([[1.0, 3.0, 3.0, -2.0], [2.0, 0.5, 2.0, 7.0], [-1.0, 4.0, 0.0, 4.0]])


def _u(torch):
    """No ties within a row or column: torch leaves the order of equal values in topk unspecified."""
    return torch.tensor([[1.0, 3.5, 3.0, -2.0], [2.0, 0.5, 2.5, 7.0], [-1.0, 4.0, 0.0, 4.5]])


def _leaf(torch, values):
    return torch.tensor(values, requires_grad=True)


def _grad(torch, values, f):
    """The gradient of f(torch, x).sum() w.r.t. x = values (f returns a tensor, or a tuple whose first item is)."""
    x = _leaf(torch, values)
    y = f(torch, x)
    (y[0] if isinstance(y, tuple) else y).sum().backward()
    return x.grad


# -- reductions: dim / keepdim, NumPy's aliases, dtypes ----------------------------------------------------------------
REDUCTIONS = {
    "sum_dim_keepdim": lambda t: _m(t).sum(dim=1, keepdim=True),
    "sum_positional": lambda t: _m(t).sum(0, True),
    "sum_dim_tuple": lambda t: _m(t).sum(dim=(0, 1)),
    "sum_dim_list": lambda t: _m(t).sum([0, 1]),
    "sum_numpy_aliases": lambda t: _m(t).sum(axis=1, keepdims=True),
    "sum_of_bools_is_int64": lambda t: t.tensor([True, False, True]).sum(),
    "sum_dtype": lambda t: _m(t).sum(1, dtype=t.float64),
    "mean_dim": lambda t: _m(t).mean(dim=-1),
    "mean_of_ints_raises": lambda t: t.tensor([1, 2]).mean(),
    "amax_dims": lambda t: _m(t).amax(dim=(0, 1)),
    "amin_keepdim": lambda t: _m(t).amin(1, keepdim=True),
    "max_full": lambda t: _m(t).max(),
    "max_dim_named_tuple": lambda t: _m(t).max(1),
    "max_dim_keepdim": lambda t: _m(t).max(dim=0, keepdim=True),
    "max_dim_unpacked": lambda t: tuple(_m(t).max(-1)),
    "max_values_attribute": lambda t: _m(t).max(1).values * 2,
    "min_dim_indices": lambda t: _m(t).min(0).indices,
    "min_dim_indexing": lambda t: _m(t).min(1)[0],
    "max_of_two_tensors": lambda t: _m(t).max(t.zeros(4)),
    "max_nan_wins": lambda t: t.tensor([[1.0, float("nan"), 5.0]]).max(1),
    "max_empty_dim_raises": lambda t: t.zeros(0, 3).max(0),
    "max_empty_full_raises": lambda t: t.zeros(0, 3).max(),
    "max_dim_out_of_range": lambda t: _m(t).max(5),
    "argmax_keepdim": lambda t: _m(t).argmax(dim=1, keepdim=True),
    "argmax_flat": lambda t: _m(t).argmax(),
    "argmin_dim": lambda t: _m(t).argmin(0),
    "aminmax": lambda t: _m(t).aminmax(dim=0),
    "median_full_lower": lambda t: t.tensor([4.0, 1.0, 3.0, 2.0]).median(),
    "median_dim": lambda t: t.tensor([[4.0, 1.0, 3.0], [9.0, 7.0, 8.0]]).median(1),
    "median_nan": lambda t: t.tensor([[1.0, float("nan"), 0.0]]).median(1),
    "mode_dim": lambda t: t.tensor([[2.0, 1.0, 2.0, 1.0], [3.0, 3.0, 0.0, 5.0]]).mode(1),
    "kthvalue": lambda t: t.tensor([[5.0, 1.0, 4.0], [0.0, 9.0, 2.0]]).kthvalue(2, 1),
    "kthvalue_out_of_range": lambda t: t.tensor([1.0, 2.0]).kthvalue(3),
    "var_unbiased_false": lambda t: _m(t).var(unbiased=False),
    "var_lone_bool": lambda t: _m(t).var(False),
    "var_dim_correction": lambda t: _m(t).var(1, correction=0),
    "var_dim_unbiased_keepdim": lambda t: _m(t).var(0, True, True),
    "std_dim_keepdim": lambda t: _m(t).std(dim=1, keepdim=True),
    "prod_dim": lambda t: _m(t).prod(1),
    "prod_full": lambda t: _m(t).prod(),
    "prod_keepdim": lambda t: _m(t).prod(0, keepdim=True),
    "prod_of_ints_is_int64": lambda t: t.tensor([2, 3, 4], dtype=t.int32).prod(),
    "prod_tuple_dim_raises": lambda t: _m(t).prod(dim=(0, 1)),
    "cumsum": lambda t: _m(t).cumsum(dim=1),
    "cumsum_int32_to_int64": lambda t: t.tensor([1, 2, 3], dtype=t.int32).cumsum(0),
    "cumsum_dtype": lambda t: t.tensor([1, 2, 3]).cumsum(0, dtype=t.float32),
    "cumprod": lambda t: _m(t).cumprod(0),
    "norm": lambda t: _m(t).norm(),
    "norm_p1_dim": lambda t: _m(t).norm(p=1, dim=1),
    "norm_keepdim": lambda t: _m(t).norm(dim=0, keepdim=True),
    "norm_inf": lambda t: _m(t).norm(float("inf")),
    "norm_p3_dims": lambda t: _m(t).norm(3, dim=(0, 1)),
    "norm_of_ints_raises": lambda t: t.tensor([3, 4]).norm(),
    "all_any": lambda t: (_m(t).all(), _m(t).any(), (_m(t) > 0).all(dim=1), (_m(t) > 5).any(1, keepdim=True)),
    "count_nonzero": lambda t: (_m(t).count_nonzero(), _m(t).count_nonzero(dim=0)),
    "logsumexp_dim": lambda t: _m(t).logsumexp(dim=1),
    "softmax_dim_kw": lambda t: _m(t).softmax(dim=0),
    "log_softmax_dim": lambda t: _m(t).log_softmax(1),
    "size_dim": lambda t: (_m(t).size(1), _m(t).size(dim=-1), _m(t).size()),
}


@pytest.mark.parametrize("habit", REDUCTIONS, ids=list(REDUCTIONS))
def test_reductions(habit):
    check(REDUCTIONS[habit])


# -- gradients of selections, scans and norms: where torch puts them ------------------------------------------------
TIES = [[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]]
GRADS = {
    "max_dim_grad_goes_to_the_returned_index": (TIES, lambda t, x: x.max(1)),
    "amax_grad_splits_ties": (TIES, lambda t, x: x.amax(1)),
    "max_full_grad_splits_ties": (TIES, lambda t, x: x.max()),
    "min_dim_keepdim_grad": (TIES, lambda t, x: x.min(0, keepdim=True)),
    "median_full_grad": ([[4.0, 1.0, 3.0], [2.0, 6.0, 5.0]], lambda t, x: x.median()),
    "median_dim_grad": ([[4.0, 1.0, 3.0], [2.0, 6.0, 5.0]], lambda t, x: x.median(1)),
    "kthvalue_grad": ([[4.0, 1.0, 3.0], [2.0, 6.0, 5.0]], lambda t, x: x.kthvalue(1, 0)),
    "sort_grad": ([[4.0, 1.0, 3.0], [2.0, 6.0, 5.0]], lambda t, x: x.sort(1, descending=True).values.cumsum(1)),
    "topk_grad": ([[4.0, 1.0, 3.0], [2.0, 6.0, 5.0]], lambda t, x: x.topk(2)),
    "prod_grad": ([2.0, 3.0, 4.0], lambda t, x: x.prod()),
    "prod_grad_one_zero": ([2.0, 0.0, 4.0], lambda t, x: x.prod()),
    "prod_grad_two_zeros": ([0.0, 3.0, 0.0], lambda t, x: x.prod()),
    "prod_dim_grad_zeros": ([[2.0, 0.0, 4.0], [1.0, 2.0, 3.0]], lambda t, x: x.prod(1)),
    "cumsum_grad": ([[1.0, 2.0, 3.0]], lambda t, x: x.cumsum(1) * x.cumsum(1)),
    "cumprod_grad": ([[2.0, 3.0, 4.0]], lambda t, x: x.cumprod(1)),
    "cumprod_grad_zeros": ([[2.0, 0.0, 3.0, 0.0, 4.0]], lambda t, x: x.cumprod(1)),
    "norm_grad": ([3.0, 4.0], lambda t, x: x.norm()),
    "norm_grad_at_zero": ([0.0, 0.0], lambda t, x: x.norm()),
    "norm_p1_grad": ([[3.0, -4.0], [0.5, 2.0]], lambda t, x: x.norm(1, dim=1)),
    "norm_inf_grad_ties": ([3.0, -4.0, 4.0], lambda t, x: x.norm(float("inf"))),
    "flip_grad": ([[1.0, 2.0], [3.0, 4.0]], lambda t, x: x.flip(0) * x),
    "repeat_grad": ([[1.0, 2.0]], lambda t, x: x.repeat(3, 2)),
    "tril_grad": ([[1.0, 2.0], [3.0, 4.0]], lambda t, x: x.tril() * x),
    "clamp_tensor_bounds_grad": ([[-3.0, 0.5, 3.0]], lambda t, x: x.clamp(min=x.detach() * 0 - 1,
                                                                          max=x.detach() * 0 + 1)),
    "floor_grad_is_zero": ([[1.5, -0.5]], lambda t, x: x.floor()),
    "remainder_grad": ([[5.5, -5.5]], lambda t, x: x % 2),
    "einsum_grad": ([[1.0, 2.0], [3.0, 4.0]], lambda t, x: t.einsum("ij,jk->ik", x, x)),
    "einsum_trace_grad": ([[1.0, 2.0], [3.0, 4.0]], lambda t, x: t.einsum("ii", x) * t.einsum("ij->", x)),
}


@pytest.mark.parametrize("habit", GRADS, ids=list(GRADS))
def test_gradients(habit):
    values, f = GRADS[habit]
    check(lambda torch: _grad(torch, values, f))


@compat
def test_max_dim_second_derivative(torch):
    x = _leaf(torch, [[1.0, 3.0], [2.0, 0.5]])
    (g,) = torch.autograd.grad((x.max(1).values ** 3).sum(), x, create_graph=True)
    return torch.autograd.grad(g.sum(), x)[0]


@compat
def test_cumprod_second_derivative(torch):
    x = _leaf(torch, [[2.0, 0.0, 3.0]])
    (g,) = torch.autograd.grad(x.cumprod(1).sum(), x, create_graph=True)
    return torch.autograd.grad((g * g).sum(), x)[0]


@compat
def test_values_indices_named_tuple_fields(torch):
    r = _u(torch).topk(2, dim=1)
    return r.values, r.indices, len(r), type(r).__name__, r.n_fields


# -- sorting ----------------------------------------------------------------------------------------------------------
SORTING = {
    "sort_dim_descending": lambda t: _m(t).sort(dim=1, descending=True),
    "sort_default_last_dim": lambda t: _m(t).sort(),
    "sort_stable_ties": lambda t: t.tensor([[1.0, 5.0, 5.0, 2.0, 5.0]]).sort(descending=True, stable=True),
    "sort_nan_last": lambda t: t.tensor([3.0, float("nan"), 1.0]).sort(),
    "sort_nan_first_descending": lambda t: t.tensor([3.0, float("nan"), 1.0]).sort(descending=True),
    "sort_ints": lambda t: t.tensor([3, 1, 2]).sort(),
    "argsort_descending": lambda t: _m(t).argsort(dim=0, descending=True),
    "topk": lambda t: _u(t).topk(2),
    "topk_smallest_dim0": lambda t: _u(t).topk(2, dim=0, largest=False),
    "topk_k_too_large": lambda t: _m(t).topk(5),
    "sort_0d": lambda t: t.tensor(3.0).sort(),
}


@pytest.mark.parametrize("habit", SORTING, ids=list(SORTING))
def test_sorting(habit):
    check(SORTING[habit])


# -- shape and movement -----------------------------------------------------------------------------------------------
SHAPES = {
    "split_size": lambda t: _m(t).split(2),
    "split_sections_dim": lambda t: _m(t).split([1, 3], dim=1),
    "split_bad_sections": lambda t: _m(t).split([1, 1]),
    "chunk_uneven": lambda t: t.arange(5.0).chunk(2),
    "chunk_dim1": lambda t: _m(t).chunk(3, dim=1),
    "chunk_zero_raises": lambda t: _m(t).chunk(0),
    "tensor_split": lambda t: t.arange(7.0).tensor_split(3),
    "unbind": lambda t: _m(t).unbind(1),
    "narrow": lambda t: _m(t).narrow(1, 1, 2),
    "narrow_too_long": lambda t: _m(t).narrow(1, 3, 2),
    "select": lambda t: _m(t).select(1, -1),
    "select_out_of_range": lambda t: _m(t).select(0, 5),
    "repeat": lambda t: t.tensor([[1.0, 2.0]]).repeat(2, 3),
    "repeat_new_dims": lambda t: t.tensor([1.0, 2.0]).repeat(2, 1, 2),
    "repeat_too_few_sizes": lambda t: _m(t).repeat(2),
    "tile": lambda t: t.tensor([[1.0, 2.0]]).tile((2,)),
    "repeat_interleave": lambda t: t.tensor([[1.0, 2.0], [3.0, 4.0]]).repeat_interleave(2, dim=1),
    "repeat_interleave_flat": lambda t: t.tensor([[1, 2], [3, 4]]).repeat_interleave(2),
    "repeat_interleave_counts": lambda t: t.tensor([1.0, 2.0, 3.0]).repeat_interleave(t.tensor([1, 0, 2])),
    "flip_one_dim": lambda t: _m(t).flip(0),
    "flip_dims_list": lambda t: _m(t).flip([0, 1]),
    "fliplr": lambda t: _m(t).fliplr(),
    "roll_dim": lambda t: _m(t).roll(1, 1),
    "roll_flat": lambda t: _m(t).roll(-2),
    "roll_two_dims": lambda t: _m(t).roll((1, 2), (0, 1)),
    "tril": lambda t: _m(t).tril(),
    "triu_diagonal": lambda t: _m(t).triu(diagonal=1),
    "tril_negative": lambda t: _m(t).tril(-1),
    "tril_1d_raises": lambda t: t.arange(3.0).tril(),
    "diagonal": lambda t: _m(t).diagonal(),
    "diagonal_offset": lambda t: _m(t).diagonal(offset=1),
    "diag_of_vector": lambda t: t.tensor([1.0, 2.0]).diag(),
    "diag_of_vector_offset": lambda t: t.tensor([1.0, 2.0]).diag(-1),
    "diag_of_matrix": lambda t: _m(t).diag(1),
    "trace": lambda t: _m(t).trace(),
    "flatten_start_dim": lambda t: t.zeros(2, 3, 4).flatten(start_dim=1).shape,
    "unflatten": lambda t: t.arange(6.0).unflatten(0, (2, 3)),
    "movedim": lambda t: t.zeros(2, 3, 4).movedim(0, -1).shape,
    "movedim_tuples": lambda t: t.zeros(2, 3, 4).movedim((0, 1), (2, 0)).shape,
    "swapaxes": lambda t: t.zeros(2, 3, 4).swapaxes(0, 2).shape,
    "squeeze_dim_kw": lambda t: t.zeros(2, 1, 3).squeeze(dim=1).shape,
    "unsqueeze_dim_kw": lambda t: t.zeros(2, 3).unsqueeze(dim=-1).shape,
    "contiguous": lambda t: (_m(t).t().is_contiguous(), _m(t).t().contiguous().is_contiguous(), _m(t).is_contiguous()),
    "contiguous_values": lambda t: _m(t).t().contiguous(),
    "index_select": lambda t: _m(t).index_select(1, t.tensor([3, 0, 3])),
    "masked_select": lambda t: _m(t).masked_select(_m(t) > 1),
    "nonzero": lambda t: _m(t).nonzero(),
    "nonzero_as_tuple": lambda t: _m(t).nonzero(as_tuple=True),
    "argwhere": lambda t: (_m(t) > 2).argwhere(),
    "unique": lambda t: t.tensor([3, 1, 3, 2, 1]).unique(),
    "unique_inverse_counts": lambda t: t.tensor([[3, 1], [3, 2]]).unique(return_inverse=True, return_counts=True),
    "unique_dim": lambda t: t.tensor([[1, 2], [1, 2], [0, 1]]).unique(dim=0),
    "gather_dim_kw": lambda t: _m(t).gather(dim=1, index=t.tensor([[0], [3], [1]])),
    "where_method": lambda t: _m(t).where(_m(t) > 0, t.zeros(4)),
    "view_as_reshape_as": lambda t: (t.arange(4.0).view_as(t.zeros(2, 2)), t.arange(4.0).reshape_as(t.zeros(4, 1))),
    "type_as": lambda t: t.tensor([1, 2]).type_as(t.zeros(1)),
}


@pytest.mark.parametrize("habit", SHAPES, ids=list(SHAPES))
def test_shapes(habit):
    check(SHAPES[habit])


# -- rounding division, casts, tests of values -------------------------------------------------------------------------
VALUES = {
    "int_floordiv_is_int": lambda t: t.tensor([5, -5, 7]) // t.tensor([2, 2, -2]),
    "int_floordiv_scalar": lambda t: t.tensor([5, -5]) // 2,
    "float_floordiv": lambda t: t.tensor([5.5, -5.5]) // 2,
    "rfloordiv": lambda t: 7 // t.tensor([2.0, -3.0]),
    "float_mod_sign_of_divisor": lambda t: t.tensor([5.0, -5.0]) % t.tensor([-2.0, 2.0]),
    "int_mod": lambda t: t.tensor([5, -5]) % 3,
    "rmod": lambda t: 7 % t.tensor([2, -3]),
    "fmod_sign_of_dividend": lambda t: t.tensor([5.0, -5.0]).fmod(-2),
    "remainder_method": lambda t: t.tensor([5.0, -5.0]).remainder(3),
    "floor_divide_method": lambda t: t.tensor([5.0, -5.0]).floor_divide(3),
    "div_floor": lambda t: t.tensor([5.0, -5.0]).div(2, rounding_mode="floor"),
    "div_trunc": lambda t: t.tensor([5.0, -5.0]).div(2, rounding_mode="trunc"),
    "div_trunc_ints": lambda t: t.tensor([5, -5]).div(2, rounding_mode="trunc"),
    "div_bad_mode": lambda t: t.tensor([5.0]).div(2, rounding_mode="round"),
    "casts": lambda t: [getattr(_m(t), c)() for c in ("int", "long", "bool", "half", "float", "double", "short")],
    "bool_of_floats": lambda t: t.tensor([0.0, 0.5, -1.0]).bool(),
    "int_truncates": lambda t: t.tensor([1.7, -1.7]).int(),
    "isnan_isinf_isfinite": lambda t: [f(t.tensor([1.0, float("nan"), float("inf"), -float("inf")]))
                                       for f in (lambda x: x.isnan(), lambda x: x.isinf(), lambda x: x.isfinite(),
                                                 lambda x: x.isposinf(), lambda x: x.isneginf())],
    "allclose_is_a_bool": lambda t: (_m(t).allclose(_m(t) + 1e-9), _m(t).allclose(_m(t) + 1)),
    "isclose": lambda t: t.tensor([1.0, 2.0]).isclose(t.tensor([1.0 + 1e-7, 2.1])),
    "equal": lambda t: (_m(t).equal(_m(t)), _m(t).equal(_m(t)[:2]), _m(t).equal(_m(t) * 2)),
    "logical_ops": lambda t: ((_m(t) > 0).logical_and(_m(t) < 4), (_m(t) > 0).logical_or(_m(t) < -1),
                              (_m(t) > 0).logical_not(), (_m(t) > 0).logical_xor(_m(t) > 2)),
    "xor_operator": lambda t: (_m(t) > 0) ^ (_m(t) > 2),
    "clamp_min_max": lambda t: (_m(t).clamp(min=0), _m(t).clamp(max=1), _m(t).clamp(-1, 2), _m(t).clip(0, 1)),
    "clamp_min_clamp_max": lambda t: (_m(t).clamp_min(1), _m(t).clamp_max(1)),
    "clamp_tensor_bounds": lambda t: _m(t).clamp(min=t.tensor([0.0, 1.0, 2.0, 3.0]), max=t.tensor(3.5)),
    "clamp_nothing_raises": lambda t: _m(t).clamp(),
    "rounding": lambda t: [f(t.tensor([1.5, -1.5, 2.5, -0.2])) for f in (lambda x: x.floor(), lambda x: x.ceil(),
                                                                        lambda x: x.round(), lambda x: x.trunc(),
                                                                        lambda x: x.frac(), lambda x: x.sign())],
    "floor_of_ints_stays_int": lambda t: t.tensor([1, -2]).floor(),
    "round_decimals": lambda t: (t.tensor([1.2345, -2.5551]).round(decimals=2),
                                 t.round(t.tensor([1234.5]), decimals=-2)),
    "reciprocal_rsqrt": lambda t: (t.tensor([2.0, 4.0]).reciprocal(), t.tensor([4.0, 16.0]).rsqrt()),
    "log2_log10_exp2": lambda t: (t.tensor([2.0, 8.0]).log2(), t.tensor([10.0, 1e3]).log10(), t.tensor([3.0]).exp2()),
    "trig": lambda t: [f(t.tensor([0.25, -0.5])) for f in (lambda x: x.tan(), lambda x: x.asin(), lambda x: x.acos(),
                                                          lambda x: x.atan(), lambda x: x.sinh(), lambda x: x.cosh())],
    "floor_in_place": lambda t: t.tensor([1.5, -1.5]).floor_(),
}


@pytest.mark.parametrize("habit", VALUES, ids=list(VALUES))
def test_values(habit):
    check(VALUES[habit])


# -- products ---------------------------------------------------------------------------------------------------------
PRODUCTS = {
    "mm": lambda t: _m(t).mm(_m(t).t()),
    "mm_needs_matrices": lambda t: _m(t).mm(t.ones(4)),
    "bmm": lambda t: t.ones(2, 3, 4).bmm(t.ones(2, 4, 5)),
    "bmm_batch_mismatch": lambda t: t.ones(2, 2, 3).bmm(t.ones(3, 3, 2)),
    "mv": lambda t: _m(t).mv(t.ones(4)),
    "dot": lambda t: t.tensor([1.0, 2.0]).dot(t.tensor([3.0, 4.0])),
    "dot_size_mismatch": lambda t: t.ones(3).dot(t.ones(4)),
    "outer": lambda t: t.tensor([1.0, 2.0]).outer(t.tensor([3.0, 4.0, 5.0])),
    "einsum_matmul": lambda t: t.einsum("ij,jk->ik", _m(t), _m(t).t()),
    "einsum_implicit": lambda t: t.einsum("ij,jk", _m(t), _m(t).t()),
    "einsum_implicit_transpose": lambda t: t.einsum("ba", _m(t)),
    "einsum_trace": lambda t: t.einsum("ii", t.eye(3) * 2),
    "einsum_diag": lambda t: t.einsum("ii->i", _m(t)[:, :3]),
    "einsum_batched": lambda t: t.einsum("bij,bjk->bik", t.ones(2, 3, 4), t.ones(2, 4, 5)),
    "einsum_ellipsis": lambda t: t.einsum("...ij,...jk", t.ones(5, 2, 3), t.ones(3, 4)),
    "einsum_ellipsis_sum": lambda t: t.einsum("i...->...", t.ones(2, 3, 4)),
    "einsum_list_operands": lambda t: t.einsum("i,i->", [t.tensor([1.0, 2.0]), t.tensor([3.0, 4.0])]),
    "einsum_spaces": lambda t: t.einsum("i j , j -> i", _m(t), t.ones(4)),
    "einsum_broadcast_size_one": lambda t: t.einsum("ij,ij->ij", t.ones(3, 1), t.ones(3, 4)),
    "einsum_outer_of_three": lambda t: t.einsum("i,j,k->ijk", t.ones(2), t.ones(3), t.ones(4)).shape,
    "einsum_too_few_operands": lambda t: t.einsum("ij,jk", _m(t)),
    "einsum_bad_output": lambda t: t.einsum("ij->k", _m(t)),
    "einsum_wrong_rank": lambda t: t.einsum("ijk", _m(t)),
}


@pytest.mark.parametrize("habit", PRODUCTS, ids=list(PRODUCTS))
def test_products(habit):
    check(PRODUCTS[habit])


@compat
def test_clamp_tensor_bounds_get_gradients(torch):
    x, lo, hi = _leaf(torch, [-3.0, 0.5, 3.0]), _leaf(torch, [-1.0, -1.0, -1.0]), _leaf(torch, [1.0, 1.0, 1.0])
    (x.clamp(lo, hi) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    return x.grad, lo.grad, hi.grad


# -- empty and 0-d tensors, dtypes, out= -------------------------------------------------------------------------------
EDGES = {
    "max_0d": lambda t: t.tensor(2.0).max(0),
    "max_0d_keepdim": lambda t: t.tensor(2.0).max(-1, keepdim=True),
    "max_of_ints": lambda t: t.tensor([[1, 5], [3, 2]]).max(1),
    "argmax_0d": lambda t: t.tensor(3.0).argmax(0),
    "cumsum_empty": lambda t: t.zeros(0, 3).cumsum(0),
    "cumsum_bools": lambda t: t.tensor([True, False, True]).cumsum(0),
    "cumprod_0d": lambda t: t.tensor(3.0).cumprod(0),
    "prod_empty_is_one": lambda t: (t.zeros(0, 3).prod(0), t.zeros(0).prod()),
    "prod_0d_and_bools": lambda t: (t.tensor(3.0).prod(0), t.tensor([True, True]).prod()),
    "norm_empty_and_0d": lambda t: (t.zeros(0).norm(), t.tensor(-3.0).norm()),
    "sort_empty_and_bools": lambda t: (t.zeros(0).sort(), t.tensor([True, False, True]).sort()),
    "topk_zero": lambda t: t.ones(3).topk(0),
    "unique_empty": lambda t: t.zeros(0).unique(),
    "unique_inverse_keeps_shape": lambda t: t.tensor([[2.0, 1.0], [1.0, 3.0]]).unique(return_inverse=True),
    "nonzero_empty": lambda t: t.zeros(0, 2).nonzero(),
    "split_and_chunk_empty": lambda t: (t.zeros(0).split(2), t.zeros(0).chunk(2)),
    "einsum_empty_contraction": lambda t: t.einsum("ij,jk->ik", t.zeros(2, 0), t.zeros(0, 3)),
    "einsum_mixed_dtypes_raise": lambda t: t.einsum("i,i", t.ones(2), t.ones(2, dtype=t.float64)),
    "repeat_zero": lambda t: t.ones(2).repeat(0),
    "flip_0d": lambda t: t.tensor(1.0).flip(0),
    "tril_batched": lambda t: t.ones(2, 3, 3).tril(),
    "roll_more_than_size": lambda t: t.arange(5.0).roll(-7),
    "mean_empty_is_nan": lambda t: t.zeros(0).mean(),
    "sum_dim_out_of_range": lambda t: t.ones(2, 3).sum(-3),
    "int_tensor_mod_float": lambda t: t.tensor([5, -5]) % 2.5,
    "int_tensor_floordiv_float": lambda t: t.tensor([5, -5]) // 2.5,
    "std_mean": lambda t: t.std_mean(t.arange(4.0)),
    "mul_out": lambda t: (lambda o: (t.mul(t.ones(2), 3, out=o), o))(t.zeros(2)),
    "matmul_out_resizes": lambda t: (lambda o: (t.matmul(t.ones(2, 3), t.ones(3, 2), out=o), o))(t.zeros(0)),
    "max_out_named_tuple": lambda t: t.max(t.ones(2, 3), 1, out=(t.zeros(2), t.zeros(2, dtype=t.long))),
    "out_with_grad_raises": lambda t: t.mul(t.ones(2, requires_grad=True), 3, out=t.zeros(2)),
}


@pytest.mark.parametrize("habit", EDGES, ids=list(EDGES))
def test_edges(habit):
    check(EDGES[habit])


@compat
def test_max_dim_in_a_training_accuracy(torch):
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5], [0.2, 0.1, 0.9]])
    _, predicted = torch.max(logits, 1)
    return (predicted == torch.tensor([1, 0, 0])).sum().item()


@compat
def test_topk_accuracy(torch):
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5], [0.2, 0.1, 0.9]])
    _, pred = logits.topk(2, 1, True, True)
    correct = pred.t().eq(torch.tensor([2, 0, 1]).view(1, -1).expand_as(pred.t()))
    return correct[:2].reshape(-1).float().sum(0, keepdim=True)


@compat
def test_causal_mask_with_triu(torch):
    scores = torch.arange(9.0).reshape(3, 3)
    mask = torch.triu(torch.ones(3, 3), diagonal=1).bool()
    return scores.masked_fill(mask, float("-inf")).softmax(dim=-1)


@compat
def test_attention_scores_with_einsum(torch):
    q, k = torch.arange(24.0).reshape(2, 3, 4) / 10, torch.arange(24.0).reshape(2, 3, 4) / 20
    return torch.einsum("bqd,bkd->bqk", q, k).softmax(-1)
