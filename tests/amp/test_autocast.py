"""gpugrad.autocast against torch.autocast: the CPU op lists executed op by op (every row of the op table, in bfloat16
and float16: output dtypes, values and float32 gradients), the CUDA lists compared as data with torch's source, the
weight-cast cache, nesting, the decorator and the state functions."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.core import autocast as ac
from tests.amp.compare import assert_matches_torch, name
from tests.op_cases import CASES, case_inputs

PARAMS = [(c, d) for c in CASES if c.torch_fn and c.shift == 0 for d in ("bfloat16", "float16")]
# where gpugrad's autocast differs from torch's CPU one on purpose (README, differences from torch)
KNOWN = {"einsum_broadcast": "torch's CPU einsum is cast only where it reaches bmm; 'ij,ij->i' with a broadcast j "
                             "becomes mul + sum there: gpugrad casts every einsum of two or more operands"}
KNOWN_OPS = {"bias_act": "gpugrad's fused bias + activation of a Linear layer runs in the low dtype, as torch's F.linear "
                         "takes its bias; the rows' torch equivalent is the unfused add + activation, which torch "
                         "leaves in float32 (test_a_fused_linear_layer_has_torchs_dtypes checks the layer)"}
TOL = {"bfloat16": 2.0 ** -5, "float16": 2.0 ** -8}  # a few ulps of each low dtype



@pytest.mark.parametrize("case,low", PARAMS, ids=[f"{c.name}-{d}" for c, d in PARAMS])
def test_cpu_autocast_matches_torch_op_by_op(case, low, torch):
    if case.name in KNOWN or case.op in KNOWN_OPS:
        pytest.skip(KNOWN.get(case.name) or KNOWN_OPS[case.op])
    arrays = case_inputs(case, case.shapes[0])
    floats = [a.dtype.kind == "f" for a in arrays]
    theirs = [torch.tensor(a).float().requires_grad_() if f else torch.tensor(a) for a, f in zip(arrays, floats)]
    try:
        with torch.autocast("cpu", dtype=getattr(torch, low)):
            ty = case.torch_fn(*theirs)
    except (RuntimeError, TypeError, NotImplementedError) as e:
        pytest.skip(f"torch's CPU autocast refuses {case.name} in {low}: {e}")
    ours = [gpugrad.tensor(a).float().requires_grad_() if f else gpugrad.tensor(a) for a, f in zip(arrays, floats)]
    with gpugrad.autocast("cpu", dtype=getattr(gpugrad, low)):
        y = case.fn(*ours)
    assert_matches_torch(torch, y, ty, ours, theirs, TOL[low], 2 * TOL[low])
    assert all(a.grad.dtype == gpugrad.float32 for a in ours if a.grad is not None)  # float32 leaves, float32 grads


def test_the_cpu_list_is_torchs_for_every_op_gpugrad_has(torch):
    """Each op gpugrad lists for the CPU runs in the dtype torch's CPU autocast gives it; each gpugrad op it does not
    list keeps its input dtype there too (checked on the row above, here on the list itself)."""
    x = torch.randn(4, 4)
    probes = {"matmul": lambda a: a @ a, "linear": lambda a: torch.nn.functional.linear(a, a),
              "mse_loss": lambda a: torch.nn.functional.mse_loss(a, a),
              "l1_loss": lambda a: torch.nn.functional.l1_loss(a, a),
              "smooth_l1_loss": lambda a: torch.nn.functional.smooth_l1_loss(a, a),
              "huber_loss": lambda a: torch.nn.functional.huber_loss(a, a),
              "kl_div": lambda a: torch.nn.functional.kl_div(a, a, reduction="batchmean"),
              "cross_entropy": lambda a: torch.nn.functional.cross_entropy(a, torch.tensor([0, 1, 2, 3])),
              "nll_loss": lambda a: torch.nn.functional.nll_loss(a, torch.tensor([0, 1, 2, 3])),
              "binary_cross_entropy_with_logits": lambda a: torch.nn.functional.binary_cross_entropy_with_logits(a, a),
              "softmax": lambda a: a.softmax(-1), "log_softmax": lambda a: a.log_softmax(-1),
              "logsumexp": lambda a: a.logsumexp(-1), "exp": lambda a: a.exp(), "sum": lambda a: a.sum(),
              "layer_norm": lambda a: torch.nn.functional.layer_norm(a, (4,))}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, f in probes.items():
            # float32 in, bfloat16 out: the low list; bfloat16 in, float32 out: the fp32 list; else unlisted
            got = ac.LOW if f(x).dtype == torch.bfloat16 else ac.FP32 if f(x.bfloat16()).dtype == torch.float32 \
                else None
            assert ac.POLICIES["cpu"].get(name) == got, name


# torch's CUDA lists, read from aten/src/ATen/autocast_mode.h (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
# AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE) and autocast_mode.cpp (binary_cross_entropy banned): the names
# gpugrad has an op or composite for. Not executable here (torch 2.13 CPU has no CUDA autocast).
TORCH_CUDA = {
    "lower_precision_fp": {"matmul", "linear", "einsum", "mm", "bmm", "mv", "addmm", "baddbmm", "addbmm"},
    "fp32": {"exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh", "cosh", "tan", "acos",
             "asin", "pow", "softplus", "layer_norm", "norm", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
             "huber_loss", "kl_div", "binary_cross_entropy_with_logits", "logsumexp", "softmax", "log_softmax",
             "cumsum", "cumprod", "sum", "prod"},
    "promote": {"dot", "scatter_add", "cross", "atan2", "addcmul", "addcdiv"},
}


def test_the_cuda_list_is_torchs_as_data():
    for policy, names in TORCH_CUDA.items():
        for n in names:
            assert ac.POLICIES["cuda"].get(n) == policy, n
    assert ac.POLICIES["cuda"]["binary_cross_entropy"] == ac.BANNED
    # the CPU and CUDA lists differ where torch's do: softmax stays in the input dtype on the CPU
    assert "softmax" not in ac.POLICIES["cpu"] and ac.POLICIES["cuda"]["softmax"] == ac.FP32


def test_weights_are_cast_once_per_block_and_get_float32_gradients(torch):
    w = gpugrad.randn(3, 3, requires_grad=True)
    x = gpugrad.randn(2, 3)
    with gpugrad.autocast("cpu"):
        a, b = x @ w, x @ w
        assert a.grad_fn.next_functions[1][0] is b.grad_fn.next_functions[1][0]  # the same cached cast
        with gpugrad.autocast("cpu", cache_enabled=False):
            pass
        assert len(ac.STATE.cache) == 1
    assert not ac.STATE.cache  # cleared when the outermost block exits
    (a.float().sum() + b.float().sum()).backward()
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    with torch.autocast("cpu"):
        ta, tb = torch.tensor(x.numpy()) @ tw, torch.tensor(x.numpy()) @ tw
    (ta.float().sum() + tb.float().sum()).backward()
    assert w.grad.dtype == gpugrad.float32
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-2)


def test_state_functions_nesting_and_the_decorator(torch):
    assert not gpugrad.is_autocast_enabled("cpu") and gpugrad.get_autocast_dtype("cpu") == gpugrad.bfloat16
    assert gpugrad.get_autocast_dtype("cuda") == gpugrad.float16 and torch.get_autocast_dtype("cuda") == torch.float16
    with gpugrad.autocast("cpu", dtype=gpugrad.float16):
        assert gpugrad.is_autocast_enabled("cpu") and gpugrad.get_autocast_dtype("cpu") == gpugrad.float16
        with gpugrad.autocast("cpu", enabled=False):
            assert not gpugrad.is_autocast_enabled("cpu")
            assert (gpugrad.ones(2, 2) @ gpugrad.ones(2, 2)).dtype == gpugrad.float32
        assert gpugrad.is_autocast_enabled("cpu")
    assert not gpugrad.is_autocast_enabled("cpu") and not ac.STATE.enabled

    @gpugrad.autocast("cpu")
    def f(a):
        return a @ a

    assert f(gpugrad.ones(2, 2)).dtype == gpugrad.bfloat16
    with pytest.warns(FutureWarning, match="gpugrad.amp.autocast\\('cpu'"):
        with gpugrad.cpu.amp.autocast():
            assert gpugrad.is_autocast_enabled("cpu")
    with pytest.warns(UserWarning, match="Disabling autocast"):
        with gpugrad.autocast("cpu", dtype=gpugrad.float64):
            assert not gpugrad.is_autocast_enabled("cpu")


def test_cuda_autocast_leaves_cpu_tensors_alone():
    x = gpugrad.ones(2, 2)
    with gpugrad.autocast("cuda"):
        assert (x @ x).dtype == gpugrad.float32  # as torch's CUDA autocast, which does not touch CPU tensors


def test_a_fused_linear_layer_has_torchs_dtypes(torch):
    """nn.MLP's linear + bias_act under autocast: the layer's output and its gradients have the dtypes and, within
    bfloat16's precision, the values of torch's Linear + ReLU under torch's CPU autocast."""
    gpugrad.manual_seed(0)
    mlp = gpugrad.nn.MLP([6, 8, 3])
    tl1, tl2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
    with torch.no_grad():
        for t, g in zip((tl1.weight, tl1.bias, tl2.weight, tl2.bias), mlp.parameters()):
            t.copy_(torch.tensor(g.detach().numpy()))
    x = np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32)
    with gpugrad.autocast("cpu"):
        y = mlp(gpugrad.tensor(x))  # the fused forward: linear without bias, then bias_act
    with torch.autocast("cpu"):
        th = torch.relu(tl1(torch.tensor(x)))
        ty = tl2(th)
    assert name(y.dtype) == name(ty.dtype) == "bfloat16"
    np.testing.assert_allclose(y.float().detach().numpy(), ty.float().detach().numpy(), rtol=3e-2, atol=3e-2)
    y.float().sum().backward()
    ty.float().sum().backward()
    for g, t in zip(mlp.parameters(), (tl1.weight, tl1.bias, tl2.weight, tl2.bias)):
        assert g.grad.dtype == gpugrad.float32
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=5e-2, atol=5e-2)
