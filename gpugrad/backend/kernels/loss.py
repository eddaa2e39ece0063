"""Launchers of loss.cu: softmax cross-entropy (class weights, ignore_index, label smoothing, the reduction in
the same launch) and the token log-probability it also computes (sign -1), forward and backward."""
from __future__ import annotations

import math

from gpugrad.backend import reference
from gpugrad.backend.kernels.check import _check_status, _status
from gpugrad.backend.kernels.launch import _launch_rows
from gpugrad.backend.kernels.validate import _check_float, _check_shapes, _describe, _rows_in
from gpugrad.backend.reference.float16 import opmath_all
from gpugrad.backend.reference.loss import REDUCTIONS


def _check_reduction(name, reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


_REDUCE = {"none": 0, "sum": 1, "mean": 2}  # the kernels' reduce parameter


def _check_targets(name, x, t):
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer class ids, got {_describe([t])}")
    _check_shapes(name, x.shape[:1], t)


def _xent_in(name, x, t, reduction, w, row_vectors=()):
    """Checked, C-contiguous (rt, x, w, *row_vectors, t): w (cols,) of x's dtype, or None (a null pointer: all 1)."""
    _check_targets(name, x, t)
    _check_reduction(name, reduction)
    w = None if w is None else w.astype(x.dtype, copy=False)  # class weights in x's dtype, as the reference
    rt, x, *rv, w = _rows_in(name, x, row_vectors=row_vectors, col_vectors=[w])
    return (rt, x, w, *rv, rt.ascontiguousarray(t.astype("int64", copy=False)))


def _ignore_args(ignore_index):
    return (0, 0) if ignore_index is None else (1, int(ignore_index))


def _xent_fwd(name, x, t, sign, reduction, status, site, w=None, ignore_index=None, smoothing=0.0):
    _check_status(name, status)
    rt, x, w, t = _xent_in(name, x, t, reduction, w)
    rows = x.shape[0]
    loss, lse, aux = rt.empty((rows,), x.dtype), rt.empty((rows,), x.dtype), rt.empty((2,), x.dtype)
    total = loss if reduction == "none" else rt.empty((), x.dtype)
    if rows == 0:  # no launch: the sum of no rows is 0, their mean NaN (0 / 0)
        aux[...] = reference.xent_aux(rt.xp, x, t, w)
        if reduction != "none":
            total[...] = 0.0 if reduction == "sum" else math.nan
        return total, lse, aux
    _launch_rows(rt, "loss", "softmax_xent_fwd", x, (x, t, w, loss, lse, total, aux, _status(rt, status), x.shape[1],
                                                     sign, _REDUCE[reduction], *_ignore_args(ignore_index),
                                                     float(smoothing), int(site)))
    return total, lse, aux


def _xent_bwd(name, x, t, lse, g, sign, reduction, w=None, ignore_index=None, smoothing=0.0, aux=None):
    if reduction == "none":
        rt, x, w, lse, g, t = _xent_in(name, x, t, reduction, w, [lse, g])
    else:  # the 0-d upstream gradient of the sum or mean, read by the kernel
        _check_float(name, x, g)
        _check_shapes(name, (), g)
        rt, x, w, lse, t = _xent_in(name, x, t, reduction, w, [lse])
        g = rt.ascontiguousarray(g)
    if aux is None:  # called without the forward's (den, W): the same terms, from the reference
        aux = reference.xent_aux(rt.xp, x, t, w, ignore_index)
    _check_float(name, x, aux)
    _check_shapes(name, (2,), aux)
    gx = rt.empty(x.shape, x.dtype)
    _launch_rows(rt, "loss", "softmax_xent_bwd", x, (x, t, w, lse, g, rt.ascontiguousarray(aux), gx, x.shape[1], sign,
                                                     _REDUCE[reduction], *_ignore_args(ignore_index), float(smoothing)))
    return gx


def softmax_xent_fwd(xp, x, t, reduction="none", status=None, site=0, w=None, ignore_index=None, smoothing=0.0):
    """(loss, lse, aux), loss_i = (1 - e) w[t_i] (log Σ - (x[i, t_i] - max)) + e / C Σ_c w_c (log Σ - (x[i, c] - max))
    (lse_i = max + log Σ; torch's class weights w, label smoothing e), 0 where t_i == ignore_index, reduced ('none' |
    'sum' | 'mean' over the summed row weights: 0-d) in the same launch; aux = (summed row weights, Σ w); NaN rows
    where t_i is outside [0, cols) and not ignored, recorded in status under site."""
    return _xent_fwd("softmax_xent_fwd", x, t, 1.0, reduction, status, site, w, ignore_index, smoothing)


def softmax_xent_bwd(xp, x, t, lse, gloss, reduction="none", w=None, ignore_index=None, smoothing=0.0, aux=None):
    """gx = g_i * (softmax(x)_i a_i - onehot(t_i) b_i - e_i w) (reference._xent_grad), g_i = gloss_i ('none') or
    gloss / aux[0] ('mean', 0-d gloss) or gloss ('sum'); NaN rows for invalid targets, 0 rows for ignored ones."""
    return _xent_bwd("softmax_xent_bwd", x, t, lse, gloss, 1.0, reduction, w, ignore_index, smoothing, aux)


def token_logprob_fwd(xp, x, t, status=None, site=0):
    """(logp, lse), logp_i = log_softmax(x)[i, t_i] = (x[i, t_i] - max) - log Σ (the cross-entropy kernel, sign -1)."""
    return _xent_fwd("token_logprob_fwd", x, t, -1.0, "none", status, site)[:2]


def token_logprob_bwd(xp, x, t, lse, glogp):
    """gx = glogp_i * (onehot(t_i) - softmax(x)_i)."""
    return _xent_bwd("token_logprob_bwd", x, t, lse, glogp, -1.0, "none")

opmath_all(globals())  # float16 in float32, exactly as the references (reference.opmath)
