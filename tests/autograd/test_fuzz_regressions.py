"""Regressions found by differential fuzzing against torch, one section per finding.

Each property is checked on gpugrad alone (exact values, float64 finite differences or the behaviour torch
documents), and against torch itself where the `torch` fixture is available: only those comparisons skip without it.
"""
from __future__ import annotations

import gc
import math
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


# -- 5. autograd.grad w.r.t. an intermediate leaves the graph below it alive --------------------------------------------
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


# -- 9. in-place ops on expand() views ----------------------------------------------------------------------------------
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



# -- forward-mode jacobian of an empty input: no directions to stack ----------------------------------------------------
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


# -- an op over x and its detached alias: each operand's saved value stays its own --------------------------------------
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
