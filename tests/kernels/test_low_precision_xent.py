"""The cross-entropy and token log-probability kernels on float16 and bfloat16 logits (loss.cu's gg::f16 / gg::bf16
instantiations): the loss, the logits' gradient and the saved statistics in the dtypes reference.opmath gives them
(the loss and gradient in the logits' dtype, lse and aux float32) and equal to the NumPy float32 reference (rounded
once) under the CPU emulator; contiguous low-precision logits run their own instantiation; F.cross_entropy on the
simulated CUDA device equals torch's float32 result on the same logits, rounded."""
from __future__ import annotations

import copy

import ml_dtypes
import numpy as np
import pytest

from gpugrad.backend import kernels, reference
from tests.kernel_cases import CASES, TOLERANCE, rng_for

BF16, HALF, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
LOW = {BF16: 2.0 ** -7, HALF: 2.0 ** -10}  # dtype -> its relative rounding step (one ulp at 1)
_FORWARDS = ("softmax_xent_fwd", "token_logprob_fwd")
# NOTE: test_low_precision_kernels.py runs these rows too but wants every result in the low dtype; the forwards'
# lse and aux stay float32 (reference.opmath's _KEEP_FLOAT32), so they are checked here, each result in its dtype.
FORWARD_ROWS = [pytest.param(c, d, s, id=f"{c.id}-{d.name}-{'x'.join(map(str, s))}") for c in CASES
                if c.name in _FORWARDS for d in LOW for s in c.shapes]


def test_the_loss_launchers_run_low_precision_kernels_of_their_own():
    assert {"softmax_xent_fwd", "softmax_xent_bwd", "token_logprob_fwd", "token_logprob_bwd"} <= kernels.NATIVE_LOW


@pytest.mark.parametrize("case, dtype, shape", FORWARD_ROWS)
def test_forward_results_equal_the_float32_reference_in_their_dtypes(emu, case, dtype, shape):
    args, kwargs = case.make(rng_for(case, dtype, shape), dtype.type, shape)
    mine = copy.deepcopy(args)  # the status words are updated in place: each side gets its own
    want = getattr(reference, case.name)(np, *args, **kwargs)
    with kernels.use_runtime(emu):
        got = getattr(kernels, case.name)(np, *mine, **kwargs)
    assert [g.dtype for g in got] == [w.dtype for w in want] == [dtype] + [F32] * (len(want) - 1)
    tol = case.tolerance or TOLERANCE
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape
        # the loss: both round a float32 value, one ulp of the low dtype apart at most where the float32 values
        # differ in their last bits across a rounding boundary; lse and aux: float32 against float32
        rtol = LOW[dtype] if i == 0 else tol[F32][0]
        np.testing.assert_allclose(g.astype(F32), w.astype(F32), rtol=rtol, atol=tol[F32][1], equal_nan=True)
    for i in case.inplace:  # the status words record the same failed check (site, min and max id)
        np.testing.assert_array_equal(mine[i], args[i])


def _xent_inputs(dtype, rows=5, cols=37, seed=0):
    r = np.random.default_rng(seed)
    x = (r.standard_normal((rows, cols)) * 3).astype(dtype)
    t = r.integers(0, cols, rows)
    t[1] = -100  # ignored
    return x, t, r.uniform(0.5, 2.0, cols).astype(np.float32)


@pytest.mark.parametrize("dtype, ctype", [(BF16, "gg::bf16"), (HALF, "gg::f16")])
def test_contiguous_low_precision_logits_run_their_instantiation_in_torchs_dtypes(emu, monkeypatch, dtype, ctype):
    seen = []
    raw = emu.raw_kernel
    monkeypatch.setattr(emu, "raw_kernel", lambda family, name: seen.append(name) or raw(family, name))
    x, t, w = _xent_inputs(dtype)
    opts = dict(w=w, ignore_index=-100, smoothing=0.1)
    with kernels.use_runtime(emu):
        rows, lse, aux = kernels.softmax_xent_fwd(np, x, t, "none", **opts)
        mean, lse_m, aux_m = kernels.softmax_xent_fwd(np, x, t, "mean", **opts)
        g_rows = kernels.softmax_xent_bwd(np, x, t, lse, np.ones(5, dtype), "none", aux=aux, **opts)
        g_mean = kernels.softmax_xent_bwd(np, x, t, lse_m, np.ones((), F32), "mean", aux=aux_m, **opts)
        logp, lse_t = kernels.token_logprob_fwd(np, x, np.where(t < 0, 0, t))
        g_logp = kernels.token_logprob_bwd(np, x, np.where(t < 0, 0, t), lse_t, logp)
        assert seen == [f"softmax_xent_fwd<{ctype}>"] * 2 + [f"softmax_xent_bwd<{ctype}>"] * 2 + \
            [f"softmax_xent_fwd<{ctype}>", f"softmax_xent_bwd<{ctype}>"]
        del seen[:]
        kernels.softmax_xent_fwd(np, x[:, ::2], t, "none")  # not contiguous: cast to float32 (reference.opmath)
        assert seen == ["softmax_xent_fwd<float>"]
    assert rows.shape == (5,) and mean.shape == () and g_rows.shape == g_mean.shape == g_logp.shape == x.shape
    for a in (rows, mean, g_rows, g_mean, logp, g_logp):  # what the caller sees: the logits' dtype
        assert a.dtype == dtype
    for a in (lse, aux, lse_m, aux_m, lse_t):  # what the backward reads: float32, never rounded to the low dtype
        assert a.dtype == F32


def test_float32_logits_beside_a_bfloat16_gradient_widen_it(emu):
    """reference.opmath hands the launcher (float32 logits, a bfloat16 upstream gradient) as they are ("mixed"): the
    gradient is widened (exactly), as the cast route did, and the float kernel runs."""
    x, t, w = _xent_inputs(F32, seed=1)
    lse = reference.logsumexp_fwd(np, x)
    g = np.random.default_rng(2).standard_normal(5).astype(BF16)
    with kernels.use_runtime(emu):
        got = kernels.softmax_xent_bwd(np, x, t, lse, g, "none", w=w, ignore_index=-100)
    want = reference.softmax_xent_bwd(np, x, t, lse, g.astype(F32), "none", w=w, ignore_index=-100)
    assert got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[F32][0], atol=TOLERANCE[F32][1])


def test_a_float64_statistic_beside_low_precision_logits_is_refused(emu):
    x, t, _ = _xent_inputs(BF16)
    with kernels.use_runtime(emu), pytest.raises(TypeError, match=r"softmax_xent_bwd: .*bfloat16 logits .*float64"):
        kernels.softmax_xent_bwd(np, x, t, np.zeros(5), np.ones(5, BF16), "none")


# ---- F.cross_entropy on the simulated CUDA device against torch ----------------------------------------------
_TORCH_DTYPES = {BF16: "bfloat16", HALF: "float16"}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("options", [{}, {"weight": True, "ignore_index": 3, "label_smoothing": 0.2}],
                         ids=["plain", "weight-ignore-smoothing"])
def test_cross_entropy_on_low_precision_logits_equals_torchs_float32_result_rounded(torch, monkeypatch, dtype,
                                                                                    reduction, options):
    """torch computes on the same (widened) logits and weights in float32; gpugrad's loss and gradient are that,
    rounded once to the logits' dtype (one ulp apart at most where the float32 values differ in their last bits).
    The dtypes are torch's on the low-precision logits themselves."""
    import gpugrad
    import gpugrad.nn.functional as F
    from gpugrad.backend.kernels.runtimes import CupyRuntime

    seen = []
    raw = CupyRuntime.raw_kernel
    monkeypatch.setattr(CupyRuntime, "raw_kernel", lambda self, f, n: seen.append(n) or raw(self, f, n))
    r = np.random.default_rng(4)
    rows, cols = 9, 300
    xl = (r.standard_normal((rows, cols)) * 4).astype(dtype)
    t = r.integers(0, cols, rows)
    t[::3] = 3  # the ignored class, when ignore_index is 3
    wl = r.uniform(0.5, 2.0, cols).astype(dtype) if options.get("weight") else None
    kw = {k: v for k, v in options.items() if k != "weight"}

    x = gpugrad.tensor(xl, device="cuda", requires_grad=True)
    weight = None if wl is None else gpugrad.tensor(wl, device="cuda")
    loss = F.cross_entropy(x, gpugrad.tensor(t, device="cuda"), weight=weight, reduction=reduction, **kw)
    (loss.sum() if reduction == "none" else loss).backward()
    ctype = {BF16: "gg::bf16", HALF: "gg::f16"}[dtype]
    assert f"softmax_xent_fwd<{ctype}>" in seen and f"softmax_xent_bwd<{ctype}>" in seen

    def torch_run(torch_dtype):
        tx = torch.tensor(xl.astype(F32)).to(torch_dtype).requires_grad_()
        tw = None if wl is None else torch.tensor(wl.astype(F32)).to(torch_dtype)
        tl = torch.nn.functional.cross_entropy(tx, torch.tensor(t), weight=tw, reduction=reduction, **kw)
        (tl.sum() if reduction == "none" else tl).backward()
        return tl, tx.grad

    torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    low_loss, low_grad = torch_run(torch_dtype)  # torch's dtypes: the loss and gradient in the logits'
    assert low_loss.dtype == low_grad.dtype == torch_dtype and loss.shape == tuple(low_loss.shape)
    assert loss.dtype == x.grad.dtype == x.dtype == getattr(gpugrad, _TORCH_DTYPES[dtype])
    want_loss, want_grad = (a.detach().numpy().astype(dtype).astype(F32) for a in torch_run(torch.float32))
    np.testing.assert_allclose(loss.detach().float().cpu().numpy(), want_loss, rtol=LOW[dtype], atol=1e-6)
    np.testing.assert_allclose(x.grad.float().cpu().numpy(), want_grad, rtol=LOW[dtype], atol=1e-6)
    assert np.abs(want_grad).max() > 1e-3  # a gradient, not zeros
