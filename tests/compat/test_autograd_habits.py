"""Everyday autograd habits, each run with torch and with gpugrad and compared (tests/compat/harness.py): backward
and accumulation, retain_graph/create_graph, torch.autograd.grad, grad modes as contexts and decorators, detach and
requires_grad_, tensor hooks, retain_grad, leaves and grad_fn names, custom Functions, autograd.functional and
forward_ad."""
from __future__ import annotations

from tests.compat.harness import check_raises_as_torch, compat


def _x(torch, *values, **kw):
    return torch.tensor(list(values) or [1.0, -2.0, 3.0], requires_grad=True, **kw)


# --- backward and .grad -----------------------------------------------------------------------------------------

@compat
def test_backward_of_a_scalar_fills_leaf_grads(torch):
    x = _x(torch)
    (x * x).sum().backward()
    return x.grad


@compat
def test_grad_is_none_before_backward(torch):
    return _x(torch).grad


@compat
def test_grads_accumulate_over_backwards(torch):
    x = _x(torch)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    return x.grad


@compat
def test_zeroing_grad_in_place_then_backward(torch):
    x = _x(torch)
    (x ** 2).sum().backward()
    x.grad.zero_()
    (x * 5).sum().backward()
    return x.grad


@compat
def test_setting_grad_to_none_restarts_accumulation(torch):
    x = _x(torch)
    (x ** 2).sum().backward()
    x.grad = None
    (x * 5).sum().backward()
    return x.grad


@compat
def test_assigning_a_grad_of_another_shape_raises(torch):
    x = _x(torch)
    x.grad = torch.zeros(2)


@compat
def test_backward_adds_into_an_assigned_grad(torch):
    x = _x(torch)
    x.grad = torch.ones(3)
    (x * 2).sum().backward()
    return x.grad


@compat
def test_backward_of_a_non_scalar_needs_a_gradient(torch):
    x = _x(torch)
    (x * 2).backward()


@compat
def test_backward_of_a_one_element_tensor_needs_no_gradient(torch):
    x = _x(torch)
    (x[:1] * 4).backward()
    return x.grad


@compat
def test_backward_with_a_gradient_is_a_vector_jacobian_product(torch):
    x = _x(torch)
    (x ** 2).backward(torch.tensor([1.0, 0.5, -1.0]))
    return x.grad


@compat
def test_backward_of_a_tensor_without_grad_raises(torch):
    torch.ones(3).sum().backward()


@compat
def test_second_backward_through_a_freed_graph_raises(torch):
    x = _x(torch)
    y = (x.exp() * x).sum()
    y.backward()
    y.backward()


@compat
def test_retain_graph_allows_a_second_backward(torch):
    x = _x(torch)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    return x.grad


@compat
def test_backward_inputs_fills_only_those(torch):
    x, w = _x(torch), _x(torch, 0.5, 0.25, 2.0)
    (x * w).sum().backward(inputs=[w])
    return x.grad, w.grad


@compat
def test_autograd_backward_of_several_tensors(torch):
    x = _x(torch)
    torch.autograd.backward([x.sum(), (x * x).sum()], [torch.tensor(1.0), torch.tensor(2.0)])
    return x.grad


@compat
def test_gradient_through_indexing_is_zero_elsewhere(torch):
    x = _x(torch, 1.0, 2.0, 3.0, 4.0)
    (x[1:3] * 10).sum().backward()
    return x.grad


@compat
def test_reused_tensor_gets_the_sum_of_its_paths(torch):
    x = _x(torch)
    (x * x + x).sum().backward()
    return x.grad


# --- torch.autograd.grad ------------------------------------------------------------------------------------------

@compat
def test_autograd_grad_returns_a_tuple_and_leaves_grad_alone(torch):
    x = _x(torch)
    g = torch.autograd.grad((x ** 3).sum(), x)
    return type(g).__name__, g, x.grad


@compat
def test_autograd_grad_of_several_inputs(torch):
    x, y = _x(torch), _x(torch, 2.0, 2.0, 2.0)
    return torch.autograd.grad((x * y).sum(), [x, y])


@compat
def test_autograd_grad_with_grad_outputs(torch):
    x = _x(torch)
    return torch.autograd.grad(x * x, x, grad_outputs=torch.tensor([1.0, 2.0, 3.0]))


@compat
def test_autograd_grad_of_an_unused_input_raises(torch):
    x, unused = _x(torch), _x(torch)
    torch.autograd.grad((x * 2).sum(), [x, unused])


@compat
def test_autograd_grad_allow_unused_gives_none(torch):
    x, unused = _x(torch), _x(torch)
    return torch.autograd.grad((x * 2).sum(), [x, unused], allow_unused=True)


@compat
def test_create_graph_gives_a_second_derivative(torch):
    x = _x(torch)
    g, = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
    g2, = torch.autograd.grad(g.sum(), x)
    return g, g2


@compat
def test_backward_of_a_create_graph_gradient_accumulates_the_second_derivative(torch):
    x = _x(torch)
    g, = torch.autograd.grad((x.sin() * x).sum(), x, create_graph=True)
    g.sum().backward()
    return g.requires_grad, x.grad


@compat
def test_backward_create_graph_makes_grad_differentiable(torch):
    x = _x(torch)
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    x.grad = None
    g.sum().backward()
    return g.requires_grad, x.grad


@compat
def test_autograd_grad_does_not_retain_the_graph_by_default(torch):
    x = _x(torch)
    y = (x.exp()).sum()
    torch.autograd.grad(y, x)
    torch.autograd.grad(y, x)


# --- grad modes -------------------------------------------------------------------------------------------------

@compat
def test_no_grad_context_records_nothing(torch):
    x = _x(torch)
    with torch.no_grad():
        y = x * 2
    return y, y.requires_grad, y.grad_fn, torch.is_grad_enabled()


@compat
def test_no_grad_decorator_with_parentheses(torch):
    @torch.no_grad()
    def f(x):
        return x * 2, torch.is_grad_enabled()
    return f(_x(torch)), torch.is_grad_enabled()


@compat
def test_bare_no_grad_decorator(torch):
    @torch.no_grad
    def f(x):
        return x * 2
    y = f(_x(torch))
    return y, y.requires_grad


@compat
def test_bare_enable_grad_and_inference_mode_decorators(torch):
    @torch.enable_grad
    def f(x):
        return x * 2

    @torch.inference_mode
    def g(x):
        return x * 2

    with torch.no_grad():
        return f(_x(torch)).requires_grad, g(_x(torch)).requires_grad


@compat
def test_enable_grad_inside_no_grad(torch):
    x = _x(torch)
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = x * 2
    return y.requires_grad, z.requires_grad


@compat
def test_set_grad_enabled_as_context(torch):
    x = _x(torch)
    with torch.set_grad_enabled(False):
        y = x * 2
    with torch.set_grad_enabled(True):
        z = x * 2
    return y.requires_grad, z.requires_grad


@compat
def test_set_grad_enabled_as_a_call(torch):
    x = _x(torch)
    torch.set_grad_enabled(False)
    try:
        y = x * 2
        off = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    return y.requires_grad, off, torch.is_grad_enabled()


@compat
def test_set_grad_enabled_as_decorator(torch):
    @torch.set_grad_enabled(False)
    def f(x):
        return x * 2
    return f(_x(torch)).requires_grad


@compat
def test_inference_mode_context(torch):
    x = _x(torch)
    with torch.inference_mode():
        y = x * 2
        inside = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    return y, y.requires_grad, inside, torch.is_inference_mode_enabled()


@compat
def test_inference_mode_decorator(torch):
    @torch.inference_mode()
    def f(x):
        return x * 2
    return f(_x(torch)).requires_grad


@compat
def test_inference_mode_false_keeps_recording(torch):
    x = _x(torch)
    with torch.inference_mode(False):
        y = x * 2
    return y.requires_grad


@compat
def test_in_place_update_of_a_leaf_under_no_grad(torch):
    w = _x(torch)
    (w * w).sum().backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
    return w, w.is_leaf, w.requires_grad, w.grad_fn


@compat
def test_in_place_op_on_a_leaf_that_requires_grad_raises(torch):
    w = _x(torch)
    w.add_(1)


@compat
def test_changing_a_saved_tensor_in_place_makes_backward_raise(torch):
    x = _x(torch)
    y = x.exp()
    z = (y * y).sum()
    y.add_(1)
    z.backward()


# --- leaves, requires_grad, detach ------------------------------------------------------------------------------

@compat
def test_requires_grad_propagates_to_results(torch):
    a, b = torch.ones(3), _x(torch)
    return (a * 2).requires_grad, (a + b).requires_grad


@compat
def test_is_leaf(torch):
    x, c = _x(torch), torch.ones(2)
    y = x * 2
    return x.is_leaf, c.is_leaf, y.is_leaf, y.detach().is_leaf


@compat
def test_requires_grad_underscore_returns_self_and_defaults_to_true(torch):
    x = torch.ones(3)
    y = x.requires_grad_()
    return y is x, x.requires_grad, x.requires_grad_(False).requires_grad


@compat
def test_requires_grad_false_on_a_non_leaf_raises(torch):
    y = _x(torch) * 2
    y.requires_grad_(False)


@compat
def test_integer_tensors_cannot_require_grad(torch):
    torch.tensor([1, 2, 3]).requires_grad_()


@compat
def test_integer_tensor_with_requires_grad_raises(torch):
    torch.tensor([1, 2, 3], requires_grad=True)


@compat
def test_detach_cuts_the_graph_and_shares_storage(torch):
    x = _x(torch)
    d = x.detach()
    d[0] = 10.0
    return d.requires_grad, d.grad_fn, x.detach()


@compat
def test_detached_term_gets_no_gradient(torch):
    a, b = _x(torch), _x(torch, 0.5, 0.5, 0.5)
    (a * b.detach() + b).sum().backward()
    return a.grad, b.grad


@compat
def test_frozen_parameter_gets_no_grad(torch):
    lin = torch.nn.Linear(3, 2)
    lin.weight.requires_grad_(False)
    lin(torch.ones(4, 3)).sum().backward()
    return lin.weight.grad, lin.bias.grad


# --- hooks and retain_grad --------------------------------------------------------------------------------------

@compat
def test_hook_on_a_leaf_changes_its_gradient(torch):
    x = _x(torch)
    x.register_hook(lambda g: g * 2)
    (x * 3).sum().backward()
    return x.grad


@compat
def test_hook_on_an_intermediate_sees_and_changes_the_gradient(torch):
    x = _x(torch)
    seen = []
    y = x * x
    y.register_hook(lambda g: seen.append(g.clone()) or g * 0.5)
    y.sum().backward()
    return seen, x.grad


@compat
def test_removed_hook_is_not_called(torch):
    x = _x(torch)
    handle = x.register_hook(lambda g: g * 100)
    handle.remove()
    (x * 3).sum().backward()
    return x.grad


@compat
def test_hook_on_a_tensor_without_grad_raises(torch):
    torch.ones(3).register_hook(lambda g: g)


@compat
def test_retain_grad_keeps_an_intermediate_grad(torch):
    x = _x(torch)
    y = x * 2
    y.retain_grad()
    (y ** 2).sum().backward()
    return y.grad, y.retains_grad, x.retains_grad


@compat
def test_intermediate_grad_is_none_without_retain_grad(torch):
    import warnings
    x = _x(torch)
    y = x * 2
    y.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that .grad of a non-leaf is not populated
        return y.grad


@compat
def test_post_accumulate_grad_hook_sees_the_accumulated_grad(torch):
    x = _x(torch)
    seen = []
    x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    (x * 2).sum().backward()
    (x * 2).sum().backward()
    return seen


# --- grad_fn ----------------------------------------------------------------------------------------------------

@compat
def test_grad_fn_names_of_common_ops(torch):
    x, m = _x(torch), torch.ones(3, 3, requires_grad=True)
    ys = [x + 1, x * 2, x - 1, x / 2, x ** 2, x.exp(), x.sum(), x.mean(), m @ m, m.t(), x.view(3, 1), -x]
    return [y.grad_fn.name() for y in ys]


@compat
def test_grad_fn_names_of_indexing(torch):
    x = torch.ones(3, 4, requires_grad=True)
    keys = [0, slice(1, 3), (slice(None), 0), (0, slice(1, 2)), slice(None), Ellipsis, None, (Ellipsis, -1), [0, 2]]
    return [x[k].grad_fn.name() for k in keys]


@compat
def test_grad_fn_name_of_a_leaf_is_accumulate_grad(torch):
    x = _x(torch)
    fn, i = (x * 2).grad_fn.next_functions[0]
    return type(fn).__name__, i, fn.variable is x


@compat
def test_grad_fn_of_a_leaf_is_none(torch):
    return _x(torch).grad_fn, torch.ones(2).grad_fn


# --- custom Function --------------------------------------------------------------------------------------------

@compat
def test_custom_function_forward_and_backward(torch):
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x ** 2 * g

    x = _x(torch)
    y = Cube.apply(x)
    y.sum().backward()
    return y, x.grad, y.grad_fn.name()


@compat
def test_custom_function_with_a_non_tensor_argument(torch):
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = _x(torch)
    Scale.apply(x, 4.0).sum().backward()
    return x.grad


@compat
def test_custom_function_needs_input_grad(torch):
    flags = []

    class Mul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            flags.append(ctx.needs_input_grad)
            a, b = ctx.saved_tensors
            return g * b, g * a

    a = _x(torch)
    Mul.apply(a, torch.ones(3)).sum().backward()
    return flags, a.grad


# --- autograd.functional and forward_ad -------------------------------------------------------------------------

@compat
def test_functional_jacobian(torch):
    return torch.autograd.functional.jacobian(lambda x: x ** 2 * 3, torch.tensor([1.0, 2.0]))


@compat
def test_functional_hessian(torch):
    return torch.autograd.functional.hessian(lambda x: (x ** 3).sum(), torch.tensor([1.0, 2.0]))


@compat
def test_functional_vjp_and_jvp(torch):
    F = torch.autograd.functional
    x, v = torch.tensor([0.5, 1.0]), torch.tensor([1.0, -1.0])
    return F.vjp(lambda x: x.sin() * 2, x, v), F.jvp(lambda x: x.sin() * 2, x, v)


@compat
def test_functional_hvp(torch):
    return torch.autograd.functional.hvp(lambda x: (x ** 3).sum(), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]))


@compat
def test_forward_ad_make_and_unpack_dual(torch):
    fwAD = torch.autograd.forward_ad
    x, v = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0])
    with fwAD.dual_level():
        y = (fwAD.make_dual(x, v) ** 2).sin()
        out = fwAD.unpack_dual(y)
        return out, type(out).__name__, out.primal, out.tangent


@compat
def test_gradcheck_of_a_double_function(torch):
    x = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    return torch.autograd.gradcheck(lambda t: (t.tanh() * t).sum(), (x,))


@compat
def test_custom_function_with_setup_context(torch):
    class Double(torch.autograd.Function):  # torch 2's style: forward without ctx, then setup_context
        @staticmethod
        def forward(x, k):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = _x(torch)
    y = Double.apply(x, 2.0)
    y.sum().backward()
    return y, x.grad


@compat
def test_functional_jacobian_of_two_inputs(torch):
    return torch.autograd.functional.jacobian(lambda a, b: a * b, (torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])))


# --- more everyday spellings ------------------------------------------------------------------------------------

@compat
def test_requires_grad_attribute_assignment(torch):
    x = torch.tensor([1.0, 2.0])
    x.requires_grad = True
    (x * x).sum().backward()
    return x.grad


@compat
def test_backward_gradient_keyword(torch):
    x = _x(torch)
    (x * x).backward(gradient=torch.ones(3))
    return x.grad


@compat
def test_autograd_namespace_grad_modes(torch):
    x = _x(torch)
    with torch.autograd.set_grad_enabled(False):
        y = x * 2
    with torch.autograd.no_grad():
        z = x * 2
    return y.requires_grad, z.requires_grad


@compat
def test_autograd_grad_with_retain_graph_then_backward(torch):
    x = _x(torch)
    y = (x ** 2).sum()
    g, = torch.autograd.grad(y, x, retain_graph=True)
    y.backward()
    return g, x.grad


@compat
def test_autograd_grad_with_a_wrong_shape_gradient_raises(torch):
    x = _x(torch)
    torch.autograd.grad(x * 2, x, torch.ones(2))


@compat
def test_backward_of_a_no_grad_result_raises(torch):
    x = _x(torch)
    with torch.no_grad():
        y = x * 2
    y.sum().backward()


@compat
def test_detached_copy_made_a_leaf_gets_its_own_grad(torch):
    x = _x(torch)
    z = x.detach().requires_grad_()
    (z * 3).sum().backward()
    return x.grad, z.grad, z.is_leaf


@compat
def test_parameter_is_a_leaf_that_requires_grad(torch):
    w = torch.nn.Parameter(torch.ones(2))
    (w * 2).sum().backward()
    return w.requires_grad, w.is_leaf, w.grad


@compat
def test_gradient_through_an_assignment_into_a_clone(torch):
    x = _x(torch)
    y = x.clone()
    y[0] = 5.0
    (y * y).sum().backward()
    return y, x.grad


@compat
def test_item_and_tolist_of_a_tensor_that_requires_grad(torch):
    s = (_x(torch) * 2).sum()
    return s.item(), float(s), (_x(torch) * 1).tolist()


@compat
def test_numpy_of_a_tensor_that_requires_grad_raises(torch):
    _x(torch).numpy()


# --- grad modes on generator functions ----------------------------------------------------------------------------

@compat
def test_grad_mode_decorators_on_generators_hold_across_yield(torch):
    x = _x(torch)

    @torch.no_grad()
    def frozen():
        received = yield (x * 2).requires_grad, torch.is_grad_enabled()
        yield received, (x * 2).requires_grad

    @torch.enable_grad()
    def recording():
        yield (x * 2).requires_grad

    @torch.inference_mode()
    def inferring():
        yield torch.ones(1).is_inference(), torch.is_inference_mode_enabled()

    @torch.set_grad_enabled(False)
    def disabled():
        yield torch.is_grad_enabled()

    gen = frozen()
    first = next(gen)
    outside = torch.is_grad_enabled(), (x * 2).requires_grad  # suspended at a yield: the caller's mode is back
    second = gen.send("sent")
    with torch.no_grad():
        inner = list(recording())
    return first, outside, second, inner, list(inferring()), list(disabled()), torch.is_grad_enabled()


@compat
def test_grad_mode_generator_sees_exceptions_and_close(torch):
    @torch.no_grad()
    def gen():
        try:
            yield torch.is_grad_enabled()
        except ValueError:
            yield "caught", torch.is_grad_enabled()
        finally:
            seen.append(torch.is_grad_enabled())

    seen = []
    g = gen()
    out = [next(g), g.throw(ValueError("x")), torch.is_grad_enabled()]
    g.close()
    return out, seen, torch.is_grad_enabled()


# --- hooks on unbind and split outputs --------------------------------------------------------------------------

@compat
def test_hooks_on_unbind_outputs_that_get_no_gradient_see_none(torch):
    x = _x(torch) * 1
    a, b, c = x.unbind()
    calls = []
    a.register_hook(lambda g: calls.append(("a", g)))
    b.register_hook(lambda g: calls.append(("b", g)))
    c.register_hook(lambda g: calls.append(("c", g)))
    (b * 2).backward()
    # NOTE: sorted: gpugrad runs b's hook as its gradient arrives, torch all three in the order registered (README)
    return sorted(calls, key=lambda c: c[0]), a.grad_fn.name(), a.grad_fn is c.grad_fn, [t.output_nr for t in (a, b, c)]


@compat
def test_grad_with_respect_to_a_hooked_unbind_output(torch):
    """A hook on the output differentiated: its change is captured when the node does not run, not when it runs."""
    x = _x(torch)
    a, b, c = (x * 1).unbind()
    b.register_hook(lambda g: g * 10)
    return torch.autograd.grad(b * 3, b), torch.autograd.grad(b * 3 + a, [b, x])


@compat
def test_hooks_on_split_and_chunk_outputs(torch):
    x = torch.arange(6.0, requires_grad=True) * 1
    calls = []
    first, second = x.split(3)
    first.register_hook(lambda g: calls.append(("split", g)))
    p, q, r = x.chunk(3)
    r.register_hook(lambda g: calls.append(("chunk", g)))
    s, t = x.split([2, 4])
    s.register_hook(lambda g: calls.append(("sizes", g)))
    (second.sum() + p.sum() + t.sum()).backward()
    return calls, second.grad_fn.name(), s.grad_fn.name(), x.grad_fn.name()


@compat
def test_a_hook_may_not_replace_a_missing_gradient(torch):
    a, b = (_x(torch, 1.0, 2.0) * 1).unbind()
    a.register_hook(lambda g: torch.tensor(5.0))
    b.backward()


@compat
def test_unbind_gradients_and_their_second_order(torch):
    x = _x(torch, 1.0, 2.0, 3.0)
    a, b, c = (x * x).unbind()
    (g,) = torch.autograd.grad(a * 3 + c, x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    return g, h


@compat
def test_retain_grad_on_an_unbind_output_without_gradient(torch):
    a, b = (_x(torch, 1.0, 2.0) * 1).unbind()
    a.retain_grad()
    b.retain_grad()
    (b * 3).backward()
    return a.grad, b.grad


# --- dual tensors, legacy names, gradcheck's module --------------------------------------------------------------

def _printed(torch, t):
    return repr(t).replace(torch.__name__ + ".", "torch.")


@compat
def test_a_dual_tensor_prints_its_tangent(torch):
    fwd = torch.autograd.forward_ad
    with fwd.dual_level():
        out = [_printed(torch, fwd.make_dual(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))),
               _printed(torch, fwd.make_dual(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[3.0, 4.0],
                                                                                                  [1.5, 2.0]]))),
               _printed(torch, fwd.make_dual(torch.tensor([1.0, 2.0], dtype=torch.float64),
                                             torch.tensor([3.0, 4.0], dtype=torch.float64))),
               _printed(torch, fwd.make_dual(torch.tensor(1.5), torch.tensor(2.25))),
               _printed(torch, fwd.make_dual(torch.tensor(0.1), torch.tensor(0.1))),
               _printed(torch, fwd.make_dual(_x(torch), torch.tensor([3.12345, 4.0, 5.0]))),
               _printed(torch, fwd.make_dual(torch.arange(12.0).reshape(3, 4) * 1.5, torch.ones(3, 4) / 4)),
               _printed(torch, fwd.make_dual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0])) * 2)]
        str_form = str(fwd.make_dual(torch.tensor([1.0]), torch.tensor([2.0]))).replace(torch.__name__, "torch")
    return out, str_form


@compat
def test_variable_is_the_legacy_wrapper(torch):
    Variable = torch.autograd.Variable
    t = torch.ones(2)
    v = Variable(t, requires_grad=True)
    with torch.no_grad():
        v.add_(1)
    x = torch.ones(2, requires_grad=True) * 2
    w = Variable(x)
    return (type(v) is torch.Tensor, v is t, v.requires_grad, t.requires_grad, t, v._version == t._version,
            isinstance(t, Variable), w.grad_fn, w.is_leaf, Variable(x, requires_grad=True).requires_grad)


@compat
def test_variable_of_a_list_raises(torch):
    torch.autograd.Variable([1.0, 2.0])


@compat
def test_is_inference(torch):
    with torch.inference_mode():
        i = torch.ones(2)
    t = torch.ones(2)
    return i.is_inference(), torch.is_inference(i), t.is_inference(), torch.is_inference(t)


@compat
def test_gradcheck_is_the_function_and_its_module_is_importable(torch):
    import importlib  # noqa: PLC0415 - the module by its torch name, in the library under test
    module = importlib.import_module(torch.__name__ + ".autograd.gradcheck")
    x = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    return (callable(torch.autograd.gradcheck), module.gradcheck is torch.autograd.gradcheck,
            torch.autograd.gradcheck(lambda t: t.sin() * t, (x,)), callable(torch.autograd.gradcheck),
            issubclass(module.GradcheckError, RuntimeError))


@compat
def test_gradgradcheck_of_smooth_functions(torch):
    a = torch.tensor([0.3, -0.7, 1.1], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[0.5, 2.0, -1.0]], dtype=torch.float64, requires_grad=True)
    return (torch.autograd.gradgradcheck(lambda t: (t.sin() * t).exp(), (a,)),
            torch.autograd.gradgradcheck(lambda s, t: (s * t).tanh(), (a, b)),
            torch.autograd.gradgradcheck(lambda t: t ** 3, (a,), (torch.ones(3, dtype=torch.float64,
                                                                             requires_grad=True),)))


@compat
def test_gradgradcheck_finds_a_wrong_second_derivative(torch):
    class WrongSecond(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x.detach() ** 2  # right value, but detached: its own derivative is lost

    x = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    first = torch.autograd.gradcheck(WrongSecond.apply, (x,))
    second = torch.autograd.gradgradcheck(WrongSecond.apply, (x,), raise_exception=False)
    return first, second


@compat
def test_gradcheck_with_forward_ad_of_a_custom_function(torch):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * g * x

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return 2 * t * x

    x = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    return torch.autograd.gradcheck(Square.apply, (x,), check_forward_ad=True), \
        torch.autograd.gradcheck(Square.apply, (x,), check_forward_ad=True, check_backward_ad=False)


@compat
def test_functional_jvp_hands_func_leaves_that_require_grad(torch):
    """torch's jvp is the double-backward trick: func's inputs are fresh leaves that require grad."""
    seen = []

    def f(x):
        seen.append(x.requires_grad)
        return x * 2 + x.sin()
    out, tangent = torch.autograd.functional.jvp(f, torch.linspace(-1, 1, 4), torch.ones(4))
    return out, tangent, seen


def test_an_in_place_op_on_a_functional_jvp_input_raises_as_torch():
    check_raises_as_torch(lambda torch: torch.autograd.functional.jvp(lambda x: x.mul_(2), torch.ones(2), torch.ones(2)))


@compat
def test_the_tangent_of_the_median_of_nothing_is_zero(torch):
    fw = torch.autograd.forward_ad
    with fw.dual_level():
        y = fw.make_dual(torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)).median()
        return y, fw.unpack_dual(y).tangent


@compat
def test_abs_gradient_and_tangent_are_torchs_product_with_sgn(torch):
    """gy * sgn(x) with sgn(NaN) = 0: an inf gradient at 0 and a NaN tangent give NaN, a NaN input 0."""
    x = torch.tensor([float("nan"), 0.0, 2.0, -1.0], requires_grad=True)
    x.abs().backward(torch.tensor([1.0, float("inf"), float("nan"), 1.0]))
    fw = torch.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(x.detach(), torch.tensor([float("nan"), float("inf"), 1.0, float("nan")]))
        return x.grad, fw.unpack_dual(d.abs()).tangent


@compat
def test_requires_grad_of_a_multi_output_view_after_its_base_was_written_can_still_be_read(torch):
    """torch raises when such a view is used (tests/autograd), not when its requires_grad is read."""
    x = torch.ones(2, 3, requires_grad=True) * 1
    a, _ = x.unbind(0)
    x.mul_(2)
    return a.requires_grad
