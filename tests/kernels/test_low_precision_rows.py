"""The float16 and bfloat16 row kernels of reduce.cu and norm.cu (softmax, log_softmax, logsumexp, sum_rows,
layer_norm): contiguous low-precision arrays run the kernels' own ``<gg::bf16>`` / ``<gg::f16>`` instantiations
(mixed layouts and dtypes still the float32 route), their results come back in the dtypes reference.opmath gives
(y in the low dtype, layer_norm's mean and rstd in float32), what the shared table test cannot check (the float32
statistics, float32 weights beside low-precision x, a float32 lse) equals NumPy in float32 rounded once, column
sums are rounded once however many passes they take, and on the simulated CUDA device the Tensor ops agree with
torch (float32 math on the same low-precision inputs, rounded)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpugrad.backend import kernels

BF16, HALF, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
ULP = {BF16: 2.0 ** -7, HALF: 2.0 ** -10}  # dtype -> its relative rounding step (one ulp at 1)
CTYPE = {BF16: "gg::bf16", HALF: "gg::f16"}
LOW = pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bfloat16", "float16"])
# short rows (a team of lanes), a vector row (cols % 8 == 0), a scalar one, block rows, past the register cache
SHAPES = [(17, 3), (9, 64), (5, 65), (4, 264), (2, 4104)]


@pytest.fixture
def launched(emu, monkeypatch):
    """The name expressions the emulator is asked for, in order."""
    seen = []
    raw = emu.raw_kernel
    monkeypatch.setattr(emu, "raw_kernel", lambda family, name: seen.append(name) or raw(family, name))
    return seen


def _low(rng, shape, dtype, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(dtype)


def _close(got, want_f32, dtype, atol):
    """got (low dtype) against a float32 oracle rounded to it: one rounding apart at most (both round a float32 value
    that may differ in its last bits across a rounding boundary), and ``atol`` where the float32 math cancels."""
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(F32), want_f32.astype(dtype).astype(F32), rtol=ULP[dtype], atol=atol)


def _np_layer_norm(x, w, b, eps=1e-5):
    """float32 NumPy LayerNorm of the widened inputs (the oracle): y, mean, rstd."""
    x = x.astype(F32)
    mean = x.mean(axis=1, dtype=F32)
    xc = x - mean[:, None]
    rstd = (1 / np.sqrt((xc * xc).mean(axis=1, dtype=F32) + np.float32(eps))).astype(F32)
    return xc * rstd[:, None] * w.astype(F32) + b.astype(F32), mean, rstd


@LOW
def test_each_row_launcher_runs_its_low_precision_instantiation(emu, launched, dtype):
    rng = np.random.default_rng(0)
    c = CTYPE[dtype]
    x, g = _low(rng, (70, 24), dtype), _low(rng, (70, 24), dtype)
    w, b = _low(rng, 24, dtype), _low(rng, 24, dtype)
    with kernels.use_runtime(emu):
        for name in ("softmax_fwd", "log_softmax_fwd", "logsumexp_fwd"):
            getattr(kernels, name)(np, x)
        kernels.softmax_bwd(np, x, g)
        kernels.log_softmax_bwd(np, x, g)
        kernels.logsumexp_bwd(np, x, np.zeros(70, F32), np.ones(70, dtype))  # the op's float32 lse beside low x
        kernels.sum_rows(np, g)  # 70 rows: two chunks, then the float32 partials
        _, mean, rstd = kernels.layer_norm_fwd(np, x, w, b, 1e-5)
        kernels.layer_norm_bwd(np, x, w, mean, rstd, g)
    assert launched == [f"softmax_fwd<{c}>", f"log_softmax_fwd<{c}>", f"logsumexp_fwd<{c}>", f"softmax_bwd<{c}>",
                        f"log_softmax_bwd<{c}>", f"logsumexp_bwd<{c}>", f"sum_rows<{c}>", "sum_rows<float>",
                        f"layer_norm_fwd<{c}>", f"layer_norm_bwd<{c}>", f"layer_norm_bwd_wb<{c}>",
                        "sum_rows<float>", "sum_rows<float>"]


@LOW
def test_strided_or_mixed_low_precision_arrays_take_the_float32_route(emu, launched, dtype):
    rng = np.random.default_rng(1)
    x, g = _low(rng, (6, 48), dtype), _low(rng, (6, 48), dtype)
    with kernels.use_runtime(emu):
        kernels.softmax_fwd(np, x[:, ::2])  # not contiguous
        kernels.softmax_bwd(np, x, g.astype(F32))  # a float32 gy beside low-precision y
        kernels.layer_norm_bwd(np, x, None, np.zeros(6, F32), np.ones(6, F32), g.astype(F32))
        y = kernels.layer_norm_fwd(np, x.astype(F32), _low(rng, 48, dtype), None, 1e-5)[0]  # low w beside float32 x
    assert CTYPE[dtype] not in "".join(launched) and launched[:2] == ["softmax_fwd<float>", "softmax_bwd<float>"]
    assert y.dtype == F32


@LOW
def test_output_dtypes(emu, dtype):
    rng = np.random.default_rng(2)
    x, g = _low(rng, (5, 40), dtype), _low(rng, (5, 40), dtype)
    w = _low(rng, 40, dtype)
    with kernels.use_runtime(emu):
        assert kernels.softmax_fwd(np, x).dtype == dtype
        assert kernels.log_softmax_bwd(np, x, g).dtype == dtype
        assert kernels.logsumexp_fwd(np, x).dtype == dtype  # as reference.opmath: rounded (the op passes float32 x)
        assert kernels.logsumexp_bwd(np, x, np.zeros(5, F32), g[:, 0]).dtype == dtype
        assert kernels.sum_rows(np, g).dtype == dtype
        y, mean, rstd = kernels.layer_norm_fwd(np, x, w, None, 1e-5)
        assert (y.dtype, mean.dtype, rstd.dtype) == (dtype, F32, F32)
        assert [a.dtype for a in kernels.layer_norm_bwd(np, x, w, mean, rstd, g)] == [dtype] * 3
        assert [a.dtype for a in kernels.layer_norm_bwd(np, x[:0], w, mean[:0], rstd[:0], g[:0])] == [dtype] * 3


@LOW
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layer_norm_statistics_are_float32_and_float32_weights_are_read_exactly(emu, dtype, shape):
    """mean and rstd (float32, which the shared table test does not compare) and y with float32 w, b beside low x,
    against NumPy in float32. The statistics are sums of a row in another order: float32 rounding apart (rtol 1e-5,
    ~100 float32 ulps for rows of ~4000)."""
    rng = np.random.default_rng(3)
    x = _low(rng, shape, dtype, 2.0, 1.5)
    w, b = rng.standard_normal(shape[1]).astype(F32), rng.standard_normal(shape[1]).astype(F32)
    with kernels.use_runtime(emu):
        y, mean, rstd = kernels.layer_norm_fwd(np, x, w, b, 1e-5)
    want_y, want_mean, want_rstd = _np_layer_norm(x, w, b)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-5)
    _close(y, want_y, dtype, atol=1e-5)  # y = xhat * w + b cancels to ~0 in places: float32 ulps of |b| ~ 1


@LOW
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layer_norm_backward_with_float32_weight_and_statistics(emu, dtype, shape):
    """gx, gw, gb for low x and gy beside float32 w, mean, rstd, against NumPy float32 of the same values, rounded.
    atol: gx = rstd (g - mean(g) - xhat mean(g xhat)) cancels between terms of size ~|g|; gw, gb are sums over rows
    whose float32 rounding (~1e-7 per term) is absolute."""
    rng = np.random.default_rng(4)
    x, gy = _low(rng, shape, dtype, 2.0, 1.5), _low(rng, shape, dtype)
    w = rng.standard_normal(shape[1]).astype(F32)
    _, mean, rstd = _np_layer_norm(x, w, np.zeros_like(w))
    with kernels.use_runtime(emu):
        gx, gw, gb = kernels.layer_norm_bwd(np, x, w, mean, rstd, gy)
    x32, g32 = x.astype(F32), gy.astype(F32)
    xhat = (x32 - mean[:, None]) * rstd[:, None]
    g = g32 * w
    n = np.float32(shape[1])
    want_gx = rstd[:, None] * (g - g.sum(1, keepdims=True) / n - xhat * (g * xhat).sum(1, keepdims=True) / n)
    _close(gx, want_gx, dtype, atol=1e-5)
    _close(gw, (g32 * xhat).sum(0), dtype, atol=1e-5 * shape[0])
    _close(gb, g32.sum(0), dtype, atol=1e-5 * shape[0])


@LOW
def test_logsumexp_backward_reads_the_float32_lse(emu, dtype):
    """The op's saved lse is float32 (ops/softmax.py): gx = glse * exp(x - lse) with that lse, not a rounded one.
    Rows near 100: a bfloat16 lse there would be off by up to 0.25, exp(0.25) = 28% in every gx."""
    rng = np.random.default_rng(5)
    x = _low(rng, (9, 40), dtype, 1.0, 100.0)
    x32 = x.astype(F32)
    m = x32.max(1, keepdims=True)
    lse = (m + np.log(np.exp(x32 - m).sum(1, keepdims=True, dtype=F32)))[:, 0].astype(F32)
    glse = _low(rng, 9, dtype)
    with kernels.use_runtime(emu):
        gx = kernels.logsumexp_bwd(np, x, lse, glse)
    _close(gx, glse.astype(F32)[:, None] * np.exp(x32 - lse[:, None]), dtype, atol=1e-6)


@LOW
@pytest.mark.parametrize("cols", [40, 65])
def test_column_sums_are_rounded_once_after_every_pass(emu, dtype, cols):
    """Integers 1..255 are exact in both dtypes and their float32 sums are exact too, so the one correct result is
    the exact column sum rounded once to the low dtype, bit for bit; 1000 (bf16) / 300 (f16, whose max is 65504) rows
    are several row chunks whose partial sums (~8000) are not representable in the low dtype: a partial rounded
    before the next pass would move the result. Also layer_norm_bwd's gb (= the column sums of gy)."""
    rows = 1000 if dtype == BF16 else 300  # rounding the partials instead moves 4 or 5 of the 40 columns
    g = np.random.default_rng(6).integers(1, 256, (rows, cols)).astype(dtype)
    want = g.astype(np.int64).sum(0).astype(F32).astype(dtype)
    x = _low(np.random.default_rng(7), (rows, cols), dtype)
    with kernels.use_runtime(emu):
        got = kernels.sum_rows(np, g)
        gb = kernels.layer_norm_bwd(np, x, None, np.zeros(rows, F32), np.ones(rows, F32), g)[2]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(gb.view(np.uint16), want.view(np.uint16))


# ---- end to end: the Tensor API on the simulated CUDA device against torch ------------------------------------
_TORCH_DTYPE = {BF16: "bfloat16", HALF: "float16"}


def _cuda(a, requires_grad=True):
    import gpugrad

    return gpugrad.tensor(a, device="cuda", requires_grad=requires_grad)


def _host(t):
    return t.detach().cpu().numpy()


@pytest.fixture
def cuda_launched(monkeypatch):
    """The raw kernels the CUDA runtime launches (on the simulated device: the emulator)."""
    rt = kernels.runtime()
    seen = []
    raw = rt.raw_kernel
    monkeypatch.setattr(rt, "raw_kernel", lambda family, name: seen.append(name) or raw(family, name))
    return seen


@pytest.mark.gpu
@LOW
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(6, 48), (3, 300)], ids=["team-vector", "block-scalar"])
def test_softmax_family_on_cuda_agrees_with_torch(torch, cuda_launched, dtype, op, shape):
    """Forward: torch in float32 on the same low-precision x, rounded. Backward: torch's own backward kernel in
    float32 given the same saved (low-precision) output and gy, rounded, as gpugrad's backward reads the saved y.
    atol: gy - sum(gy * y) cancels (float32 rounding of sums of ~|gy|)."""
    rng = np.random.default_rng(8)
    x, gy = _low(rng, shape, dtype, 3.0), _low(rng, shape, dtype)
    xt = _cuda(x)
    y = getattr(xt, op)(-1)
    y.backward(_cuda(gy, False))
    got_y, got_gx = _host(y), _host(xt.grad)
    assert f"{op}_fwd<{CTYPE[dtype]}>" in cuda_launched and f"{op}_bwd<{CTYPE[dtype]}>" in cuda_launched
    x32 = torch.from_numpy(x.astype(F32))
    want_y = getattr(torch, op)(x32, -1).numpy()
    _close(got_y, want_y, dtype, atol=1e-6)
    backward = torch._softmax_backward_data if op == "softmax" else torch._log_softmax_backward_data
    want_gx = backward(torch.from_numpy(gy.astype(F32)), torch.from_numpy(got_y.astype(F32)), -1, torch.float32)
    _close(got_gx, want_gx.numpy(), dtype, atol=1e-5)


@pytest.mark.gpu
@LOW
@pytest.mark.parametrize("shape", [(2, 3, 64), (4, 300)], ids=["team-vector", "block-scalar"])
def test_layer_norm_on_cuda_agrees_with_torch(torch, cuda_launched, dtype, shape):
    """Forward and backward against torch's float32 LayerNorm and autograd on the same low-precision x, w, b and gy,
    rounded: gpugrad keeps mean and rstd in float32, so its backward is that float32 math rounded once.
    atol as test_layer_norm_backward_with_float32_weight_and_statistics (cancellation in gx, sums in gw, gb)."""
    import gpugrad.nn.functional as F

    rng = np.random.default_rng(9)
    n, rows = shape[-1], int(np.prod(shape[:-1]))
    x, gy = _low(rng, shape, dtype, 2.0, 1.5), _low(rng, shape, dtype)
    w, b = _low(rng, n, dtype), _low(rng, n, dtype)
    xt, wt, bt = _cuda(x), _cuda(w), _cuda(b)
    y = F.layer_norm(xt, (n,), wt, bt)
    y.backward(_cuda(gy, False))
    c = CTYPE[dtype]
    assert {f"layer_norm_fwd<{c}>", f"layer_norm_bwd<{c}>", f"layer_norm_bwd_wb<{c}>"} <= set(cuda_launched)
    leaves = [torch.from_numpy(a.astype(F32)).requires_grad_() for a in (x, w, b)]
    want_y = torch.nn.functional.layer_norm(leaves[0], (n,), leaves[1], leaves[2], 1e-5)
    want_y.backward(torch.from_numpy(gy.astype(F32)))
    _close(_host(y), want_y.detach().numpy(), dtype, atol=1e-5)
    _close(_host(xt.grad), leaves[0].grad.numpy(), dtype, atol=1e-5)
    _close(_host(wt.grad), leaves[1].grad.numpy(), dtype, atol=1e-5 * rows)
    _close(_host(bt.grad), leaves[2].grad.numpy(), dtype, atol=1e-5 * rows)
