"""Tensor and autograd semantics found by the differential fuzzer, each checked against torch 2.13.

Each test runs the same steps in both libraries (``run(lib)`` with gpugrad or torch as ``lib``) and compares the
values, gradients, errors and autograd state; the gpugrad-only assertions say what torch does.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad

BROADCAST_ERROR = "doesn't match the broadcast shape"
# torch warns that backward(create_graph=True) makes a reference cycle between a leaf and its .grad
CYCLE_WARNING = "ignore:Using backward\\(\\) with create_graph=True"
OVERLAP = "more than one element of the written-to tensor refers to a single memory location"


def T(lib, values, requires_grad=False):
    return lib.tensor(np.asarray(values, dtype=np.float64), requires_grad=requires_grad)


def same(a, b):
    """Two results (tensors, None or tuples of them) hold the same values."""
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
        return
    assert (a is None) == (b is None), (a, b)
    if a is not None:
        np.testing.assert_allclose(np.asarray(a.detach().numpy()), b.detach().numpy(force=True), rtol=1e-12)


def both(torch, run):
    return run(gpugrad), run(torch)


# -- 1. an in-place result may not be larger than the tensor ----------------------------------------------------------
@pytest.mark.parametrize("op", ["add_", "sub_", "mul_", "div_", "copy_"])
@pytest.mark.parametrize("shape,other", [((3,), (1, 3)), ((), (1,)), ((2, 3), (2, 2, 3))])
def test_inplace_result_larger_than_the_tensor_raises(torch, op, shape, other):
    for lib in (gpugrad, torch):
        x = lib.zeros(shape, dtype=lib.float64)
        for requires_grad in (False, True):
            y = T(lib, np.ones(other), requires_grad)
            with pytest.raises(RuntimeError, match=BROADCAST_ERROR):
                getattr(x, op)(y)
        assert x._version == 0 and not x.requires_grad and np.all(x.numpy() == 0)


def test_setitem_drops_leading_size_one_axes_as_torch(torch):
    def run(lib):
        x = lib.zeros((2, 3), dtype=lib.float64)
        x[0] = T(lib, np.ones((1, 1, 3)))
        return x
    same(*both(torch, run))


# -- 2. copy_, fill_ and zero_ keep the old graph (a zero gradient) ---------------------------------------------------
@pytest.mark.parametrize("op", ["copy_", "fill_", "zero_"])
def test_overwrite_records_a_node_with_a_zero_gradient_for_the_old_values(torch, op):
    def run(lib):
        a = T(lib, [1.0, 2.0, 3.0], True)
        y = a * 2
        {"copy_": lambda: y.copy_(T(lib, np.zeros(3))), "fill_": lambda: y.fill_(1.5), "zero_": y.zero_}[op]()
        state = (y.grad_fn.name().split("::")[-1], y.is_leaf, y.requires_grad, y._version)
        (y * T(lib, [1.0, 2.0, 3.0])).sum().backward()
        return state, a.grad
    (ours, ga), (theirs, ta) = both(torch, run)
    assert ours == theirs and ours[0] in ("CopyBackwards", "FillBackward2", "ZeroBackward0")
    same(ga, ta)  # zeros, not None


def test_copy_gradient_reaches_the_source_summed_and_cast(torch):
    def run(lib):
        s = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)  # float64 into float32 rows
        y = lib.zeros((3, 2), dtype=lib.float32)
        y.copy_(s)
        (y * T(lib, np.arange(6.0).reshape(3, 2)).float()).sum().backward()
        return y.is_leaf, y.dtype == lib.float32, s.grad
    (g_leaf, g_dt, gs), (t_leaf, t_dt, ts) = both(torch, run)
    assert (g_leaf, g_dt) == (t_leaf, t_dt) == (False, True)
    same(gs, ts)


def test_copy_into_a_view_and_into_itself(torch):
    def run(lib):
        a = T(lib, [[1.0, 2.0], [3.0, 4.0]], True)
        y = a * 1
        y[0].copy_(T(lib, [5.0, 6.0]))
        y.copy_(y)  # a no-op for the values, but a new version with a node, as in torch
        (y * y).sum().backward()
        return y, a.grad, y._version
    (gy, ga, gv), (ty, ta, tv) = both(torch, run)
    same((gy, ga), (ty, ta))
    assert gv == tv


def test_copy_of_a_graph_tensor_keeps_second_order_through_the_source(torch):
    def run(lib):
        a, s = T(lib, [1.0, 2.0, 3.0], True), T(lib, [1.0, 2.0, 3.0], True)
        y = a * a
        y.copy_(s * s)
        ga, gs = lib.autograd.grad(y.sum(), [a, s], create_graph=True)
        (gs * gs).sum().backward()
        return ga, gs, s.grad
    same(*both(torch, run))


# -- 3. .grad from backward(create_graph=True) is a copy that later passes add into ----------------------------------
@pytest.mark.filterwarnings(CYCLE_WARNING)
def test_grad_from_create_graph_accepts_a_plain_backward(torch):
    def run(lib):
        x = T(lib, np.ones((2, 3)), True)
        x.mean().backward(create_graph=True)  # the VJP is a broadcast view: read-only in NumPy
        x.mean().backward()
        return x.grad
    same(*both(torch, run))


@pytest.mark.filterwarnings(CYCLE_WARNING)
def test_grads_from_create_graph_do_not_alias(torch):
    def run(lib):
        a, b = T(lib, [1.0, 2.0], True), T(lib, [3.0, 4.0], True)
        (a + b).sum().backward(create_graph=True)  # add's VJP hands gy to both
        with lib.no_grad():
            a.grad.mul_(10)
        return a.grad, b.grad
    same(*both(torch, run))


# -- 4. a view whose base changed in place re-derives its autograd state when read -----------------------------------
def test_view_taken_before_an_inplace_op_on_its_base(torch):
    def run(lib):
        x, w = lib.zeros(3, dtype=lib.float64), T(lib, [1.0, 2.0, 3.0], True)
        v = x[0:2]
        x.add_(w)
        state = (v.requires_grad, v.is_leaf)
        seen = []
        v.register_hook(lambda g: seen.append(g.clone()))
        (v * T(lib, [2.0, 3.0])).sum().backward()
        return state, seen, w.grad
    (g_state, g_seen, gw), (t_state, t_seen, tw) = both(torch, run)
    assert g_state == t_state == (True, False)
    assert len(g_seen) == len(t_seen) == 1
    same((g_seen[0], gw), (t_seen[0], tw))


def test_expand_view_after_an_inplace_op_on_its_base(torch):
    def run(lib):
        w = T(lib, [[1.0], [2.0], [3.0]], True)
        x = lib.zeros((3, 1), dtype=lib.float64)
        e = x.expand(3, 4)
        col = e[:, 0]
        x.add_(w)
        ge = lib.autograd.grad((e * T(lib, np.arange(12.0).reshape(3, 4))).sum(), [w], retain_graph=True)
        gc = lib.autograd.grad((col * T(lib, [1.0, 2.0, 3.0])).sum(), [w])
        return e.requires_grad, ge, gc
    (g_rg, gge, ggc), (t_rg, tge, tgc) = both(torch, run)
    assert g_rg and t_rg
    same((gge, ggc), (tge, tgc))  # the expand's gradient sums over the repeated elements


def test_writes_into_expand_views(torch):
    def run(lib):
        x = lib.zeros((3, 1), dtype=lib.float64)
        e = x.expand(3, 4)
        e[:, 0].add_(1.0)  # repeats no element: allowed, and reaches x
        with pytest.raises(RuntimeError, match=OVERLAP):
            e[:, 1:3].add_(1.0)
        e.fill_(2.5)  # one value everywhere: allowed on the overlapping tensor itself
        return x
    same(*both(torch, run))


def test_fill_of_an_expand_with_a_graph_raises_at_backward(torch):
    for lib in (gpugrad, torch):
        y = T(lib, [[1.0], [2.0]], True) * 2
        y.expand(2, 3).zero_()
        with pytest.raises(RuntimeError, match=OVERLAP):
            y.sum().backward()


# -- 5. create_graph gradients through abs and relu depend on x (derivative 0), as torch's ---------------------------
@pytest.mark.filterwarnings(CYCLE_WARNING)
@pytest.mark.parametrize("op", ["abs", "relu"])
def test_create_graph_gradient_of_abs_and_relu_requires_grad(torch, op):
    def run(lib):
        x = T(lib, [1.0, -2.0, 0.0, 0.5], True)
        (getattr(x, op)() * 3).sum().backward(create_graph=True)
        first = (x.grad.requires_grad, x.grad.detach().clone())
        (x.grad * T(lib, [1.0, 2.0, 3.0, 4.0])).sum().backward()  # raised in gpugrad before
        return first[0], first[1], x.grad
    (g_rg, g1, g2), (t_rg, t1, t2) = both(torch, run)
    assert g_rg and t_rg
    same((g1, g2), (t1, t2))


def test_create_graph_abs_of_nan_uses_torch_sgn(torch):
    def run(lib):
        x = T(lib, [np.nan, 2.0, -1.0], True)
        (g,) = lib.autograd.grad(x.abs().sum(), [x], create_graph=True)
        return g
    same(*both(torch, run))  # sgn(NaN) = 0 in torch, NaN in NumPy


# -- 6. second order after retain_graph=False ------------------------------------------------------------------------
@pytest.mark.parametrize("step", ["fill_", "add_alpha"])
def test_second_order_after_retain_graph_false(torch, step):
    def run(lib):
        x, w = T(lib, [0.5, -1.0, 2.0], True), T(lib, [1.0, 2.0, 3.0], True)
        if step == "fill_":
            z = x * w
            z.fill_(1.0)  # torch's FillBackward gives a constant zero: no edge into exp's (freed) history
            loss, wrt = z.exp().sum() + (x * x).sum(), x
        else:
            z = (x * 1).detach()
            z.add_(w, alpha=2)  # the alpha multiply saved no tensor: usable after the graph is freed
            loss, wrt = (z * z).sum(), w
        gs = lib.autograd.grad(loss, [wrt], create_graph=True, retain_graph=False)
        sum((g * g).sum() for g in gs).backward()
        return gs, x.grad, w.grad
    same(*both(torch, run))


# -- 7. backward(inputs=) runs a non-leaf input's grad_fn and retains its grad from then on ---------------------------
def test_backward_inputs_non_leaf(torch):
    def run(lib):
        x = T(lib, [1.0, 2.0], True)
        h = x * x
        y = (h * 3).sum()
        y.backward(inputs=[h], retain_graph=True)
        first = (h.grad.detach().clone(), x.grad)
        y.backward(inputs=[x])  # h still retains its grad
        return first, h.grad, x.grad
    same(*both(torch, run))


def test_backward_inputs_non_leaf_checks_its_saved_tensors(torch):
    for lib in (gpugrad, torch):
        x = T(lib, [1.0, 2.0], True)
        h = x.exp()  # saves its output
        y = (h * 2).sum()
        h.detach().mul_(2)
        with pytest.raises(RuntimeError, match="modified by an in"):
            y.backward(inputs=[h])


def test_second_derivative_with_operands_sharing_memory(torch):
    def run(lib):
        x = T(lib, [0.5, -1.0, 2.0], True)
        y = (x * x.unsqueeze(-2)).softmax(1)  # the saved b is a view of a's buffer
        (g,) = lib.autograd.grad((y * T(lib, [[1.0, 2.0, 3.0]])).sum(), [x], create_graph=True)
        (g2,) = lib.autograd.grad((g * T(lib, [1.0, -1.0, 2.0])).sum(), [x])
        return g, g2
    same(*both(torch, run))


def test_cat_of_an_empty_vector_has_a_constant_gradient(torch):
    def run(lib):
        a, e = T(lib, [1.0, 2.0], True), lib.zeros(0, dtype=lib.float64, requires_grad=True)
        c = lib.cat([a, e], 0)
        (ge,) = lib.autograd.grad((c * c).sum(), [e], create_graph=True)  # gy = 2c carries a graph
        return ge.requires_grad, ge.shape == (0,)
    ours, theirs = both(torch, run)
    assert ours == theirs == (False, True)


# -- the same paths on a device (AsView's scatter-add, writable broadcasts, Overwrite) --------------------------------
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_view_and_overwrite_paths_on_every_device(torch, device):
    def run(lib):
        put = (lambda a: lib.tensor(np.asarray(a, np.float64), device=device)) if lib is gpugrad else \
            (lambda a: T(lib, a))
        w = put([[1.0], [2.0], [3.0]]).requires_grad_()
        x = put(np.zeros((3, 1)))
        e = x.expand(3, 4)
        e[:, 1].add_(put([1.0, 1.0, 1.0]))  # through a column of the expand: into x
        x.add_(w)  # e's grad_fn is re-derived: its gradient sums the repeated elements
        y = e * put(np.arange(12.0).reshape(3, 4))
        z = w * 2
        z.copy_(put([[4.0], [5.0], [6.0]]))
        z.expand(3, 2)[:, 1] = 7.0  # a column of the expand: only that region is written
        (y.sum() + (z * w).sum()).backward()
        return x.detach(), z.detach(), w.grad
    ours, theirs = both(torch, run)
    same(tuple(t.cpu() for t in ours), theirs)


def test_hooks_outside_the_inputs_do_not_run(torch):
    def run(lib):
        a, b = T(lib, [1.0, 2.0], True), T(lib, [3.0, 4.0], True)
        seen = []
        b.register_hook(lambda g: seen.append("b"))
        h = b * 2
        h.retain_grad()
        h.register_hook(lambda g: seen.append("h"))
        y = (a * h).sum()
        y.backward(inputs=[a], retain_graph=True)  # b and h lead to no input: torch runs none of their hooks
        (ga,) = lib.autograd.grad(y, [a])
        return seen, h.grad, b.grad, a.grad, ga
    (g_seen, *ours), (t_seen, *theirs) = both(torch, run)
    assert g_seen == t_seen == []
    same(ours, theirs)


def test_a_promoted_input_changed_in_place_before_backward_raises_as_in_torch():
    """float32 * float64 computes on a float64 copy; changing the float32 original in place before backward is
    still caught, as torch (which saves the original) catches it (found by the long fuzzer run)."""
    v0 = gpugrad.tensor([1.0, 2.0], dtype=gpugrad.float64, requires_grad=True)
    v2 = gpugrad.tensor([3.0, 4.0], dtype=gpugrad.float32)
    v3 = v2 * v0
    v2.clamp_(-0.5, 0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        v3.sum().backward()
