"""References of norm.cu: LayerNorm over the last axis, forward and backward."""
from __future__ import annotations

from gpugrad.backend.reference.common import _quiet, _s
from gpugrad.backend.reference.float16 import opmath_all


def _row_mean(x, keepdims=False):
    """sum / n, as the kernel computes it (and NaN, not a warning, over an empty axis)."""
    return x.sum(axis=-1, keepdims=keepdims) / _s(x, x.shape[-1])


def layer_norm_fwd(xp, x, w, b, eps):
    """(y, mean, rstd): y = (x - mean) * rstd * w + b over the last axis, rstd = 1 / sqrt(var + eps), var biased."""
    with _quiet(xp):
        mean = _row_mean(x)
        xc = x - mean[:, None]
        rstd = 1 / xp.sqrt(_row_mean(xc * xc) + _s(x, eps))
    y = xc * rstd[:, None]
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y, mean, rstd


def layer_norm_bwd(xp, x, w, mean, rstd, gy):
    """(gx, gw, gb): gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * w, xhat = (x - mean) * rstd."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = gy if w is None else gy * w
    with _quiet(xp):
        gx = rstd[:, None] * (g - _row_mean(g, True) - xhat * _row_mean(g * xhat, True))
    return gx, (gy * xhat).sum(axis=0), gy.sum(axis=0)


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
