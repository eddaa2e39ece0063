"""Engine semantics: each property in its own test, values checked exactly or against an oracle."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.autograd import gradcheck
from gpugrad.core import op


def leaf(values, dtype=np.float64):
    return gpugrad.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


# -- the worked examples -----------------------------------------------------------------------------------------
def test_e_equals_ab_plus_c():
    a, b, c = leaf(2.0), leaf(-3.0), leaf(10.0)
    e = a * b + c
    assert e.grad_fn.name() == "AddBackward0"
    assert e.grad_fn.next_functions[0][0].name() == "MulBackward0"
    assert e.grad_fn.next_functions[1][0].name() == "AccumulateGrad"
    e.backward()
    assert (a.grad.item(), b.grad.item(), c.grad.item()) == (-3.0, 2.0, 1.0)


def test_square_of_three():
    x = gpugrad.tensor(3.0, requires_grad=True)
    y = x ** 2
    y.backward()
    assert x.grad.item() == 6.0 and x.grad.dtype == np.float32


def test_repr_names_grad_fn():
    x = gpugrad.tensor([[-4.0, -3.2998], [-5.0, -4.0]], requires_grad=True)
    assert repr(x.sum()) == "tensor(-16.2998, grad_fn=<SumBackward0>)"
    assert repr(x.sum(axis=0).grad_fn).startswith("<SumBackward1 object at")
    assert x.mean().grad_fn.name() == "MeanBackward0"
    assert x.relu().grad_fn.name() == "ReluBackward0"
    assert (x @ x).grad_fn.name() == "MmBackward0"
    assert repr(gpugrad.tensor([1.0, 2.0], requires_grad=True)) == "tensor([1., 2.], requires_grad=True)"


def test_nested_mlp_loss_passes_gradcheck():
    rng = np.random.default_rng(0)
    inputs = gpugrad.tensor(rng.standard_normal((4, 3)))
    y_true = gpugrad.tensor(np.eye(3)[[0, 2, 1, 2]])
    W1, b1 = leaf(rng.standard_normal((3, 5))), leaf(rng.standard_normal(5))
    W2, b2 = leaf(rng.standard_normal((5, 3))), leaf(rng.standard_normal(3))

    def loss(W1, b1, W2, b2):
        probs = F.softmax((inputs @ W1 + b1).relu() @ W2 + b2)
        return -(y_true * probs.log()).sum() / 4

    assert gradcheck(loss, [W1, b1, W2, b2])


def test_sequence_score_log_softmax_gather_sum():
    rng = np.random.default_rng(1)
    logits = leaf(rng.standard_normal((6, 11)))
    ids = gpugrad.tensor(rng.integers(0, 11, size=(6, 1)))
    score = logits.log_softmax(-1).gather(1, ids).sum()
    assert score.grad_fn.name() == "SumBackward0"
    score.backward()
    x = logits.detach().numpy()
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    expected = np.eye(11)[ids.numpy()[:, 0]] - p
    np.testing.assert_allclose(logits.grad.numpy(), expected, rtol=1e-12, atol=1e-14)
    fused = F.token_logprob(logits, ids.reshape(-1)).sum()
    np.testing.assert_allclose(fused.item(), score.item(), rtol=1e-12)
    with gpugrad.inference_mode():
        s = logits.log_softmax(-1).gather(1, ids).sum()
    assert s.grad_fn is None and not s.requires_grad


# -- graph walking -------------------------------------------------------------------------------------------------
def test_long_chain_has_no_recursion_limit():
    x = gpugrad.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.backward()
    assert x.grad.item() == 1.0


def test_a_long_graphs_nodes_share_their_bookkeeping_tuples(monkeypatch):
    # The cyclic GC's full passes touch every object a live node refers to: equal tuples shared by many nodes stay
    # in cache (core/op.py _SHARED), where one tuple per node made the GC most of a long chain's forward.
    x = gpugrad.ones(8, requires_grad=True)
    y = x
    for _ in range(50):
        y = y * 1.5 + 0.0
    nodes, node = [], y.grad_fn
    while node is not None and node.next_functions:
        nodes.append(node)
        node = node.next_functions[0][0]
    assert len(nodes) == 100
    assert len({id(n.needs_input_grad) for n in nodes}) == 1 and len({id(n._in_meta) for n in nodes}) == 1
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(8, 1.5 ** 50), rtol=1e-5)

    # the cache is bounded: a program of ever-new shapes does not grow it forever
    monkeypatch.setattr(op, "_SHARED_MAX", 16)
    for n in range(1, 60):
        z = gpugrad.ones(n, requires_grad=True)
        (z * 2.0 + 1.0).sum().backward()
        np.testing.assert_array_equal(z.grad.numpy(), np.full(n, 2.0))
        assert len(op._SHARED) <= 16 + 1


def test_accumulates_across_paths_and_calls():
    x = leaf([1.0, 2.0, 3.0])
    (x * x + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 5.0, 7.0])
    buf = x.grad._data  # the raw array (.data is a Tensor, as torch's)
    (x * x + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 10.0, 14.0])
    assert x.grad._data is buf and x.grad._data.ctypes.data == buf.ctypes.data  # same buffer, in place
    x.grad = None
    (x + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_shared_subgraph_and_aliasing():
    x = leaf([1.0, -2.0])
    h = x * 3.0
    y = (h + h) * h  # 2h * h = 2h^2 -> dy/dx = 4h*3 = 12h
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 12 * 3 * np.array([1.0, -2.0]))
    z = leaf([5.0])
    w = z + z  # AddBackward hands the same gy to both inputs: accumulation must not alias
    (w * w).sum().backward()
    assert z.grad.item() == 40.0


def test_leaf_grad_buffer_kept_across_steps():
    w = leaf(np.ones((3, 3)))
    x = gpugrad.tensor(np.arange(9.0).reshape(3, 3))
    ptrs = set()
    for _ in range(3):
        (x @ w).sum().backward()
        ptrs.add(w.grad._data.ctypes.data)
        w.grad._data.fill(0)
    assert len(ptrs) == 1


def test_intermediate_gradients_are_released():
    x = leaf(np.ones(1000))
    h = x.exp() * 2.0
    refs = []
    h.register_hook(lambda g: refs.append(weakref.ref(g._data)))
    (h * 3.0).sum().backward()
    gc.collect()
    assert len(refs) == 1 and refs[0]() is None  # nothing holds h's gradient once it was consumed
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.e)


def test_saved_buffer_freed_after_backward():
    x = leaf(np.ones(10))
    y = x.tanh()
    arr = y.grad_fn.saved[0]
    ref = weakref.ref(arr)
    del arr
    loss = (y.sum())
    del y
    loss.backward()
    gc.collect()
    assert ref() is None


def test_second_backward_names_node_and_retain_graph():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"MulBackward0.*retain_graph=True"):
        y.backward()
    z = (x.exp()).sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0]) * 2 / 2 + 2 * np.exp([1.0, 2.0]))


def test_nonscalar_backward_needs_gradient():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(gpugrad.tensor([1.0, 10.0], dtype=np.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 20.0])


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        gpugrad.tensor([1.0]).sum().backward()


# -- higher order ---------------------------------------------------------------------------------------------------
def test_create_graph_second_derivative():
    x = leaf([0.5, -1.5])
    (g,) = gpugrad.autograd.grad((x ** 3).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * np.array([0.5, -1.5]) ** 2)
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.array([0.5, -1.5]))


def test_create_graph_through_exp_tanh_matmul():
    rng = np.random.default_rng(0)
    a = leaf(rng.standard_normal((3, 3)))
    v = leaf(rng.standard_normal(3))

    def first(a, v):
        (ga,) = gpugrad.autograd.grad(((a @ v).tanh().exp()).sum(), a, create_graph=True)
        return (ga * ga).sum()

    assert gradcheck(first, [a, v])


def test_create_graph_unsupported_op_raises_with_name():
    """Every built-in op supports create_graph (test_gradgradcheck.py); an Op subclass whose VJP is neither
    Tensor-safe nor linear is refused by name, never differentiated wrongly."""
    class Cube(gpugrad.autograd.Op):
        def forward(self, xp, x):
            self.save_for_backward(x)
            return x ** 3

        def backward(self, xp, gy):
            return gy * 3 * self.saved[0] ** 2

    x = leaf([[0.5, -1.5, 2.0]])
    with pytest.raises(RuntimeError, match="CubeBackward0 does not support create_graph"):
        gpugrad.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)


# -- grad modes -----------------------------------------------------------------------------------------------------
def test_no_grad_and_inference_mode_record_nothing():
    x = leaf([1.0])
    with gpugrad.no_grad():
        y = x * 2
        assert not gpugrad.is_grad_enabled()
        with gpugrad.enable_grad():
            assert (x * 2).grad_fn is not None
    assert y.grad_fn is None and not y.requires_grad
    with gpugrad.inference_mode():
        z = x * 2
    assert z.grad_fn is None
    with pytest.raises(RuntimeError, match="inference"):
        (z * x).sum()
    with pytest.raises(RuntimeError, match="inference"):
        z.requires_grad_()


def test_grad_modes_as_decorators():
    x = leaf([1.0])

    @gpugrad.no_grad()
    def f():
        return x * 2

    @gpugrad.set_grad_enabled(False)
    def g():
        return x * 2

    assert gpugrad.is_grad_enabled()
    assert f().grad_fn is None and g().grad_fn is None
    assert gpugrad.is_grad_enabled()
    gpugrad.set_grad_enabled(False)
    assert not gpugrad.is_grad_enabled()
    gpugrad.set_grad_enabled(True)
    with gpugrad.set_grad_enabled(False):
        assert (x * 2).grad_fn is None
    assert gpugrad.is_grad_enabled()

    @gpugrad.inference_mode()
    def h():
        return x * 2

    assert h().grad_fn is None


def test_detach_shares_data_and_cuts_graph():
    x = leaf([1.0, 2.0])
    y = x * 2
    d = y.detach()
    assert d.grad_fn is None and not d.requires_grad
    d.data[0] = 100.0
    assert y.data[0] == 100.0


# -- in place -------------------------------------------------------------------------------------------------------
def test_inplace_after_save_raises_with_versions():
    x = leaf([1.0, 2.0])
    y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match=r"^one of the variables needed for gradient computation has been modified by "
                       r"an inplace operation: \[gpugrad.DoubleTensor \[2\]\], which is output 0 of Exp, is at version "
                       r"1; expected version 0 instead\..*\(ExpBackward0 saved its output"):
        y.sum().backward()


def test_inplace_on_saved_input_raises():
    x = leaf([1.0, 2.0])
    h = x * 1.0
    y = h.log()
    h.mul_(2)
    with pytest.raises(RuntimeError, match=r"LogBackward0 saved its input"):
        y.sum().backward()


def test_inplace_on_leaf_requiring_grad_raises():
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad is being used in an in-place operation"):
        x += 1
    with gpugrad.no_grad():
        x += 1
    assert x.item() == 2.0 and x._version == 1


def test_inplace_ops_record_correct_gradients():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    y += x          # y = 3x
    y.mul_(2.0)     # y = 6x
    y[0] = 7.0      # element 0 no longer depends on x
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 6.0, 6.0])
    assert y.grad_fn.name() == "CopySlices"  # as torch: y[0] = v is y[0].copy_(v)


def test_setitem_gradient_flows_to_value():
    x = leaf([1.0, 2.0, 3.0])
    v = leaf([10.0])
    y = x * 1.0
    y[1:2] = v * 3
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 6.0])
    np.testing.assert_array_equal(v.grad.numpy(), [2 * 30.0 * 3])


def test_view_inplace_bumps_base_version():
    x = leaf([1.0, 2.0])
    h = x.exp()
    v = h.detach()[0:1]
    v.data[...] = 0  # raw data writes bypass autograd (as torch's .data) ...
    h2 = x.tanh()
    view = h2.detach()
    view.add_(1.0)   # ... but in-place ops on a detached alias are seen by the saved output
    with pytest.raises(RuntimeError, match="TanhBackward0"):
        h2.sum().backward()


# -- dtype and device errors -----------------------------------------------------------------------------------------
def test_integer_operands_promote_and_cannot_require_grad():
    x = leaf([1.0, 2.0])
    i = gpugrad.tensor([1, 2])
    y = x * i  # as torch: the int64 operand promotes to x's float64 and gets no gradient
    y.sum().backward()
    assert y.dtype == gpugrad.float64 and x.grad.tolist() == [1.0, 2.0] and not i.requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        gpugrad.tensor([1, 2], requires_grad=True)
    assert (i * i).tolist() == [1, 4] and (i * i).dtype == gpugrad.int64  # integer math stays integer


def test_mixed_devices_raise():
    from gpugrad.backend import Backend
    from gpugrad.backend.device import Device

    fake = Backend("cuda", np, Device("cuda", 0))  # a CUDA-labelled backend is enough to exercise the check
    a = leaf([1.0, 2.0])
    b = gpugrad.tensor([1.0, 2.0], dtype=np.float64)
    b._backend = fake
    with pytest.raises(RuntimeError, match=r"add: .*devices \[cpu, cuda:0\].*same device"):
        a + b


def test_cuda_request_without_gpu_says_why():
    if gpugrad.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match=r"CUDA is not available: .*device='cpu'"):
        gpugrad.zeros(2, device="cuda")


# -- hooks, retain_grad, autograd.grad, custom functions -------------------------------------------------------------
def test_hooks_and_retain_grad():
    x = leaf([1.0, 2.0])
    h = x * 3
    h.retain_grad()
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    x.register_hook(lambda g: g * 10)
    (h * h).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(seen[0], [6.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [180.0, 360.0])


def test_autograd_grad_returns_without_accumulating():
    x, y = leaf([1.0, 2.0]), leaf([3.0])
    out = (x * x).sum() * y
    gx, gy = gpugrad.autograd.grad(out, [x, y])
    np.testing.assert_array_equal(gx.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(gy.numpy(), [5.0])
    assert x.grad is None and y.grad is None
    z = leaf([1.0])
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        gpugrad.autograd.grad((x * 2).sum(), [x, z])
    gx, gz = gpugrad.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)
    assert gz is None


def test_autograd_grad_wrt_intermediate():
    x = leaf([1.0, 2.0])
    h = x.exp()
    (gh,) = gpugrad.autograd.grad((h * h).sum(), h)
    np.testing.assert_allclose(gh.numpy(), 2 * np.exp([1.0, 2.0]))


class Cube(gpugrad.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy * 3 * x * x


def test_custom_function():
    x = leaf([1.0, -2.0])
    y = Cube.apply(x)
    assert y.grad_fn.name() == "CubeBackward"
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 12.0])
    assert gradcheck(Cube.apply, [leaf([0.3, 0.7])])
    with pytest.raises(RuntimeError, match="CubeBackward.*retain_graph"):
        y.sum().backward()


def test_next_functions_and_is_leaf():
    x = leaf([1.0])
    c = gpugrad.tensor([2.0], dtype=np.float64)
    y = x * c
    (n0, i0), (n1, i1) = y.grad_fn.next_functions
    assert n0.name() == "AccumulateGrad" and n0.variable is x and n1 is None and i0 == 0
    assert x.is_leaf and not y.is_leaf


# -- regressions from review: each once gave a silently wrong gradient or crashed ---------------------------------
def test_zero_dim_tensor_used_twice():
    t = gpugrad.tensor(2.0, requires_grad=True)
    (t * t).backward()
    assert t.grad.item() == 4.0
    t.grad = None
    (t.exp() * t).backward()
    np.testing.assert_allclose(t.grad.item(), np.exp(2.0) * 3, rtol=1e-6)
    (t * t).backward()  # a second backward accumulates into the 0-d leaf buffer
    np.testing.assert_allclose(t.grad.item(), np.exp(2.0) * 3 + 4, rtol=1e-6)
    x = leaf([1.0, 2.0])
    loss = (x * x).sum()
    (loss * loss + loss.exp()).backward()
    np.testing.assert_allclose(x.grad.numpy(), (2 * 5 + np.exp(5)) * 2 * np.array([1.0, 2.0]))


def test_inplace_change_of_a_saved_view_is_caught():
    x = leaf([[1.0, 2.0, 3.0]])
    for make in (lambda: x.softmax(-1), lambda: x.amax(1), lambda: x.log_softmax(-1)):
        y = make()
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    z = x * 1
    lse = z.logsumexp(-1)
    z.mul_(2)
    with pytest.raises(RuntimeError, match="LogsumexpBackward0 saved its input"):
        lse.sum().backward()


def test_fill_and_zero_on_graph_tensors_cut_the_gradient():
    x, w = leaf([1.0, 2.0, 3.0]), leaf([4.0, 5.0, 6.0])
    z = x * 1
    z.zero_()
    (z + w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
    z = x * 1
    z.fill_(2.0)
    (z * w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0, 3.0])


def test_views_follow_inplace_changes_of_their_base(torch):
    def run(lib, make):
        x, c = make([1.0, 2.0]), make([3.0])
        y = x * 2
        v = y[0]
        y.mul_(3)
        (v * c).sum().backward()
        return x.grad, c.grad

    ours = run(gpugrad, lambda v: gpugrad.tensor(np.array(v), requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy())


def test_inplace_through_views_records_copy_slices(torch):
    def run(lib, make):
        w = make([1.0, 2.0])
        z = lib.zeros(3, dtype=w.dtype)
        z[:2].add_(w * w)  # z does not require grad until the in-place op
        z2 = lib.zeros((2, 3), dtype=w.dtype)
        z2[0][1:] = w      # chained views
        h = w * 1
        h[0] += 5          # Python's `x[i] += ...`: __getitem__, __iadd__ on the view, __setitem__
        ((z * z).sum() + (z2 * 3).sum() + (h * h).sum()).backward()
        return w.grad, z.detach(), z2.detach(), h.detach()

    ours = run(gpugrad, lambda v: gpugrad.tensor(np.array(v), requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy())
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad is being used in an in-place operation"):
        leaf([1.0, 2.0])[0:1].add_(1.0)


def test_inplace_ops_that_save_self_work_on_graph_tensors(torch):
    def run(lib, make):
        x, w = make([0.5, -2.0, 3.0]), make([2.0, 3.0, 4.0])
        z = x * 1
        z.clamp_(-1.0, 1.0)
        z.mul_(w)
        (z * z).sum().backward()
        return x.grad, w.grad

    ours = run(gpugrad, lambda v: gpugrad.tensor(np.array(v), requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy())


def test_hook_must_keep_shape_and_dtype():
    x = leaf([1.0, 2.0, 3.0])
    x.register_hook(lambda g: g[:2])
    with pytest.raises(RuntimeError, match=r"hook .* returned shape gpugrad\.Size\(\[2\]\).*shape gpugrad\.Size\(\[3\]\)"):
        (x * 2).sum().backward()


class ReturnsKept(gpugrad.autograd.Function):
    kept = None

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, gy):
        return ReturnsKept.kept


def test_custom_function_gradient_is_never_aliased():
    ReturnsKept.kept = gpugrad.tensor([1.0, 1.0], dtype=np.float64)
    x = leaf([0.0, 0.0])
    ReturnsKept.apply(x).sum().backward()
    ReturnsKept.apply(x).sum().backward()
    np.testing.assert_array_equal(ReturnsKept.kept.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_setitem_with_fewer_axes_in_the_gradient():
    t = leaf(np.zeros((2, 3)))
    w = leaf(np.ones((1, 3)))
    u = t * 1
    u[0] = w
    (u * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[2.0, 2.0, 2.0]])


def test_autograd_grad_applies_the_inputs_hooks():
    # As torch: an input's hooks run on the gradient grad() returns; but when the input's node must also run (to
    # reach another input below it), the gradient is captured before its hooks (torch's NOTE [Hooks ordering]).
    x = leaf([1.0])
    h = x * 2
    h.register_hook(lambda g: g * 100)
    (gh,) = gpugrad.autograd.grad((h * h).sum(), [h])
    assert gh.item() == 400.0
    gh, gx = gpugrad.autograd.grad((h * h).sum(), [h, x])
    assert gh.item() == 4.0 and gx.item() == 800.0


def test_numpy_scalars_are_weak():
    x = gpugrad.tensor([1.0, 2.0])
    assert (x * np.float64(2)).dtype == np.float32 and (x / np.sqrt(np.float64(4))).dtype == np.float32
