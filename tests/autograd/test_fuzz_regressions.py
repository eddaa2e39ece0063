"""Regressions found by differential fuzzing against torch, one section per finding.

Each property is checked on gpugrad alone (exact values, float64 finite differences or the behaviour torch
documents), and against torch itself where the `torch` fixture is available: only those comparisons skip without it.
"""
from __future__ import annotations

import contextlib
import gc
import math
import re
import weakref

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.autograd import grad
from gpugrad.backend import kernels, reference

INPLACE_ERROR = "modified by an inplace operation"


def leaf(values, dtype=np.float64):
    return gpugrad.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


def tleaf(torch, values, dtype=np.float64):
    return torch.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


def fd_derivative(f, x, eps=1e-6):
    """Central finite difference of a scalar function of a float64 scalar."""
    return (f(x + eps) - f(x - eps)) / (2 * eps)


# -- 1. 0-d tensors: NumPy's 0-d results are scalars ------------------------------------------------------------------
ZERO_D = {  # name: (gpugrad / torch function of a 0-d tensor, its NumPy value for finite differences)
    "exp_plus_square": (lambda x: x.exp() + x * x, lambda v: math.exp(v) + v * v),
    "sqrt": (lambda x: x.sqrt() * x, lambda v: math.sqrt(v) * v),
    "scalar_pow": (lambda x: 2.0 ** x, lambda v: 2.0 ** v),
    "tanh": (lambda x: x.tanh(), math.tanh),
    "sigmoid": (lambda x: x.sigmoid(), lambda v: 1 / (1 + math.exp(-v))),
    "max_times_x": (lambda x: x.max() * x, lambda v: v * v),
}


def _second_derivative(f, value):
    x = gpugrad.tensor(np.float64(value), requires_grad=True)
    (g,) = grad(f(x), x, create_graph=True)
    (gg,) = grad(g, x)
    return g.item(), gg.item()


@pytest.mark.parametrize("name", list(ZERO_D))
def test_zero_d_second_derivative_matches_finite_differences(name):
    f, ref = ZERO_D[name]
    g, gg = _second_derivative(f, 0.5)
    d1 = lambda v: fd_derivative(ref, v)  # noqa: E731
    assert g == pytest.approx(d1(0.5), rel=1e-6)
    assert gg == pytest.approx(fd_derivative(d1, 0.5, eps=1e-4), rel=1e-5)


def test_zero_d_exp_plus_square_second_derivative_is_e_to_x_plus_2():
    assert _second_derivative(ZERO_D["exp_plus_square"][0], 0.5)[1] == pytest.approx(math.exp(0.5) + 2)  # 3.6487


@pytest.mark.parametrize("name", list(ZERO_D))
def test_zero_d_second_derivative_matches_torch(torch, name):
    f, _ = ZERO_D[name]
    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    (gg,) = torch.autograd.grad(g, x)
    assert _second_derivative(f, 0.5) == pytest.approx((g.item(), gg.item()), rel=1e-12)


def test_zero_d_leaf_used_twice_keeps_an_array_grad():
    x = gpugrad.tensor(0.5, requires_grad=True)
    opt = gpugrad.optim.SGD([x], lr=0.0)
    for step in range(3):
        opt.zero_grad(set_to_none=False)
        (x + x * 1.0).backward()  # two gradients into the leaf: summed, not a NumPy scalar
        assert isinstance(x.grad._data, np.ndarray) and x.grad.shape == ()
        assert x.grad.item() == 2.0
    (x + x).backward()
    assert x.grad.item() == 4.0


def test_zero_d_compare_and_max_under_create_graph():
    x = gpugrad.tensor(0.5, requires_grad=True)
    assert isinstance((x > 0)._data, np.ndarray) and isinstance(x.argmax()._data, np.ndarray)
    (g,) = grad(x.max(), x, create_graph=True)
    assert g.item() == 1.0


# -- 2. view() never copies ------------------------------------------------------------------------------------------
def test_view_of_non_contiguous_raises_like_torch(torch):
    with pytest.raises(RuntimeError):
        torch.arange(6.0).reshape(2, 3).t().view(6)
    with pytest.raises(RuntimeError, match=r"view size is not compatible.*Use \.reshape"):
        gpugrad.tensor(np.arange(6.0).reshape(2, 3)).T.view(6)


def test_view_writes_reach_the_base_and_reshape_still_copies():
    base = gpugrad.tensor(np.arange(6.0).reshape(2, 3))
    v = base.T.view(3, 2)  # same shape: a view
    v[0, 0] = 100.0
    flat = base.view(6)
    flat[5] = -1.0
    assert base.tolist() == [[100.0, 1.0, 2.0], [3.0, 4.0, -1.0]]
    assert base.T.reshape(6).tolist() == [100.0, 3.0, 1.0, 4.0, 2.0, -1.0]
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        base[:, :2].view(4)


# -- 3. relu backward selects (an inf/NaN upstream gradient where x < 0 gives 0) ---------------------------------------
RELU_X = [np.nan, -1.0, 0.0, 2.0, -3.0, 4.0]
RELU_GY = [3.0, np.nan, np.nan, np.inf, np.inf, np.nan]
RELU_GX = [3.0, 0.0, 0.0, np.inf, 0.0, np.nan]  # torch: x <= 0 ? 0 : gy, on the output (NaN passes gy)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_backward_selects(dtype):
    x = leaf(RELU_X, dtype)
    x.relu().backward(gpugrad.tensor(np.asarray(RELU_GY, dtype)))
    np.testing.assert_array_equal(x.grad.numpy(), np.asarray(RELU_GX, dtype))
    gz, gb = reference.bias_act_bwd(np, reference.relu_fwd(np, np.asarray([RELU_X], dtype)),
                                    np.asarray([RELU_GY], dtype), "relu")
    np.testing.assert_array_equal(gz, np.asarray([RELU_GX], dtype))
    np.testing.assert_array_equal(gb, np.asarray(RELU_GX, dtype))


def test_relu_backward_matches_torch(torch):
    x = tleaf(torch, RELU_X)
    x.relu().backward(torch.tensor(RELU_GY, dtype=torch.float64))
    g = leaf(RELU_X)
    g.relu().backward(gpugrad.tensor(np.asarray(RELU_GY)))
    np.testing.assert_array_equal(g.grad.numpy(), x.grad.numpy())


def test_relu_backward_create_graph_selects():
    x = leaf(RELU_X)
    (g,) = grad(x.relu(), x, gpugrad.tensor(np.asarray(RELU_GY)), create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), RELU_GX)


def test_relu_reference_keeps_dtype_and_layout():
    rng = np.random.default_rng(0)
    for dtype in (np.float16, np.float32, np.float64):
        y = np.maximum(rng.standard_normal((7, 10)), 0).astype(dtype)[:, ::2]  # strided
        gy = rng.standard_normal((10, 7)).astype(dtype).T[:, :5]
        out = reference.relu_bwd(np, y, gy)
        assert out.dtype == dtype and out.shape == y.shape
        np.testing.assert_array_equal(out, np.where(y > 0, gy, 0).astype(dtype))


def _emulator():
    try:
        from gpugrad.testing.cuda_emu import EmuRuntime, compiler_available
    except ImportError as e:
        pytest.skip(f"CPU emulator not importable: {e}")
    if not compiler_available():
        pytest.skip("CPU emulator: no C++ compiler found")
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())], seed=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_kernels_select_like_the_reference(dtype):
    """The CUDA kernels (relu_bwd, bias_act_bwd with relu) on the emulator, at the inf/NaN cases the kernel table's
    random inputs never reach."""
    rt = _emulator()
    y = np.asarray(RELU_X * 3, dtype).reshape(3, 6)
    gy = np.asarray(RELU_GY * 3, dtype).reshape(3, 6)
    want = np.asarray(RELU_GX * 3, dtype).reshape(3, 6)
    with kernels.use_runtime(rt):
        got = kernels.relu_bwd(np, y, gy)
        gz, gb = kernels.bias_act_bwd(np, y, gy, "relu")
    for out in (got, gz, reference.relu_bwd(np, y, gy)):
        np.testing.assert_array_equal(np.asarray(out), want)
    np.testing.assert_array_equal(np.asarray(gb), want.sum(axis=0))


# -- 4. create_graph through logsumexp over a middle axis -------------------------------------------------------------
@pytest.mark.parametrize("shape, axis, keepdims", [((2, 3, 4), 1, False), ((2, 3, 4), 1, True), ((2, 3, 4, 5), 2, False),
                                                   ((2, 3, 4), 0, True), ((2, 3, 4), -1, False)])
def test_logsumexp_double_backward_any_axis(shape, axis, keepdims):
    rng = np.random.default_rng(0)
    x0, v = rng.standard_normal(shape), rng.standard_normal(shape)

    def first(x):  # <d/dx sum(lse(x)^2), v>
        x = gpugrad.tensor(x, requires_grad=True)
        (g,) = grad((x.logsumexp(axis, keepdims) ** 2).sum(), x, create_graph=True)
        return g, x

    g, x = first(x0)
    (gg,) = grad((g * gpugrad.tensor(v)).sum(), x)
    # the Hessian-vector product against finite differences of the first derivative
    eps = 1e-6
    fd = (first(x0 + eps * v)[0].detach().numpy() - first(x0 - eps * v)[0].detach().numpy()) / (2 * eps)
    np.testing.assert_allclose(gg.numpy(), fd, rtol=1e-5, atol=1e-7)


def test_logsumexp_double_backward_matches_torch(torch):
    x0 = np.random.default_rng(1).standard_normal((2, 3, 4))
    t = tleaf(torch, x0)
    (gt,) = torch.autograd.grad((torch.logsumexp(t, 1) ** 3).sum(), t, create_graph=True)
    (ggt,) = torch.autograd.grad((gt * gt).sum(), t)
    x = leaf(x0)
    (g,) = grad((x.logsumexp(1) ** 3).sum(), x, create_graph=True)
    (gg,) = grad((g * g).sum(), x)
    np.testing.assert_allclose(gg.numpy(), ggt.numpy(), rtol=1e-10)


def test_logsumexp_input_changed_in_place_is_caught():  # torch saves the input: so does gpugrad, for every axis
    x = leaf(np.ones((2, 3, 4))) * 1
    y = x.logsumexp(1).sum()
    x.mul_(2)
    with pytest.raises(RuntimeError, match=INPLACE_ERROR):
        y.backward()


# -- 5. autograd.grad w.r.t. an intermediate leaves the graph below it alive -------------------------------------------
def test_grad_wrt_intermediate_keeps_its_grad_fn():
    x = leaf([1.0, 2.0])
    h = x.exp()
    side = x * 3.0  # a branch that leads to no input of grad(): not run either
    side.register_hook(lambda g: pytest.fail("a node grad() does not need ran its hooks"))
    (gh,) = grad((h * h).sum() + side.sum(), [h])
    np.testing.assert_allclose(gh.numpy(), 2 * np.exp([1.0, 2.0]))
    h.sum().backward()  # through h's own grad_fn: not run by grad(), so not freed
    side.grad_fn._pre_hooks.clear()
    side.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]) + 3.0)


def test_grad_wrt_intermediate_matches_torch(torch):
    x = tleaf(torch, [1.0, 2.0])
    h = x.exp()
    (gh_t,) = torch.autograd.grad((h * h).sum(), [h])
    h.sum().backward()
    g = leaf([1.0, 2.0])
    hg = g.exp()
    (gh,) = grad((hg * hg).sum(), [hg])
    hg.sum().backward()
    np.testing.assert_allclose(gh.numpy(), gh_t.numpy())
    np.testing.assert_allclose(g.grad.numpy(), x.grad.numpy())


def test_grad_still_frees_the_nodes_it_ran():  # as torch: z's node ran (it leads to h), so its buffers are gone
    x = leaf([1.0, 2.0])
    h = x * 2.0
    z = h.exp()
    grad((z * h).sum(), [h])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        z.sum().backward()


# -- 6. autograd.grad applies the hooks of its inputs ------------------------------------------------------------------
def _hooked_grads(lib, make):
    x = make([1.0])
    h = x * 2
    h.register_hook(lambda g: g * 100)
    x2 = make([3.0])
    x2.register_hook(lambda g: g * 10)
    only_h = lib.autograd.grad((h * h).sum(), [h], retain_graph=True)[0]
    both = lib.autograd.grad((h * h).sum(), [h, x])  # h's node also runs (for x): captured before its hooks
    leaf_hooked = lib.autograd.grad((x2 * x2).sum(), [x2])[0]
    return [float(only_h.sum()), float(both[0].sum()), float(both[1].sum()), float(leaf_hooked.sum())]


def test_grad_applies_input_hooks():
    assert _hooked_grads(gpugrad, leaf) == [400.0, 4.0, 800.0, 60.0]


def test_grad_applies_input_hooks_like_torch(torch):
    assert _hooked_grads(gpugrad, leaf) == _hooked_grads(torch, lambda v: tleaf(torch, v))


def test_grad_sets_retained_grad_of_an_input():
    x = leaf([1.0])
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 100)
    (g,) = grad((h * h).sum(), [h])
    assert g.item() == 400.0 and h.grad.item() == 400.0 and x.grad is None


# -- 7. retain_grad() follows the tensor through an in-place op --------------------------------------------------------
def _retained_after_inplace(lib, make):
    x = make([1.0, 2.0])
    h = x * 2
    h.retain_grad()
    h.mul_(3)
    (h * h).sum().backward()
    base = make([1.0, 2.0]) * 2
    base.retain_grad()
    base[0:1].mul_(3)  # through a view: the base's value changes too
    (base * base).sum().backward()
    return h.grad.tolist(), base.grad.tolist(), x.grad.tolist()


def test_retain_grad_moves_to_the_new_value():
    h_grad, base_grad, x_grad = _retained_after_inplace(gpugrad, leaf)
    assert h_grad == [12.0, 24.0]  # d/dh of sum(h^2) at the new h = 6x
    assert base_grad == [12.0, 8.0]
    assert x_grad == [72.0, 144.0]


def test_retain_grad_moves_like_torch(torch):
    assert _retained_after_inplace(gpugrad, leaf) == _retained_after_inplace(torch, lambda v: tleaf(torch, v))


# -- 8. saving what torch saves: in-place changes after the op raise exactly when torch's do -------------------------
def _raises(lib, build, target, ra=True, rb=True):
    """Build an op's graph from fresh non-leaf inputs, change one of (a, b, out) in place, backward: 'ok' or 'error',
    and the leaves' gradients."""
    make = (lambda v, r: gpugrad.tensor(v, requires_grad=r)) if lib is gpugrad else \
        (lambda v, r: lib.tensor(v, requires_grad=r))
    rng = np.random.default_rng(0)
    la, lb = make(rng.random((2, 3, 4)) + 0.5, ra), make(rng.random((2, 3, 4)) + 0.5, rb)
    a, b = la * 1, lb * 1
    out = build(lib, a, b)
    if not out.requires_grad:  # e.g. a ** 3 when only b requires grad
        return "no graph", None
    loss = out.sum()
    {"a": a, "b": b, "out": out}[target].mul_(2)
    try:
        loss.backward()
    except RuntimeError as e:
        assert "in-place" in str(e) or "inplace" in str(e)
        return "error", None
    return "ok", [None if t.grad is None else np.asarray(t.grad.tolist()) for t in (la, lb)]


SAVE_CASES = {
    "pow_scalar_exponent": lambda lib, a, b: a ** 3,
    "pow_tensors": lambda lib, a, b: a ** b,
    "scalar_pow": lambda lib, a, b: 2.0 ** b,
    "div": lambda lib, a, b: a / b,
    "scalar_div": lambda lib, a, b: 2.0 / b,
    "div_scalar": lambda lib, a, b: a / 2.0,
    "bmm": lambda lib, a, b: a @ b.transpose(1, 2),
    "bmm_broadcast": lambda lib, a, b: a[:1] @ b.transpose(1, 2),
    "matmul_2d_3d": lambda lib, a, b: a[0] @ b.reshape(2, 4, 3),  # torch folds b.mT into a copy
    "matmul_2d_3d_transposed": lambda lib, a, b: a[0] @ b.transpose(1, 2),  # ... here into a view of b
    "matmul_3d_2d_strided": lambda lib, a, b: a.transpose(0, 1) @ b[0].T,
    "matmul_vec_3d": lambda lib, a, b: a[0, 0] @ b.transpose(1, 2),
    "cross_entropy": lambda lib, a, b: _xent(lib, a.reshape(6, 4)),
    "cross_entropy_sum": lambda lib, a, b: _xent(lib, a.reshape(6, 4), "sum"),
}


def _xent(lib, logits, reduction="mean"):
    target = [0, 1, 2, 3, 0, 1]
    if lib is gpugrad:
        return F.cross_entropy(logits, gpugrad.tensor(np.asarray(target)), reduction=reduction)
    return lib.nn.functional.cross_entropy(logits, lib.tensor(target), reduction=reduction)


SAVE_PARAMS = [pytest.param(name, target, ra, rb, id=f"{name}-{target}-{int(ra)}{int(rb)}")
               for name in SAVE_CASES for target in ("a", "b", "out") for ra, rb in ((1, 1), (1, 0), (0, 1))]


@pytest.mark.parametrize("name, target, ra, rb", SAVE_PARAMS)
def test_inplace_after_op_raises_exactly_when_torch_does(torch, name, target, ra, rb):
    want = _raises(torch, SAVE_CASES[name], target, bool(ra), bool(rb))
    got = _raises(gpugrad, SAVE_CASES[name], target, bool(ra), bool(rb))
    assert got[0] == want[0]
    if want[0] == "ok":
        for g, w in zip(got[1], want[1]):
            assert (g is None) == (w is None)
            if w is not None:
                np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, target, expected", [
    ("pow_scalar_exponent", "out", "ok"), ("pow_scalar_exponent", "a", "error"), ("div", "out", "ok"),
    ("div", "a", "error"), ("scalar_div", "b", "ok"), ("cross_entropy", "a", "ok"), ("matmul_2d_3d", "b", "ok"),
    ("matmul_2d_3d", "a", "error"), ("matmul_2d_3d_transposed", "b", "error"), ("bmm", "a", "error")])
def test_inplace_after_op_known_cases(name, target, expected):
    assert _raises(gpugrad, SAVE_CASES[name], target)[0] == expected


def test_private_copy_keeps_double_backward():
    """A kept-private input copied on write still carries its history: create_graph differentiates through it."""
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((2, 4, 5)), rng.standard_normal((3, 4))

    def hvp(modify):
        w, x = leaf(w0), leaf(x0)
        wn = w * 1
        y = (x @ wn).sum()  # torch folds w into a copy: wn may change in place
        (gx,) = grad(y, x, create_graph=True)
        if modify:
            wn.mul_(2)
        (gw,) = grad((gx * gx).sum(), w)
        return gw.numpy()

    # gx[r, k] = s[k] = sum of w[:, k, :]; sum(gx^2) = 3 sum_k s[k]^2; its gradient w.r.t. w[i, k, c] is 6 s[k]
    want = np.broadcast_to(6 * w0.sum(axis=(0, 2))[None, :, None], w0.shape)
    np.testing.assert_allclose(hvp(False), want, rtol=1e-12)
    np.testing.assert_allclose(hvp(True), want, rtol=1e-12)


# -- 9. in-place ops on expand() views ---------------------------------------------------------------------------------
def _expand_inplace(lib, make):
    x = make([1.0, 2.0, 3.0])
    base = x * 1
    same = base.expand(3)
    same.mul_(2)
    lead = base.expand(1, 3)  # a new leading axis of size 1: no element shared either
    lead.add_(1)
    (base * base).sum().backward()
    return base.tolist(), x.grad.tolist()


def test_expand_without_overlap_is_writable():
    values, g = _expand_inplace(gpugrad, leaf)
    assert values == [3.0, 5.0, 7.0] and g == [12.0, 20.0, 28.0]


def test_expand_without_overlap_matches_torch(torch):
    assert _expand_inplace(gpugrad, leaf) == _expand_inplace(torch, lambda v: tleaf(torch, v))


MSG = "more than one element of the written-to tensor refers to a single memory location"


@pytest.mark.parametrize("requires_grad", [True, False])
def test_expand_with_overlap_refuses_in_place(requires_grad):
    x = gpugrad.tensor([[1.0], [2.0]], requires_grad=requires_grad) * 1
    wide = x.expand(2, 3)
    # (fill_ and zero_ write one value everywhere: torch allows them, see tests/autograd/test_inplace_views.py)
    for op in (lambda t: t.mul_(2), lambda t: t.__setitem__(0, 5.0)):
        with pytest.raises(RuntimeError, match=MSG):
            op(wide)
    assert x.tolist() == [[1.0], [2.0]]


def test_expand_with_overlap_refused_by_torch_too(torch):
    with pytest.raises(RuntimeError, match=MSG):
        torch.tensor([[1.0], [2.0]]).expand(2, 3).mul_(2)


# -- 10. a hook on a leaf makes no reference cycle ------------------------------------------------------------------
def test_hooked_leaf_is_freed_by_reference_counting():
    gc.collect()
    gc.disable()
    try:
        x = gpugrad.tensor([1.0, 2.0], requires_grad=True)
        seen = []
        x.register_hook(lambda g: seen.append(g.tolist()))
        (x * x).sum().backward()
        (x * 3).sum().backward()  # hooks outlive the first graph
        assert seen == [[2.0, 4.0], [3.0, 3.0]]
        rx, rg = weakref.ref(x), weakref.ref(x.grad)
        del x
        assert rx() is None and rg() is None
    finally:
        gc.enable()


def test_leaf_hook_handle_removes_and_survives_graphs():
    x = gpugrad.tensor([1.0], requires_grad=True)
    handle = x.register_hook(lambda g: g * 10)
    (x * 2).sum().backward()
    gc.collect()
    (x * 2).sum().backward()
    handle.remove()
    (x * 2).sum().backward()
    assert x.grad.item() == 42.0



# -- forward-mode jacobian of an empty input: no directions to stack ---------------------------------------------------
@pytest.mark.filterwarnings("ignore:var")  # the variance of nothing: NaN, with a warning
@pytest.mark.parametrize("f, shape", [(lambda v: v.var(None, correction=0).neg(), (0,)), (lambda v: v.sum() * 2, (0,)),
                                      (lambda v: (v * 3).exp(), (0, 0))])
def test_forward_mode_jacobian_of_an_empty_input(f, shape):
    """jacobian(vectorize=True, strategy="forward-mode") of a function of an empty input has 0 directions, so its
    tangents are (0, ...): an op without a batched JVP used to stack its per-direction tangents, of which there were
    none (the fuzzer: an AttributeError from type promotion of nothing). torch gives the same (0,) and (0, 0)."""
    j = gpugrad.autograd.functional.jacobian(f, gpugrad.zeros(0, requires_grad=True), vectorize=True,
                                             strategy="forward-mode")
    assert tuple(j.shape) == shape and j.dtype == gpugrad.float32


# -- an op over x and its detached alias: each operand's saved value stays its own -------------------------------------
@pytest.mark.parametrize("alias", ["detach", "data"])
def test_second_derivative_through_an_op_of_x_and_its_detached_alias(torch, alias):
    """x.detach() / x saves both operands, which share x's memory: binding each saved value to its own operand keeps
    the detached one a constant and x's differentiable, so the create_graph gradient requires grad and its
    derivative is d²/dx² (c / x) = 2c / x³ (the fuzzer: gpugrad's x.grad did not require grad)."""
    got = []
    for lib in (gpugrad, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        c = getattr(x, alias)() if alias == "detach" else x.data
        (g,) = lib.autograd.grad((c / x + c * x * x).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        assert g.requires_grad
        got.append(np.asarray(gg.detach()))
    np.testing.assert_allclose(got[0], [2.0 / 1.0 + 2.0, 2.0 * 2.0 / 8.0 + 4.0])  # 2c/x³ + 2c
    np.testing.assert_allclose(got[0], got[1])


# -- a vectorized create_graph Jacobian through a select requires grad -------------------------------------------------
@pytest.mark.parametrize("which", ["jacobian", "hessian"])
def test_vectorized_create_graph_jacobian_through_relu_requires_grad(which):
    """relu's VJP reads x only through x > 0, so J = d relu(x) * 2 / dx = diag(2 [x > 0]) has derivative 0 in x, but
    torch's vmapped backward records it as a function of x: J requires grad and d sum(J) / dx is 0 (not None). The
    vectorized path takes J from the tangent of the backward, which carried no such dependence (the fuzzer)."""
    fn = getattr(gpugrad.autograd.functional, which)
    x = gpugrad.tensor([0.5, -1.0, 2.0], requires_grad=True)
    f = (lambda t: gpugrad.relu(t) * 2) if which == "jacobian" else (lambda t: (gpugrad.relu(t) * t).sum())
    j = fn(f, x, create_graph=True, vectorize=True)
    want = np.diag([2.0, 0.0, 2.0])  # relu(t) * t = t² [t > 0]: the Hessian is 2 [t > 0] on the diagonal, too
    assert j.requires_grad
    np.testing.assert_array_equal(j.detach().numpy(), want)
    (gx,) = grad(j.sum(), x, allow_unused=True)
    np.testing.assert_array_equal(gx.numpy(), [0.0, 0.0, 0.0])


# -- functional.jvp of a variance without degrees of freedom -----------------------------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf and 0 * inf in the tangent, as the values say
@pytest.mark.parametrize("x, correction, t, want", [
    ([0.0, 2.0], 2, [1.0, 1.0], math.inf), ([0.0, 2.0], 2, [1.0, -1.0], math.nan),
    ([0.0, 2.0], 3, [1.0, 0.0], math.nan),
    ([0.0, 2.0], 3, [1.0, 1.0], math.inf), ([1.0, 1.0], 2, [1.0, 1.0], math.nan), ([3.0], 1, [1.0], math.nan)])
def test_jvp_of_var_without_degrees_of_freedom(x, correction, t, want):
    """Over all elements with n <= correction, torch's var_backward is gy * (inf where x is off its mean, NaN where on
    it), a constant: the tangent is Σ t_i * that (inf + inf = inf, inf - inf and 0 * inf = NaN) and does not require
    grad. gpugrad's JVP took Σ (x - mean) t * 2 / dof: finite or -inf values, requiring grad (the fuzzer)."""
    xs = gpugrad.tensor(x, dtype=gpugrad.float64, requires_grad=True)
    _, tangent = gpugrad.autograd.functional.jvp(lambda v: v.var(correction=correction), xs,
                                                 gpugrad.tensor(t, dtype=gpugrad.float64), create_graph=True)
    assert not tangent.requires_grad
    np.testing.assert_equal(tangent.item(), want)


def test_vectorized_create_graph_jacobian_through_a_zeroed_tensor_requires_grad():
    """f(x) = (2 exp(log_softmax(x))).zero_(): J = 0, but torch's backward of zero_ feeds zeros on through the
    log_softmax node, whose inputs require grad, so J requires grad; the vectorized path had no tangent there."""
    def f(v):
        y = v.log_softmax(-1).exp() * 2
        y.zero_()
        return y.reshape(-1, 1)

    x = gpugrad.tensor([[0.5], [1.0], [2.0]], dtype=gpugrad.float64, requires_grad=True)
    j = gpugrad.autograd.functional.jacobian(f, x, create_graph=True, vectorize=True)
    assert j.requires_grad and not j.detach().numpy().any()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("x, t, want", [([0.0, 2.0], [1.0, 1.0], math.nan), ([0.0, 2.0], [1.0, -1.0], -math.inf),
                                        ([0.0, 2.0], [1.0, 0.0], math.nan)])
def test_forward_mode_var_over_an_axis_without_degrees_of_freedom(x, t, want):
    """var(dim=0, correction=2) of two elements: torch's var_jvp scales each term by 2 / 0 = inf before the sum, so
    a zero term is inf * 0 = NaN ((x - mean) t = (-1, 1) t: inf - inf or -inf + NaN) and (-1, -1) sums to -inf."""
    fa = gpugrad.autograd.forward_ad
    with fa.dual_level():
        d = fa.make_dual(gpugrad.tensor(x, dtype=gpugrad.float64), gpugrad.tensor(t, dtype=gpugrad.float64))
        np.testing.assert_equal(fa.unpack_dual(d.var(dim=0, correction=2)).tangent.item(), want)


# -- elu at 0 and at NaN: torch's branches -----------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_elu_derivatives_at_zero_and_nan(alpha):
    """torch's elu_backward takes alpha e^x where x <= 0 (so f'(0) = alpha, and NaN takes the other branch: gy), and
    its double backward masks by x < 0, so f''(0) = 0 (the reference's minimum(x, 0) gave its tie's half: alpha / 2;
    the fuzzer). Closed forms: f' = alpha e^x, f'' = alpha e^x for x < 0."""
    x = gpugrad.tensor([-1.0, 0.0, 1.0, math.nan], dtype=gpugrad.float64, requires_grad=True)
    (g,) = grad(F.elu(x, alpha).sum(), x, create_graph=True)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), [alpha * math.exp(-1.0), alpha, 1.0, 1.0])
    np.testing.assert_allclose(h.numpy()[:3], [alpha * math.exp(-1.0), 0.0, 0.0])
    np.testing.assert_array_equal(reference.elu_bwd(np, x.detach().numpy(), np.ones(4), alpha),
                                  [alpha * math.exp(-1.0), alpha, 1.0, 1.0])


def test_bias_act_of_a_vector_differentiates_twice():
    """bias_act(x, b) of a 1-D x: its create_graph bias gradient is gz itself (summing over no leading axes, not
    torch's sum over all of them: the fuzzer's reshape error). Values: relu(x + b) with x + b = (0.6, -0.8, 2.3)."""
    x = gpugrad.tensor([0.5, -1.0, 2.0], dtype=gpugrad.float64, requires_grad=True)
    b = gpugrad.tensor([0.1, 0.2, 0.3], dtype=gpugrad.float64, requires_grad=True)
    w = gpugrad.tensor([1.0, 2.0, 3.0], dtype=gpugrad.float64)
    gx, gb = grad((F.bias_act(x, b, "sigmoid") * w).sum(), (x, b), create_graph=True)
    s = 1 / (1 + np.exp(-np.array([0.6, -0.8, 2.3])))
    np.testing.assert_allclose(gx.detach().numpy(), w.numpy() * s * (1 - s))
    np.testing.assert_allclose(gb.detach().numpy(), gx.detach().numpy())
    (hb,) = grad(gb.sum(), b)
    np.testing.assert_allclose(hb.numpy(), w.numpy() * s * (1 - s) * (1 - 2 * s))


# -- an output's hook runs when a sibling output is captured -----------------------------------------------------------
@pytest.mark.parametrize("how", ["grad", "backward_inputs"])
def test_hook_on_a_sibling_output_runs_when_one_output_is_captured(how):
    """a, b = x.unbind(): torch captures a's gradient at the input of UnbindBackward0 once all its inputs are in, so
    the path to b runs and b's hook sees its gradient 3 (and b retains it), though the node itself does not run."""
    calls = []
    x = gpugrad.tensor([1.0, 3.0], requires_grad=True)
    a, b = x.unbind(0)
    b.register_hook(lambda g: calls.append(g.item()))
    b.retain_grad()
    if how == "grad":
        assert grad(a * 2 + b * 3, [a])[0].item() == 2.0
    else:
        (a * 2 + b * 3).backward(inputs=[a])
        assert a.grad.item() == 2.0
    assert calls == [3.0] and b.grad.item() == 3.0 and x.grad is None


def test_hook_on_the_captured_output_changes_the_capture_only_when_its_node_does_not_run():
    """torch's order: a node that will not run calls the hooks, then captures; one that runs captures first."""
    x = gpugrad.tensor([1.0, 3.0], requires_grad=True)
    a, b = (x * 1).unbind()
    b.register_hook(lambda g: g * 10)
    assert grad(b * 3, b)[0].item() == 30.0
    gb, gx = grad(b * 3 + a, [b, x])
    assert gb.item() == 3.0 and gx.tolist() == [1.0, 30.0]


def test_aminmax_is_one_node_with_two_outputs(torch):
    """torch's AminmaxBackward0: both results are its outputs, so a hook on max runs when min's gradient is taken,
    an in-place change to max is caught by a backward through min, and the gradients split ties evenly."""
    x = gpugrad.tensor([[1.0, 3.0, 3.0], [2.0, -1.0, 0.0]], dtype=gpugrad.float64, requires_grad=True)
    mn, mx = x.aminmax(dim=1)
    assert mn.grad_fn.name() == mx.grad_fn.name() == "AminmaxBackward0"
    calls = []
    mx.register_hook(lambda g: calls.append(g.tolist()))
    (gmn,) = grad((mx * 5).sum() + (mn * 3).sum(), [mn], retain_graph=True)
    assert gmn.tolist() == [3.0, 3.0] and calls == [[5.0, 5.0]]
    (gx,) = grad((mn * 2 + mx * mx).sum(), x, create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), [[2.0, 3.0, 3.0], [4.0, 2.0, 0.0]])  # 2 at the min, 2 max / 2
    (hx,) = grad(gx.sum(), x)
    np.testing.assert_allclose(hx.numpy(), [[0.0, 1.0, 1.0], [2.0, 0.0, 0.0]])
    mn, mx = x.aminmax(dim=1)
    mx.div_(3)
    with pytest.raises(RuntimeError, match=INPLACE_ERROR):
        mn.sum().backward()
    t = torch.tensor(x.detach().numpy(), requires_grad=True)
    tmn, tmx = t.aminmax(dim=1)
    assert tmn.grad_fn.name() == "AminmaxBackward0"


# -- advanced indexing: torch's order of checks ------------------------------------------------------------------------
def test_index_put_checks_the_leaf_then_the_index_shapes_then_the_dtypes():
    """torch's x[i, j] = v: a leaf that requires grad refuses first, then index tensors that do not broadcast
    (IndexError, torch's words), then a value of another dtype; reading x[i, j] gives the same IndexError."""
    i, j = gpugrad.tensor([], dtype=gpugrad.int64), gpugrad.tensor([0, 1, -1])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        gpugrad.zeros(2, 2, requires_grad=True)[i, j] = gpugrad.ones((), dtype=gpugrad.float64)
    msg = re.escape("shape mismatch: indexing tensors could not be broadcast together with shapes [0], [3]")
    for value in (gpugrad.ones(()), gpugrad.ones((), dtype=gpugrad.float64)):
        with pytest.raises(IndexError, match=msg):
            gpugrad.zeros(2, 2, 2)[i, j] = value
    with pytest.raises(IndexError, match=msg):
        gpugrad.zeros(2, 2, 2)[i, j]
    mask = gpugrad.tensor([[True, False], [True, True]])
    with pytest.raises(IndexError, match=re.escape("shapes [3], [3], [2]")):
        gpugrad.zeros(2, 2, 2)[mask, gpugrad.tensor([0, 1])]
    assert tuple(gpugrad.zeros(2, 2, 2)[mask, gpugrad.tensor([0, 1, 1])].shape) == (3,)
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        gpugrad.zeros(2, 2)[gpugrad.tensor([0, 1])] = gpugrad.ones((), dtype=gpugrad.float64)


@pytest.mark.parametrize("shape, dim, error, text", [
    ((3,), 0, IndexError, "index out of range in self"),
    ((3, 4), 0, RuntimeError, "index -1 is out of bounds for dimension 0 with size 3"),
    ((3, 4), -1, RuntimeError, "index -1 is out of bounds for dimension 1 with size 4"),
    ((4, 3, 2), 1, IndexError, "index out of range in self")])
def test_index_add_out_of_range_raises_torchs_error(shape, dim, error, text):
    """torch's CPU index_add: scatter_add_ (RuntimeError) along the first or last of 2+ dims with int64 ids and
    alpha 1, else its own loop over the ids (IndexError)."""
    source = list(shape)
    source[dim] = 1
    with pytest.raises(error, match=re.escape(text)):
        gpugrad.zeros(*shape).index_add(dim, gpugrad.tensor([-1]), gpugrad.ones(*source))


def test_index_add_into_an_empty_input_checks_no_id():
    """torch checks nothing when the input is empty: the result is empty and the source's gradient 0."""
    s = gpugrad.ones(1, 3, requires_grad=True)
    y = gpugrad.zeros(0, 3).index_add(0, gpugrad.tensor([1]), s)
    assert tuple(y.shape) == (0, 3)
    y.sum().backward()
    assert s.grad.tolist() == [[0.0, 0.0, 0.0]]


def test_slogdet_sign_alone_gives_no_gradient():
    """torch's slogdet backward ignores the sign's gradient: through the sign alone A.grad stays None; through the
    log |det| it is A^-T (here A = 2 I: I / 2, times the loss's factor)."""
    for create_graph in (False, True):
        a = (gpugrad.eye(2, dtype=gpugrad.float64) * 2).requires_grad_(True)
        sign, logabs = gpugrad.linalg.slogdet(a)
        (sign * 3).backward(create_graph=create_graph)
        assert a.grad is None
        (logabs * 3).backward(create_graph=create_graph)
        np.testing.assert_allclose(a.grad.detach().numpy(), 1.5 * np.eye(2))


def test_layer_norm_create_graph_weight_and_bias_gradients_require_grad():
    """torch's one backward op has the weight among its inputs: gw and gb require grad, with no gradient of their own
    for the weight or bias (None), while x's second derivative is defined."""
    x = gpugrad.tensor([[1.0, 2.0, 4.0], [0.0, -1.0, 3.0]], dtype=gpugrad.float64)
    w = gpugrad.tensor([1.0, 2.0, 3.0], dtype=gpugrad.float64, requires_grad=True)
    b = gpugrad.tensor([0.5, 0.0, 1.0], dtype=gpugrad.float64, requires_grad=True)
    y = F.layer_norm(x, (3,), w, b)
    gw, gb = grad((y * gpugrad.tensor([1.0, 2.0, 3.0], dtype=gpugrad.float64)).sum(), (w, b), create_graph=True)
    assert gw.requires_grad and gb.requires_grad
    np.testing.assert_allclose(gb.detach().numpy(), [2.0, 4.0, 6.0])
    assert grad(gw.sum() + gb.sum(), (w, b), allow_unused=True) == (None, None)


# -- clamp with Tensor bounds: torch's JVP and its NaN values ----------------------------------------------------------
CLAMP_X = [0.0, 1.0, 2.0, 3.0, 1.0, 5.0, math.nan, 1.0]
CLAMP_LO = [0.0, 0.0, 3.0, 1.0, 1.0, 2.0, 0.0, math.nan]
CLAMP_HI = [2.0, 1.0, 2.0, 3.0, 1.0, 1.0, 1.0, 2.0]


@pytest.mark.parametrize("bounds, want", [
    ("min", [10, 1, 10, 1, 10, 1, 10, 10]),  # x's tangent only where x > min
    ("max", [1, 100, 100, 100, 100, 100, 100, 1]),  # x's tangent only where x < max
    ("both", [1, 1, 100, 1, 1, 100, 1, 1]),  # a bound's where x is beyond it, max's where min > max
    ("min_plain", [0, 1, 0, 1, 0, 1, 0, 0])])
def test_clamp_tangent_with_tensor_bounds_is_torchs_clamp_jvp(bounds, want):
    """Tangents 1 (x), 10 (min), 100 (max): torch's clamp_jvp, which differs from the gradient's rule at ties and NaN
    (the gradient goes to x where x == min; the tangent is min's)."""
    fa = gpugrad.autograd.forward_ad
    with fa.dual_level():
        x = fa.make_dual(gpugrad.tensor(CLAMP_X, dtype=gpugrad.float64), gpugrad.full((8,), 1.0, dtype=gpugrad.float64))
        lo = fa.make_dual(gpugrad.tensor(CLAMP_LO, dtype=gpugrad.float64),
                          gpugrad.full((8,), 10.0, dtype=gpugrad.float64))
        hi = fa.make_dual(gpugrad.tensor(CLAMP_HI, dtype=gpugrad.float64),
                          gpugrad.full((8,), 100.0, dtype=gpugrad.float64))
        kw = {"min": dict(min=lo), "max": dict(max=hi), "both": dict(min=lo, max=hi),
              "min_plain": dict(min=gpugrad.tensor(CLAMP_LO, dtype=gpugrad.float64))}[bounds]
        assert fa.unpack_dual(x.clamp(**kw)).tangent.tolist() == want


def test_clamp_with_tensor_bounds_is_nan_at_nan_with_the_masks_gradient():
    """x = NaN with max < min: the value is NaN (the bound was selected), and max still gets the gradient (torch's
    clamp_backward_min_max: max where x > max or max < min); -0.0 keeps its sign."""
    x, lo, hi = (gpugrad.tensor(v, dtype=gpugrad.float64, requires_grad=True) for v in (
        [math.nan, math.nan, 1.0, 1.0, 0.5, -0.0], [1.0, 0.0, math.nan, 2.0, 0.0, -1.0],
        [0.0, 1.0, 2.0, math.nan, 1.0, 1.0]))
    y = x.clamp(min=lo, max=hi)
    y.backward(gpugrad.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=gpugrad.float64))
    assert str(y.detach().numpy().tolist()) == "[nan, nan, nan, nan, 0.5, -0.0]"
    assert x.grad.tolist() == [0, 0, 0, 0, 5, 6] and lo.grad.tolist() == [0] * 6
    assert hi.grad.tolist() == [1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("requires_grad", [False, True])
def test_view_of_a_dual_sees_its_tangent_replaced_by_an_in_place_write(requires_grad):
    """v = d.moveaxis(1, 0) of a dual d: after d.copy_(y) (y without a tangent) d's tangent is 0, and so is v's, a
    view of it (torch's); the write rebinds d's tangent where ops may have recorded the old one (requires_grad), and
    v's tangent used to stay the old one."""
    fa = gpugrad.autograd.forward_ad
    rng = np.random.default_rng(5)
    with fa.dual_level():
        d = fa.make_dual(gpugrad.tensor(rng.standard_normal((4, 3, 2)), requires_grad=requires_grad) * 1,
                         gpugrad.tensor(rng.standard_normal((4, 3, 2))))
        v = d.moveaxis(1, 0)
        with gpugrad.no_grad() if not requires_grad else contextlib.nullcontext():
            d.copy_(gpugrad.tensor(rng.standard_normal((4, 3, 2))))
        assert not fa.unpack_dual(d).tangent.detach().numpy().any()
        assert not fa.unpack_dual(v).tangent.detach().numpy().any()
        d.mul_(fa.make_dual(gpugrad.tensor(2.0, dtype=gpugrad.float64), gpugrad.tensor(1.0, dtype=gpugrad.float64)))
        np.testing.assert_array_equal(fa.unpack_dual(v).tangent.detach().numpy(), np.moveaxis(d.detach().numpy() / 2,
                                                                                               1, 0))


@pytest.mark.filterwarnings("ignore:reduction")
@pytest.mark.parametrize("reduction, n", [("sum", 1), ("mean", 2)])
def test_kl_div_target_gradient_is_finite_for_positive_targets(reduction, n):
    """d/dt of t log t - t x is log t + 1 - x (torch's): the NaN branch for t < 0 used to be t * NaN, whose gradient
    (0 * NaN) made every target's gradient NaN."""
    x = gpugrad.tensor([0.1, -0.3], dtype=gpugrad.float64, requires_grad=True)
    t = gpugrad.tensor([0.0042, 0.5], dtype=gpugrad.float64, requires_grad=True)
    F.kl_div(x, t, reduction=reduction).backward()
    np.testing.assert_allclose(t.grad.numpy(), (np.log([0.0042, 0.5]) + 1 - np.array([0.1, -0.3])) / n, rtol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), -np.array([0.0042, 0.5]) / n, rtol=1e-14)


@pytest.mark.parametrize("p, dim, where", [(-1, None, "an empty tensor because"), (-2, 1, "the dimension 1because"),
                                           (math.inf, -2, "the dimension -2because"), (-math.inf, None, "an empty")])
def test_norm_without_an_identity_over_an_empty_dim_raises(p, dim, where):
    """A negative or infinite order over an empty dim has no identity: torch's error (its wording, typo and all);
    orders >= 0 give 0, as torch."""
    with pytest.raises(RuntimeError, match=re.escape(f"linalg.vector_norm cannot compute the {p:g} norm on {where}")):
        gpugrad.zeros(2, 0, 3).norm(p, dim)
    assert gpugrad.zeros(2, 0, 3).norm(2, 1).tolist() == [[0.0] * 3] * 2


def test_index_put_of_a_tensor_into_its_own_memory_raises():
    """x[mask] = x[:2] reads what it writes: torch refuses (but fills one value through masked_fill)."""
    x = gpugrad.ones(4)
    mask = gpugrad.tensor([True, False, True, False])
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer to a "
                                           "single memory location"):
        x[mask] = x[:2]
    with pytest.raises(RuntimeError, match="single memory location"):
        x[gpugrad.tensor([0, 1])] = x[2:]
    x[mask] = x[1:2] * 3
    x[mask] = x[:1]
    assert x.tolist() == [3.0, 1.0, 3.0, 1.0]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_unique_keeps_every_nan(device):
    """torch's unique: NaN != NaN, so each NaN is its own value (sorted last, count 1); NumPy and CuPy merge them by
    default (the fuzzer: 12 NaNs gave 1)."""
    x = gpugrad.tensor([math.nan, 1.0, math.nan, 1.0, 0.5], device=device)
    values, inverse, counts = gpugrad.unique(x, return_inverse=True, return_counts=True)
    assert str(values.cpu().tolist()) == "[0.5, 1.0, nan, nan]"
    assert inverse.cpu().tolist() == [2, 1, 3, 1, 0] and counts.cpu().tolist() == [1, 2, 1, 1]
