"""Every CUDA kernel, run unchanged on the CPU emulator (gpugrad/testing/cuda_emu) through its real launcher and
held to backend/reference.py: float32 and float64, sizes that are not multiples of the block, contiguous and
strided inputs, under three thread schedules ("forward", "random", and "warp-reverse", which lets warps run ahead
of each other between barriers so reuse of shared scratch without a barrier shows).
Also, without the emulator: every kernel in kernels/*.cu has a launcher, a reference and a case, and launchers
reject bad inputs by name.
"""
from __future__ import annotations

import inspect
import re
import subprocess
import sys

import numpy as np
import pytest

from gpugrad.backend import kernels, reference
from kernel_cases import CASES, DTYPES, TOLERANCE, rng_for, strided

try:
    from gpugrad.testing.cuda_emu import EmuRuntime, EmulationError, compiler_available
except ImportError as e:  # the emulator is optional: these tests skip, the static ones below still run
    EmuRuntime, _EMU_MISSING = None, f"CPU emulator not importable: {e}"
else:
    _EMU_MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"

SCHEDULES = ("forward", "random", "warp-reverse")  # warp-reverse: races between warps (cuda_emu/runtime.cpp)
needs_emu = pytest.mark.skipif(_EMU_MISSING is not None, reason=_EMU_MISSING or "")


class Recorder:
    """Wraps a runtime, recording which kernels a launcher requests and the launch shapes."""

    def __init__(self, rt):
        self.rt, self.xp, self.used, self.launches = rt, rt.xp, set(), []

    def raw_kernel(self, family, name_expr):
        k = self.rt.raw_kernel(family, name_expr)
        base = name_expr.split("<")[0]

        def launch(grid, block, args, shared_mem=0):
            self.used.add(f"{family}:{base}")
            self.launches.append((base, tuple(grid), tuple(block)))
            return k(grid, block, args, shared_mem=shared_mem)

        return launch

    def elementwise(self, family, in_params, out_params, operation, name):
        k = self.rt.elementwise(family, in_params, out_params, operation, name)

        def call(*args, **kwargs):
            self.used.add(f"ew:{name.removeprefix('gg_')}")
            return k(*args, **kwargs)

        return call

    def __getattr__(self, attr):  # empty, zeros, ascontiguousarray
        return getattr(self.rt, attr)


@pytest.fixture(scope="module", params=SCHEDULES)
def emu(request):
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())],
                      schedule=request.param, seed=0)


def _instances():
    for case in CASES:
        for dtype in DTYPES:
            for i, shape in enumerate(case.shapes):
                layouts = ("C", "strided") if case.strided and i == len(case.shapes) // 2 else ("C",)
                for layout in layouts:
                    yield pytest.param(case, dtype, shape, layout,
                                       id=f"{case.id}-{np.dtype(dtype).name}-{'x'.join(map(str, shape))}-{layout}")


def _flat(out):
    return [a for o in out for a in _flat(o)] if isinstance(out, tuple) else [out]


def assert_matches(got, want, dtype, what, tolerance=None):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    rtol, atol = (tolerance or TOLERANCE)[np.dtype(dtype)]
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, f"{what}: output {k} should be None"
            continue
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: output {k} is {g.shape} {g.dtype}, expected {w.shape} {w.dtype}"
        if w.dtype == bool:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {k}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{what}: output {k}")


def run_case(rt, case, dtype, shape, layout):
    """Launch case on rt and on the reference with identical inputs; returns the Recorder."""
    args, kwargs = case.make(rng_for(case, dtype, shape), np.dtype(dtype).type, shape)
    if layout == "strided":
        args = tuple(a if i in case.inplace else strided(a) for i, a in enumerate(args))
    k_args = [a.copy() if i in case.inplace and a is not None else a for i, a in enumerate(args)]
    r_args = [a.copy() if i in case.inplace and a is not None else a for i, a in enumerate(args)]
    rec = Recorder(rt)
    calls = kernels.CALLS[case.name]
    with kernels.use_runtime(rec):
        got = getattr(kernels, case.name)(np, *k_args, **kwargs)
    want = getattr(reference, case.name)(np, *r_args, **kwargs)
    what = f"{case.id} {np.dtype(dtype).name} {shape} {layout}"
    assert kernels.CALLS[case.name] == calls + 1, f"{what}: CALLS not counted"
    assert_matches(got, want, dtype, what, case.tolerance)
    for i in (i for i in case.inplace if args[i] is not None):
        assert_matches(k_args[i], r_args[i], dtype, f"{what} in-place argument {i}", case.tolerance)
    assert rec.used <= set(kernels.USES[case.name]), f"{what}: launched {rec.used - set(kernels.USES[case.name])} undeclared in kernels.USES"
    return rec


@needs_emu
@pytest.mark.parametrize("case, dtype, shape, layout", list(_instances()))
def test_kernel_matches_reference(emu, case, dtype, shape, layout):
    run_case(emu, case, dtype, shape, layout)


@needs_emu
@pytest.mark.parametrize("dtype", DTYPES)
def test_block_1024_and_multi_chunk_rows(emu, dtype):
    """4097 columns take the largest block, and (for doubles) a second register chunk; 8200 for floats."""
    case = next(c for c in CASES if c.name == "softmax_fwd" and not c.variant)
    cols = 4097 if dtype == np.float64 else 8200
    rec = run_case(emu, case, dtype, (2, cols), "C")
    assert rec.launches == [("softmax_fwd", (2,), (1024,))]
    assert cols > 1024 * (32 // np.dtype(dtype).itemsize)  # more columns than the register cache holds


@needs_emu
def test_out_of_range_targets_read_nothing(emu):
    """Targets far outside the row are NaN rows, not reads of another row (or of unmapped memory)."""
    x = np.zeros((3, 5), np.float32)
    t = np.array([2, -(2**40), 2**40], np.int64)
    with kernels.use_runtime(emu):
        loss, lse = kernels.softmax_xent_fwd(np, x, t)
        gx = kernels.softmax_xent_bwd(np, x, t, lse, np.ones(3, np.float32))
    np.testing.assert_allclose(loss[0], np.log(5), rtol=1e-6)
    assert np.isnan(loss[1:]).all() and np.isnan(gx[1:]).all() and np.isfinite(gx[0]).all()


# ---- static checks: run without the emulator ------------------------------------------------------------------
_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
_DEVICE_OP = re.compile(r"__device__\s+__forceinline__\s+\w+\s+(\w+_(?:fwd|bwd))\s*\(")


def _scan_kernels():
    """{'family:kernel'} for every __global__ and {'name'} for every <op>_fwd/_bwd device function."""
    globals_, device_ops = set(), set()
    for path in sorted(kernels.kernel_dir().glob("*.cu")):
        text = path.read_text()
        globals_ |= {f"{path.stem}:{n}" for n in _GLOBAL.findall(text)}
        device_ops |= set(_DEVICE_OP.findall(text))
    return globals_, device_ops


def test_every_kernel_has_a_launcher_reference_and_case():
    globals_, device_ops = _scan_kernels()
    assert globals_ and device_ops, "scan found no kernels"
    used = {u for uses in kernels.USES.values() for u in uses}
    assert globals_ - used == set(), "kernels no launcher declares in kernels.USES"
    for g in globals_:
        family, name = g.split(":")
        assert name in kernels.RAW_KERNELS[family], f"{g} missing from kernels.RAW_KERNELS (NVRTC check, RawModule)"
    ew_used = {u.removeprefix("ew:") for u in used if u.startswith("ew:")}
    ops = " ".join(kernels.ELEMENTWISE[k][2] for k in ew_used)
    assert {d for d in device_ops if not re.search(rf"\b{d}\s*\(", ops)} - {"act_bwd"} == set(), \
        "device functions no ElementwiseKernel operation calls"
    assert set(kernels.ELEMENTWISE) - ew_used == set(), "ELEMENTWISE entries no launcher uses"
    cased = {c.name for c in CASES}
    for name in kernels.USES:
        assert callable(getattr(kernels, name, None)), f"kernels.{name} missing"
        assert callable(getattr(reference, name, None)), f"reference.{name} missing"
        assert name in cased, f"no case for {name} in tests/kernel_cases.py"


def test_bias_act_bwd_is_reached_through_act_bwd():
    """act_bwd is the only device function not named in an operation: bias_act_bwd calls every *_bwd through it."""
    text = (kernels.kernel_dir() / "elementwise.cu").read_text()
    body = text[text.index("act_bwd(T saved"):text.index("__global__")]
    assert all(f"{a}_bwd(" in body for a in ("relu", "gelu", "sigmoid", "tanh"))


@pytest.mark.parametrize("name", sorted(kernels.USES))
def test_launcher_signature_is_the_reference_signature(name):
    assert list(inspect.signature(getattr(kernels, name)).parameters) == \
        list(inspect.signature(getattr(reference, name)).parameters)


@pytest.mark.parametrize("name, args", [
    ("relu_fwd", (np.zeros(3, np.int32),)),
    ("gelu_bwd", (np.zeros(3, np.float32), np.zeros(3, np.float64))),
    ("softmax_fwd", (np.zeros((2, 3), np.int16),)),
    ("sgd_update_", (np.zeros(3, np.float16), np.zeros(3, np.float16), None, 0.1, 0.0, 0.0, 0.0, False, False)),
    ("sum_rows", (np.zeros((2, 3), np.complex64),)),
    ("layer_norm_fwd", (np.zeros((2, 3), np.int64), None, None, 1e-5)),
    ("adam_update_", (np.zeros(3, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float64),
                      np.zeros(3, np.float32), 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False)),
])
def test_launchers_reject_other_dtypes_by_name(name, args):
    with pytest.raises(TypeError, match=name):
        getattr(kernels, name)(np, *args)


@pytest.mark.parametrize("name, args", [
    ("softmax_fwd", (np.zeros((2, 3, 4), np.float32),)),
    ("relu_bwd", (np.zeros(3, np.float32), np.zeros(4, np.float32))),
    ("logsumexp_bwd", (np.zeros((2, 3)), np.zeros(3), np.zeros(2))),
    ("bias_act_fwd", (np.zeros((2, 3)), np.zeros(2), "relu")),
    ("bias_act_fwd", (np.zeros((2, 3)), np.zeros(3), "swish")),
    ("dropout_fwd", (np.zeros(3), 1.5, np.zeros(3))),
    ("sgd_update_", (np.zeros((3, 4)).T, np.zeros((3, 4)), None, 0.1, 0.0, 0.0, 0.0, False, False)),
    ("sgd_update_", (np.zeros(3), np.zeros(3), None, 0.1, 0.9, 0.0, 0.0, False, False)),
])
def test_launchers_reject_bad_shapes_by_name(name, args):
    with pytest.raises(ValueError, match=name):
        getattr(kernels, name)(np, *args)


def test_sources_point_errors_at_the_cu_files():
    for family in kernels.FAMILIES:
        first = kernels.source(family).splitlines()[0]
        assert first == f'#line 1 "{kernels.kernel_dir() / family}.cu"'
    assert not any(o.startswith("-I") for o in kernels.OPTIONS)  # headers are inlined (test_kernel_source.py)


def test_row_block_sizes():
    assert [kernels.row_block(c, 4) for c in (1, 256, 257, 1000, 4097, 8192, 10**6)] == [32, 32, 64, 128, 1024, 1024, 1024]
    assert [kernels.row_block(c, 8) for c in (1, 128, 129, 1000, 4096, 4097)] == [32, 32, 64, 256, 1024, 1024]


def test_importing_the_kernel_modules_does_not_import_cupy():
    code = ("import sys, gpugrad.backend.kernels, gpugrad.backend.reference, gpugrad.testing.nvrtc_check; "
            "sys.exit('cupy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=kernels.kernel_dir().parent).returncode == 0


# ---- the references follow PyTorch (optional oracle) -----------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_references_match_torch_activations_norm_and_losses(torch, dtype):
    rng = np.random.default_rng(0)
    x, gy = _rand(rng, dtype, (5, 7), 3.0), _rand(rng, dtype, (5, 7))
    w, b, t, g = _rand(rng, dtype, (7,)), _rand(rng, dtype, (7,)), rng.integers(0, 7, 5), _rand(rng, dtype, (5,))
    tol = TOLERANCE[np.dtype(dtype)]

    def grads(f, *arrays, cotangent):
        ts = [torch.tensor(a, requires_grad=True) for a in arrays]
        out = f(*ts)
        out.backward(torch.tensor(cotangent))
        return [out.detach().numpy()] + [a.grad.numpy() for a in ts]

    want = grads(lambda a: torch.nn.functional.gelu(a, approximate="tanh"), x, cotangent=gy)
    _close([reference.gelu_fwd(np, x), reference.gelu_bwd(np, x, gy)], want, tol)
    want = grads(lambda a, w_, b_: torch.nn.functional.layer_norm(a, (7,), w_, b_, 1e-5), x, w, b, cotangent=gy)
    y, mean, rstd = reference.layer_norm_fwd(np, x, w, b, 1e-5)
    _close([y, *reference.layer_norm_bwd(np, x, w, mean, rstd, gy)], want, tol)
    tt = torch.tensor(t)
    want = grads(lambda a: torch.nn.functional.cross_entropy(a, tt, reduction="none"), x, cotangent=g)
    loss, lse = reference.softmax_xent_fwd(np, x, t)
    _close([loss, reference.softmax_xent_bwd(np, x, t, lse, g)], want, tol)
    want = grads(lambda a: torch.log_softmax(a, -1).gather(1, tt[:, None])[:, 0], x, cotangent=g)
    logp, lse = reference.token_logprob_fwd(np, x, t)
    _close([logp, reference.token_logprob_bwd(np, x, t, lse, g)], want, tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt, kw", [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=1e-2, weight_decay=0.01)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.01)),
])
def test_reference_optimizers_match_torch(torch, dtype, opt, kw):
    rng = np.random.default_rng(0)
    p = _rand(rng, dtype, (50,))
    tp = torch.nn.Parameter(torch.tensor(p))
    topt = getattr(torch.optim, opt)([tp], foreach=False, **kw)
    buf, m, v = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for step in range(1, 6):
        g = _rand(rng, dtype, (50,))
        tp.grad = torch.tensor(g)
        topt.step()
        if opt == "SGD":
            momentum = kw.get("momentum", 0.0)
            reference.sgd_update_(np, p, g, buf if momentum else None, kw["lr"], momentum, kw.get("dampening", 0.0),
                                  kw.get("weight_decay", 0.0), kw.get("nesterov", False), step == 1)
        else:
            reference.adam_update_(np, p, g, m, v, step, kw["lr"], 0.9, 0.999, 1e-8, kw["weight_decay"],
                                   opt == "AdamW")
    _close([p], [tp.detach().numpy()], TOLERANCE[np.dtype(dtype)])


def _rand(rng, dtype, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _close(got, want, tol):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1])
