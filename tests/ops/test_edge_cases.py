"""Edge cases against PyTorch: gather shapes and bounds, 0 ** 0, var with n <= correction, 0-d tensors, empty axes,
expand's -1, cat/stack dim=, the mean of an empty batch, nested inference_mode."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.backend import reference
from gpugrad.backend.reference import loss as R


def _pair(torch, arrays):
    """The same float64 leaves for gpugrad and torch."""
    ours = [gpugrad.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    return ours, theirs


def _assert_same(ours, theirs, y, ty, seed=1):
    """Values, then the gradients of <u, y> for a random u (NaN and inf must match too)."""
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert y.shape == tuple(ty.shape)
    u = np.random.default_rng(seed).standard_normal(tuple(ty.shape))
    y.backward(gpugrad.tensor(u))
    ty.backward(torch_like(ty, u))
    for a, b in zip(ours, theirs):
        want = b.grad.numpy() if b.grad is not None else np.zeros(b.shape)
        np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-12, atol=1e-12)


def torch_like(t, array):
    return t.new_tensor(array)


# -- 1. gather: torch's shape rules and bounds ----------------------------------------------------------------------
GATHERS = [
    ((3, 4), 1, [[0, 2]]),  # index shorter than x along axis 0: x is cut, not broadcast
    ((3, 4), 1, [[0], [1]]),  # index narrower than x along the gathered axis
    ((3, 4), 1, [[0, 1, 2, 3, 0]]),  # longer than x along the gathered axis is allowed
    ((3, 4), 0, [[0, 1, 2, 0]] * 5),
    ((3, 4), -1, [[3, 3], [0, 1]]),  # repeated ids add up in the gradient
    ((2, 3, 4), 1, [[[2, 0, 1]], [[1, 1, 0]]]),
    ((3, 4), 1, np.zeros((0, 2), np.int64)),
    ((), 0, 0),
    ((), -1, 0),
]


@pytest.mark.parametrize("shape,axis,index", GATHERS, ids=[f"{s}-{a}-{np.shape(i)}" for s, a, i in GATHERS])
def test_gather_follows_torch_shape_rules(shape, axis, index, torch):
    x = np.arange(float(np.prod(shape))).reshape(shape)
    idx = np.asarray(index, dtype=np.int64)
    (ours,), (theirs,) = _pair(torch, [x])
    _assert_same([ours], [theirs], ours.gather(axis, gpugrad.tensor(idx)), theirs.gather(axis, torch.tensor(idx)))


def test_gather_rejects_what_torch_rejects():
    x = gpugrad.tensor(np.arange(12.0).reshape(3, 4))
    # torch's RuntimeError and first sentence (issue #21: the fuzzer compares error types)
    with pytest.raises(RuntimeError, match=r"index -1 is out of bounds for dimension 0 with size 3"):
        x.gather(0, gpugrad.tensor([[-1]]))  # would wrap around to the last row
    with pytest.raises(RuntimeError, match=r"index 4 is out of bounds for dimension 1 with size 4"):
        x.gather(1, gpugrad.tensor([[0, 4]]))
    with pytest.raises(ValueError, match=r"index of shape \(1,\) must have as many axes as the input \(3, 4\)"):
        x.gather(0, gpugrad.tensor([-1]))
    with pytest.raises(ValueError, match=r"no larger than the input \(3, 4\) along every axis but 0"):
        x.gather(0, gpugrad.tensor([[0, 1, 2, 0, 0]]))
    with pytest.raises(TypeError, match="integers"):
        x.gather(0, gpugrad.tensor([[0.0]]))


# -- 2. pow: torch's pow_backward at b == 0 and a <= 0 ---------------------------------------------------------------
POW_POINTS = [(0.0, 0.0), (0.0, 1.0), (0.0, 2.0), (0.0, 0.5), (0.0, -1.0), (-1.0, 2.0), (-1.0, 0.0), (-2.0, 0.5),
              (2.0, 0.0), (1.5, -2.0)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy warns on 0 ** -1 and log(0); the values are the point
@pytest.mark.parametrize("a,b", POW_POINTS)
def test_pow_gradients_match_torch(a, b, torch):
    ours, theirs = _pair(torch, [[a], [b]])
    _assert_same(ours, theirs, ours[0] ** ours[1], theirs[0] ** theirs[1])  # tensor ** tensor
    (x,), (tx,) = _pair(torch, [[a]])
    _assert_same([x], [tx], x ** b, tx ** b)  # a Python scalar exponent
    (e,), (te,) = _pair(torch, [[b]])
    _assert_same([e], [te], a ** e, a ** te)  # a Python scalar base


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_with_zero_exponent_keeps_second_derivative(torch):
    ours, theirs = _pair(torch, [[0.0, 1.5], [0.0, 2.0]])
    (g,) = gpugrad.autograd.grad((ours[0] ** ours[1]).sum(), [ours[0]], create_graph=True)
    (tg,) = torch.autograd.grad((theirs[0] ** theirs[1]).sum(), [theirs[0]], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy())
    _assert_same(ours, theirs, g, tg)


# -- 3. var with n <= correction ----------------------------------------------------------------------------------
VARS = [([1.0, 3.0], 2, None), ([1.0, 3.0], 2, 0), ([1.0, 1.0], 2, 0), ([1.0, 1.0], 2, None), ([2.0], 1, 0),
        ([2.0], 1, None), ([1.0, 3.0], 3, None), ([1.0, 3.0], 3, 0), ([1.0, 3.0], 2.5, None), ([1.0, 3.0], 1.5, 0),
        ([[1.0, 3.0], [2.0, 2.0]], 2, 1), (5.0, 1, None), (5.0, 1, 0), (np.zeros((0, 3)), 1, 0), (np.zeros(0), 1, None)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")  # inf * 0 here; torch warns on dof <= 0
@pytest.mark.parametrize("x,correction,axis", VARS)
def test_var_with_too_few_elements_matches_torch(x, correction, axis, torch):
    (v,), (tv,) = _pair(torch, [x])
    kw = {} if axis is None else {"dim": axis}
    _assert_same([v], [tv], v.var(axis=axis, correction=correction), tv.var(correction=correction, **kw))


# -- 4. 0-d tensors take axis 0 and -1 ------------------------------------------------------------------------------
ZERO_D = ["sum", "mean", "max", "min", "softmax", "log_softmax", "logsumexp", "squeeze", "unsqueeze"]


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("op", ZERO_D)
def test_zero_dim_tensor_accepts_axis_0_and_minus_1(op, axis, torch):
    (s,), (ts,) = _pair(torch, [1.5])
    theirs = {"max": "amax", "min": "amin"}.get(op, op)  # max(dim) is (values, indices): amax is the reduction
    _assert_same([s], [ts], getattr(s, theirs)(axis), getattr(ts, theirs)(axis))


@pytest.mark.parametrize("op", ZERO_D + ["var"])
def test_zero_dim_tensor_rejects_other_axes(op):
    s = gpugrad.tensor(1.5, requires_grad=True)
    with pytest.raises(IndexError, match=r"axis 1 is out of range for a tensor with 0 dimensions"):
        getattr(s, op)(1)


def test_zero_dim_reductions_keepdims_and_tuple_axes(torch):
    (s,), (ts,) = _pair(torch, [2.0])
    _assert_same([s], [ts], s.sum((0,), keepdims=True) * 3, ts.sum((0,), keepdim=True) * 3)
    with pytest.raises(ValueError, match="twice"):
        gpugrad.ones(2, 3).sum((1, -1))


# -- 5. softmax family over an empty axis ---------------------------------------------------------------------------
EMPTY = [((3, 0), -1), ((3, 0), 0), ((0, 3), -1), ((0, 3), 0), ((2, 0, 4), 1)]


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("shape,axis", EMPTY)
def test_softmax_family_over_empty_axes_matches_torch(op, shape, axis, torch):
    (x,), (tx,) = _pair(torch, [np.zeros(shape)])
    _assert_same([x], [tx], getattr(x, op)(axis), getattr(tx, op)(axis))


# -- 6. max/min keep an empty axis that is not reduced --------------------------------------------------------------
@pytest.mark.parametrize("op", ["max", "min"])
def test_extreme_over_a_nonempty_axis_of_an_empty_tensor(op, torch):
    (x,), (tx,) = _pair(torch, [np.zeros((0, 3))])
    _assert_same([x], [tx], getattr(x, "a" + op)(1), getattr(tx, "a" + op)(1))
    with pytest.raises(IndexError, match=r"cannot reduce an empty tensor of shape \(0, 3\)"):  # as torch's types
        getattr(x, "a" + op)(0)
    with pytest.raises(RuntimeError, match=r"cannot reduce an empty tensor of shape \(0, 3\)"):
        getattr(x, op)()


# -- 7. expand: -1 only for existing axes ---------------------------------------------------------------------------
def test_expand_rejects_minus_one_for_a_new_axis(torch):
    with pytest.raises(ValueError, match="new leading axes"):
        gpugrad.zeros(3).expand(-1, 3)
    with pytest.raises(ValueError, match="at least 2 sizes"):
        gpugrad.zeros(3, 1).expand(3)
    (x,), (tx,) = _pair(torch, [np.arange(3.0).reshape(3, 1)])
    _assert_same([x], [tx], x.expand(2, -1, 4), tx.expand(2, -1, 4))


# -- 8. cat / stack take dim= ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["cat", "stack"])
def test_cat_and_stack_accept_dim(fn, torch):
    ours, theirs = _pair(torch, [np.arange(6.0).reshape(2, 3), np.arange(6.0, 12.0).reshape(2, 3)])
    _assert_same(ours, theirs, getattr(gpugrad, fn)(ours, dim=1), getattr(torch, fn)(theirs, dim=1))
    assert getattr(gpugrad, fn)(ours, -1).shape == tuple(getattr(torch, fn)(theirs, -1).shape)
    assert getattr(gpugrad, fn)(ours).shape == tuple(getattr(torch, fn)(theirs).shape)
    with pytest.raises(TypeError, match="not both"):
        getattr(gpugrad, fn)(ours, axis=0, dim=1)


# -- 9. cross-entropy of an empty batch -----------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_an_empty_batch_matches_torch(reduction, torch):
    (x,), (tx,) = _pair(torch, [np.zeros((0, 5))])
    t = np.zeros(0, np.int64)
    y = F.cross_entropy(x, gpugrad.tensor(t), reduction=reduction)
    ty = torch.nn.functional.cross_entropy(tx, torch.tensor(t), reduction=reduction)
    _assert_same([x], [tx], y, ty)
    assert x.grad.shape == (0, 5)


# -- 10. inference_mode(False) ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("outer", ["inference_mode", "no_grad", "enable_grad"])
def test_inference_mode_false_enables_grad_as_torch(outer, torch):
    w = gpugrad.ones(2, requires_grad=True)
    with getattr(gpugrad, outer)(), getattr(torch, outer)():
        with gpugrad.inference_mode(False), torch.inference_mode(False):
            assert (gpugrad.is_grad_enabled(), gpugrad.is_inference_mode_enabled()) == (
                torch.is_grad_enabled(), torch.is_inference_mode_enabled()) == (True, False)
            assert (w * 2).requires_grad
        assert (gpugrad.is_grad_enabled(), gpugrad.is_inference_mode_enabled()) == (
            torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    assert (gpugrad.is_grad_enabled(), gpugrad.is_inference_mode_enabled()) == (True, False)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(10,), (), (2, 5)])
def test_relu_keeps_negative_zero_and_nans_bit_for_bit_as_torch(dtype, shape, torch):
    values = [-1.0, -0.0, 0.0, 1.5, float("nan"), -float("nan"), float("inf"), -float("inf"), 1e-40, -1e-40]
    t = torch.tensor(values[:1] if shape == () else values, dtype=getattr(torch, dtype)).reshape(shape)
    bits = {"float32": (torch.int32, np.int32), "float64": (torch.int64, np.int64)}.get(dtype, (torch.int16, np.int16))
    x = t.view(bits[0]).numpy().view(gpugrad.tensor([], dtype=getattr(gpugrad, dtype)).numpy().dtype)  # same bits
    mine = gpugrad.tensor(x).relu().numpy().view(bits[1])
    # -0.0 stays -0.0 and -nan stays -nan (np.maximum would give +0.0 for -0.0)
    np.testing.assert_array_equal(mine, torch.relu(t).view(bits[0]).numpy())


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_plain_cross_entropy_gives_the_general_formulas_bits(reduction):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((37, 7)) * 4).astype(np.float32)
    x[3, :] = -np.inf  # an all -inf row, a row with one -inf, one with a NaN, one with +inf
    x[4, 1], x[5, 6], x[6, 0] = -np.inf, np.nan, np.inf
    t = rng.choice([0, 1, 2, 4, 5, 6], 37)  # never 3: ignore_index=3 lies within the ids, so the general path runs
    assert R._plain(np, x, t, None, -100, 0.0) and not R._plain(np, x, t, None, 3, 0.0)
    fast, general = (R.softmax_xent_fwd(np, x, t, reduction, ignore_index=i) for i in (-100, 3))
    for a, b in zip(fast, general):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype and a.shape == b.shape
    gloss = rng.standard_normal(37).astype(np.float32) if reduction == "none" else np.array(0.7, np.float32)
    grads = [R.softmax_xent_bwd(np, x, t, fast[1], gloss, reduction, ignore_index=i, aux=fast[2]) for i in (-100, 3)]
    np.testing.assert_array_equal(grads[0], grads[1])
    assert grads[0].dtype == np.float32


@pytest.mark.parametrize("ids, ignore_index, plain", [([0, 4, 2, 4], -100, True), ([1, 4, 2, 4], 0, True),
                                                      ([1, 4, 2, 4], 2, False), ([1, 3, 3, 1], 2, False)])
def test_cross_entropy_hands_its_checked_id_range_to_the_reference(ids, ignore_index, plain, torch, monkeypatch):
    # the CPU range check reduces the ids once; the reference's plain-case test reuses its (min, max)
    seen = []
    real = R.softmax_xent_fwd

    def spy(*args, **kwargs):
        seen.append(kwargs.get("t_range"))
        return real(*args, **kwargs)

    monkeypatch.setattr(reference, "softmax_xent_fwd", spy)
    x = np.random.default_rng(3).standard_normal((4, 5))
    t = np.array(ids)
    ours = F.cross_entropy(gpugrad.tensor(x), gpugrad.tensor(t), ignore_index=ignore_index)
    theirs = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t), ignore_index=ignore_index)
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    ignored = np.array(ids) == ignore_index
    assert seen == [None if ignored.any() else (min(ids), max(ids))]
    assert R._plain(np, x, t, None, ignore_index, 0.0, seen[0]) == R._plain(np, x, t, None, ignore_index, 0.0) == plain
    with pytest.raises(IndexError, match=r"cross_entropy: target ids must lie in \[0, 5\) .* got min 1 and max 5"):
        F.cross_entropy(gpugrad.tensor(x), gpugrad.tensor(np.array([1, 5, 2, 3])), ignore_index=ignore_index)
