"""One row per kernel launcher (``backend/kernels/``): how to build its inputs, the shapes to run, which arguments
it updates in place. ``test_kernel_emulated.py`` runs every row through the CPU emulator against
``backend/reference/``; GPU parity tests can run the same rows on CuPy.

Shapes are chosen around the launch shapes: columns 1, 31, 33 (a warp +- 1), 1000, 4097 (> 4096: a second
register chunk for doubles and block 1024) and 8200 (> 8192: a second chunk for floats); rows 1, 3, 65 (65 rows
make the column kernels split rows into two chunks, then sum the partials again); and empty arrays.
The vectorized kernels add their own: pointwise sizes 1..9 and others that are not multiples of the vector width
(4 floats, 2 doubles: a scalar tail), bias widths that are (a vector bias load) or are not; row kernels get short
rows (1..32 columns for 1..65 rows: G lanes of a warp per row, several rows per block), the warp / block boundary
(256 | 257 floats, 64 | 65 doubles) and long rows that are vector-aligned past the register cache (4100 floats,
2052 doubles). OFFSET_SHAPES also run as views one element into a buffer: contiguous but not 16-byte aligned.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Callable

import numpy as np

from gpugrad.backend import reference as ref
from gpugrad.ops.declarations import ACTIVATIONS, KERNEL_OPS, POINTWISE as POINTWISE_DECLS

ROWS = ((1, 1), (3, 31), (65, 33), (3, 1000), (1, 4097), (2, 8200), (0, 5), (3, 0))  # row kernels (rows, cols)
COLUMNS = ((1, 1), (65, 33), (3, 1000), (300, 7), (1000, 3), (0, 5), (3, 0))  # several chunks and passes
# elementwise: any shape (the middle one also runs strided)
POINTWISE = ((1,), (2,), (3,), (4,), (5,), (6,), (65, 33), (7,), (8,), (9,), (4097,), (2, 3, 33), (0,))
# (..., C) with a bias of (C,): C % 4 == 0 (a vector bias for both dtypes), C even (doubles only), C odd
BIAS = ((1, 1), (3, 2), (2, 6), (65, 36), (2, 3, 8), (65, 33), (2, 3, 33), (3, 1000), (9, 4), (0, 4), (3, 0))
# the row kernels of reduce.cu / norm.cu: ROWS, then short rows (a team of G lanes per row), the warp / block
# boundary for floats (256 | 257) and doubles (64 | 65), vector-aligned rows past the register cache
SHORT_ROWS = ((65, 1), (2, 2), (17, 3), (1, 4), (65, 5), (5, 7), (33, 8), (3, 9), (65, 16), (2, 17), (65, 32),
              (7, 64), (9, 65), (4, 256), (4, 257))
TEAM_ROWS = ROWS + SHORT_ROWS + ((2, 4100), (3, 2052))
# also run as contiguous views at a one-element offset (not 16-byte aligned: the kernels' scalar paths)
OFFSET_SHAPES = {(8,), (65, 33), (4097,), (2, 3, 8), (65, 36), (65, 32), (3, 1000), (2, 8200), (4, 256), (2, 2052)}
FLAT = ((1,), (1000,), (65, 33), (4097,), (0,))  # optimizer buffers


DTYPES = (np.float32, np.float64)
# Per dtype (rtol, atol): the kernels and references round differently (reduction order, fma, library exp).
TOLERANCE = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-12, 1e-13)}
# gelu's derivative at x << 0 is a difference of two terms of size ~1 that cancel to ~1e-11: in float32 any two
# correct implementations differ by the rounding of the terms (~1e-7 * |x|^3 * |gy|), whatever the true value.
GELU_TOLERANCE = {np.dtype(np.float32): (2e-5, 3e-5), np.dtype(np.float64): (1e-12, 1e-12)}


@dataclasses.dataclass(frozen=True)
class KernelCase:
    name: str  # the launcher in backend/kernels/ == the function in backend/reference/
    make: Callable  # make(rng, dtype, shape) -> (args, kwargs); args[0] is xp, filled in by the runner
    shapes: tuple
    variant: str = ""  # tells rows of one launcher apart (activation, flags)
    inplace: tuple = ()  # positions in args (after xp) of arrays the call updates in place
    strided: bool = True  # also run with non-contiguous array inputs (never the in-place ones)
    tolerance: dict | None = None  # {dtype: (rtol, atol)} instead of TOLERANCE
    reference64: bool = False  # want: the reference on the inputs in float64 (on the host), cast to the dtype

    @property
    def id(self):
        return f"{self.name}[{self.variant}]" if self.variant else self.name


def rng_for(case, dtype, shape, layout=""):
    """A generator seeded by the case instance, so every run and schedule sees the same inputs."""
    return np.random.default_rng(zlib.crc32(f"{case.id}/{np.dtype(dtype).name}/{shape}/{layout}".encode()))


def _u(rng, dtype, shape, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, shape).astype(dtype)


def _n(rng, dtype, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _shifted(rng, dtype, shape):
    """N(0, 1) - 1000: every value of a row very negative. A row max that starts at 0 instead of -inf (in a kernel
    or in the reference) gives exp(x - 0) = 0 there: lse = -inf and softmax 0 / 0."""
    return (rng.standard_normal(shape) - 1000.0).astype(dtype)


# The shifted rows are held to float64 math on the same (rounded) inputs. float32 results near -1000 (logsumexp) are
# within half an ulp of 1000 (3e-5) of it. log_softmax and the losses compute (x - max) - log(sum), as torch, and do
# not carry that error (x - lse would, on values of size ~1); a max that starts at 0 gives -inf or NaN here, far
# outside any tolerance.
SHIFTED_TOLERANCE = {np.dtype(np.float32): (2e-5, 1e-4), np.dtype(np.float64): (1e-12, 1e-11)}
# layer norm's float32 mean of a row near -1000 is itself off by a few ulps of 1000 (the row sum's rounding), which
# every y = (x - mean) * rstd * w carries; a variance from E[x^2] - mean^2 would be off by ~0.1 (ulp of 1e6).
SHIFTED_NORM_TOLERANCE = {np.dtype(np.float32): (2e-5, 1e-3), np.dtype(np.float64): (1e-12, 1e-11)}
SHIFTED_ROWS = ((3, 31), (65, 33), (3, 1000), (1, 4097), (65, 5), (9, 65), (4, 257))  # blocks, chunks and teams


def _targets(rng, rows, cols, invalid=False):
    t = rng.integers(0, max(cols, 1), rows).astype(np.int64)
    if invalid and rows >= 3:  # NaN rows, never an out-of-bounds read
        t[0], t[-1] = -1, cols
    return t


def _sample(rng, dtype, shape, decl, kinks=None):
    """Inputs of a declared pointwise op: in its [low, high], at least 0.05 from each kink (a wrong branch beyond
    softplus's threshold must show, a subgradient at relu's 0 must not be a coin flip)."""
    x = rng.uniform(decl.low, decl.high, shape)
    for k in decl.kinks if kinks is None else kinks:
        near = np.abs(x - k) < 0.05
        x = np.where(near, k + np.where(x >= k, 0.05, -0.05) + (x - k), x)
    return x.astype(dtype)


# Parameters other than the defaults, and the kinks they move (softplus branches at threshold / beta).
OTHER_PARAMS = {"softplus": ((2.0, 10.0), (5.0,)), "leaky_relu": ((0.2,), (0.0,)), "elu": ((0.5,), (0.0,))}


def _activation_cases():
    """<op>_fwd and <op>_bwd of every kernel op in ops/declarations.py, at its default parameters and others."""
    out = []
    for d in KERNEL_OPS:
        f = getattr(ref, f"{d.name}_fwd")
        runs = [(d.defaults, d.kinks)] + ([OTHER_PARAMS[d.name]] if d.name in OTHER_PARAMS else [])
        for params, kinks in runs:
            variant = "" if params == d.defaults else ",".join(map(str, params))
            out.append(KernelCase(f"{d.name}_fwd", lambda r, t, s, d=d, p=params, k=kinks: ((_sample(r, t, s, d, k),
                                                                                               *p), {}),
                                  POINTWISE, variant=variant, tolerance=GELU_TOLERANCE))

            def make(r, t, s, d=d, f=f, p=params, k=kinks):
                x = _sample(r, t, s, d, k)
                return ((x if d.saves == "x" else f(np, x, *p)), _n(r, t, s, 1.0), *p), {}

            out.append(KernelCase(f"{d.name}_bwd", make, POINTWISE, variant=variant, tolerance=GELU_TOLERANCE))
    return out


def _bias_act_cases():
    out = []
    for act in ACTIVATIONS:
        d = POINTWISE_DECLS.get(act)
        sample = (lambda r, t, s, d=d: _sample(r, t, s, d)) if d else _u
        params = d.defaults if d else ()

        out.append(KernelCase("bias_act_fwd", lambda r, t, s, a=act, x=sample, p=params: (
                                  (x(r, t, s), _u(r, t, s[-1:], 0, 0), a, *p), {}),
                              BIAS, variant=act, tolerance=GELU_TOLERANCE))
        out.append(KernelCase("bias_act_fwd", lambda r, t, s, a=act, p=params: ((_u(r, t, s), _u(r, t, s[-1:]), a, *p),
                                                                                 {}),
                              BIAS[:4], variant=act + ",bias", tolerance=GELU_TOLERANCE))

        def make_bwd(r, t, s, a=act, x=sample, p=params):
            _, saved = ref.bias_act_fwd(np, x(r, t, s), _u(r, t, s[-1:], 0, 0), a, *p)
            return (saved, _n(r, t, s, 1.0), a, *p), {}

        out.append(KernelCase("bias_act_bwd", make_bwd, BIAS, variant=act, tolerance=GELU_TOLERANCE))
    return out


def _dropout_cases():
    out = []
    for p in (0.0, 0.3, 1.0):
        out.append(KernelCase("dropout_fwd", lambda r, d, s, p=p: ((_u(r, d, s), p, r.random(s).astype(d)), {}),
                              POINTWISE, variant=f"p={p}"))
        out.append(KernelCase("dropout_bwd", lambda r, d, s, p=p: ((_n(r, d, s), r.random(s) >= p, p), {}),
                              POINTWISE, variant=f"p={p}"))
    # randoms in another precision than x: p is compared in u's dtype
    out.append(KernelCase("dropout_fwd", lambda r, d, s: ((_u(r, d, s), 0.5, r.random(s)), {}), POINTWISE,
                          variant="u=float64"))
    return out


def _softmax_family():
    def masked(r, d, s):  # attention-style -inf entries (never a whole row)
        x = _n(r, d, s)
        if s[1] > 1:
            x[:, ::3] = -np.inf
        return x

    def lse_inputs(r, d, s):
        x = _n(r, d, s)
        return (x, ref.logsumexp_fwd(np, x), _n(r, d, s[:1], 1.0)), {}

    masked_rows = ROWS[1:4] + ((65, 5), (33, 8), (9, 65), (4, 257))  # short rows: teams of 2 and 4 lanes, warp, block
    return [
        KernelCase("softmax_fwd", lambda r, d, s: ((_n(r, d, s),), {}), TEAM_ROWS),
        KernelCase("softmax_fwd", lambda r, d, s: ((masked(r, d, s),), {}), masked_rows, variant="masked"),
        KernelCase("softmax_bwd", lambda r, d, s: ((ref.softmax_fwd(np, _n(r, d, s)), _n(r, d, s, 1.0)), {}),
                   TEAM_ROWS),
        KernelCase("log_softmax_fwd", lambda r, d, s: ((_n(r, d, s),), {}), TEAM_ROWS),
        KernelCase("log_softmax_fwd", lambda r, d, s: ((masked(r, d, s),), {}), masked_rows, variant="masked"),
        KernelCase("log_softmax_bwd",
                   lambda r, d, s: ((ref.log_softmax_fwd(np, _n(r, d, s)), _n(r, d, s, 1.0)), {}), TEAM_ROWS),
        KernelCase("logsumexp_fwd", lambda r, d, s: ((_n(r, d, s),), {}), TEAM_ROWS),
        KernelCase("logsumexp_fwd", lambda r, d, s: ((np.full(s, -np.inf, d),), {}),
                   ((3, 31), (65, 3), (9, 8), (2, 300)), variant="all-inf"),
        # |x| ~ 1e3: exp(x) overflows without the max subtraction
        KernelCase("logsumexp_fwd", lambda r, d, s: ((_n(r, d, s, 1e3),), {}), ROWS[1:5] + ((65, 5), (9, 65)),
                   variant="large"),
        KernelCase("softmax_fwd", lambda r, d, s: ((_n(r, d, s, 1e3),), {}), ROWS[1:5] + ((65, 5), (9, 65)),
                   variant="large"),
        KernelCase("logsumexp_bwd", lse_inputs, TEAM_ROWS),
        KernelCase("sum_rows", lambda r, d, s: ((_n(r, d, s, 1.0),), {}), COLUMNS),
        *(KernelCase(name, lambda r, d, s: ((_shifted(r, d, s),), {}), SHIFTED_ROWS, variant="shifted",
                     tolerance=SHIFTED_TOLERANCE, reference64=True)
          for name in ("softmax_fwd", "log_softmax_fwd", "logsumexp_fwd")),
    ]


SITE = 7  # the site id the check rows record under


def _status(earlier=False):
    """Fresh status words (kernels/common.cuh), or words already holding another check's failure (site 3),
    which a later failure must leave as they are."""
    status = np.zeros(4, np.int64)
    if earlier:
        status[:3] = (3, -5, 99)
    return status


def _loss_cases():
    out = []
    for name, reductions in (("softmax_xent", ("none", "sum", "mean")), ("token_logprob", (None,))):
        for red in reductions:
            red_args = () if red is None else (red,)
            for invalid, earlier in ((False, False), (True, False), (True, True)):
                if earlier and red not in (None, "mean"):
                    continue
                variant = "/".join(v for v in (red, invalid and "invalid-targets", earlier and "earlier-failure") if v)
                out.append(KernelCase(f"{name}_fwd", lambda r, d, s, i=invalid, e=earlier, a=red_args: (
                    (_n(r, d, s), _targets(r, s[0], s[1], i), *a, _status(e), SITE), {}), ROWS, variant=variant,
                    inplace=(2 + len(red_args),)))
                if earlier:
                    continue

                def make_bwd(r, d, s, i=invalid, a=red_args):
                    x, t = _n(r, d, s), _targets(r, s[0], s[1], i)
                    g = _n(r, d, () if a and a[0] != "none" else s[:1], 1.0)
                    return (x, t, ref.logsumexp_fwd(np, x), g, *a), {}

                out.append(KernelCase(f"{name}_bwd", make_bwd, ROWS, variant=variant))
        red_args = ("none",) if name == "softmax_xent" else ()  # rows near -1000: the lse's row max
        out.append(KernelCase(f"{name}_fwd", lambda r, d, s, a=red_args: (
            (_shifted(r, d, s), _targets(r, s[0], s[1]), *a, _status(), SITE), {}), SHIFTED_ROWS, variant="shifted",
            inplace=(2 + len(red_args),), tolerance=SHIFTED_TOLERANCE, reference64=True))
    return out + _xent_option_cases()


def _xent_options(r, d, s, weights, ignore, smoothing, invalid=False):
    """(x, t, w, ignore_index, smoothing) for cross-entropy with torch's options: class weights in [0.5, 2], an
    ignore_index (-100, or class 1 when ``ignore`` is "class") that some rows hit, label smoothing."""
    x, t = _n(r, d, s), _targets(r, s[0], s[1], invalid)
    ii = None if not ignore else -100 if ignore == "-100" else 1
    if ii is not None and s[0] >= 2:
        t[1 if invalid or s[0] < 3 else slice(None, None, 2)] = ii  # between the invalid rows, or every other row
    # float64 weights for either dtype: the launchers cast them to x's (test_dtype_layout makes every third element
    # of a float32 input denormal: a mean over summed denormal weights is 0 / 0 once flushed)
    w = r.uniform(0.5, 2.0, s[1]) if weights else None
    return x, t, w, ii, smoothing


# (weights, ignore_index, label smoothing): each option alone, and all of them together
XENT_OPTIONS = ((True, "", 0.0), (False, "-100", 0.0), (False, "class", 0.0), (False, "", 0.1), (True, "-100", 0.25))


def _xent_option_cases():
    out = []
    for weights, ignore, smoothing in XENT_OPTIONS:
        opts = "/".join(v for v in (weights and "weights", ignore and f"ignore={ignore}",
                                     smoothing and f"smoothing={smoothing}") if v)
        for red in ("none", "sum", "mean"):
            for invalid in (False, True) if red == "mean" else (False,):
                variant = f"{red}/{opts}" + ("/invalid-targets" if invalid else "")

                def fwd(r, d, s, o=(weights, ignore, smoothing), red=red, i=invalid):
                    x, t, w, ii, e = _xent_options(r, d, s, *o, invalid=i)
                    return (x, t, red, _status(), SITE, w, ii, e), {}

                def bwd(r, d, s, o=(weights, ignore, smoothing), red=red, i=invalid):
                    x, t, w, ii, e = _xent_options(r, d, s, *o, invalid=i)
                    g = _n(r, d, () if red != "none" else s[:1], 1.0)
                    # aux (the forward's summed weights) is recomputed by the launcher: an input here would get
                    # denormals in test_dtype_layout, where a mean divided by one means nothing
                    return (x, t, ref.logsumexp_fwd(np, x), g, red, w, ii, e), {}

                out.append(KernelCase("softmax_xent_fwd", fwd, ROWS, variant=variant, inplace=(3,)))
                out.append(KernelCase("softmax_xent_bwd", bwd, ROWS, variant=variant))
    return out


def _check_cases():
    """check_index over int32 ids (the float32 runs) and int64 ids (float64), in [0, 50) or not."""
    def make(r, d, s, invalid=False, earlier=False):
        ids = r.integers(0, 50, s).astype(np.int32 if d == np.float32 else np.int64)
        if invalid and ids.size >= 2:
            ids.flat[0], ids.flat[-1] = -3, 54
        return (ids, 50, _status(earlier), SITE), {}

    shapes = ((1,), (65, 33), (4097,), (2, 3, 33), (70001,), (0,))  # 70001: 256 blocks of 256 threads loop
    return [KernelCase("check_index", make, shapes, inplace=(2,)),
            KernelCase("check_index", lambda r, d, s: make(r, d, s, True), shapes, variant="invalid", inplace=(2,)),
            KernelCase("check_index", lambda r, d, s: make(r, d, s, True, True), shapes[:3], variant="earlier-failure",
                       inplace=(2,)),
            *(KernelCase("check_finite", lambda r, d, s, v=v: _finite_case(r, d, s, v), shapes, variant=v,
                         inplace=(0,)) for v in ("finite", "nan-inf", "earlier", "many"))]


def _finite_case(r, d, s, variant):
    """check_finite for row 2 of 4 under epoch 5: arrays of shape s, s reversed, None and a small one; NaN and inf
    placed so that the first NaN is in array 2 (and 3) and the first inf in array 0; "earlier": row 2 already says
    NaN at 1 in this epoch (kept) and inf in epoch 4 (stale: replaced); "many": 11 arrays (two launches of 8
    slots), a NaN only in the last."""
    arrays = [_n(r, d, s), _n(r, d, s[::-1]), None, _n(r, d, (3,))]
    if variant == "many":
        arrays = arrays * 2 + [_n(r, d, s), _n(r, d, (5,)), _n(r, d, s)]
        arrays[-1].flat[-1:] = np.nan
    elif variant != "finite":
        arrays[2] = _n(r, d, s)
        arrays[2].flat[-1:], arrays[3][1] = np.nan, np.nan
        arrays[0].flat[:1] = -np.inf
    flags = np.zeros((4, 2), np.int64)
    flags[1] = flags[3] = 7  # other nodes' rows are left alone
    if variant == "earlier":
        flags[2] = (5 << 32) + 2**31 - 2, (4 << 32) + 2**31 - 1
    return (flags, 2, 5, *arrays), {}


def _layer_norm_cases():
    def fwd(r, d, s, affine=True):
        w, b = (_n(r, d, s[1:], 1.0), _n(r, d, s[1:], 1.0)) if affine else (None, None)
        return (_n(r, d, s) + d(1.5), w, b, 1e-5), {}

    def bwd(r, d, s, affine=True):
        x = _n(r, d, s) + d(1.5)
        w = _n(r, d, s[1:], 1.0) if affine else None
        _, mean, rstd = ref.layer_norm_fwd(np, x, w, None, 1e-5)
        return (x, w, mean, rstd, _n(r, d, s, 1.0)), {}

    def shifted_fwd(r, d, s):
        return (_shifted(r, d, s), _n(r, d, s[1:], 1.0), _n(r, d, s[1:], 1.0), 1e-5), {}

    def shifted_bwd(r, d, s):  # mean, rstd from the dtype's reference, as the forward kernel would save them
        x, w = _shifted(r, d, s), _n(r, d, s[1:], 1.0)
        _, mean, rstd = ref.layer_norm_fwd(np, x, w, None, 1e-5)
        return (x, w, mean, rstd, _n(r, d, s, 1.0)), {}

    return [
        # rows near -1000 (mean -1000, spread 1): a variance from E[x^2] - mean^2 cancels there
        KernelCase("layer_norm_fwd", shifted_fwd, SHIFTED_ROWS, variant="shifted",
                   tolerance=SHIFTED_NORM_TOLERANCE, reference64=True),
        KernelCase("layer_norm_bwd", shifted_bwd, SHIFTED_ROWS, variant="shifted",
                   tolerance=SHIFTED_NORM_TOLERANCE, reference64=True),
        KernelCase("layer_norm_fwd", fwd, TEAM_ROWS),
        KernelCase("layer_norm_fwd", lambda r, d, s: fwd(r, d, s, False), ROWS[:3] + ((65, 8),), variant="no-affine"),
        KernelCase("layer_norm_bwd", bwd, TEAM_ROWS + ((300, 7),)),
        KernelCase("layer_norm_bwd", lambda r, d, s: bwd(r, d, s, False), ROWS[:3] + ((65, 8),), variant="no-affine"),
    ]


def _optim_cases():
    def sgd(momentum, dampening, wd, nesterov, first):
        def make(r, d, s):
            buf = _n(r, d, s, 0.1) if momentum else None
            return (_n(r, d, s, 1.0), _n(r, d, s, 1.0), buf, 0.1, momentum, dampening, wd, nesterov, first), {}

        return make

    def adam(step, wd, decoupled):
        def make(r, d, s):
            return (_n(r, d, s, 1.0), _n(r, d, s, 1.0), _n(r, d, s, 0.1), np.abs(_n(r, d, s, 0.01)), step, 1e-3,
                    0.9, 0.999, 1e-8, wd, decoupled), {}

        return make

    sgds = {"plain": (0.0, 0.0, 0.0, False, False), "momentum-first": (0.9, 0.0, 0.0, False, True),
            "momentum": (0.9, 0.1, 0.01, False, False), "nesterov": (0.9, 0.0, 0.01, True, False)}
    adams = {"adam": (1, 0.0, False), "adam-l2": (10, 0.01, False), "adamw": (3, 0.01, True)}
    return ([KernelCase("sgd_update_", sgd(*a), FLAT, variant=v, inplace=(0, 2), strided=True)
             for v, a in sgds.items()]
            + [KernelCase("adam_update_", adam(*a), FLAT, variant=v, inplace=(0, 2, 3), strided=True)
               for v, a in adams.items()])


# Multi-tensor updates: a "shape" is the sizes of the row's tensors (1-D), one count per row (the in-place argument
# positions depend on it). Odd sizes, empty and 1-element tensors, sizes past one block and past 4096; all empty
# (Adam still counts the steps); MANY: more tensors than one launch takes (16), so two launches.
MULTI = ((1, 0, 33, 4097, 5, 1000), (7, 1, 0, 0, 300, 2), (0, 0, 0, 0, 0, 0))
MANY = ((3, 0, 1, 17, 2, 5, 1, 0, 9, 4, 1, 2, 0, 6, 1, 1, 8, 0, 3, 1),)


def _multi_optim_cases():
    def sgd(momentum, dampening, wd, nesterov, maximize=False):
        def make(r, d, sizes):
            ps, gs = [_n(r, d, (k,), 1.0) for k in sizes], [_n(r, d, (k,), 1.0) for k in sizes]
            bufs = [_n(r, d, (k,), 0.1) for k in sizes] if momentum else []
            first = [i % 3 == 1 for i in range(len(sizes))]  # some tensors at their first step, most not
            return (np.array([0.1, momentum, dampening, wd, float(nesterov), float(maximize)]), first, *ps, *gs,
                    *bufs), {}

        return make

    def steps(r, sizes):
        return [np.array(r.integers(0, 12), np.int64) for _ in sizes]  # 0: this is the tensor's first step

    def adam(wd, decoupled, amsgrad=False, maximize=False):
        def make(r, d, sizes):
            ps, gs = [_n(r, d, (k,), 1.0) for k in sizes], [_n(r, d, (k,), 1.0) for k in sizes]
            ms, vs = [_n(r, d, (k,), 0.1) for k in sizes], [np.abs(_n(r, d, (k,), 0.01)) for k in sizes]
            vmax = [np.abs(_n(r, d, (k,), 0.01)) for k in sizes] if amsgrad else []  # above and below v
            return (np.array([1e-3, 0.9, 0.999, 1e-8, wd, float(maximize)]), np.zeros(1, np.uint32), decoupled,
                    amsgrad, *ps, *gs, *ms, *vs, *vmax, *steps(r, sizes)), {}

        return make

    def rmsprop(wd, momentum, centered, maximize=False):
        def make(r, d, sizes):
            ps, gs = [_n(r, d, (k,), 1.0) for k in sizes], [_n(r, d, (k,), 1.0) for k in sizes]
            sq = [np.abs(_n(r, d, (k,), 1.0)) + 1 for k in sizes]  # sq >= ga^2: centered variance stays positive
            ga = [_n(r, d, (k,), 0.1) for k in sizes] if centered else []
            bufs = [_n(r, d, (k,), 0.1) for k in sizes] if momentum else []
            return (np.array([1e-2, 0.9, 1e-8, wd, momentum, float(maximize)]), np.zeros(1, np.uint32), centered,
                    bool(momentum), *ps, *gs, *sq, *ga, *bufs, *steps(r, sizes)), {}

        return make

    def adagrad(lr_decay, wd, maximize=False):
        def make(r, d, sizes):
            ps, gs = [_n(r, d, (k,), 1.0) for k in sizes], [_n(r, d, (k,), 1.0) for k in sizes]
            sums = [np.abs(_n(r, d, (k,), 1.0)) for k in sizes]
            return (np.array([1e-2, lr_decay, wd, 1e-10, float(maximize)]), np.zeros(1, np.uint32), *ps, *gs,
                    *sums, *steps(r, sizes)), {}

        return make

    def sgd_case(v, a, shapes):
        n = len(shapes[0])
        inplace = (*range(2, 2 + n), *(range(2 + 2 * n, 2 + 3 * n) if a[0] else ()))
        return KernelCase("sgd_multi_update_", sgd(*a), shapes, variant=v, inplace=inplace)

    def adam_case(v, a, shapes):
        n, runs = len(shapes[0]), 5 + bool(a[2:3] and a[2])  # the ticket (left 0), parameters, moments and counts
        return KernelCase("adam_multi_update_", adam(*a), shapes, variant=v,
                          inplace=(1, *range(4, 4 + n), *range(4 + 2 * n, 4 + runs * n)))

    def rmsprop_case(v, a, shapes):
        n, runs = len(shapes[0]), 4 + bool(a[1]) + bool(a[2])  # the ticket (left 0), parameters, state and counts
        return KernelCase("rmsprop_multi_update_", rmsprop(*a), shapes, variant=v,
                          inplace=(1, *range(4, 4 + n), *range(4 + 2 * n, 4 + runs * n)))

    def adagrad_case(v, a, shapes):
        n = len(shapes[0])
        return KernelCase("adagrad_multi_update_", adagrad(*a), shapes, variant=v,
                          inplace=(1, *range(2, 2 + n), *range(2 + 2 * n, 2 + 4 * n)))

    sgds = {"plain": (0.0, 0.0, 0.0, False), "momentum": (0.9, 0.1, 0.01, False), "nesterov": (0.9, 0.0, 0.01, True),
            "maximize": (0.9, 0.0, 0.01, False, True)}
    adams = {"adam": (0.0, False), "adam-l2": (0.01, False), "adamw": (0.01, True), "amsgrad": (0.01, False, True),
             "adamw-amsgrad-maximize": (0.01, True, True, True)}
    rmsprops = {"plain": (0.0, 0.0, False), "centered": (0.01, 0.0, True), "momentum": (0.0, 0.9, False),
                "centered-momentum-maximize": (0.01, 0.9, True, True)}
    adagrads = {"plain": (0.0, 0.0), "decay": (0.1, 0.01), "maximize": (0.0, 0.01, True)}
    def skipped(case, found):  # GradScaler's found_inf: 1 skips the whole step (nothing changes), 0 steps as usual
        make = case.make

        def make_skipped(r, d, sizes):
            args, kw = make(r, d, sizes)
            return args, {**kw, "skip": np.array([found], np.float32)}

        return dataclasses.replace(case, make=make_skipped, variant=f"{case.variant}-skip{found:g}")

    skips = [skipped(c, f) for c in (sgd_case("momentum", sgds["momentum"], MULTI),
                                     adam_case("adamw", adams["adamw"], MULTI),
                                     rmsprop_case("centered", rmsprops["centered"], MULTI),
                                     adagrad_case("decay", adagrads["decay"], MULTI)) for f in (0.0, 1.0)]
    return (skips + [sgd_case(v, a, MULTI) for v, a in sgds.items()] + [adam_case(v, a, MULTI) for v, a in adams.items()]
            + [rmsprop_case(v, a, MULTI) for v, a in rmsprops.items()]
            + [adagrad_case(v, a, MULTI) for v, a in adagrads.items()]
            + [sgd_case("momentum-many", sgds["momentum"], MANY), adam_case("adamw-many", adams["adamw"], MANY),
               adam_case("amsgrad-many", adams["amsgrad"], MANY),
               rmsprop_case("centered-momentum-many", rmsprops["centered-momentum-maximize"], MANY),
               adagrad_case("decay-many", adagrads["decay"], MANY)])


def _amp_unscale_cases():
    def make(bad):
        def build(r, d, sizes):
            gs = [_n(r, d, (k,), 1e3) for k in sizes]
            for g in gs[:1 if bad else 0]:
                if g.size:
                    g[g.size // 2] = bad  # one inf or NaN in the first gradient
            return (np.array(2.0 ** 10, np.float32), np.zeros(1, np.float32), *gs), {}  # the scale, found_inf
        return build

    return [KernelCase("amp_unscale_multi_", make(bad), shapes, variant=v,
                       inplace=(1, *range(2, 2 + len(shapes[0]))))
            for v, bad, shapes in (("finite", 0, MULTI), ("inf", np.inf, MULTI), ("nan", np.nan, MULTI),
                                   ("many", 0, MANY))] + [
        KernelCase("amp_update_scale_", _scale_update(found, tracker, growth, backoff), ((),), variant=v,
                   inplace=(0, 1), strided=False)
        for v, found, tracker, growth, backoff in (
            ("backoff", 1.0, 5, 2.0, 0.5), ("count", 0.0, 0, 2.0, 0.5), ("grow", 0.0, 2, 2.0, 0.5),
            ("odd-factors", 0.0, 2, 1.7, 0.3), ("odd-backoff", 1.0, 2, 1.7, 0.3), ("overflow", 0.0, 2, 1e38, 0.5))]


def _scale_update(found, tracker, growth, backoff):
    """GradScaler.update's arguments: a scale (65536; 3e38 for the overflow row), the tracker, found_inf, growth
    factor, backoff factor and an interval of 3."""
    def build(r, d, shape):
        scale = 3e38 if growth > 1e30 else 65536.0 * (1 + r.random())
        return (np.array(scale, np.float32), np.array(tracker, np.int32), np.array(found, np.float32), growth,
                backoff, 3), {}
    return build


CASES = [
    *_activation_cases(),
    *_bias_act_cases(),
    *_dropout_cases(),
    KernelCase("accumulate_", lambda r, d, s: ((_n(r, d, s), _n(r, d, s)), {}), POINTWISE, inplace=(0,)),
    KernelCase("copy_", lambda r, d, s: ((_n(r, d, s), _n(r, d, s)), {}), POINTWISE, inplace=(0,)),
    *_softmax_family(),
    *_loss_cases(),
    *_check_cases(),
    *_layer_norm_cases(),
    *_optim_cases(),
    *_multi_optim_cases(),
    *_amp_unscale_cases(),
]



def offset(a, xp=np):
    """The same values in a C-contiguous view one element into a buffer: contiguous, but (for a 16-byte aligned
    allocation) not 16-byte aligned, as ``buf[1:]``; ``xp`` is the array module of ``a``."""
    if not isinstance(a, xp.ndarray) or a.ndim == 0:
        return a
    buf = xp.empty(a.size + 1, a.dtype)
    view = buf[1:].reshape(a.shape)
    view[...] = a
    return view


def strided(a, xp=np):
    """The same values in a non-contiguous array (the transpose of a copy, or every other element of a buffer);
    ``xp`` is the array module of ``a`` (NumPy, or CuPy for device arrays)."""
    if not isinstance(a, xp.ndarray) or a.ndim == 0:
        return a
    if a.ndim >= 2:
        return xp.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)
    buf = xp.empty(a.shape[0] * 2, a.dtype)
    buf[::2] = a
    return buf[::2]
