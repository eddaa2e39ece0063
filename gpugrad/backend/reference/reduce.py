"""References of reduce.cu: softmax, log_softmax and logsumexp over the rows of a 2-D array, forward and
backward; column sums."""
from __future__ import annotations

from gpugrad.backend.reference.common import _quiet, _s
from gpugrad.backend.reference.float16 import opmath_all


def _max_for_shift(xp, x):
    """Row max, keepdims; 0 for all -inf rows so that x - m stays -inf (not NaN) and the row's lse is -inf."""
    m = x.max(axis=-1, keepdims=True)
    return xp.where(m == -xp.inf, _s(x, 0), m)


def _shifted_log_sum(xp, x):
    """(x - m, m, log Σ e^(x - m)) over the rows (keepdims), m = _max_for_shift: log_softmax = (x - m) - log Σ, as
    torch computes it. NOTE: not x - lse with lse = m + log Σ, which rounds log Σ to an ulp of m (all of it for
    float32 logits ~1e8). A row holding +inf gets NaN (inf - inf), as torch's softmax family; an empty row -inf."""
    if x.shape[-1] == 0:
        m = xp.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
        return x.copy(), m, m - _s(x, xp.inf)
    m = _max_for_shift(xp, x)
    with _quiet(xp):
        d = x - m
        return d, m, xp.log(xp.exp(d).sum(axis=-1, keepdims=True))


def logsumexp_fwd(xp, x):
    """m + log Σ e^(x - m), shifted by the row max m, or by 0 where m is infinite (as torch's logsumexp): a row
    holding +inf gives inf (not inf - inf = NaN), an all -inf or empty row -inf, a row holding NaN NaN."""
    if x.shape[-1] == 0:
        return xp.full(x.shape[:-1], -xp.inf, dtype=x.dtype)
    m = x.max(axis=-1, keepdims=True)
    m = xp.where(xp.isinf(m), _s(x, 0), m)
    with _quiet(xp):
        return (xp.log(xp.exp(x - m).sum(axis=-1, keepdims=True)) + m)[..., 0]


def logsumexp_bwd(xp, x, lse, glse):
    with _quiet(xp):  # inf - inf where lse is +-inf: NaN, as torch
        return glse[:, None] * xp.exp(x - lse[:, None])


def softmax_fwd(xp, x):
    if x.shape[-1] == 0:
        return x.copy()
    with _quiet(xp):
        e = xp.exp(x - _max_for_shift(xp, x))
        return e / e.sum(axis=-1, keepdims=True)


def softmax_bwd(xp, y, gy):
    with _quiet(xp):  # an inf upstream gradient (inf soft targets): inf - inf is NaN, as torch, quietly
        return y * (gy - (gy * y).sum(axis=-1, keepdims=True))


def log_softmax_fwd(xp, x):
    d, _, log_sum = _shifted_log_sum(xp, x)
    with _quiet(xp):
        return d - log_sum


def log_softmax_bwd(xp, y, gy):
    with _quiet(xp):  # an inf upstream gradient (inf soft targets): inf - inf is NaN, as torch, quietly
        return gy - xp.exp(y) * gy.sum(axis=-1, keepdims=True)


def sum_rows(xp, g):
    return g.sum(axis=0)


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
