"""Arithmetic with options as torch users write it: ``add``/``sub`` with ``alpha=``, ``addmm`` (beta, alpha),
``addcmul``/``addcdiv`` (value=), ``lerp`` with a number or a tensor weight, ``pow`` with a number as the base,
``atan2``/``arctan2``, their in-place forms, gradients and torch's errors (tests/compat/harness.py)."""
from __future__ import annotations

import pytest

from tests.compat.harness import check, check_raises_as_torch, compat


def _leaves(torch, *shapes):
    g = torch.Generator().manual_seed(0)
    return [torch.linspace(-1.5, 2.0, int(torch.tensor(s).prod())).reshape(s).requires_grad_() for s in shapes], g


def _grads(torch, y, xs):
    y.backward(torch.ones_like(y) * 0.5 + torch.arange(y.numel()).reshape(y.shape) * 0.25)
    return y, [x.grad for x in xs]


@compat
def test_add_and_sub_with_alpha_and_their_gradients(torch):
    (a, b), _ = _leaves(torch, (2, 3), (3,))
    return _grads(torch, torch.add(a, b, alpha=2) - torch.sub(b, a, alpha=-0.5) + a.sub(3, alpha=2), [a, b])


@compat
def test_add_and_sub_in_place_with_alpha(torch):
    x = torch.ones(2, 3)
    x.add_(torch.arange(3.0), alpha=2).sub_(torch.ones(3), alpha=0.5)
    n = torch.tensor([1, 2])
    n.add_(torch.tensor([3, 4]), alpha=3)
    return x, n, torch.add(torch.tensor([1, 2]), 3, alpha=2)


@compat
def test_add_with_a_float_alpha_and_integer_tensors_refuses(torch):
    return torch.add(torch.tensor([1, 2]), torch.tensor([1, 2]), alpha=0.5)


@compat
def test_addmm_with_beta_alpha_and_a_broadcast_input(torch):
    (c, a, b), _ = _leaves(torch, (4,), (2, 3), (3, 4))
    return _grads(torch, torch.addmm(c, a, b, beta=0.5, alpha=2.0), [c, a, b])


@compat
def test_addmm_defaults_method_and_beta_zero_ignores_nan(torch):
    a, b = torch.ones(2, 3), torch.arange(12.0).reshape(3, 4)
    return (torch.ones(2, 4).addmm(a, b), torch.addmm(torch.full((2, 4), float("nan")), a, b, beta=0),
            torch.addmm(torch.tensor(1.0), a, b, alpha=-1))


@compat
def test_addmm_in_place(torch):
    x = torch.ones(2, 4)
    return x.addmm_(torch.ones(2, 3), torch.ones(3, 4), beta=2, alpha=0.5), x


@compat
def test_addmm_of_integers(torch):
    ones = torch.ones(2, 2, dtype=torch.int64)
    return torch.addmm(ones, ones, ones, beta=2, alpha=3)


@pytest.mark.parametrize("call", [
    lambda t: t.addmm(t.ones(2, 4), t.ones(3), t.ones(3, 4)),
    lambda t: t.addmm(t.ones(2, 4), t.ones(2, 3), t.ones(2, 4)),
    lambda t: t.addmm(t.ones(2, 2, dtype=t.float64), t.ones(2, 2), t.ones(2, 2)),
    lambda t: t.ones(4).addmm_(t.ones(2, 3), t.ones(3, 4)),
], ids=["vector", "shapes", "dtypes", "in_place_broadcast"])
def test_addmm_refuses_as_torch(call):
    check(call)


@compat
def test_addcmul_and_addcdiv_with_value_and_gradients(torch):
    (a, b, c), _ = _leaves(torch, (2, 1), (3,), (2, 3))
    return _grads(torch, torch.addcmul(a, b, c, value=-0.5) + torch.addcdiv(a, b, c + 3, value=2), [a, b, c])


@compat
def test_addcmul_and_addcdiv_in_place_and_as_methods(torch):
    x = torch.zeros(3)
    x.addcmul_(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 2.0, 2.0]), value=0.5)
    x.addcdiv_(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([4.0, 2.0, 1.0]))
    return x, torch.ones(3).addcmul(torch.ones(3), torch.ones(3) * 2), torch.ones(3).addcdiv(torch.ones(3), torch.ones(3))


@compat
def test_addcmul_of_integers_and_mixed_dtypes(torch):
    i = torch.tensor([1, 2])
    return torch.addcmul(i, i, i, value=2), torch.addcmul(i, torch.ones(2), torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize("call", [
    lambda t: t.addcdiv(t.tensor([1, 2]), t.tensor([1, 2]), t.tensor([1, 1])),
    lambda t: t.addcmul(t.ones(2), t.ones(2), 2.0),
    lambda t: t.addcmul(t.ones(2), t.ones(3), t.ones(2)),
], ids=["integer_division", "number", "shapes"])
def test_addcmul_and_addcdiv_refuse_as_torch(call):
    check(call)


@compat
def test_lerp_with_a_number_and_a_tensor_weight_and_gradients(torch):
    (a, b, w), _ = _leaves(torch, (2, 3), (3,), (2, 1))
    y = torch.lerp(a, b, 0.3) + a.lerp(b, w)
    return (*_grads(torch, y, [a, b, w]), torch.lerp(a, b, 0.3).grad_fn.name(), a.lerp(b, w).grad_fn.name())


@compat
def test_lerp_at_weight_one_is_the_end_exactly(torch):
    start, end = torch.tensor([1e30, 3.0, -2.0]), torch.tensor([0.1, 7.0, 0.3])
    return torch.lerp(start, end, 1.0), torch.lerp(start, end, torch.ones(3)), torch.lerp(start, end, 0.0)


@compat
def test_lerp_in_place(torch):
    x = torch.zeros(3)
    return x.lerp_(torch.tensor([2.0, 4.0, 8.0]), 0.25), x.lerp_(torch.ones(3), torch.tensor([0.0, 0.5, 1.0]))


@pytest.mark.parametrize("call", [
    lambda t: t.lerp(t.tensor([1, 2]), t.tensor([1, 2]), 0.5),
    lambda t: t.lerp(t.ones(2), t.ones(2, dtype=t.float64), 0.5),
], ids=["integers", "dtypes"])
def test_lerp_refuses_as_torch(call):
    check(call)


@compat
def test_pow_with_a_number_as_the_base(torch):
    (x,), _ = _leaves(torch, (5,))
    y = torch.pow(2, x) + 3.0 ** x
    return _grads(torch, y, [x]), torch.pow(2, torch.tensor([1, 2, 3]))


@compat
def test_integer_powers_with_negative_exponents_in_a_tensor(torch):
    """torch's integer pow: base 1 gives 1, -1 gives +-1 by parity, any other base 0 (NumPy refuses them all)."""
    return (torch.tensor([1, -1, 0, 5, -1, 2]) ** torch.tensor([-1, -3, -2, 2, -2, -1]),
            2 ** torch.tensor([-1, 2, -3]), torch.tensor(2, dtype=torch.int32) ** torch.tensor(-1, dtype=torch.int32))


@pytest.mark.parametrize("call", [
    lambda t: t.tensor([2, 3]) ** -1,
    lambda t: t.tensor([2, 3]).pow(-2),
    lambda t: t.pow(t.tensor([2, 3]), -1),
], ids=["operator", "method", "function"])
def test_an_integer_tensor_to_a_negative_number_raises_as_torch(call):
    check_raises_as_torch(call)


@compat
def test_atan2_quadrants_gradients_and_the_origin(torch):
    y = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 2.0], requires_grad=True)
    x = torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0, -3.0, 0.0], requires_grad=True)
    out = torch.atan2(y, x)
    out.sum().backward()
    return out, y.grad, x.grad, out.grad_fn.name()


@compat
def test_atan2_of_integers_arctan2_and_in_place(torch):
    a = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    b = a.clone()
    b.atan2_(torch.tensor([2.0, -1.0]))
    return (torch.atan2(torch.tensor([1, 2]), torch.tensor([1, 0])), torch.arctan2(a, a.T), a.arctan2(a.T), b,
            torch.atan2(a, torch.tensor(2.0)))


@compat
def test_atan2_refuses_a_number(torch):
    return torch.atan2(torch.ones(2), 2.0)


@pytest.mark.parametrize("shapes", [((2, 3), (4,)), ((5, 1, 4), (2, 3)), ((3,), (2, 2)), ((2, 3), (1, 3), (4, 1, 2))],
                         ids=["trailing", "middle", "vector", "three"])
def test_operands_that_do_not_broadcast_raise_torchs_runtime_error(shapes):
    def snippet(torch):
        xs = [torch.ones(s, requires_grad=True) for s in shapes]
        y = xs[0] * xs[1]
        return y + xs[2] if len(xs) > 2 else y
    check_raises_as_torch(snippet)


@pytest.mark.parametrize("join", ["stack", "cat", "hstack", "vstack", "dstack", "column_stack", "row_stack"])
def test_joining_nothing_raises_as_torch(join):
    check_raises_as_torch(lambda torch: getattr(torch, join)([]))


@compat
def test_the_tangent_of_atan2_at_the_origin(torch):
    fw = torch.autograd.forward_ad
    a = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.0, 0.5, 3.0], dtype=torch.float64)
    with fw.dual_level():  # (b t_a - a t_b) / r²: NaN at the origin, where the VJP gives 0
        y = fw.make_dual(a, torch.ones(3, dtype=torch.float64)).atan2(fw.make_dual(b, torch.ones(3, dtype=torch.float64)))
        return fw.unpack_dual(y).tangent.detach()


@compat
def test_atleast_nd_dstack_column_stack_and_row_stack_with_gradients(torch):
    a, b, c = torch.tensor(1.5, requires_grad=True), torch.arange(3.0, requires_grad=True), torch.ones(3, 2)
    c.requires_grad_()
    views = [torch.atleast_1d(a), torch.atleast_2d(a, b, c), torch.atleast_3d([b, c]), torch.atleast_3d(c)]
    joined = [torch.dstack([b, b * 2]), torch.dstack([c, c]), torch.column_stack([b, c]), torch.row_stack([b, b])]
    total = sum(v.sum() for v in joined) + sum(t.sum() for v in views for t in (v if isinstance(v, tuple) else (v,)))
    total.backward()
    names = [t.grad_fn.name() for v in views for t in (v if isinstance(v, tuple) else (v,))]
    return views, joined, a.grad, b.grad, c.grad, names


@compat
def test_the_gradient_of_x_to_the_zero_is_zero_even_for_a_nan_or_inf_upstream_gradient(torch):
    x = torch.tensor([1.0, -2.0, 0.0], requires_grad=True)
    (x ** 0).backward(torch.tensor([float("nan"), float("inf"), 1.0]))
    g, = torch.autograd.grad((x.pow(0) * 3).sum(), x, create_graph=True)
    return x.grad, g


@compat
def test_second_derivatives_of_fmod_and_remainder_are_constants(torch):
    """The divisor's gradient -gy * trunc(a / b) (floor for remainder) differentiates to zeros that need no grad, as
    torch's div(rounding_mode=) node gives."""
    a = torch.tensor([5.0, -3.0, 2.5], dtype=torch.float64)
    out = []
    for op in ("fmod", "remainder"):
        b = torch.tensor([2.0, 2.0, 1.5], dtype=torch.float64, requires_grad=True)
        g, = torch.autograd.grad((getattr(a, op)(b) * torch.arange(1.0, 4.0, dtype=torch.float64)).sum(), b,
                                 create_graph=True)
        h, = torch.autograd.grad(g.sum(), b, create_graph=True)
        out += [g, h, h.requires_grad]
    return out
