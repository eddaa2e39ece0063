"""One row per kernel launcher (``backend/kernels.py``): how to build its inputs, the shapes to run, which arguments
it updates in place. ``test_kernel_emulated.py`` runs every row through the CPU emulator against
``backend/reference.py``; GPU parity tests can run the same rows on CuPy.

Shapes are chosen around the launch shapes: columns 1, 31, 33 (a warp +- 1), 1000, 4097 (> 4096: a second
register chunk for doubles and block 1024) and 8200 (> 8192: a second chunk for floats); rows 1, 3, 65 (65 rows
make the column kernels split rows into two chunks, then sum the partials again); and empty arrays.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Callable

import numpy as np

from gpugrad.backend import reference as ref

ROWS = ((1, 1), (3, 31), (65, 33), (3, 1000), (1, 4097), (2, 8200), (0, 5), (3, 0))  # row kernels (rows, cols)
COLUMNS = ((1, 1), (65, 33), (3, 1000), (300, 7), (1000, 3), (0, 5), (3, 0))  # several chunks and passes
POINTWISE = ((1,), (65, 33), (4097,), (2, 3, 33), (0,))  # elementwise: any shape
BIAS = ((1, 1), (65, 33), (2, 3, 33), (3, 1000), (0, 4), (3, 0))  # (..., C) with a bias of (C,)
FLAT = ((1,), (1000,), (65, 33), (4097,), (0,))  # optimizer buffers


DTYPES = (np.float32, np.float64)
# Per dtype (rtol, atol): the kernels and references round differently (reduction order, fma, library exp).
TOLERANCE = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-12, 1e-13)}
# gelu's derivative at x << 0 is a difference of two terms of size ~1 that cancel to ~1e-11: in float32 any two
# correct implementations differ by the rounding of the terms (~1e-7 * |x|^3 * |gy|), whatever the true value.
GELU_TOLERANCE = {np.dtype(np.float32): (2e-5, 3e-5), np.dtype(np.float64): (1e-12, 1e-12)}


@dataclasses.dataclass(frozen=True)
class KernelCase:
    name: str  # the launcher in backend/kernels.py == the function in backend/reference.py
    make: Callable  # make(rng, dtype, shape) -> (args, kwargs); args[0] is xp, filled in by the runner
    shapes: tuple
    variant: str = ""  # tells rows of one launcher apart (activation, flags)
    inplace: tuple = ()  # positions in args (after xp) of arrays the call updates in place
    strided: bool = True  # also run with non-contiguous array inputs (never the in-place ones)
    tolerance: dict | None = None  # {dtype: (rtol, atol)} instead of TOLERANCE

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


def _targets(rng, rows, cols, invalid=False):
    t = rng.integers(0, max(cols, 1), rows).astype(np.int64)
    if invalid and rows >= 3:  # NaN rows, never an out-of-bounds read
        t[0], t[-1] = -1, cols
    return t


def _activation_cases():
    fwd = {"relu": ref.relu_fwd, "gelu": ref.gelu_fwd, "sigmoid": ref.sigmoid_fwd, "tanh": ref.tanh_fwd}
    out = []
    for act, f in fwd.items():
        out.append(KernelCase(f"{act}_fwd", lambda r, d, s: ((_u(r, d, s),), {}), POINTWISE))
        if act == "gelu":  # gelu saves its input
            make = lambda r, d, s: ((_u(r, d, s), _n(r, d, s, 1.0)), {})
        else:  # the others save their output
            make = lambda r, d, s, f=f: ((f(np, _u(r, d, s)), _n(r, d, s, 1.0)), {})
        out.append(KernelCase(f"{act}_bwd", make, POINTWISE, tolerance=GELU_TOLERANCE if act == "gelu" else None))
    return out


def _bias_act_cases():
    out = []
    for act in ("identity", "relu", "gelu", "sigmoid", "tanh"):
        out.append(KernelCase("bias_act_fwd", lambda r, d, s, a=act: ((_u(r, d, s), _u(r, d, s[-1:]), a), {}),
                              BIAS, variant=act))

        def make_bwd(r, d, s, a=act):
            _, saved = ref.bias_act_fwd(np, _u(r, d, s), _u(r, d, s[-1:]), a)
            return (saved, _n(r, d, s, 1.0), a), {}

        out.append(KernelCase("bias_act_bwd", make_bwd, BIAS, variant=act,
                              tolerance=GELU_TOLERANCE if act == "gelu" else None))
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

    return [
        KernelCase("softmax_fwd", lambda r, d, s: ((_n(r, d, s),), {}), ROWS),
        KernelCase("softmax_fwd", lambda r, d, s: ((masked(r, d, s),), {}), ROWS[1:4], variant="masked"),
        KernelCase("softmax_bwd", lambda r, d, s: ((ref.softmax_fwd(np, _n(r, d, s)), _n(r, d, s, 1.0)), {}), ROWS),
        KernelCase("log_softmax_fwd", lambda r, d, s: ((_n(r, d, s),), {}), ROWS),
        KernelCase("log_softmax_fwd", lambda r, d, s: ((masked(r, d, s),), {}), ROWS[1:4], variant="masked"),
        KernelCase("log_softmax_bwd",
                   lambda r, d, s: ((ref.log_softmax_fwd(np, _n(r, d, s)), _n(r, d, s, 1.0)), {}), ROWS),
        KernelCase("logsumexp_fwd", lambda r, d, s: ((_n(r, d, s),), {}), ROWS),
        KernelCase("logsumexp_fwd", lambda r, d, s: ((np.full(s, -np.inf, d),), {}), ((3, 31),), variant="all-inf"),
        # |x| ~ 1e3: exp(x) overflows without the max subtraction
        KernelCase("logsumexp_fwd", lambda r, d, s: ((_n(r, d, s, 1e3),), {}), ROWS[1:5], variant="large"),
        KernelCase("softmax_fwd", lambda r, d, s: ((_n(r, d, s, 1e3),), {}), ROWS[1:5], variant="large"),
        KernelCase("logsumexp_bwd", lse_inputs, ROWS),
        KernelCase("sum_rows", lambda r, d, s: ((_n(r, d, s, 1.0),), {}), COLUMNS),
    ]


def _loss_cases():
    out = []
    for name, sign in (("softmax_xent", 1), ("token_logprob", -1)):
        for invalid in (False, True):
            variant = "invalid-targets" if invalid else ""
            out.append(KernelCase(f"{name}_fwd", lambda r, d, s, i=invalid: (
                (_n(r, d, s), _targets(r, s[0], s[1], i)), {}), ROWS, variant=variant))

            def make_bwd(r, d, s, i=invalid):
                x, t = _n(r, d, s), _targets(r, s[0], s[1], i)
                return (x, t, ref.logsumexp_fwd(np, x), _n(r, d, s[:1], 1.0)), {}

            out.append(KernelCase(f"{name}_bwd", make_bwd, ROWS, variant=variant))
    return out


def _layer_norm_cases():
    def fwd(r, d, s, affine=True):
        w, b = (_n(r, d, s[1:], 1.0), _n(r, d, s[1:], 1.0)) if affine else (None, None)
        return (_n(r, d, s) + d(1.5), w, b, 1e-5), {}

    def bwd(r, d, s, affine=True):
        x = _n(r, d, s) + d(1.5)
        w = _n(r, d, s[1:], 1.0) if affine else None
        _, mean, rstd = ref.layer_norm_fwd(np, x, w, None, 1e-5)
        return (x, w, mean, rstd, _n(r, d, s, 1.0)), {}

    return [
        KernelCase("layer_norm_fwd", fwd, ROWS),
        KernelCase("layer_norm_fwd", lambda r, d, s: fwd(r, d, s, False), ROWS[:3], variant="no-affine"),
        KernelCase("layer_norm_bwd", bwd, ROWS + ((300, 7),)),
        KernelCase("layer_norm_bwd", lambda r, d, s: bwd(r, d, s, False), ROWS[:3], variant="no-affine"),
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


CASES = [
    *_activation_cases(),
    *_bias_act_cases(),
    *_dropout_cases(),
    KernelCase("accumulate_", lambda r, d, s: ((_n(r, d, s), _n(r, d, s)), {}), POINTWISE, inplace=(0,)),
    *_softmax_family(),
    *_loss_cases(),
    *_layer_norm_cases(),
    *_optim_cases(),
]



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
