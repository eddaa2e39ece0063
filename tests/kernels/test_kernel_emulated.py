"""Every CUDA kernel, run unchanged on the CPU emulator (gpugrad/testing/cuda_emu) through its real launcher and
held to backend/reference/: float32 and float64, sizes that are not multiples of the block or of the vector
width, contiguous, strided and misaligned (offset) inputs, under three thread schedules ("forward", "random", and
"warp-reverse", which lets warps run ahead of each other between barriers so reuse of shared scratch without a
barrier shows). The emulator fails a launch that makes a misaligned 16-byte access (common.cuh GG_CHECK_PACK), so
the offset layouts prove the kernels' scalar paths take over where vectors cannot.
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
from tests.kernel_cases import CASES, DTYPES, OFFSET_SHAPES, TOLERANCE, offset, rng_for, strided

try:
    from gpugrad.testing.cuda_emu import EmulationError, EmuRuntime, compiler_available
except ImportError as e:  # the emulator is optional: these tests skip, the static ones below still run
    EmuRuntime, _EMU_MISSING = None, f"CPU emulator not importable: {e}"
else:
    _EMU_MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"

SCHEDULES = ("forward", "random", "warp-reverse")  # warp-reverse: races between warps (cuda_emu/runtime.cpp)
needs_emu = pytest.mark.skipif(_EMU_MISSING is not None, reason=_EMU_MISSING or "")


class Recorder:
    """Wraps a runtime, recording which kernels a launcher requests and the launch shapes."""

    def __init__(self, rt):
        self.rt, self.xp, self.used, self.launches, self.names = rt, rt.xp, set(), [], []

    def raw_kernel(self, family, name_expr):
        k = self.rt.raw_kernel(family, name_expr)
        base = name_expr.split("<")[0]

        def launch(grid, block, args, shared_mem=0):
            self.used.add(f"{family}:{base}")
            self.launches.append((base, tuple(grid), tuple(block)))
            self.names.append(name_expr)
            return k(grid, block, args, shared_mem=shared_mem)

        return launch

    def elementwise(self, family, in_params, out_params, operation, name):
        k = self.rt.elementwise(family, in_params, out_params, operation, name)

        def call(*args, **kwargs):
            self.used.add(f"ew:{name.removeprefix('gg_')}")
            self.names.append(name)
            return k(*args, **kwargs)

        return call

    def __getattr__(self, attr):  # empty, zeros, ascontiguousarray
        return getattr(self.rt, attr)


@pytest.fixture(scope="module", params=SCHEDULES)
def emu(request):
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())],
                      schedule=request.param, seed=0)


def vectorized(case):
    """Whether the case's launcher runs kernels with vector paths (elementwise.cu, reduce.cu, norm.cu)."""
    return any(u.split(":")[0] in ("elementwise", "reduce", "norm") for u in kernels.USES[case.name])


def layouts(case, shape, strided_too):
    """C; strided where asked (and the case allows); offset for the OFFSET_SHAPES of the vectorized kernels."""
    return (("C",) + (("strided",) if case.strided and strided_too else ())
            + (("offset",) if shape in OFFSET_SHAPES and vectorized(case) else ()))


def _instances():
    for case in CASES:
        for dtype in DTYPES:
            for i, shape in enumerate(case.shapes):
                for layout in layouts(case, shape, i == len(case.shapes) // 2):
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


def expected(case, dtype, args, kwargs):
    """The reference's result; for ``reference64`` rows computed in float64 on the host and cast to the dtype."""
    if not case.reference64:
        return getattr(reference, case.name)(np, *args, **kwargs)
    wide = [a.astype(np.float64) if getattr(a, "dtype", None) == dtype else a for a in args]
    out = getattr(reference, case.name)(np, *wide, **kwargs)
    for a, w in zip(args, wide):  # in-place arguments (status words) are compared after the call
        if w is not a and isinstance(a, np.ndarray):
            a[...] = w
    return tuple(_cast(o, dtype) for o in out) if isinstance(out, tuple) else _cast(out, dtype)


def _cast(a, dtype):
    return a.astype(dtype) if getattr(a, "dtype", None) == np.float64 else a


def run_case(rt, case, dtype, shape, layout):
    """Launch case on rt and on the reference with identical inputs; returns the Recorder."""
    args, kwargs = case.make(rng_for(case, dtype, shape), np.dtype(dtype).type, shape)
    if layout == "strided":
        args = tuple(a if i in case.inplace else strided(a) for i, a in enumerate(args))
    k_args = [a.copy() if i in case.inplace and a is not None else a for i, a in enumerate(args)]
    if layout == "offset":  # every array, in-place ones too: contiguous views the kernels write through
        k_args = [offset(a) for a in k_args]
    r_args = [a.copy() if i in case.inplace and a is not None else a for i, a in enumerate(args)]
    rec = Recorder(rt)
    calls = kernels.CALLS[case.name]
    with kernels.use_runtime(rec):
        got = getattr(kernels, case.name)(np, *k_args, **kwargs)
    want = expected(case, dtype, r_args, kwargs)
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
def test_block_512_and_multi_chunk_rows(emu, dtype):
    """4097 / 2052 (doubles) and 8200 / 4100 (floats) columns take the largest block and more register chunks than
    one, with scalar and vector accesses."""
    case = next(c for c in CASES if c.name == "softmax_fwd" and not c.variant)
    for cols in ((4097, 2052) if dtype == np.float64 else (8200, 4100)):
        rec = run_case(emu, case, dtype, (2, cols), "C")
        assert rec.launches == [("softmax_fwd", (2,), (512,))]
        assert cols > 512 * kernels.TEAM_CACHE[np.dtype(dtype).itemsize]  # more than the register cache holds


@needs_emu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax_fwd", "log_softmax_bwd", "layer_norm_fwd"])
def test_short_rows_share_blocks(emu, dtype, name):
    """Rows up to 32 * K columns get G lanes of a warp each, 128 / G rows per 128-thread block."""
    case = next(c for c in CASES if c.name == name and not c.variant)
    k = kernels.TEAM_CACHE[np.dtype(dtype).itemsize]
    for rows, cols, lanes in ((65, 1, 1), (65, 5, 1 if k == 8 else 4), (33, 8, 1 if k == 8 else 4),
                              (65, 32, 4 if k == 8 else 16), (9, 32 * k, 32)):
        rec = run_case(emu, case, dtype, (rows, cols), "C")
        assert kernels.row_plan(cols, np.dtype(dtype).itemsize) == (lanes, 128)
        assert rec.launches == [(name, (-(-rows // (128 // lanes)),), (128,))]
    rec = run_case(emu, case, dtype, (3, 32 * k + 1), "C")  # one column more: a block per row
    assert rec.launches == [(name, (3,), (64,))]


@needs_emu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, variant, shape", [
    ("relu_fwd", "", (3, 4099)), ("gelu_bwd", "", (12291,)), ("accumulate_", "", (3, 4099)),
    ("dropout_fwd", "u=float64", (12290,)), ("bias_act_fwd", "relu", (300, 36)), ("bias_act_fwd", "gelu", (301, 33)),
])
@pytest.mark.parametrize("layout", ["C", "offset"])
def test_pointwise_grid_stride_steps(emu, monkeypatch, dtype, name, variant, shape, layout):
    """With the grid capped at 1 or 3 blocks, every thread loops over several grid-stride steps (the bias column
    advanced per step without a modulo), on the vector and (offset) the scalar path."""
    case = next(c for c in CASES if c.name == name and c.variant == variant)
    for blocks in (1, 3):
        monkeypatch.setattr(kernels.elementwise, "_EW_MAX_GRID", blocks)
        rec = run_case(emu, case, dtype, shape, layout)
        assert [(g, b) for _, g, b in rec.launches] == [((blocks,), (kernels.elementwise._EW_BLOCK,))]


@needs_emu
@pytest.mark.parametrize("dtype", DTYPES)
def test_contiguous_arrays_take_the_vectorized_kernel(emu, dtype):
    """Contiguous (and offset) arrays: pointwise<Op>; strided or broadcast ones: the ElementwiseKernel."""
    c = kernels.CTYPES[np.dtype(dtype).name]
    x, gy = np.linspace(-2, 2, 4 * 33, dtype=dtype).reshape(4, 33), np.ones((4, 33), dtype)
    runs = {
        "relu_fwd": ((x,), f"pointwise<ActFwd<{c}, pw::relu>>", "gg_relu_fwd"),
        "tanh_bwd": ((x, gy), f"pointwise<ActBwd<{c}, pw::tanh>>", "gg_tanh_bwd"),
        "bias_act_fwd": ((x, x[0], "gelu"), f"pointwise<BiasActFwd<{c}, pw::gelu, true>>", "gg_bias_gelu_fwd"),
        "dropout_fwd": ((x, 0.5, gy), f"pointwise<DropoutFwd<{c}, {c}>>", "gg_dropout_fwd"),
        "dropout_bwd": ((gy, x > 0, 0.5), f"pointwise<DropoutBwd<{c}>>", "gg_dropout_bwd"),
        "accumulate_": ((gy.copy(), x), f"pointwise<Accumulate<{c}>>", "gg_accumulate_"),
        "copy_": ((gy.copy(), x), f"pointwise<ActFwd<{c}, pw::identity>>", "gg_copy_"),
    }
    for name, (args, raw, ew) in runs.items():
        for layout, want in (("C", raw), ("offset", raw), ("strided", ew)):
            lay = offset if layout == "offset" else strided if layout == "strided" else (lambda a: a)
            laid = [lay(a) if i != 0 or name not in ("accumulate_", "copy_") or layout == "offset" else a.copy()
                    for i, a in enumerate(args)]
            rec = Recorder(emu)
            with kernels.use_runtime(rec):
                getattr(kernels, name)(np, *laid)
            assert rec.names == [want], f"{name} {layout}"


@needs_emu
@pytest.mark.parametrize("shape", [(1, 1), (65, 33), (300, 7), (1000, 3)])  # one chunk, two, and two passes
def test_bias_and_weight_gradients_own_their_memory(emu, shape):
    """Column sums come back as fresh (cols,) arrays (.base None): a view would make the engine copy it."""
    x, gy = np.ones(shape), np.ones(shape)
    with kernels.use_runtime(emu):
        outs = [kernels.sum_rows(np, gy), kernels.bias_act_bwd(np, x, gy, "relu")[1],
                *kernels.layer_norm_bwd(np, x, np.ones(shape[1]), np.zeros(shape[0]), np.ones(shape[0]), gy)[1:]]
    for out in outs:
        assert out.shape == (shape[1],) and out.base is None and out.flags.c_contiguous


@needs_emu
def test_out_of_range_targets_read_nothing(emu):
    """Targets far outside the row are NaN rows, not reads of another row (or of unmapped memory)."""
    x = np.zeros((3, 5), np.float32)
    t = np.array([2, -(2**40), 2**40], np.int64)
    with kernels.use_runtime(emu):
        loss, lse, _ = kernels.softmax_xent_fwd(np, x, t)
        gx = kernels.softmax_xent_bwd(np, x, t, lse, np.ones(3, np.float32))
    np.testing.assert_allclose(loss[0], np.log(5), rtol=1e-6)
    assert np.isnan(loss[1:]).all() and np.isnan(gx[1:]).all() and np.isfinite(gx[0]).all()


@needs_emu
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ignored_rows_gradient_is_zero_times_softmax(emu, reduction):
    """An ignored row's gradient is 0 * softmax(row), as torch's log_softmax backward of its zero gradient: 0 where
    the softmax is finite, NaN where it is NaN (a NaN or +inf logit, a row of -inf), whatever the upstream gradient.
    The kernel on the emulator, the reference and the closed form agree (the fuzzer: gpugrad's rows were 0)."""
    nan, inf = np.nan, np.inf
    x = np.array([[0.5, nan, -1.0], [inf, 2.0, 0.0], [-inf, -inf, -inf], [0.3, -0.2, 1.0], [1.0, 2.0, -inf]],
                 np.float32)
    t = np.array([-100, -100, -100, -100, 1])
    want = np.zeros_like(x)
    want[:3] = nan  # softmax NaN there: the log-sum-exp of a row holding NaN or +inf is NaN, of all -inf -inf - -inf
    p = np.exp(x[4] - np.log(np.exp(x[4]).sum()))
    opts = dict(ignore_index=-100)
    for launch in ("reference", "kernel"):
        impl = reference if launch == "reference" else kernels
        with kernels.use_runtime(emu):
            loss, lse, aux = impl.softmax_xent_fwd(np, x, t, reduction, **opts)
            g = np.ones(5 if reduction == "none" else (), np.float32) * np.float32(3.0)
            gx = impl.softmax_xent_bwd(np, x, t, lse, g, reduction, aux=aux, **opts)
        np.testing.assert_array_equal(np.isnan(gx[:4]), np.isnan(want[:4]))
        np.testing.assert_array_equal(gx[:4][~np.isnan(want[:4])], 0)
        np.testing.assert_allclose(gx[4], 3.0 * (p - np.eye(3, dtype=np.float32)[1]), rtol=1e-6)


# ---- dropout's keep rule: mask = u >= p, so u == p keeps; p == 0 is the identity ------------------------------------
def _dropout_inputs(xdtype, udtype, p):
    """x with signed zeros and large values; u holding p exactly (in u's dtype), values just below and above it,
    0 and values near 1."""
    x = np.array([[1.5, -2.25, 0.0, -0.0, 3e30, -7.0], [0.1, 4.0, -1e-3, 2.0, 5.5, -0.5]], xdtype)
    pu = udtype(p)
    u = np.array([[pu, np.nextafter(pu, udtype(0)), np.nextafter(pu, udtype(1)), 0.0, pu, 0.999],
                  [pu, 0.5, 0.0, pu, 0.25, np.nextafter(udtype(1), udtype(0))]], udtype)
    return x, u


def _check_dropout(fwd, bwd, xdtype, udtype, p):
    x, u = _dropout_inputs(xdtype, udtype, p)
    y, mask = fwd(np, x, p, u)
    np.testing.assert_array_equal(mask, u >= udtype(p))  # ties (u == p) kept, compared in u's dtype
    assert mask[u == udtype(p)].all()
    scale = xdtype(1.0 / (1.0 - p))
    np.testing.assert_array_equal(y, np.where(mask, x * scale, xdtype(0)))
    gy = np.linspace(-1, 1, x.size, dtype=xdtype).reshape(x.shape)
    np.testing.assert_array_equal(bwd(np, gy, mask, p), np.where(mask, gy * scale, xdtype(0)))
    if p == 0:  # every u >= 0 is kept and the scale is 1: x and gy come back bit for bit, -0.0 included
        assert mask.all()
        np.testing.assert_array_equal(y, x)
        assert np.array_equal(np.signbit(y), np.signbit(x))
        np.testing.assert_array_equal(bwd(np, gy, mask, p), gy)


DROPOUT_TIES = [(np.float32, np.float32), (np.float64, np.float64), (np.float32, np.float64)]


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5])
@pytest.mark.parametrize("xdtype, udtype", DROPOUT_TIES)
def test_dropout_reference_keeps_u_equal_to_p(xdtype, udtype, p):
    _check_dropout(reference.dropout_fwd, reference.dropout_bwd, xdtype, udtype, p)


@needs_emu
@pytest.mark.parametrize("layout", ["C", "strided"])  # the raw pointwise kernel; the ElementwiseKernel
@pytest.mark.parametrize("p", [0.0, 0.3, 0.5])
@pytest.mark.parametrize("xdtype, udtype", DROPOUT_TIES)
def test_dropout_kernels_keep_u_equal_to_p(emu, xdtype, udtype, p, layout):
    lay = strided if layout == "strided" else (lambda a: a)

    def fwd(xp, x, p, u):
        with kernels.use_runtime(emu):
            return kernels.dropout_fwd(xp, lay(x), p, lay(u))

    def bwd(xp, gy, mask, p):
        with kernels.use_runtime(emu):
            return kernels.dropout_bwd(xp, lay(gy), lay(mask), p)

    _check_dropout(fwd, bwd, xdtype, udtype, p)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_op_keeps_u_equal_to_p_and_p0_is_the_identity(dtype):
    import gpugrad
    from gpugrad.nn.functional import dropout
    from gpugrad.ops.activation import Dropout

    x, u = _dropout_inputs(dtype, dtype, 0.3)
    t = gpugrad.tensor(x, requires_grad=True)
    y = Dropout.apply(t, p=0.3, u=u)
    keep = u >= dtype(0.3)
    np.testing.assert_array_equal(y.detach().numpy(), np.where(keep, x * dtype(1 / 0.7), dtype(0)))
    y.backward(gpugrad.tensor(np.ones_like(x)))
    np.testing.assert_array_equal(t.grad.numpy(), np.where(keep, dtype(1 / 0.7), dtype(0)))
    # p = 0: the identity, bit for bit, whether the op runs (u given) or F.dropout short-cuts it
    t = gpugrad.tensor(x, requires_grad=True)
    y = Dropout.apply(t, p=0.0, u=np.zeros_like(x))
    np.testing.assert_array_equal(y.detach().numpy(), x)
    assert np.array_equal(np.signbit(y.detach().numpy()), np.signbit(x))
    gy = np.linspace(-1, 1, x.size, dtype=dtype).reshape(x.shape)
    y.backward(gpugrad.tensor(gy))
    np.testing.assert_array_equal(t.grad.numpy(), gy)
    assert dropout(t, p=0.0) is t


# ---- static checks: run without the emulator ------------------------------------------------------------------
_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
_POINTWISE_STRUCT = re.compile(r"^struct (\w+) \{", re.M)


def _scan_kernels():
    """{'family:kernel'} for every __global__ and {'name'} for every pw::<name> pointwise struct."""
    globals_, device_ops = set(), set()
    for path in sorted(kernels.kernel_dir().glob("*.cu")):
        text = path.read_text()
        globals_ |= {f"{path.stem}:{n}" for n in _GLOBAL.findall(text)}
        if "namespace pw {" in text:
            device_ops |= set(_POINTWISE_STRUCT.findall(text[text.index("namespace pw {"):text.index("}  // namespace pw")]))
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
    assert {d for d in device_ops if f"pw::{d}::" not in ops} == set(), \
        "pointwise structs no ElementwiseKernel operation calls"
    assert set(kernels.ELEMENTWISE) - ew_used == set(), "ELEMENTWISE entries no launcher uses"
    cased = {c.name for c in CASES}
    for name in kernels.USES:
        assert callable(getattr(kernels, name, None)), f"kernels.{name} missing"
        assert callable(getattr(reference, name, None)), f"reference.{name} missing"
        assert name in cased, f"no case for {name} in tests/kernel_cases.py"


def test_pointwise_structs_are_the_declared_kernel_ops():
    """elementwise.cu's pw:: structs are exactly ops/declarations.py's kernel ops (and the identity), so a
    declaration without its struct, or a struct without its declaration, fails here and not at a first launch."""
    from gpugrad.ops.declarations import ACTIVATIONS

    _, structs = _scan_kernels()
    assert structs == set(ACTIVATIONS)


def test_launch_constants_match_the_kernels():
    """The launchers' block sizes and register caches are the ones the kernels are compiled for."""
    ew, red, norm, common = (
        (kernels.kernel_dir() / f).read_text() for f in ("elementwise.cu", "reduce.cu", "norm.cu", "common.cuh"))
    assert f"GG_EW_BLOCK = {kernels.elementwise._EW_BLOCK}," in ew
    bounds = set(re.findall(r"__launch_bounds__\((\d+), 2\)", red + norm))
    assert bounds == {str(kernels.ROW_BLOCK_MAX)}
    assert kernels.TEAM_CACHE[2] == kernels.TEAM_CACHE[4]  # a 2-byte element is cached as a float, like a float
    assert "TeamCache { static constexpr int K = sizeof(T) == 8 ? %d : %d; }" % (
        kernels.TEAM_CACHE[8], kernels.TEAM_CACHE[4]) in common
    assert kernels.POINTWISE_OPS and all(f"pointwise<{op}>" in kernels.NAME_EXPRESSIONS["elementwise"]
                                         for op in kernels.POINTWISE_OPS)


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


def test_row_plan():
    """(lanes, block): G lanes of a warp for rows up to 32 * K columns (K = 8 floats / 2 doubles), else a block of
    64..512 threads."""
    assert [kernels.row_plan(c, 4) for c in (0, 1, 8, 9, 32, 33, 256, 257, 512, 513, 4096, 10**6)] == [
        (1, 128), (1, 128), (1, 128), (2, 128), (4, 128), (8, 128), (32, 128), (0, 64), (0, 64), (0, 128),
        (0, 512), (0, 512)]
    assert [kernels.row_plan(c, 8) for c in (1, 2, 3, 64, 65, 128, 129, 1024, 1025)] == [
        (1, 128), (1, 128), (2, 128), (32, 128), (0, 64), (0, 64), (0, 128), (0, 512), (0, 512)]


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
    loss, lse, _ = reference.softmax_xent_fwd(np, x, t)
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
