"""nn: Module bookkeeping, layers and their ops (values and gradients against PyTorch or NumPy formulas),
init distributions, state_dict round trips and error messages."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import gpugrad
from gpugrad import nn
from gpugrad.autograd import gradcheck
from gpugrad.nn import functional as F, init
from gpugrad.testing import cuda_sim

CPU = "cpu"
F64 = np.float64


def t64(a, requires_grad=False):
    return gpugrad.tensor(np.asarray(a, F64), device=CPU, requires_grad=requires_grad)


def host(t):
    return t.detach().cpu().numpy()


# ---- Parameter ------------------------------------------------------------------------------------------------------
def test_parameter_wraps_without_copy_and_prints_like_torch():
    base = gpugrad.zeros(2, 3, device=CPU)
    p = nn.Parameter(base)
    assert isinstance(p, gpugrad.Tensor) and p.requires_grad and p.is_leaf
    assert p._data is base._data  # shares memory, as torch.nn.Parameter(t) does
    arr = np.ones(3, np.float32)
    assert nn.Parameter(arr)._data is arr
    assert nn.Parameter([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert repr(nn.Parameter(gpugrad.ones(2, device=CPU))) == \
        "Parameter containing:\ntensor([1., 1.], requires_grad=True)"
    assert not nn.Parameter(base, requires_grad=False).requires_grad
    y = p * 2  # results of ops are plain tensors
    assert type(y) is gpugrad.Tensor


def test_deepcopy_module_gets_fresh_parameters():
    import copy

    m = nn.MLP([3, 4, 2], device=CPU)
    m(gpugrad.ones(1, 3, device=CPU)).sum().backward()
    c = copy.deepcopy(m)
    for (n, p), (_, q) in zip(m.named_parameters(), c.named_parameters()):
        assert type(q) is nn.Parameter and q is not p and not np.shares_memory(q.data, p.data), n
        np.testing.assert_array_equal(host(q), host(p))
        np.testing.assert_array_equal(host(q.grad), host(p.grad))


# ---- Module bookkeeping ---------------------------------------------------------------------------------------------
class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 3, device=CPU)
        self.body = nn.Sequential(nn.Linear(3, 4, device=CPU), nn.ReLU(), nn.Linear(4, 5, bias=False, device=CPU))
        self.body[2].weight = self.emb.weight  # tied: must be listed once
        self.register_buffer("steps", gpugrad.zeros(1, device=CPU))
        self.register_buffer("scratch", gpugrad.zeros(2, device=CPU), persistent=False)


def test_named_parameters_are_dotted_and_deduplicated():
    m = Tied()
    assert [n for n, _ in m.named_parameters()] == ["emb.weight", "body.0.weight", "body.0.bias"]
    assert len(list(m.parameters())) == 3
    assert [n for n, _ in m.named_children()] == ["emb", "body"]
    assert [type(c).__name__ for c in m.modules()] == ["Tied", "Embedding", "Sequential", "Linear", "ReLU", "Linear"]
    assert [n for n, _ in m.named_buffers()] == ["steps", "scratch"]
    assert [n for n, _ in m.body.named_parameters(prefix="body")][0] == "body.0.weight"
    assert m.body[2].bias is None and "bias" in m.body[2]._parameters


def test_setattr_rules():
    m = nn.Linear(2, 2, device=CPU)
    with pytest.raises(TypeError, match="cannot assign Tensor as parameter 'weight'"):
        m.weight = gpugrad.zeros(2, 2)
    m.weight = None
    assert m.weight is None and [n for n, _ in m.named_parameters()] == ["bias"]
    m.extra = 3  # plain attributes are plain
    assert m.extra == 3 and "extra" not in m._parameters
    del m.bias
    assert not hasattr(m, "bias")
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'nope'"):
        m.nope

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(gpugrad.zeros(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_train_eval_and_dropout():
    net = nn.Sequential(nn.Linear(2, 2, device=CPU), nn.Dropout(0.25))
    assert net.training and net[1].training
    net.eval()
    assert not net.training and not net[1].training
    x = gpugrad.ones(200, 50, device=CPU)
    assert nn.Dropout(0.5).eval()(x) is x
    y = host(nn.Dropout(0.25)(x))
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75)  # survivors scaled by 1 / (1 - p)
    assert abs(kept.mean() - 0.75) < 0.02
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_zero_grad_keeps_or_drops_buffers():
    lin = nn.Linear(3, 2, device=CPU)
    lin(gpugrad.ones(4, 3, device=CPU)).sum().backward()
    g = lin.weight.grad
    ptr = g._data.ctypes.data
    lin.zero_grad(set_to_none=False)
    assert lin.weight.grad is g and g._data.ctypes.data == ptr and not g._data.any()
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


def test_apply_and_requires_grad():
    net = nn.MLP([3, 4, 2], device=CPU)
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "MLP"]
    net.apply(lambda m: init.zeros_(m.weight) if isinstance(m, nn.Linear) else None)
    assert not host(net[0].weight).any()
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_repr_like_torch():
    net = nn.Sequential(nn.Linear(4, 8, device=CPU), nn.GELU(), nn.Sequential(nn.LayerNorm(8), nn.Identity()),
                        nn.Dropout(0.1), nn.Embedding(3, 2, padding_idx=0), nn.Flatten())
    assert repr(net) == """Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): GELU(approximate='none')
  (2): Sequential(
    (0): LayerNorm((8,), eps=1e-05, elementwise_affine=True)
    (1): Identity()
  )
  (3): Dropout(p=0.1, inplace=False)
  (4): Embedding(3, 2, padding_idx=0)
  (5): Flatten(start_dim=1, end_dim=-1)
)"""


def test_sequential_container():
    a, b, c = nn.Linear(2, 3, device=CPU), nn.Tanh(), nn.Linear(3, 1, device=CPU)
    net = nn.Sequential(a, b, c)
    assert len(net) == 3 and net[0] is a and net[-1] is c and list(net) == [a, b, c]
    head = net[:2]
    assert isinstance(head, nn.Sequential) and list(head) == [a, b]
    with pytest.raises(IndexError, match="out of range"):
        net[3]
    named = nn.Sequential(OrderedDict([("fc", a), ("act", b)]))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]
    x = t64(np.random.randn(5, 2))
    net.double()
    want = np.tanh(host(x) @ host(a.weight).T + host(a.bias)) @ host(c.weight).T + host(c.bias)
    np.testing.assert_allclose(host(net(x)), want, rtol=1e-12)


# ---- state_dict -----------------------------------------------------------------------------------------------------
def test_state_dict_holds_detached_tensors_sharing_storage_with_buffers():
    m = Tied()
    sd = m.state_dict()
    assert list(sd) == ["steps", "emb.weight", "body.0.weight", "body.0.bias", "body.2.weight"]  # tied: both names
    assert all(type(v) is gpugrad.Tensor and not v.requires_grad for v in sd.values())
    with gpugrad.no_grad():
        m.body[0].bias.add_(1.0)
    np.testing.assert_array_equal(host(sd["body.0.bias"]), host(m.body[0].bias))  # as torch: the same storage
    assert m.state_dict(keep_vars=True)["body.0.bias"] is m.body[0].bias
    assert list(m.state_dict(prefix="net.")) == ["net." + k for k in sd]


def test_load_state_dict_copies_in_place():
    src, dst = Tied(), Tied()
    with gpugrad.no_grad():
        src.steps.fill_(7)
    w = dst.body[0].weight
    ptr = w._data.ctypes.data
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert dst.body[0].weight is w and w._data.ctypes.data == ptr  # same object, same buffer
    for (n, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        np.testing.assert_array_equal(host(a), host(b), err_msg=n)
    # a Tensor-valued checkpoint loads too, cast to the parameter's dtype
    dst.load_state_dict({k: gpugrad.tensor(host(v).astype(F64)) for k, v in src.state_dict().items()})
    assert dst.body[0].weight.dtype == np.float32


def test_load_state_dict_errors_name_the_keys():
    m = nn.Linear(2, 3, device=CPU)
    sd = m.state_dict()
    bad = {"weight": np.zeros((2, 3)), "extra": np.zeros(1)}
    with pytest.raises(RuntimeError) as err:
        m.load_state_dict(bad)
    msg = str(err.value)
    assert "Error(s) in loading state_dict for Linear" in msg
    assert 'Missing key(s) in state_dict: "bias".' in msg
    assert 'Unexpected key(s) in state_dict: "extra".' in msg
    assert ("size mismatch for weight: copying a param with shape (2, 3) from checkpoint, the shape in current "
            "model is (3, 2).") in msg
    np.testing.assert_array_equal(host(m.weight), host(sd["weight"]))  # nothing was half-loaded
    keys = m.load_state_dict({"weight": sd["weight"], "extra": 1}, strict=False)
    assert keys.missing_keys == ["bias"] and keys.unexpected_keys == ["extra"]
    with pytest.raises(RuntimeError, match="size mismatch for bias"):
        m.load_state_dict({"bias": np.zeros(4)}, strict=False)  # shapes are checked even when not strict


def test_to_moves_in_place_keeping_parameter_objects():
    lin = nn.Linear(3, 2, device=CPU)
    lin(gpugrad.ones(1, 3, device=CPU)).sum().backward()
    w, wv = lin.weight, host(lin.weight)
    assert lin.to(CPU) is lin and lin.weight is w
    lin.double()
    assert lin.weight is w and w.dtype == F64 and w.grad.dtype == F64
    np.testing.assert_array_equal(host(w), wv.astype(F64))
    with pytest.raises(TypeError, match="floating point"):
        lin.to(dtype=np.int64)


@pytest.mark.cuda
def test_cuda_round_trip_keeps_parameter_objects():
    lin = nn.Linear(3, 2, device=CPU)
    w, wv = lin.weight, host(lin.weight)
    lin.cuda()
    assert lin.weight is w and w.device.type == "cuda"
    y = lin(gpugrad.ones(4, 3, device="cuda"))
    y.sum().backward()
    np.testing.assert_allclose(host(w.grad), np.full((2, 3), 4.0))
    lin.cpu()
    assert lin.weight is w and w.device.type == "cpu" and w.grad.device.type == "cpu"
    np.testing.assert_array_equal(host(w), wv)


# ---- init ------------------------------------------------------------------------------------------------------------
def test_calculate_gain_and_fans():
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01**2)))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")
    assert init._calculate_fan_in_and_fan_out(gpugrad.empty(6, 4, 3, 3)) == (36, 54)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(gpugrad.empty(5))


@pytest.mark.parametrize("fn,lo,hi,std", [
    (lambda t: init.uniform_(t, -2.0, 3.0), -2.0, 3.0, 5 / math.sqrt(12)),
    (lambda t: init.kaiming_uniform_(t, a=math.sqrt(5)), -1 / 16, 1 / 16, 1 / 16 / math.sqrt(3)),
    (lambda t: init.xavier_uniform_(t, gain=2.0), -2 * math.sqrt(6 / 768), 2 * math.sqrt(6 / 768),
     2 * math.sqrt(2 / 768)),
    (lambda t: init.kaiming_normal_(t, nonlinearity="relu"), None, None, math.sqrt(2 / 256)),
    (lambda t: init.xavier_normal_(t), None, None, math.sqrt(2 / 768)),
    (lambda t: init.normal_(t, 1.0, 0.5), None, None, 0.5),
])
def test_random_init_distributions(fn, lo, hi, std):
    t = gpugrad.empty(512, 256, device=CPU)  # fan_in 256, fan_out 512
    buf = t._data
    assert fn(t) is t and t._data is buf  # in place
    a = host(t).astype(F64)
    if lo is not None:
        assert lo <= a.min() and a.max() <= hi and a.min() < lo + 0.01 * (hi - lo) and a.max() > hi - 0.01 * (hi - lo)
    assert a.std() == pytest.approx(std, rel=0.01)


def test_init_is_seeded_and_constant_inits():
    gpugrad.manual_seed(3)
    a = host(nn.Linear(5, 4, device=CPU).weight)
    gpugrad.manual_seed(3)
    b = host(nn.Linear(5, 4, device=CPU).weight)
    np.testing.assert_array_equal(a, b)
    t = gpugrad.empty(2, 2, device=CPU)
    np.testing.assert_array_equal(host(init.constant_(t, 0.5)), 0.5)
    np.testing.assert_array_equal(host(init.ones_(t)), 1.0)
    np.testing.assert_array_equal(host(init.zeros_(t)), 0.0)
    h = init.uniform_(gpugrad.empty(3, dtype=np.float16, device=CPU))  # drawn in float32, stored as half
    assert h.dtype == np.float16 and (host(h) >= 0).all()


def test_linear_default_init_bounds():
    lin = nn.Linear(400, 300, device=CPU)
    bound = 1 / math.sqrt(400)
    for p in (lin.weight, lin.bias):
        a = host(p)
        assert np.abs(a).max() <= bound and np.abs(a).max() > 0.97 * bound
    assert host(lin.weight).std() == pytest.approx(bound / math.sqrt(3), rel=0.02)


# ---- layers against PyTorch -----------------------------------------------------------------------------------------
def _grads(out, *ts, seed=1):
    gy = np.random.default_rng(seed).standard_normal(out.shape)
    out.backward(t64(gy))
    return gy, [host(t.grad) for t in ts]


def test_linear_matches_torch(torch):
    lin = nn.Linear(5, 3, device=CPU).double()
    x = t64(np.random.randn(2, 4, 5), requires_grad=True)
    y = lin(x)
    assert y.grad_fn.name() == "AddmmBackward0"
    gy, (gx, gw, gb) = _grads(y, x, lin.weight, lin.bias)
    tl = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(host(lin.weight)))
        tl.bias.copy_(torch.from_numpy(host(lin.bias)))
    tx = torch.from_numpy(host(x)).requires_grad_()
    ty = tl(tx)
    ty.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(host(y), ty.detach().numpy(), rtol=1e-12)
    for mine, theirs in ((gx, tx.grad), (gw, tl.weight.grad), (gb, tl.bias.grad)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape,ns,affine", [((4, 6), (6,), True), ((2, 3, 8), (8,), True),
                                             ((2, 3, 4), (3, 4), True), ((5, 7), (7,), False)])
def test_layer_norm_matches_torch(torch, shape, ns, affine):
    ln = nn.LayerNorm(ns, eps=1e-5, elementwise_affine=affine, device=CPU).double()
    if affine:
        with gpugrad.no_grad():
            init.normal_(ln.weight)
            init.normal_(ln.bias)
    x = t64(np.random.randn(*shape) * 3 + 1, requires_grad=True)
    y = ln(x)
    assert y.grad_fn.name() == "NativeLayerNormBackward0"
    params = [x] + ([ln.weight, ln.bias] if affine else [])
    gy, grads = _grads(y, *params)
    tln = torch.nn.LayerNorm(ns, eps=1e-5, elementwise_affine=affine).double()
    if affine:
        with torch.no_grad():
            tln.weight.copy_(torch.from_numpy(host(ln.weight)))
            tln.bias.copy_(torch.from_numpy(host(ln.bias)))
    tx = torch.from_numpy(host(x)).requires_grad_()
    ty = tln(tx)
    ty.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(host(y), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    theirs = [tx.grad] + ([tln.weight.grad, tln.bias.grad] if affine else [])
    for mine, t in zip(grads, theirs):
        np.testing.assert_allclose(mine, t.numpy(), rtol=1e-9, atol=1e-11)


def test_layer_norm_matches_numpy_formula():
    x = np.random.randn(3, 5)
    w, b = np.random.randn(5), np.random.randn(5)
    y = F.layer_norm(t64(x), 5, t64(w), t64(b), eps=1e-3)
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(host(y), xhat * w + b, rtol=1e-12)


def test_layer_norm_gradcheck():
    x = t64(np.random.randn(3, 2, 4), requires_grad=True)
    w = t64(np.random.randn(4), requires_grad=True)
    b = t64(np.random.randn(4), requires_grad=True)
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (4,), w, b), (x, w, b))
    assert gradcheck(lambda x: F.layer_norm(x, (2, 4)), (x,))


def test_layer_norm_bad_shapes():
    with pytest.raises(ValueError, match="does not match the trailing axes"):
        nn.LayerNorm(5)(gpugrad.ones(2, 4))
    with pytest.raises(ValueError, match="weight has shape"):
        F.layer_norm(gpugrad.ones(2, 4), 4, gpugrad.ones(3))


def test_embedding_matches_torch(torch):
    emb = nn.Embedding(6, 3, device=CPU).double()
    ids = np.array([[0, 2, 2], [5, 2, 0]])
    y = emb(gpugrad.tensor(ids))
    assert y.shape == (2, 3, 3) and y.grad_fn.name() == "EmbeddingBackward0"
    gy, (gw,) = _grads(y, emb.weight)
    te = torch.nn.Embedding(6, 3).double()
    with torch.no_grad():
        te.weight.copy_(torch.from_numpy(host(emb.weight)))
    ty = te(torch.from_numpy(ids))
    ty.backward(torch.from_numpy(gy))
    np.testing.assert_array_equal(host(y), ty.detach().numpy())
    np.testing.assert_allclose(gw, te.weight.grad.numpy(), rtol=1e-12)


def test_embedding_scatter_adds_repeated_ids():
    w = t64(np.arange(12.0).reshape(4, 3), requires_grad=True)
    ids = [3, 1, 3, 3]
    y = F.embedding(ids, w)
    np.testing.assert_array_equal(host(y), np.arange(12.0).reshape(4, 3)[ids])
    gy = np.random.randn(4, 3)
    y.backward(t64(gy))
    want = np.zeros((4, 3))
    want[1] = gy[1]
    want[3] = gy[0] + gy[2] + gy[3]  # repeated ids add up
    np.testing.assert_allclose(host(w.grad), want, rtol=1e-12)


def test_embedding_gradcheck_and_padding():
    w = t64(np.random.randn(5, 2), requires_grad=True)
    ids = gpugrad.tensor([[4, 0], [0, 1]])
    assert gradcheck(lambda w: F.embedding(ids, w), (w,))
    emb = nn.Embedding(5, 2, padding_idx=-1, device=CPU)
    assert emb.padding_idx == 4 and not host(emb.weight)[4].any()
    emb(gpugrad.tensor([4, 4, 1])).sum().backward()
    np.testing.assert_array_equal(host(emb.weight.grad)[4], 0.0)  # the padding row learns nothing
    np.testing.assert_array_equal(host(emb.weight.grad)[1], 1.0)


def test_embedding_rejects_bad_ids():
    emb = nn.Embedding(4, 2, device=CPU)
    with pytest.raises(IndexError, match=r"id 4 is out of range for a table of 4 rows \(valid: 0..3\)"):
        emb(gpugrad.tensor([0, 4]))
    with pytest.raises(IndexError, match="id -1 is out of range"):
        emb(gpugrad.tensor([-1]))
    with pytest.raises(TypeError, match="ids must be integers"):
        emb(gpugrad.tensor([1.0]))


def test_activation_layers_match_functional():
    x = t64(np.random.randn(4, 5))
    a = host(x)
    np.testing.assert_allclose(host(nn.ReLU()(x)), np.maximum(a, 0))
    np.testing.assert_allclose(host(nn.Tanh()(x)), np.tanh(a), rtol=1e-12)
    np.testing.assert_allclose(host(nn.Sigmoid()(x)), 1 / (1 + np.exp(-a)), rtol=1e-12)
    gelu = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
    np.testing.assert_allclose(host(nn.GELU("tanh")(x)), gelu, rtol=1e-12)
    exact = 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))  # torch's default, approximate='none'
    np.testing.assert_allclose(host(nn.GELU()(x)), exact, rtol=1e-14)
    with pytest.raises(RuntimeError, match="none or tanh"):
        nn.GELU("fast")(x)
    assert nn.Identity(3, k=1)(x) is x
    assert nn.Flatten()(gpugrad.ones(2, 3, 4)).shape == (2, 12)
    assert nn.Flatten(0, 1)(gpugrad.ones(2, 3, 4)).shape == (6, 4)


def test_losses_match_numpy():
    logits = np.random.randn(6, 4)
    target = np.array([0, 3, 1, 1, 2, 0])
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -logp[np.arange(6), target]
    for red, want in (("mean", nll.mean()), ("sum", nll.sum()), ("none", nll)):
        got = nn.CrossEntropyLoss(reduction=red)(t64(logits), gpugrad.tensor(target))
        np.testing.assert_allclose(host(got), want, rtol=1e-12)
    a, b = np.random.randn(3, 2), np.random.randn(3, 2)
    np.testing.assert_allclose(host(nn.MSELoss()(t64(a), t64(b))), ((a - b) ** 2).mean(), rtol=1e-12)
    np.testing.assert_allclose(host(nn.MSELoss(reduction="sum")(t64(a), t64(b))), ((a - b) ** 2).sum(), rtol=1e-12)
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):  # as torch: when called
        nn.MSELoss(reduction="avg")(t64(a), t64(b))


@pytest.mark.parametrize("act", ["relu", "gelu", "tanh", "sigmoid"])
def test_mlp_fused_path_matches_unfused(act):
    gpugrad.manual_seed(1)
    a = nn.MLP([5, 7, 6, 3], activation=act, fused=False, device=CPU).double()
    b = nn.MLP([5, 7, 6, 3], activation=act, fused=True, device=CPU).double()
    b.load_state_dict(a.state_dict())
    assert [n for n, _ in a.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    x = t64(np.random.randn(4, 5))
    ya, yb = a(x), b(x)
    np.testing.assert_allclose(host(yb), host(ya), rtol=1e-12, atol=1e-14)
    ya.sum().backward()
    yb.sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(host(pb.grad), host(pa.grad), rtol=1e-10, atol=1e-13)
    with pytest.raises(ValueError, match="activation must be one of"):
        nn.MLP([2, 2], activation="swish")


# ---- the CUDA paths of the ops, on the CPU emulator ------------------------------------------------------------------
def test_layer_norm_op_cuda_path_on_emulator():
    emu = pytest.importorskip("gpugrad.testing.cuda_emu")
    if not emu.compiler_available():
        pytest.skip("CPU emulator: no C++ compiler")
    from gpugrad.backend import kernels
    from gpugrad.ops.norm import LayerNorm

    x, w, b = np.random.randn(2, 3, 5), np.random.randn(5), np.random.randn(5)
    gy = np.random.randn(2, 3, 5)

    def run(forward, backward):
        op = LayerNorm.__new__(LayerNorm)
        op.n, op.eps, op.needs_input_grad = 5, 1e-5, (True, True, True)
        y = getattr(op, forward)(np, x, w, b)
        return (y,) + getattr(op, backward)(np, gy)

    rt = emu.EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())])
    with kernels.use_runtime(rt):
        got = run("forward_cuda", "backward_cuda")
    for g, want in zip(got, run("forward", "backward")):
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)


def test_reassigning_a_parameter_keeps_its_place():
    m = nn.Linear(2, 2)
    m.weight = nn.Parameter(gpugrad.zeros(2, 2))
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]


def test_mse_loss_rejects_unknown_reduction():
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(gpugrad.zeros(2), gpugrad.zeros(2), reduction="avg")


# ---- erf and exact GELU -------------------------------------------------------------------------------------------
def test_erf_reference_is_within_three_ulp_of_math_erf():
    from gpugrad.backend import reference

    x = np.concatenate([np.linspace(-30, 30, 60001), np.geomspace(1e-300, 6, 2000), -np.geomspace(1e-300, 6, 2000),
                        [0.0, 0.5, -0.5, 4.0, -4.0, 27.0, np.inf, -np.inf]])
    want = np.array([math.erf(v) for v in x])
    got = reference.erf_fwd(np, x)
    assert got.dtype == np.float64
    assert (np.abs(got - want) <= 3 * np.spacing(np.abs(want))).all()
    assert np.isnan(reference.erf_fwd(np, np.array([np.nan]))).all()
    got32 = reference.erf_fwd(np, x.astype(np.float32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want.astype(np.float32), rtol=4e-7, atol=1e-30)


def test_exact_gelu_of_huge_values_is_quiet():
    x = t64([1e200, -1e200, -40.0, 40.0], requires_grad=True)
    with np.errstate(all="raise"):  # no overflow warnings from x^2 in the references
        y = x.gelu()
        y.sum().backward()
    np.testing.assert_array_equal(host(y), [1e200, -0.0, -0.0, 40.0])
    np.testing.assert_array_equal(host(x.grad), [1.0, 0.0, 0.0, 1.0])


def test_mlp_gelu_is_exact_in_both_paths():
    gpugrad.manual_seed(3)
    a = nn.MLP([4, 5, 2], activation="gelu", fused=True).double()
    b = nn.MLP([4, 5, 2], activation="gelu", fused=False).double()
    b.load_state_dict(a.state_dict())
    x = t64(np.random.randn(3, 4))
    np.testing.assert_allclose(host(a(x)), host(b(x)), rtol=1e-14)
    assert a(x).grad_fn is not None


# ---- cross-entropy options on every device ---------------------------------------------------------------------------
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_options_match_torch(device, torch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    t = np.array([4, -100, 0, 2, 2, 1])
    w = rng.uniform(0.5, 2, 5).astype(np.float32)
    for kw in ({}, {"label_smoothing": 0.2}, {"reduction": "sum", "label_smoothing": 0.1}, {"reduction": "none"}):
        gx = gpugrad.tensor(x, device=device, requires_grad=True)
        y = F.cross_entropy(gx, gpugrad.tensor(t, device=device), weight=gpugrad.tensor(w, device=device), **kw)
        tx = torch.tensor(x, requires_grad=True)
        ty = torch.nn.functional.cross_entropy(tx, torch.tensor(t), weight=torch.tensor(w), **kw)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(host(y), ty.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=str(kw))
        np.testing.assert_allclose(host(gx.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=str(kw))


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_ignored_targets_are_not_out_of_range(device):
    x = gpugrad.zeros(3, 4, device=device)
    loss = F.cross_entropy(x, gpugrad.tensor([-100, 1, -100], device=device))
    assert loss.item() == pytest.approx(math.log(4))
    with pytest.raises(IndexError, match=r"cross_entropy: target ids must lie in \[0, 4\).*got min 1 and max 4"):
        # at once on the CPU, at this read on CUDA (the kernel recorded it); the ignored 7 is not named
        F.cross_entropy(x, gpugrad.tensor([7, 4, 1], device=device), ignore_index=7).item()
    with pytest.raises(IndexError, match="nll_loss: Target 5 is out of bounds"):
        F.nll_loss(x, gpugrad.tensor([0, 5, 1], device=device)).item()


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_hooks_and_clipping_on_the_device(device, torch):
    bn = nn.BatchNorm1d(3).to(device)
    x = gpugrad.tensor(np.arange(15.0, dtype=np.float32).reshape(5, 3) ** 1.5, device=device, requires_grad=True)
    seen = []
    bn.register_full_backward_hook(lambda m, gin, gout: seen.append((gin[0].device.type, gout[0].shape)))
    bn(x).pow(2).sum().backward()
    tbn = torch.nn.BatchNorm1d(3)
    tx = torch.tensor(np.arange(15.0, dtype=np.float32).reshape(5, 3) ** 1.5, requires_grad=True)
    tbn(tx).pow(2).sum().backward()
    assert seen == [(device, (5, 3))]
    np.testing.assert_allclose(host(bn.running_var), tbn.running_var.numpy(), rtol=1e-5)
    np.testing.assert_allclose(host(x.grad), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    total = nn.utils.clip_grad_norm_(bn.parameters(), 0.5)
    ttotal = torch.nn.utils.clip_grad_norm_(tbn.parameters(), 0.5)
    np.testing.assert_allclose(host(total), ttotal.numpy(), rtol=1e-5)
    np.testing.assert_allclose(host(bn.weight.grad), tbn.weight.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_backward_hook_sees_every_input_once_all_have_gradients():
    class Pair(nn.Module):
        def forward(self, a, scale, b):
            return a * scale + b.exp(), a - b

    m, seen = Pair(), []
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append(gin) or (gin[0] * 2, None, gin[2]))
    a, b = t64([1.0, 2.0], requires_grad=True), t64([0.5, -1.0], requires_grad=True)
    y, z = m(a, 3.0, b)
    (y.sum() + (z * 4).sum()).backward()
    assert len(seen) == 1 and seen[0][1] is None
    np.testing.assert_allclose(host(seen[0][0]), [7.0, 7.0])
    np.testing.assert_allclose(host(a.grad), [14.0, 14.0])  # replaced by the hook
    np.testing.assert_allclose(host(b.grad), np.exp([0.5, -1.0]) - 4)


def test_state_dict_loads_from_numpy_arrays_too():
    src, dst = nn.Linear(2, 3, device=CPU), nn.Linear(2, 3, device=CPU)
    dst.load_state_dict({k: host(v) for k, v in src.state_dict().items()})
    np.testing.assert_array_equal(host(dst.weight), host(src.weight))
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    dst.load_state_dict(sd, assign=True)
    assert dst.weight._data is sd["weight"]._data


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_sim.enabled(), reason="launches are counted on the simulated device only "
                                                 "(GPUGRAD_CUDA_SIM=1)")
def test_cross_entropy_with_every_option_is_one_launch_each_way_without_syncs():
    x = gpugrad.randn(64, 10, device="cuda", requires_grad=True)
    t = gpugrad.randint(0, 10, size=(64,), device="cuda")
    w = gpugrad.rand(10, device="cuda") + 0.5
    kw = dict(weight=w, ignore_index=3, label_smoothing=0.1)
    F.cross_entropy(x, t, **kw)  # warm-up: the device's status words exist from the first check on
    with cuda_sim.forbid_syncs("cross_entropy forward and backward"):
        with cuda_sim.trace() as fwd:
            loss = F.cross_entropy(x, t, **kw)
        with cuda_sim.trace() as bwd:
            loss.backward()
    assert [w for e, w in fwd if e == "launch"] == ["softmax_xent_fwd<float>"]
    assert [w for e, w in bwd if e == "launch"] == ["cupy.ones_like", "softmax_xent_bwd<float>"]
