"""Dtypes and layouts behave the same on every device.

- float16 and bfloat16 (issue 22): every op whose math is a kernel pair (``KernelOp``) computes float16 in float32 and returns float16
  values and gradients: the float32 result, rounded. The kernel functions do it once (``reference.opmath``), so
  the CUDA launchers and the NumPy references agree on float16 (same result, or the same error: optimizer updates
  take float16 parameters only through float32 master weights on every device).
- layouts: the launchers update non-contiguous in-place buffers (a transposed or strided parameter view) like the
  references do, writing into the caller's memory.
- flush-to-zero: CuPy compiles with -ftz=true; the float32 parity tolerance absorbs it (kernels.OPTIONS).

The "cpu" runs use the NumPy references (ops) and the CPU emulator (launchers); "cuda" runs the same checks on a
GPU when there is one.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad import nn, optim
from gpugrad.backend import kernels, reference
from gpugrad.ops import REGISTRY
from gpugrad.ops.kernel_op import KernelOp
from tests.cuda.test_parity import TOL as PARITY_TOL
from tests.kernel_cases import CASES as KERNEL_CASES, rng_for
from tests.op_cases import CASES as OP_CASES, case_inputs

try:
    from gpugrad.testing.cuda_emu import EmuRuntime, compiler_available
except ImportError as e:
    EmuRuntime, _EMU_MISSING = None, f"CPU emulator not importable: {e}"
else:
    _EMU_MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
F16 = np.float16
# float16 results vs the float32 result rounded to float16: two float16 ulps (eps = 2**-10 ~ 1e-3), as the
# gradients of ops that save their float16 output (relu, sigmoid, tanh, softmax) start from a rounded value and a
# GPU's float32 result may round to the neighbouring float16.
F16_TOL = dict(rtol=2e-3, atol=2e-3)
BF16 = gpugrad.bfloat16.dtype
# bfloat16 (issue 22) takes the same path: two bfloat16 ulps (eps = 2**-7)
LOW_TOL = {np.dtype(F16): F16_TOL, BF16: dict(rtol=1.6e-2, atol=1.6e-2)}
LOWS = [pytest.param(np.dtype(F16), id="float16"), pytest.param(BF16, id="bfloat16")]


# ---- float16 ops, through the autograd engine ---------------------------------------------------------------------
# NOTE: not the rows shifted to -1000 (op_cases.py): float16 holds them to 0.5, and logsumexp's gradient
# exp(x - lse) reads its float16-rounded output lse, off by up to exp(0.25) there (torch's too).
KERNEL_OP_CASES = [(c, i) for c in OP_CASES if issubclass(REGISTRY[c.op], KernelOp) and not c.shift
                   for i in range(len(c.shapes))]


def test_the_kernel_op_table_is_not_empty():
    ops = {c.op for c, _ in KERNEL_OP_CASES}
    assert {"relu", "gelu", "softmax", "cross_entropy", "layer_norm", "bias_act", "dropout", "token_logprob"} <= ops
    assert ops == {name for name, cls in REGISTRY.items() if issubclass(cls, KernelOp)}


def _run_op(case, arrays, dtype, device, monkeypatch, low=F16):
    monkeypatch.setenv("GPUGRAD_DEVICE", device)  # side inputs the case makes (targets, randoms) go there too
    ins = [gpugrad.tensor(a.astype(dtype), device=device, requires_grad=True) for a in arrays]
    out = case.fn(*ins)
    u = np.random.default_rng(5).standard_normal(out.shape).astype(low)  # exactly representable in both dtypes
    out.backward(gpugrad.tensor(u.astype(dtype), device=device))
    return out.detach().cpu().numpy(), [t.grad.cpu().numpy() for t in ins]


@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case,k", KERNEL_OP_CASES, ids=[f"{c.name}-{k}" for c, k in KERNEL_OP_CASES])
def test_float16_ops_are_float32_results_rounded(case, k, device, low, monkeypatch):
    arrays = case_inputs(case, case.shapes[k], low)
    want_out, want_grads = _run_op(case, arrays, np.float32, "cpu", monkeypatch, low)
    kernels.CALLS.clear()
    out, grads = _run_op(case, arrays, low, device, monkeypatch, low)
    assert out.dtype == low and all(g.dtype == low for g in grads)
    np.testing.assert_allclose(out.astype(np.float32), want_out.astype(low).astype(np.float32), **LOW_TOL[low])
    for g, w in zip(grads, want_grads):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float32), w.astype(low).astype(np.float32), **LOW_TOL[low])
    if device == "cuda":
        assert {n for n in case.gpu_kernels if kernels.CALLS[n]} == set(case.gpu_kernels)


@pytest.mark.parametrize("device", DEVICES)
def test_float16_statistics_stay_float32(device, monkeypatch):
    """layer_norm saves mean and rstd in float32 (as PyTorch): rows with a large mean and a small spread keep their
    normalized values and gradients to float16 precision."""
    monkeypatch.setenv("GPUGRAD_DEVICE", device)
    x = (100 + np.random.default_rng(0).standard_normal((4, 64)) * 0.05).astype(F16)
    t16 = gpugrad.tensor(x, device=device, requires_grad=True)
    t32 = gpugrad.tensor(x.astype(np.float32), device="cpu", requires_grad=True)
    for t in (t16, t32):
        y = nn.functional.layer_norm(t, (64,))
        (y * y * y).sum().backward()
    np.testing.assert_allclose(t16.grad.cpu().numpy(), t32.grad.numpy().astype(F16), rtol=1e-2, atol=0.5)


# ---- float16 launchers vs references --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def emu():
    if _EMU_MISSING:
        pytest.skip(_EMU_MISSING)
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())])


def _xp(device):
    from gpugrad.backend.cuda import cupy_module  # CuPy, or the simulated device under GPUGRAD_CUDA_SIM

    return np if device == "cpu" else cupy_module()


def _device_runtime(device, request):
    """(runtime or None for the default CuPy one, to_device, to_host)."""
    if device == "cpu":
        return request.getfixturevalue("emu"), (lambda a: a), (lambda a: a)
    cupy = _xp(device)
    return None, (lambda a: cupy.asarray(a) if isinstance(a, np.ndarray) else a), cupy.asnumpy


def _launch(rt, fn, *args, **kwargs):
    """fn(*args) on the emulator runtime rt, or on the default (CuPy) runtime when rt is None."""
    if rt is None:
        return fn(*args, **kwargs)
    with kernels.use_runtime(rt):
        return fn(*args, **kwargs)


def _call(name, args, kwargs, rt, xp):
    """(result, None) or (None, (exception type, message))."""
    try:
        return _launch(rt, getattr(kernels, name), xp, *args, **kwargs), None
    except (TypeError, ValueError) as e:
        return None, (type(e), str(e))


def _flat(out):
    return [a for o in out for a in _flat(o)] if isinstance(out, tuple) else [out]


_F16_KERNEL_CASES = [pytest.param(c, s, id=f"{c.id}-{'x'.join(map(str, s))}") for c in KERNEL_CASES
                     for s in c.shapes[:3]]


@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case, shape", _F16_KERNEL_CASES)
def test_float16_launchers_match_the_references(case, shape, device, low, request):
    rt, to_dev, to_host = _device_runtime(device, request)
    args, kwargs = case.make(rng_for(case, low, shape), low.type, shape)
    r_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    k_args = [to_dev(a.copy() if isinstance(a, np.ndarray) else a) for a in args]
    try:
        want, want_err = getattr(reference, case.name)(np, *r_args, **kwargs), None
    except (TypeError, ValueError) as e:
        want, want_err = None, (type(e), str(e))
    calls = kernels.CALLS[case.name]
    got, got_err = _call(case.name, k_args, kwargs, rt, _xp(device))
    assert got_err == want_err
    if want_err:
        assert case.name in reference.float16._UPDATES and "float32 master weights" in want_err[1]  # the updates
        return
    assert kernels.CALLS[case.name] == calls + 1  # the launcher ran (in float32)
    for g, w in zip(_flat(got) + [k_args[i] for i in case.inplace if args[i] is not None],
                    _flat(want) + [r_args[i] for i in case.inplace if args[i] is not None]):
        if w is None:
            assert g is None
            continue
        g = to_host(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype == bool:
            np.testing.assert_array_equal(g, w)
        else:  # both round a float32 value: one low-precision ulp apart where the float32 results straddle a rounding
            np.testing.assert_allclose(g.astype(np.float32) if g.dtype == BF16 else g,
                                       w.astype(np.float32) if w.dtype == BF16 else w, equal_nan=True,
                                       **LOW_TOL[low])


def test_float16_in_is_float32_math_out():
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(F16)
    for name in ("gelu_fwd", "sigmoid_fwd", "softmax_fwd", "log_softmax_fwd", "logsumexp_fwd"):
        f = getattr(reference, name)
        np.testing.assert_array_equal(f(np, x), f(np, x.astype(np.float32)).astype(F16), err_msg=name)
    y, mean, rstd = reference.layer_norm_fwd(np, x, None, None, 1e-5)
    assert (y.dtype, mean.dtype, rstd.dtype) == (F16, np.float32, np.float32)
    acc = np.ones(4, F16)
    assert reference.accumulate_(np, acc, np.full(4, 2**-11, F16)) is acc and acc.dtype == F16


def test_every_kernel_function_goes_through_opmath():
    for name in kernels.USES:
        for module in (kernels, reference):
            assert getattr(module, name).__wrapped__.__name__ == name, f"{module.__name__}.{name}"


# ---- optimizers update float16 parameters through float32 masters on every device -------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: optim.Adam(ps),
                                  lambda ps: optim.AdamW(ps)], ids=["SGD", "Adam", "AdamW"])
def test_optimizers_take_float16_parameters_through_float32_masters(device, make):
    """Also a parameter cast after the optimizer was built (Module.to(float16) does this); the step is the float32
    step of the widened values (tests/optim/test_master_weights.py holds it to torch), the parameter stays float16."""
    q = nn.Parameter(gpugrad.ones(3, 2, device=device))
    opt = make([q])
    q.data = q.data.astype(F16)
    q.grad = gpugrad.ones(3, 2, dtype=F16, device=device)
    opt.step()
    assert q.dtype == F16 and opt.state[q]["master_param"].dtype == np.float32
    assert (q.detach().cpu().numpy() < 1).all()
    with pytest.raises(TypeError, match=r"^SGD \(sgd_update_\): got an array of shape \(3,\) and dtype float16"):
        reference.sgd_update_(np, np.zeros(3, F16), np.zeros(3, F16), None, 0.1, 0.0, 0.0, 0.0, False, False)


# ---- non-contiguous in-place buffers ------------------------------------------------------------------------------
def _views(xp, values, kind):
    """(view, base): the same values in a strided (every other column) or transposed view of a bigger buffer."""
    if kind == "strided":
        base = xp.zeros(values.shape[:-1] + (values.shape[-1] * 2,), values.dtype)
        view = base[..., ::2]
    else:
        base = xp.zeros(values.shape[::-1], values.dtype)
        view = base.T
    view[...] = xp.asarray(values)
    assert not view.flags.c_contiguous
    return view, base


_STEPS = {
    "sgd-momentum": lambda f, xp, p, g, s, step: f.sgd_update_(xp, p, g, s[0], 0.1, 0.9, 0.1, 0.01, False, step == 1),
    "sgd-nesterov": lambda f, xp, p, g, s, step: f.sgd_update_(xp, p, g, s[0], 0.1, 0.9, 0.0, 0.0, True, step == 1),
    "adam": lambda f, xp, p, g, s, step: f.adam_update_(xp, p, g, s[0], s[1], step, 1e-2, 0.9, 0.999, 1e-8, 0.01,
                                                        False),
    "adamw": lambda f, xp, p, g, s, step: f.adam_update_(xp, p, g, s[0], s[1], step, 1e-2, 0.9, 0.999, 1e-8, 0.01,
                                                         True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["strided", "transposed"])
@pytest.mark.parametrize("opt", list(_STEPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_contiguous_parameters_update_in_place_like_the_reference(opt, kind, device, dtype, request):
    rt, to_dev, to_host = _device_runtime(device, request)
    xp = _xp(device)
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((5, 7)).astype(dtype)
    grads = [rng.standard_normal((5, 7)).astype(dtype) for _ in range(3)]
    ref_p, ref_state = p0.copy(), [np.zeros_like(p0), np.zeros_like(p0)]
    p, base = _views(xp, p0, kind)
    state = [_views(xp, np.zeros_like(p0), kind)[0], _views(xp, np.zeros_like(p0), kind)[0]]
    ptr = p.__array_interface__["data"][0] if xp is np else p.data.ptr
    for step, g in enumerate(grads, 1):
        _STEPS[opt](reference, np, ref_p, g, ref_state, step)
        _launch(rt, _STEPS[opt], kernels, xp, p, to_dev(np.asfortranarray(g)), state, step)  # g: any layout too
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(to_host(p), ref_p, **tol)
    for s, r in zip(state, ref_state):
        np.testing.assert_allclose(to_host(s), r, **tol)
    assert (p.__array_interface__["data"][0] if xp is np else p.data.ptr) == ptr  # the same array, same memory
    assert not p.flags.c_contiguous
    # ...and the update reached the base buffer through the view
    np.testing.assert_allclose(to_host(base[..., ::2] if kind == "strided" else base.T), ref_p, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, F16])
def test_accumulate_into_a_non_contiguous_buffer(device, dtype, request):
    rt, to_dev, to_host = _device_runtime(device, request)
    xp = _xp(device)
    rng = np.random.default_rng(1)
    a0, g = rng.standard_normal((4, 6)).astype(dtype), rng.standard_normal((4, 6)).astype(dtype)
    want = reference.accumulate_(np, a0.copy(), g)
    acc, base = _views(xp, a0, "transposed")
    assert _launch(rt, kernels.accumulate_, xp, acc, to_dev(g)) is acc
    np.testing.assert_allclose(to_host(base.T), want, rtol=1e-6, atol=0)


# ---- flush-to-zero ----------------------------------------------------------------------------------------------
_TINY = np.finfo(np.float32).tiny  # 2**-126: below it, float32 values are denormal


def _flush(a):
    if isinstance(a, np.ndarray) and a.dtype == np.float32:
        return np.where(np.abs(a) < _TINY, np.float32(0), a)  # signs of zeros aside, what -ftz=true does
    return a


def _with_denormals(a, rng):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.size == 0:
        return a
    a = a.copy()
    flat = a.reshape(-1)
    k = flat[::3]  # keeping each value's sign keeps the inputs valid (Adam's v >= 0)
    flat[::3] = np.copysign(rng.uniform(1, 2**23, k.shape) * 2.0**-149, k).astype(np.float32)
    return a


# float32 arguments that are control values, not data: GradScaler's scale (a power of two, never denormal), found_inf
# (0 or 1) and growth tracker
_CONTROL = {"amp_unscale_multi_": (0, 1), "amp_update_scale_": (0, 1, 2)}
_FTZ_CASES = [pytest.param(c, s, id=f"{c.id}-{'x'.join(map(str, s))}") for c in KERNEL_CASES for s in c.shapes[:3]]


@pytest.mark.parametrize("case, shape", _FTZ_CASES)
def test_flush_to_zero_stays_inside_the_float32_tolerance(case, shape):
    """GPU kernels flush float32 denormals (inputs and results) to zero, NumPy does not: with a third of every
    float32 input denormal, flushing the inputs and outputs moves no reference output by as much as the float32
    parity atol (it moves them by ~1e-38 * the op's slope), so the tolerance absorbs -ftz=true."""
    rng = rng_for(case, np.float32, shape, "ftz")
    args, kwargs = case.make(rng, np.float32, shape)
    control = _CONTROL.get(case.name, ())
    args = [a if i in control else _with_denormals(a, rng) for i, a in enumerate(args)]
    plain = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    flushed = [_flush(a).copy() if isinstance(a, np.ndarray) else a for a in args]
    want = _flat(getattr(reference, case.name)(np, *plain, **kwargs))
    got = _flat(getattr(reference, case.name)(np, *flushed, **kwargs))
    want += [plain[i] for i in case.inplace if plain[i] is not None]
    got += [flushed[i] for i in case.inplace if flushed[i] is not None]
    atol = PARITY_TOL[np.float32]["atol"]
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray) and w.dtype == np.float32:
            np.testing.assert_allclose(_flush(g), w, rtol=0, atol=atol, equal_nan=True)
