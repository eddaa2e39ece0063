"""torch's contract for custom ``autograd.Function``s, each habit run with torch and with gpugrad and compared
(tests/compat/harness.py): several outputs, non-differentiable outputs, in-place Functions (mark_dirty),
materialized gradients, once_differentiable, the setup_context style, what backward may return, saved tensors and
their checks, forward mode (jvp), and the module path torch.autograd.function."""
from __future__ import annotations

import pytest

from tests.compat.harness import check, check_raises_as_torch, compat


def _leaf(torch, *values):
    return torch.tensor(list(values) or [1.0, -2.0, 3.0], requires_grad=True)


def _polar(torch, seen=None):
    """(x, y) -> (radius, angle-ish): two differentiable outputs; ``seen`` records what backward receives."""
    class Polar(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            r = (x * x + y * y).sqrt()
            ctx.save_for_backward(x, y, r)
            return r, y / x

        @staticmethod
        def backward(ctx, gr, gq):
            x, y, r = ctx.saved_tensors
            if seen is not None:
                seen.append((gr, gq))
            return gr * x / r - gq * y / (x * x), gr * y / r + gq / x
    return Polar


# --- several outputs --------------------------------------------------------------------------------------------

@compat
def test_several_outputs_each_get_their_own_gradient(torch):
    x, y = _leaf(torch, 1.0, 2.0), _leaf(torch, 3.0, -1.0)
    r, q = _polar(torch).apply(x, y)
    (2 * r.sum() + 3 * q.sum()).backward()
    return r, q, x.grad, y.grad, r.grad_fn is q.grad_fn, r.grad_fn.name(), (r.output_nr, q.output_nr)


@compat
def test_an_unused_output_gets_zeros_in_backward(torch):
    seen = []
    x, y = _leaf(torch, 1.0, 2.0), _leaf(torch, 3.0, -1.0)
    r, q = _polar(torch, seen).apply(x, y)
    r.sum().backward()
    return seen[0], x.grad, y.grad


@compat
def test_set_materialize_grads_false_passes_none(torch):
    seen = []

    class Two(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, ga, gb):
            seen.append((ga, gb))
            return ga * 2 if gb is None else ga * 2 + gb * 3

    x = _leaf(torch)
    a, b = Two.apply(x)
    b.sum().backward()
    return seen[0], x.grad


@compat
def test_non_tensor_outputs_come_back_as_they_are(torch):
    seen = []

    class Mixed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 5, "five", None

        @staticmethod
        def backward(ctx, g, *rest):
            seen.append(rest)
            return g * 2

    x = _leaf(torch)
    y, n, s, none = Mixed.apply(x)
    y.sum().backward()
    return n, s, none, seen[0], x.grad


@compat
def test_a_backward_hook_on_one_output(torch):
    calls = []
    x, y = _leaf(torch, 1.0, 2.0), _leaf(torch, 3.0, -1.0)
    r, q = _polar(torch).apply(x, y)
    r.register_hook(lambda g: calls.append(("r", g)))
    q.register_hook(lambda g: calls.append(("q", g)))
    q.sum().backward()
    return sorted(calls, key=lambda c: c[0]), x.grad  # NOTE: the order across outputs differs (README)


@compat
def test_grad_with_respect_to_one_output(torch):
    x, y = _leaf(torch, 1.0, 2.0), _leaf(torch, 3.0, -1.0)
    r, q = _polar(torch).apply(x, y)
    return torch.autograd.grad((r * q).sum(), [q, x])


# --- non-differentiable outputs ------------------------------------------------------------------------------------

def _sort_with_order(torch, seen):
    class SortWithOrder(torch.autograd.Function):
        @staticmethod
        def forward(ctx, v):
            values, order = v.sort()
            doubled = v * 2
            ctx.mark_non_differentiable(order, doubled)
            ctx.save_for_backward(order)
            return values, order, doubled

        @staticmethod
        def backward(ctx, g, g_order, g_doubled):
            seen.append((g_order, g_doubled))
            (order,) = ctx.saved_tensors
            return torch.zeros_like(g).scatter(0, order, g)
    return SortWithOrder


@compat
def test_mark_non_differentiable_outputs_need_no_grad(torch):
    seen = []
    v = _leaf(torch, 3.0, -1.0, 2.0)
    values, order, doubled = _sort_with_order(torch, seen).apply(v)
    (values * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    return (values.requires_grad, order.requires_grad, doubled.requires_grad, doubled.grad_fn, doubled.is_leaf,
            seen[0], v.grad)


@compat
def test_integer_outputs_are_not_differentiable(torch):
    seen = []

    class ArgMax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x.argmax()

        @staticmethod
        def backward(ctx, g, gi):
            seen.append(gi)
            return g * 2

    x = _leaf(torch)
    y, i = ArgMax.apply(x)
    y.sum().backward()
    return i.requires_grad, i.grad_fn, seen[0], x.grad


# --- in-place Functions: mark_dirty --------------------------------------------------------------------------------

def _add_one_(torch):
    class AddOne_(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 3
    return AddOne_


@compat
def test_mark_dirty_returns_the_input_with_a_new_history(torch):
    a = _leaf(torch)
    x = a * 2
    before = x._version
    y = _add_one_(torch).apply(x)
    y.sum().backward()
    return y is x, y, x._version - before, x.grad_fn.name(), x.is_leaf, a.grad


@compat
def test_mark_dirty_without_a_graph_still_counts_as_a_write(torch):
    b = torch.ones(2)
    y = _add_one_(torch).apply(b)
    return y is b, b, b._version, b.requires_grad


@compat
def test_mark_dirty_on_a_view_rebases_its_base(torch):
    a = _leaf(torch, 1.0, 2.0, 3.0, 4.0)
    base = a * 1
    v = base[:2]
    y = _add_one_(torch).apply(v)
    (base * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    return y is v, base, a.grad


@compat
def test_mark_dirty_invalidates_what_other_nodes_saved(torch):
    a = _leaf(torch)
    x = a * 1
    z = x * x
    _add_one_(torch).apply(x)
    z.sum().backward()


# --- once_differentiable -----------------------------------------------------------------------------------------

def _square_once(torch, seen):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            seen.append(torch.is_grad_enabled())
            return 2 * x * g
    return Square


@compat
def test_once_differentiable_runs_backward_without_grad(torch):
    seen = []
    x = _leaf(torch)
    _square_once(torch, seen).apply(x).sum().backward()
    (g,) = torch.autograd.grad(_square_once(torch, seen).apply(x).sum(), x, create_graph=True)
    return x.grad, g, g.requires_grad, seen


# --- what backward may return --------------------------------------------------------------------------------------

def _scale(torch, grads):
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return grads(torch, g)
    return Scale


RETURNS = {
    "extra_trailing_nones": lambda torch, g: (g * 2, None, None, None),
    "an_extra_gradient": lambda torch, g: (g * 2, None, g),
    "too_few": lambda torch, g: g * 2,
    "a_gradient_for_a_number": lambda torch, g: (g * 2, g),
    "a_float": lambda torch, g: (3.0, None),
    "a_wrong_shape": lambda torch, g: (torch.ones(5), None),
    "a_broadcast_shape": lambda torch, g: (torch.ones(4, 3), None),
    "float64": lambda torch, g: (g.double() * 2, None),
}


@pytest.mark.parametrize("what", RETURNS)
def test_what_backward_returns(what):
    def snippet(torch):
        x = _leaf(torch)
        _scale(torch, RETURNS[what]).apply(x, 2.0).sum().backward()
        return x.grad, x.grad.dtype
    check(snippet)


@pytest.mark.parametrize("what", ["an_extra_gradient", "too_few", "a_gradient_for_a_number", "a_float",
                                  "a_wrong_shape"])
def test_what_backward_returns_is_refused_in_torch_words(what):
    check_raises_as_torch(lambda torch: _scale(torch, RETURNS[what]).apply(_leaf(torch), 2.0).sum().backward())


@compat
def test_needs_input_grad(torch):
    seen = []

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, k, c):
            seen.append(ctx.needs_input_grad)
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            seen.append(ctx.needs_input_grad)
            return g, g, None, None

    F.apply(_leaf(torch), torch.ones(3), 2.0, _leaf(torch)).sum().backward()
    with torch.no_grad():
        out = F.apply(_leaf(torch), torch.ones(3), 2.0, None)
    return seen, out.requires_grad


@compat
def test_forward_returning_its_input(torch):
    class Ident(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 7

    x = _leaf(torch)
    y = Ident.apply(x)
    y.sum().backward()
    return y is x, y.grad_fn.name(), x.grad, x.is_leaf


# --- the setup_context style ---------------------------------------------------------------------------------------

@compat
def test_setup_context_style_with_two_outputs(torch):
    seen = []

    class Affine(torch.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x * k, x + 1

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            seen.append((type(output).__name__, len(output), ctx.needs_input_grad))
            ctx.k = k
            ctx.save_for_backward(x, output[0])

        @staticmethod
        def backward(ctx, g1, g2):
            x, scaled = ctx.saved_tensors
            return g1 * ctx.k + g2, None

    x = _leaf(torch)
    a, b = Affine.apply(x, 3.0)
    (a * b).sum().backward()
    return seen, a, b, x.grad, hasattr(Affine, "vmap"), hasattr(Affine, "jvp")


# --- saved tensors -----------------------------------------------------------------------------------------------

@compat
def test_saving_a_number_raises(torch):
    class SaveNumber(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g

    SaveNumber.apply(_leaf(torch))


def _save_input(torch, seen):
    class SaveInput(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, None)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            again = ctx.saved_tensors
            seen.append((b, again[0] is a, again[1]))
            return g * a
    return SaveInput


@compat
def test_saved_tensors_read_twice_and_through_grad_fn(torch):
    seen = []
    x = _leaf(torch)
    y = _save_input(torch, seen).apply(x)
    y.sum().backward(retain_graph=True)
    return seen, x.grad, y.grad_fn.saved_tensors


@pytest.mark.parametrize("how", ["saved_tensors_after_backward", "second_backward", "changed_in_place"])
def test_saved_tensor_errors_in_torch_words(how):
    def snippet(torch):
        x = _leaf(torch) * 1
        y = _save_input(torch, []).apply(x)
        if how == "changed_in_place":
            with torch.no_grad():
                x.mul_(2)
        else:
            y.sum().backward()
        if how == "saved_tensors_after_backward":
            return y.grad_fn.saved_tensors
        y.sum().backward()
    check_raises_as_torch(snippet)


# --- forward mode -------------------------------------------------------------------------------------------------

@compat
def test_jvp_of_a_custom_function(torch):
    seen = []

    class MulAdd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_forward(x, y)
            seen.append(torch.autograd.forward_ad.unpack_dual(x).tangent)
            return x * y, x + y

        @staticmethod
        def backward(ctx, g, h):
            return g, h

        @staticmethod
        def jvp(ctx, tx, ty):
            x, y = ctx.saved_tensors
            seen.append(ty)
            return tx * y + ty * x, tx + ty

    fwd = torch.autograd.forward_ad
    with fwd.dual_level():
        x = fwd.make_dual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -1.0]))
        a, b = MulAdd.apply(x, torch.tensor([3.0, 4.0]))
        return seen, fwd.unpack_dual(a), fwd.unpack_dual(b)


@compat
def test_forward_mode_without_jvp_raises(torch):
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    fwd = torch.autograd.forward_ad
    with fwd.dual_level():
        Double.apply(fwd.make_dual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0])))


@compat
def test_a_function_without_backward_raises(torch):
    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

    NoBackward.apply(_leaf(torch)).sum().backward()


# --- names and module paths ---------------------------------------------------------------------------------------

@compat
def test_the_module_path_is_torch_autograd_function(torch):
    f = torch.autograd.function

    class F(f.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g

    node = F.apply(_leaf(torch)).grad_fn
    return (torch.autograd.Function is f.Function, isinstance(node, f.FunctionCtx), type(node).__name__, type(node).__module__.replace("gpugrad", "torch"),
            callable(f.once_differentiable))


@pytest.mark.parametrize("name", ["once", "dirty_leaf", "dirty_missing", "non_differentiable"])
def test_custom_function_errors_start_with_torch_sentence(name):
    check_raises_as_torch(lambda torch: SNIPPETS[name](torch))


def _dirty_leaf(torch):
    _add_one_(torch).apply(_leaf(torch))


def _dirty_missing(torch):
    class Hidden(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g

    Hidden.apply(_leaf(torch) * 1)


def _once(torch):
    x = _leaf(torch)
    (g,) = torch.autograd.grad((_square_once(torch, []).apply(x) * x).sum(), x, create_graph=True)
    g.sum().backward()


def _non_differentiable(torch):
    values, order, doubled = _sort_with_order(torch, []).apply(_leaf(torch))
    doubled.sum().backward()


SNIPPETS = {"once": _once, "dirty_leaf": _dirty_leaf, "dirty_missing": _dirty_missing,
            "non_differentiable": _non_differentiable}
