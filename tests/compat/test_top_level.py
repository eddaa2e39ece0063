"""torch.<function>(tensor, ...) habits: the top-level functions that mirror Tensor methods, with torch's positional and
keyword names, each run with torch and with gpugrad and compared (harness.py); and a check that every Tensor method
torch also has at top level is there in gpugrad too."""
from __future__ import annotations

import pytest

import gpugrad
from tests.compat.harness import check


def _m(t):
    return t.tensor([[1.0, 3.5, 3.0, -2.0], [2.0, 0.5, 2.5, 7.0], [-1.0, 4.0, 0.0, 4.5]])


def _v(t):
    return t.tensor([0.5, -1.5, 2.0])


CALLS = {
    "sum_dim": lambda t: t.sum(_m(t), dim=1),
    "sum_positional_keepdim": lambda t: t.sum(_m(t), 0, True),
    "mean_dims": lambda t: t.mean(_m(t), (0, 1)),
    "max_full": lambda t: t.max(_m(t)),
    "max_dim": lambda t: t.max(_m(t), 1),
    "max_dim_kw_keepdim": lambda t: t.max(_m(t), dim=0, keepdim=True),
    "max_two_tensors": lambda t: t.max(_m(t), t.zeros(4)),
    "min_dim": lambda t: t.min(_m(t), -1),
    "amax_amin": lambda t: (t.amax(_m(t), 0), t.amin(_m(t), dim=(0, 1))),
    "argmax_argmin": lambda t: (t.argmax(_m(t)), t.argmax(_m(t), dim=1), t.argmin(_m(t), 0, keepdim=True)),
    "median_mode": lambda t: (t.median(_m(t)), t.median(_m(t)[:, :3], 1), t.mode(t.tensor([[1, 2, 2]]), 1)),
    "kthvalue": lambda t: t.kthvalue(_m(t), 2, 0),
    "var_std": lambda t: (t.var(_m(t), 1), t.std(_m(t), dim=0, unbiased=False)),
    "var_mean_std_mean": lambda t: (t.var_mean(_m(t), 1), t.std_mean(_m(t), dim=0, keepdim=True)),
    "prod": lambda t: (t.prod(_m(t)), t.prod(_m(t), 1, keepdim=True)),
    "cumsum_cumprod": lambda t: (t.cumsum(_m(t), dim=1), t.cumprod(_m(t), 0)),
    "norm": lambda t: (t.norm(_m(t)), t.norm(_m(t), dim=1), t.norm(_m(t), p=1)),
    "all_any": lambda t: (t.all(_m(t) > -5), t.any(_m(t) > 5, dim=0)),
    "count_nonzero": lambda t: t.count_nonzero(_m(t), dim=1),
    "logsumexp": lambda t: t.logsumexp(_m(t), dim=1, keepdim=True),
    "softmax_log_softmax": lambda t: (t.softmax(_m(t), dim=1), t.log_softmax(_m(t), 0)),
    "sort": lambda t: t.sort(_m(t), dim=0, descending=True),
    "argsort": lambda t: t.argsort(_m(t), dim=1),
    "topk": lambda t: t.topk(_m(t), 2, dim=1, largest=False),
    "reshape_flatten": lambda t: (t.reshape(_m(t), (4, 3)), t.flatten(t.zeros(2, 3, 4), 1).shape),
    "transpose_permute_t": lambda t: (t.transpose(_m(t), 0, 1), t.permute(t.zeros(2, 3, 4), (2, 0, 1)).shape,
                                      t.t(_m(t))),
    "squeeze_unsqueeze": lambda t: (t.squeeze(t.zeros(1, 3, 1)).shape, t.squeeze(t.zeros(1, 3, 1), 0).shape,
                                    t.unsqueeze(_v(t), 1).shape),
    "movedim_swapaxes": lambda t: (t.movedim(t.zeros(2, 3, 4), 0, 2).shape, t.swapaxes(t.zeros(2, 3, 4), 0, 1).shape,
                                   t.moveaxis(t.zeros(2, 3, 4), -1, 0).shape, t.swapdims(t.zeros(2, 3), 0, 1).shape),
    "split_chunk": lambda t: (t.split(_m(t), 2, dim=1), t.chunk(_m(t), 3), t.split(_m(t), [1, 2])),
    "unbind_narrow_select": lambda t: (t.unbind(_m(t)), t.narrow(_m(t), 1, 0, 2), t.select(_m(t), 1, 2)),
    "cat_dim_stack": lambda t: (t.cat([_m(t), _m(t)], dim=1), t.stack([_v(t), _v(t)], 1), t.concat([_v(t), _v(t)])),
    "hstack_vstack": lambda t: (t.hstack([_v(t), _v(t)]), t.vstack([_v(t), _v(t)])),
    "gather": lambda t: t.gather(_m(t), 1, t.tensor([[0, 0], [1, 3], [2, 1]])),
    "scatter": lambda t: t.scatter(t.zeros(3, 4), 1, t.tensor([[0], [3], [1]]), 1.0),
    "scatter_add": lambda t: t.scatter_add(t.zeros(2, 3), 0, t.tensor([[0, 1, 0], [0, 0, 1]]), t.ones(2, 3)),
    "index_add": lambda t: t.index_add(t.zeros(3, 2), 0, t.tensor([0, 2, 0]), t.ones(3, 2)),
    "index_select_masked_select": lambda t: (t.index_select(_m(t), 0, t.tensor([2, 0])),
                                            t.masked_select(_m(t), _m(t) > 2)),
    "take_along_dim": lambda t: t.take_along_dim(_m(t), t.argmax(_m(t), 1, keepdim=True), 1),
    "where_three_and_one": lambda t: (t.where(_m(t) > 0, _m(t), 0.0), t.where(_m(t) > 3)),
    "nonzero_argwhere": lambda t: (t.nonzero(_m(t) > 2), t.argwhere(_m(t) < 0), t.nonzero(_v(t) > 0, as_tuple=True)),
    "unique": lambda t: t.unique(t.tensor([2, 1, 2, 3]), return_counts=True),
    "flip_roll": lambda t: (t.flip(_m(t), [0]), t.flip(_m(t), dims=(0, 1)), t.roll(_m(t), 1, 0), t.fliplr(_m(t))),
    "tril_triu": lambda t: (t.tril(_m(t)), t.triu(_m(t), 1), t.tril(_m(t), diagonal=-1)),
    "diag_diagonal_trace": lambda t: (t.diag(_v(t)), t.diag(_m(t)), t.diagonal(_m(t), 1), t.trace(_m(t))),
    "repeat_interleave_tile": lambda t: (t.repeat_interleave(_v(t), 2), t.tile(_v(t), (2,))),
    "clamp_clip": lambda t: (t.clamp(_m(t), min=0), t.clamp(_m(t), -1, 1), t.clip(_m(t), max=2)),
    "clamp_min_max": lambda t: (t.clamp_min(_m(t), 1), t.clamp_max(_m(t), 1)),
    "arith": lambda t: (t.add(_m(t), 1), t.sub(_m(t), _m(t)), t.mul(_m(t), 2), t.div(_m(t), 2), t.pow(_m(t), 2),
                        t.neg(_m(t)), t.abs(_m(t)), t.square(_m(t)), t.maximum(_m(t), t.zeros(4)),
                        t.minimum(_m(t), t.zeros(4))),
    "aliases": lambda t: (t.negative(_m(t)), t.absolute(_m(t)), t.arcsin(_v(t) / 4), t.arccos(_v(t) / 4),
                          t.arctan(_v(t))),
    "rounding_division": lambda t: (t.floor_divide(_m(t), 2), t.remainder(_m(t), 2), t.fmod(_m(t), 2),
                                    t.div(_m(t), 2, rounding_mode="floor"), t.div(_m(t), 2, rounding_mode="trunc")),
    "pointwise": lambda t: [getattr(t, f)(_m(t)) for f in ("exp", "tanh", "sigmoid", "sin", "cos", "floor", "ceil",
                                                           "round", "trunc", "frac", "sign", "atan", "sinh", "cosh",
                                                           "exp2")],
    "pointwise_positive_inputs": lambda t: [getattr(t, f)(_m(t).abs() + 0.5)
                                            for f in ("log", "sqrt", "rsqrt", "reciprocal", "log2", "log10", "log1p")],
    "pointwise_in_place": lambda t: (t.exp_(t.tensor([0.0, 1.0])), t.floor_(t.tensor([1.5, -1.5]))),
    "tests_of_values": lambda t: [getattr(t, f)(t.tensor([1.0, float("nan"), float("inf")]))
                                  for f in ("isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit")],
    "logical": lambda t: (t.logical_and(_m(t) > 0, _m(t) < 3), t.logical_or(_m(t) > 3, _m(t) < 0),
                          t.logical_not(_m(t) > 0), t.logical_xor(_m(t) > 0, _m(t) > 3)),
    "comparisons": lambda t: (t.eq(_m(t), 3.0), t.ne(_m(t), 3.0), t.lt(_m(t), 0), t.le(_m(t), 0), t.gt(_m(t), 0),
                              t.ge(_m(t), 0)),
    "allclose_isclose_equal": lambda t: (t.allclose(_m(t), _m(t) + 1e-9), t.isclose(_m(t), _m(t) * 1.1),
                                         t.equal(_m(t), _m(t))),
    "products": lambda t: (t.mm(_m(t), _m(t).t()), t.bmm(t.ones(2, 3, 4), t.ones(2, 4, 2)), t.mv(_m(t), t.ones(4)),
                           t.dot(_v(t), _v(t)), t.outer(_v(t), _v(t)), t.matmul(_m(t), t.ones(4))),
    "einsum": lambda t: (t.einsum("ij,kj->ik", _m(t), _m(t)), t.einsum("ii", _m(t)[:, :3])),
    "numel_clone_detach": lambda t: (t.numel(_m(t)), t.clone(_m(t)), t.detach(_m(t))),
    "broadcast_to": lambda t: t.broadcast_to(_v(t), (2, 3)),
    "masked_fill": lambda t: t.masked_fill(_m(t), _m(t) > 3, 0.0),
    "nansum_nanmean": lambda t: (t.nansum(t.tensor([1.0, float("nan"), 2.0])),
                                 t.nanmean(t.tensor([[1.0, float("nan")], [2.0, 4.0]]), dim=1)),
    "aminmax": lambda t: t.aminmax(_m(t), dim=1),
    "sum_of_a_list_raises": lambda t: t.sum([1.0, 2.0]),
}


@pytest.mark.parametrize("habit", CALLS, ids=list(CALLS))
def test_top_level_call(habit):
    check(CALLS[habit])


def test_every_method_torch_has_at_top_level_is_a_gpugrad_function(torch):
    """A Tensor method gpugrad has and torch also offers as torch.<name> is gpugrad.<name> too."""
    names = [n for n in dir(gpugrad.Tensor) if not n.startswith("_") and callable(getattr(gpugrad.Tensor, n))
             and callable(getattr(torch, n, None))]
    missing = [n for n in names if not callable(getattr(gpugrad, n, None))]
    assert len(names) > 150 and not missing, f"Tensor methods torch has at top level but gpugrad lacks: {missing}"
