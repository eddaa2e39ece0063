"""Regression tests against torch for op bugs the differential fuzzer found (tests/fuzz/test_fuzz.py), each once an entry of
tests/fuzz/known_differences.py: std's gradient at 0, logsumexp of +inf (ops and kernels), log_softmax precision
(ops and kernels), contiguous softmax results, NaN in max/min and maximum/minimum backward, float16 logsumexp
gradients, empty normalized / feature axes in layer_norm and linear, gelu's overflow warnings, cat of 1-D empty
tensors only, and x[mask] = a one-element tensor of another dtype.

The op tests run on the CPU and (pytest -m gpu) on CUDA; the kernel tests call the launchers on the CPU emulator.
RuntimeWarnings are errors (pyproject.toml), so every test also proves gpugrad computes these cases quietly.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.backend import kernels, reference

try:
    from gpugrad.testing.cuda_emu import EmuRuntime, compiler_available
except ImportError as e:  # the emulator is optional: its tests skip
    EmuRuntime, _EMU_MISSING = None, f"CPU emulator not importable: {e}"
else:
    _EMU_MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
inf, nan = np.inf, np.nan


def host(t):
    return t.detach().cpu().numpy()


def close(got, want, rtol=1e-7, atol=1e-12):
    """Same values (NaN where torch is NaN, infinities of the same sign), shape and dtype."""
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def both(torch, a, device="cpu", dtype=np.float64):
    """The same leaf in gpugrad (on ``device``) and in torch."""
    a = np.asarray(a, dtype)
    return gpugrad.tensor(a, device=device, requires_grad=True), torch.tensor(a, requires_grad=True)


def backward_both(y, ty, gy=None):
    """Backward in both libraries with the same upstream gradient (ones, or ``gy`` broadcast), in y's dtype."""
    gy = np.ones(ty.shape) if gy is None else np.broadcast_to(np.asarray(gy, np.float64), ty.shape)
    ty.backward(ty.new_tensor(gy))
    y.backward(gpugrad.tensor(gy.astype(host(y).dtype), device=y.device))


# ---- 1. std's gradient where all values are equal --------------------------------------------------------------------
# torch's std_backward: var_backward(gy / (2 std) masked to 0 where std == 0): a constant row has a 0 gradient, whatever
# gy (NaN too); std NaN or inf (n <= correction) keeps var's NaN gradient.
STD_CASES = [
    ([1.0, 1.0, 1.0], {}), ([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]], {"axis": 1}),
    ([[2.0, 2.0], [2.0, 2.0]], {"axis": 0, "keepdims": True}), ([3.0, 3.0], {"correction": 0}),
    ([5.0], {}), (5.0, {}), ([[1.0], [2.0]], {"axis": 1}), ([1.0, 1.0], {"correction": 2}),
    ([1.0, 2.0, 4.0], {}),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("gy", [None, nan, inf])
@pytest.mark.parametrize("a, kw", STD_CASES, ids=[f"{np.shape(a)}-{kw}" for a, kw in STD_CASES])
def test_std_gradient_matches_torch(torch, a, kw, gy, dtype):
    x, tx = both(torch, a, dtype=dtype)
    y = x.std(**kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "degrees of freedom is <= 0"
        ty = tx.std(kw.get("axis"), keepdim=kw.get("keepdims", False), correction=kw.get("correction", 1))
    assert y.grad_fn.name() == type(ty.grad_fn).__name__ == "StdBackward0"
    close(host(y), ty)
    backward_both(y, ty, gy)
    close(host(x.grad), tx.grad)


def test_std_second_order_matches_torch(torch):
    x, tx = both(torch, [[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]])
    (g,) = gpugrad.autograd.grad((x.std(1) ** 3).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((tx.std(1) ** 3).sum(), tx, create_graph=True)
    (g * g).sum().backward()
    (tg * tg).sum().backward()
    close(host(g), tg)
    close(host(x.grad), tx.grad)


# ---- 2. logsumexp of +inf; 3. log_softmax precision; 4. contiguous results: the ops ----------------------------------
# torch's logsumexp shifts by 0 where the row max is infinite (+inf rows: inf), its softmax family by the max
# (+inf rows: NaN); log_softmax is (x - max) - log(sum(exp(x - max))), never x - logsumexp(x).
INF_ROWS = np.array([[inf, 1.0, 0.5], [inf, inf, 0.0], [inf, -inf, 2.0], [inf, nan, 0.0], [-inf, -inf, -inf],
                     [-inf, 1.0, 2.0], [nan, 1.0, 2.0], [0.5, 1.0, -2.0]])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("axis", [1, 0])
def test_softmax_family_of_infinite_rows_matches_torch(torch, device, dtype, axis):
    a = INF_ROWS if axis == 1 else INF_ROWS.T.copy()
    for name in ("logsumexp", "softmax", "log_softmax"):
        x, tx = both(torch, a, device, dtype)
        y, ty = getattr(x, name)(axis), getattr(tx, name)(axis)
        close(host(y), ty, rtol=1e-6)
        backward_both(y, ty, np.arange(ty.numel()).reshape(ty.shape) % 3 - 1.0)
        close(host(x.grad), tx.grad, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, big", [(np.float32, 1e8), (np.float32, 3e4), (np.float64, 1e17), (np.float64, 1e10)])
def test_log_softmax_of_large_logits_matches_torch(torch, device, dtype, big):
    rng = np.random.default_rng(0)
    # big plus a few ulps of big: exact in dtype, so both libraries see the same logits
    a = (dtype(big) + np.spacing(dtype(big)) * rng.integers(-2, 3, (4, 7))).astype(dtype)
    t = np.array([0, 3, 6, 2])
    x, tx = both(torch, a, device, dtype)
    close(host(x.log_softmax(1)), tx.log_softmax(1), rtol=1e-6, atol=1e-6)
    close(host(x.log_softmax(0)), tx.log_softmax(0), rtol=1e-6, atol=1e-6)
    close(host(F.token_logprob(x, gpugrad.tensor(t, device=device))),
          tx.log_softmax(1)[np.arange(4), t], rtol=1e-6, atol=1e-6)
    for reduction in ("none", "mean"):
        close(host(F.cross_entropy(x, gpugrad.tensor(t, device=device), reduction=reduction)),
              torch.nn.functional.cross_entropy(tx, torch.tensor(t), reduction=reduction), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_results_are_contiguous_like_torch(torch, device, name, axis):
    a = np.random.default_rng(1).standard_normal((2, 3, 4))
    x, tx = both(torch, a, device)
    y, ty = getattr(x, name)(axis), getattr(tx, name)(axis)
    assert ty.is_contiguous() and host(y).flags.c_contiguous
    v, tv = y.view(4, 6), ty.view(4, 6)  # raised in gpugrad over a non-last axis
    close(host(v), tv)
    backward_both(v * v, tv * tv)
    close(host(x.grad), tx.grad)
    assert host(x.grad).flags.c_contiguous


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_output_changed_in_place_is_caught(name):
    x = gpugrad.tensor(np.random.default_rng(2).standard_normal((3, 4)), requires_grad=True)
    y = getattr(x, name)(0)  # torch saves the output: changing it in place fails at backward there too
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_over_a_middle_axis_double_backward_matches_torch(torch, name):
    x, tx = both(torch, np.random.default_rng(3).standard_normal((2, 3, 4)))
    (g,) = gpugrad.autograd.grad((getattr(x, name)(1) ** 2).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((getattr(tx, name)(1) ** 2).sum(), tx, create_graph=True)
    (g * g).sum().backward()
    (tg * tg).sum().backward()
    close(host(x.grad), tx.grad, atol=1e-10)


# ---- 2. and 3. in the kernels, on the CPU emulator -------------------------------------------------------------------
@pytest.fixture(scope="module", params=("forward", "warp-reverse"))
def emu(request):
    if _EMU_MISSING:
        pytest.skip(_EMU_MISSING)
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())],
                      schedule=request.param, seed=0)


def _inf_rows(dtype, cols):
    """Rows that put +inf in one lane, in lanes of different warps / chunks (the merges meet inf with inf), with
    NaN and with -inf; the last two rows are finite and all -inf."""
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((8, cols)).astype(dtype)
    x[0, 0] = inf
    x[1, -1] = inf
    x[2, [0, cols // 2, -1]] = inf
    x[3, 0], x[3, cols // 2] = inf, nan
    x[4, :] = -inf
    x[4, cols // 3] = inf
    x[5, 1] = inf
    x[7, :] = -inf
    return x


# cols: a team of 1 lane, teams of several lanes, a block of warps, rows of several chunks (common.cuh RowTeam)
EMU_COLS = (3, 37, 300, 4100)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", EMU_COLS)
def test_kernels_on_rows_holding_inf_match_torch(torch, emu, dtype, cols):
    x = _inf_rows(dtype, cols)
    t = np.array([0, 1, 2, 0, 5, 1, 2, 0]) % cols
    with kernels.use_runtime(emu):
        lse = kernels.logsumexp_fwd(np, x)
        y = kernels.softmax_fwd(np, x)
        ly = kernels.log_softmax_fwd(np, x)
        loss, _, _ = kernels.softmax_xent_fwd(np, x, t)
        logp, _ = kernels.token_logprob_fwd(np, x, t)
    tx = torch.tensor(x)
    close(lse, torch.logsumexp(tx, 1), rtol=1e-5)
    assert np.isposinf(lse[:3]).all() and np.isnan(lse[3]) and np.isposinf(lse[4]) and np.isneginf(lse[7])
    close(y, torch.softmax(tx, 1), rtol=1e-5, atol=1e-7)
    close(ly, torch.log_softmax(tx, 1), rtol=1e-5, atol=1e-6)
    close(loss, torch.nn.functional.cross_entropy(tx, torch.tensor(t), reduction="none"), rtol=1e-5, atol=1e-6)
    close(logp, torch.log_softmax(tx, 1)[np.arange(8), t], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype, big", [(np.float32, 1e8), (np.float64, 1e17)])
@pytest.mark.parametrize("cols", EMU_COLS)
def test_kernels_log_softmax_of_large_logits_match_torch(torch, emu, dtype, big, cols):
    rng = np.random.default_rng(cols)
    x = (dtype(big) + np.spacing(dtype(big)) * rng.integers(-2, 3, (3, cols))).astype(dtype)
    t = np.array([0, cols - 1, cols // 2])
    with kernels.use_runtime(emu):
        ly = kernels.log_softmax_fwd(np, x)
        loss, _, _ = kernels.softmax_xent_fwd(np, x, t, "none")
        logp, _ = kernels.token_logprob_fwd(np, x, t)
    tx = torch.tensor(x)
    want = torch.log_softmax(tx, 1)
    close(ly, want, rtol=1e-5, atol=1e-5)  # x - lse: off by up to an ulp of big (8 for 1e8 in float32)
    close(loss, -want[np.arange(3), t], rtol=1e-5, atol=1e-5)
    close(logp, want[np.arange(3), t], rtol=1e-5, atol=1e-5)


# ---- 5. NaN in max/min and maximum/minimum backward ------------------------------------------------------------------
# torch's amax/amin VJP is (gy / count) * mask: a NaN (or inf) gy spreads NaN over the row, a row whose max is NaN
# (count 0) is NaN. maximum/minimum: gy to each side but the loser (masked_fill), so with a NaN both get gy.
AMAX_CASES = [([1.0, 2.0], None, nan), ([[1.0, 2.0], [3.0, 3.0]], 1, nan), ([[1.0, 2.0]], 1, inf),
              ([1.0, nan], None, 1.0), ([nan, nan], None, 1.0), ([[1.0, nan], [3.0, 3.0]], 0, 1.0),
              ([[2.0, 2.0, 1.0]], 1, 1.0)]


@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize("a, axis, gy", AMAX_CASES)
def test_amax_amin_nan_gradients_match_torch(torch, name, a, axis, gy):
    x, tx = both(torch, a)
    y = getattr(x, name)() if axis is None else getattr(x, name)(axis)
    ty = getattr(tx, name)() if axis is None else getattr(tx, name)(axis)
    backward_both(y, ty, gy)
    close(host(x.grad), tx.grad)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.parametrize("gy", [1.0, nan])
def test_maximum_minimum_nan_gradients_match_torch(torch, name, gy):
    a = np.array([1.0, nan, nan, 1.0, 2.0, 1.0])
    b = np.array([nan, 1.0, nan, 1.0, 1.0, 2.0])
    (x, tx), (w, tw) = both(torch, a), both(torch, b)
    backward_both(getattr(x, name)(w), getattr(tx, name)(tw), gy)
    close(host(x.grad), tx.grad)
    close(host(w.grad), tw.grad)


# ---- 6. float16 logsumexp: the gradient from the float32 lse ---------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_float16_logsumexp_gradient_reads_a_float32_lse(torch, device):
    """Rows near -1000, where float16's ulp is 0.5: exp(x - lse) from the float16-rounded output is off by up to
    e^0.25 (torch's CPU float16 VJP reads its rounded output and is); gpugrad's gradient is the float32 one, rounded."""
    a = (np.random.default_rng(4).standard_normal((3, 6)) - 1000).astype(np.float16)
    x = gpugrad.tensor(a, device=device, requires_grad=True)
    y = x.logsumexp(1)
    y.backward(gpugrad.tensor(np.ones(3, np.float16), device=device))
    t64 = torch.tensor(a.astype(np.float64), requires_grad=True)
    torch.logsumexp(t64, 1).sum().backward()
    assert host(y).dtype == host(x.grad).dtype == np.float16
    np.testing.assert_allclose(host(y), t64.logsumexp(1).detach().numpy().astype(np.float16), rtol=1e-3)
    np.testing.assert_allclose(host(x.grad), t64.grad.numpy(), rtol=2e-3, atol=1e-4)


# ---- 7. empty normalized / feature axes ------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, ns, affine", [((3, 0), (0,), False), ((3, 0), (0,), True),
                                               ((2, 3, 0), (3, 0), True), ((0, 3), (3,), True)])
def test_layer_norm_of_an_empty_axis_matches_torch(torch, device, shape, ns, affine):
    x, tx = both(torch, np.ones(shape), device)
    (w, tw), (b, tb) = (both(torch, np.ones(ns), device) for _ in range(2)) if affine else ((None, None),) * 2
    y, ty = F.layer_norm(x, ns, w, b), torch.nn.functional.layer_norm(tx, ns, tw, tb)
    close(host(y), ty)
    backward_both(y, ty)
    for g, tg in ((x, tx), (w, tw), (b, tb)) if affine else ((x, tx),):
        close(host(g.grad), tg.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("xshape, wshape", [((3, 0), (2, 0)), ((2, 3, 0), (4, 0)), ((3, 2), (0, 2)),
                                            ((3, 0), (0, 0)), ((0, 2), (3, 2))])
def test_linear_with_no_features_matches_torch(torch, device, xshape, wshape):
    rng = np.random.default_rng(5)
    (x, tx), (w, tw), (b, tb) = (both(torch, rng.standard_normal(s), device)
                                 for s in (xshape, wshape, wshape[:1]))
    y, ty = F.linear(x, w, b), torch.nn.functional.linear(tx, tw, tb)
    close(host(y), ty)
    backward_both(y, ty, 2.0)
    for g, tg in ((x, tx), (w, tw), (b, tb)):
        close(host(g.grad), tg.grad)


def test_linear_with_no_in_features_double_backward_matches_torch(torch):
    (x, tx), (w, tw) = both(torch, np.ones((3, 0))), both(torch, np.ones((2, 0)))
    (b, tb) = both(torch, np.ones(2))
    (gb,) = gpugrad.autograd.grad((F.linear(x, w, b) ** 2).sum(), b, create_graph=True)
    (tgb,) = torch.autograd.grad((torch.nn.functional.linear(tx, tw, tb) ** 2).sum(), tb, create_graph=True)
    close(host(gb), tgb)


# ---- 8. gelu without overflow warnings -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, values", [(np.float64, [1e200, -1e200, 1e103, -1e103, 1e13, -3.0]),
                                          (np.float32, [3e38, -3e38, 1e20, -1e20, 1e13, -1e13, 2.5])])
def test_gelu_of_huge_values_is_quiet_and_matches_torch(torch, dtype, values):
    x, tx = both(torch, values, dtype=dtype)
    y, ty = x.gelu(approximate="tanh"), torch.nn.functional.gelu(tx, approximate="tanh")
    close(host(y), ty, rtol=1e-6)
    backward_both(y, ty)
    close(host(x.grad), tx.grad, rtol=1e-6)
    for f in (reference.gelu_fwd, lambda xp, a: reference.gelu_bwd(xp, a, np.ones_like(a))):  # the references too
        f(np, np.asarray(values, dtype))


# -- cat of 1-D empty tensors only: torch checks no dim ------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1, 5, -1, -3])
def test_cat_of_only_legacy_empty_tensors_ignores_the_dim(device, dim):
    """torch skips (0,) tensors in cat, and when every input is one it wraps no dim: cat([zeros(0)], 1) is a (0,)
    tensor (the fuzzer: gpugrad raised IndexError), in the inputs' promoted dtype, with an empty gradient."""
    a = gpugrad.zeros(0, device=device, requires_grad=True)
    out = gpugrad.cat([a, gpugrad.zeros(0, dtype=gpugrad.float64, device=device)], dim)
    assert tuple(out.shape) == (0,) and out.dtype == gpugrad.float64
    out.sum().backward()
    assert tuple(a.grad.shape) == (0,) and a.grad.dtype == gpugrad.float32
    with pytest.raises(IndexError, match="out of range"):  # a tensor of rank 1 with elements still checks it
        gpugrad.cat([a, gpugrad.zeros(2, device=device)], 1)


@pytest.mark.parametrize("device", DEVICES)
def test_cat_wraps_the_dim_before_comparing_ranks(device):
    """torch checks cat's dim against the first tensor before the ranks: cat([(0, 3), (0, 3, 2)], 2) is an
    IndexError, as in torch, not the rank mismatch's RuntimeError (the fuzzer); with a dim in range, the ranks."""
    a, b = gpugrad.zeros(0, 3, device=device), gpugrad.zeros(0, 3, 2, device=device)
    with pytest.raises(IndexError, match="out of range"):
        gpugrad.cat([a, b], 2)
    with pytest.raises(RuntimeError, match="Tensors must have same number of dimensions: got 2 and 3"):
        gpugrad.cat([a, b], 1)


# -- x[mask] = a one-element tensor of another dtype: torch casts it ---------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_masked_setitem_casts_one_value(device):
    """torch fills x[mask] = v through masked_fill when the only advanced index is one bool mask and v has one
    element, and casts v (the fuzzer: gpugrad refused a float64 0-d v for a float32 x). Other index kinds and longer
    values still refuse another dtype, as torch's index_put. The gradient reaches v in its own dtype."""
    mask = gpugrad.tensor([[True, False, True], [False, False, True]], device=device)
    for key, want in ((mask, [[2.5, 0, 2.5], [0, 0, 2.5]]), ((slice(None), mask[0]), [[2.5, 0, 2.5], [2.5, 0, 2.5]]),
                      ([True, False], [[2.5, 2.5, 2.5], [0, 0, 0]])):
        y = gpugrad.zeros(2, 3, device=device)
        y[key] = gpugrad.tensor([2.5], dtype=gpugrad.float64, device=device)
        assert y.dtype == gpugrad.float32
        np.testing.assert_array_equal(np.asarray(y.cpu()), np.array(want, np.float32))
    for key, v in (([0, 1], 2.5), (mask, [1.0, 2.0, 3.0])):
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            gpugrad.zeros(2, 3, device=device)[key] = gpugrad.tensor(v, dtype=gpugrad.float64, device=device)
    x = gpugrad.zeros(2, 3, device=device, requires_grad=True)
    v = gpugrad.tensor(2.5, dtype=gpugrad.float64, device=device, requires_grad=True)
    z = x * 1
    z[mask] = v
    (z * gpugrad.arange(6.0, device=device).reshape(2, 3)).sum().backward()
    assert v.grad.dtype == gpugrad.float64 and v.grad.item() == 7.0  # 0 + 2 + 5, the masked positions' weights
    np.testing.assert_array_equal(np.asarray(x.grad.cpu()), [[0, 1, 0], [3, 4, 0]])


def test_prod_of_a_0d_tensor_checks_the_dim():
    """A 0-d tensor takes dim 0 or -1 (torch's range for a scalar): prod(x, 1) is an IndexError (the fuzzer)."""
    x = gpugrad.tensor(2.0, requires_grad=True)
    for dim in (0, -1):
        assert gpugrad.prod(x, dim, True).item() == 2.0
    for dim in (1, -2):
        with pytest.raises(IndexError, match="out of range"):
            gpugrad.prod(x, dim, True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_cross_entropy_ignored_rows_with_nonfinite_logits_are_torchs(torch, device, reduction):
    """An ignored row's gradient is 0 * softmax(row), NaN where the row holds NaN or +inf, as torch's (the kernel and
    its reference: tests/kernels/test_kernel_emulated.py)."""
    x = np.array([[0.5, nan, -1.0], [inf, 2.0, 0.0], [0.3, -0.2, 1.0], [1.0, 2.0, -inf]], np.float32)
    t = np.array([-100, -100, -100, 1])
    grads = []
    for lib, f in ((gpugrad, F), (torch, torch.nn.functional)):
        v = lib.tensor(x, requires_grad=True, **({"device": device} if lib is gpugrad else {}))
        loss = f.cross_entropy(v, lib.tensor(t, **({"device": device} if lib is gpugrad else {})), reduction=reduction)
        loss.backward(lib.ones_like(loss) * 2)
        grads.append(np.asarray(v.grad.cpu()))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6, equal_nan=True)
