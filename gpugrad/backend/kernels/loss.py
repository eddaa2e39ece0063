"""Launchers of loss.cu: softmax cross-entropy (class weights, ignore_index, label smoothing, the reduction in
the same launch) and the token log-probability it also computes (sign -1), forward and backward.
float16 and bfloat16 logits (C-contiguous, see reference.opmath's "mixed") run kernels of their own that compute in
float32: the loss (rows or reduced) and the logits' gradient come back in the logits' dtype, each rounded once, while
the class weights, the saved lse and aux and the upstream gradient are taken (and lse, aux returned) in float32."""
from __future__ import annotations

import math

from gpugrad.backend import reference
from gpugrad.backend.kernels.check import _check_status, _status
from gpugrad.backend.kernels.launch import _launch_rows
from gpugrad.backend.kernels.names import LOW_CTYPES
from gpugrad.backend.kernels.runtimes import runtime
from gpugrad.backend.kernels.validate import (CALLS, _check_2d, _check_float, _check_shapes, _describe, _in_math,
                                              _math_dtype, _rows_in)
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


def _is_low(a):
    return a.dtype.name in LOW_CTYPES


def _widens(x, *arrays):
    """Whether float16 / bfloat16 arrays take part beside float32-math logits x: then everything but x is taken in
    float32, which the low dtypes widen to exactly (reference.opmath's "mixed" arrays: the float32 saved lse and
    aux, the upstream gradient of a low-precision loss)."""
    return _math_dtype(x) == "float32" and any(_is_low(a) for a in (x, *arrays))


def _check_beside(name, x, *arrays):
    """The float arrays beside the logits x: of x's dtype, or, where low precision takes part (_widens), float32,
    float16 or bfloat16."""
    if not _widens(x, *arrays):
        _check_float(name, x, *arrays)
    elif any(a.dtype != "float32" and not _is_low(a) for a in arrays):
        raise TypeError(f"{name}: beside {x.dtype} logits of shape {tuple(x.shape)} the class weights, saved "
                        f"statistics and upstream gradient must be float32, float16 or bfloat16 (computed in "
                        f"float32), got {_describe(arrays)}; cast them with .astype('float32')")


def _widening_rows_in(name, x, row_vectors=(), col_vectors=()):
    """_rows_in where low precision takes part (_widens): x float16, bfloat16 or float32 (run in its own
    instantiation), per-row (rows,) and per-column (cols,) vectors (None allowed) returned in float32."""
    vectors = [a for a in (*row_vectors, *col_vectors) if a is not None]
    _check_2d(name, x)
    _check_float(name, x, low=True)
    _check_beside(name, x, *vectors)
    _check_shapes(name, x.shape[:1], *row_vectors)
    _check_shapes(name, x.shape[1:], *(c for c in col_vectors if c is not None))
    rt = runtime()
    CALLS[name] += 1
    vectors = (*row_vectors, *col_vectors)
    return (rt, rt.ascontiguousarray(x), *(None if a is None else rt.ascontiguousarray(_in_math(a, x)) for a in vectors))


def _xent_in(name, x, t, reduction, w, row_vectors=()):
    """Checked, C-contiguous (rt, x, w, *row_vectors, t): w (cols,) in x's math dtype (float32 for float16 and
    bfloat16 logits: class weights are never rounded to them, as the reference computes them), or None (a null
    pointer: all 1); the row vectors (the saved lse, the upstream gradient) in the math dtype (see _check_beside)."""
    _check_targets(name, x, t)
    _check_reduction(name, reduction)
    w = None if w is None else w.astype(_math_dtype(x), copy=False)
    rows_in = _widening_rows_in if _widens(x, *row_vectors) else _rows_in
    rt, x, *rv, w = rows_in(name, x, row_vectors=row_vectors, col_vectors=[w])
    return (rt, x, w, *rv, rt.ascontiguousarray(t.astype("int64", copy=False)))


def _ignore_args(ignore_index):
    return (0, 0) if ignore_index is None else (1, int(ignore_index))


def _xent_fwd(name, x, t, sign, reduction, status, site, w=None, ignore_index=None, smoothing=0.0):
    _check_status(name, status)
    rt, x, w, t = _xent_in(name, x, t, reduction, w)
    rows, math_dtype = x.shape[0], _math_dtype(x)
    # the loss rows (or the 0-d reduction) in x's dtype; lse, aux and the rows a reduction adds in the math dtype
    lse, aux = rt.empty((rows,), math_dtype), rt.empty((2,), math_dtype)
    total = rt.empty((rows,) if reduction == "none" else (), x.dtype)
    loss = None if reduction == "none" else rt.empty((rows,), math_dtype)  # 'none': the kernel stores into total
    if rows == 0:  # no launch: the sum of no rows is 0, their mean NaN (0 / 0)
        aux[...] = reference.xent_aux(rt.xp, x.astype(math_dtype, copy=False), t, w)  # no rows: nothing to copy
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
        _check_beside(name, x, g)
        _check_shapes(name, (), g)
        rt, x, w, lse, t = _xent_in(name, x, t, reduction, w, [lse])
        g = rt.ascontiguousarray(_in_math(g, x))
    if aux is None:  # called without the forward's (den, W): the same terms, from the reference, in the math dtype
        aux = reference.xent_aux(rt.xp, x.astype(_math_dtype(x), copy=False), t, w, ignore_index)
    _check_beside(name, x, aux)
    _check_shapes(name, (2,), aux)
    gx = rt.empty(x.shape, x.dtype)
    aux = rt.ascontiguousarray(_in_math(aux, x))
    _launch_rows(rt, "loss", "softmax_xent_bwd", x, (x, t, w, lse, g, aux, gx, x.shape[1], sign, _REDUCE[reduction],
                                                     *_ignore_args(ignore_index), float(smoothing)))
    return gx


def softmax_xent_fwd(xp, x, t, reduction="none", status=None, site=0, w=None, ignore_index=None, smoothing=0.0,
                     t_range=None):
    """(loss, lse, aux), loss_i = (1 - e) w[t_i] (log Σ - (x[i, t_i] - max)) + e / C Σ_c w_c (log Σ - (x[i, c] - max))
    (lse_i = max + log Σ; torch's class weights w, label smoothing e), 0 where t_i == ignore_index, reduced ('none' |
    'sum' | 'mean' over the summed row weights: 0-d) in the same launch; aux = (summed row weights, Σ w); NaN rows
    where t_i is outside [0, cols) and not ignored, recorded in status under site. ``t_range`` (the reference's
    host shortcut) is not read: the kernel reads every id itself."""
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

# launchers with float16 and bfloat16 kernels of their own (names.LOW_KERNELS): the logits (and their gradient, the
# loss) in the low dtype, the rest in float32 (the _KEEP_FLOAT32 results of reference.opmath's route)
NATIVE_LOW = ("softmax_xent_fwd", "softmax_xent_bwd", "token_logprob_fwd", "token_logprob_bwd")
opmath_all(globals(), native=dict.fromkeys(NATIVE_LOW, "mixed"))  # the others: float16 / bfloat16 in float32
