"""References of loss.cu: softmax cross-entropy (class weights, ignore_index, label smoothing, reductions) and
the token log-probability, forward and backward."""
from __future__ import annotations

import numpy as np

from gpugrad.backend.reference.check import _record_range
from gpugrad.backend.reference.common import _quiet, _s
from gpugrad.backend.reference.float16 import opmath_all
from gpugrad.backend.reference.reduce import _shifted_log_sum

REDUCTIONS = ("none", "sum", "mean")


def _xent_rows(xp, x, t, w, ignore_index):
    """(wt, ignored, valid) per row: the weight w[t_i] of a valid, not ignored target (1 without w; 0 else), whether
    t_i == ignore_index (None: nothing is ignored) and whether t_i is in [0, cols) or ignored (never an index
    otherwise)."""
    cols = x.shape[1]
    w = None if w is None else w.astype(x.dtype, copy=False)
    ignored = t == ignore_index if ignore_index is not None else xp.zeros(t.shape, bool)
    valid = ((t >= 0) & (t < cols)) | ignored
    used = valid & ~ignored
    wt = xp.where(used, _s(x, 1), _s(x, 0)) if w is None else \
        xp.where(used, w[xp.where(used, t, 0)] if cols else _s(x, 0), _s(x, 0))
    return wt, ignored, valid


def xent_aux(xp, x, t, w=None, ignore_index=None):
    """(den, W) as a float array of 2: the sum of the row weights w[t_i] of the rows not ignored (the 'mean'
    divisor, as torch's) and the sum of the class weights (cols without w), in the sum's order."""
    wt, _, _ = _xent_rows(xp, x, t, w, ignore_index)
    wsum = _s(x, x.shape[1]) if w is None else w.astype(x.dtype, copy=False).sum()
    return xp.stack([wt.sum(), xp.asarray(wsum, dtype=x.dtype)]).astype(x.dtype)


def _reduce(xp, loss, reduction, den):
    """'none': the rows; 'sum' / 'mean': a 0-d array (the mean over den = 0 is NaN, as torch's 0 / 0)."""
    if reduction == "none":
        return loss
    total = xp.asarray(loss.sum())
    if reduction == "sum":
        return total
    with _quiet(xp):
        return xp.asarray(total / den)  # (NumPy: a 0-d array over a scalar gives a scalar)


def _chosen_log_prob(xp, x, t, w, ignore_index, smoothing, status, site):
    """(-loss, lse, rows): -loss_i = (1 - e) w_t logp_i[t_i] + e / C sum_c w_c logp_i[c] with logp_i = (x_i - m_i) -
    log Σ_i (_shifted_log_sum: torch's order of operations), NaN where t_i is invalid, 0 where ignored; lse_i = m_i +
    log Σ_i for the VJP; out-of-range ids t_i (not ignored) are recorded in status."""
    d, m, log_sum = _shifted_log_sum(xp, x)
    rows = wt, ignored, valid = _xent_rows(xp, x, t, w, ignore_index)
    _record_range(status, site, t[~ignored], x.shape[1])
    dt = d[xp.arange(x.shape[0]), xp.where(valid & ~ignored, t, 0)] if x.shape[1] else xp.zeros(t.shape, x.dtype)
    with _quiet(xp):
        ls = log_sum[:, 0]
        logp = _s(x, 1.0 - smoothing) * wt * (dt - ls)
        if smoothing:
            wc = xp.ones(x.shape[1], x.dtype) if w is None else w.astype(x.dtype, copy=False)
            logp = logp + _s(x, smoothing / max(x.shape[1], 1)) * ((d * wc).sum(axis=-1) - wc.sum() * ls)
        logp = xp.where(valid, xp.where(ignored, _s(x, 0), logp), _s(x, xp.nan))
        return logp, (m + log_sum)[:, 0], rows


def _plain(xp, x, t, w, ignore_index, smoothing, t_range=None):
    """Whether a host cross-entropy is the common case: no class weights or smoothing, every target a class and none
    ignored. Its general formulas then multiply by exact 1s and select nothing, so the plain ones below give the same
    bits in a third of the NumPy calls (the MLP step's loss at batch 64: ~20 calls of a few µs each saved).
    ``t_range``: t's (min, max) when the caller has them (the op's range check), else reduced here."""
    if xp is not np or w is not None or smoothing or not x.shape[1] or not t.size or x.shape[0] >= 1 << 24:
        return False  # (row counts from 2**24 on are not exact in float32 sums of row weights)
    lo, hi = t_range if t_range is not None else (t.min(), t.max())
    return 0 <= lo and hi < x.shape[1] and (ignore_index is None or not lo <= ignore_index <= hi)


def softmax_xent_fwd(xp, x, t, reduction="none", status=None, site=0, w=None, ignore_index=None, smoothing=0.0,
                     t_range=None):
    """(loss, lse, aux): loss_i = -(1 - e) w[t_i] log_softmax(x)[i, t_i] - e / C Σ_c w_c log_softmax(x)[i, c] (torch's
    class weights w, label smoothing e), 0 where t_i == ignore_index, NaN where t_i is outside [0, cols) (recorded in
    status), reduced by ``reduction`` ('mean' divides by the summed row weights); lse per row; aux = xent_aux.
    ``t_range``: t's (min, max), known to the caller (see _plain)."""
    if _plain(xp, x, t, w, ignore_index, smoothing, t_range):
        d, m, log_sum = _shifted_log_sum(xp, x)
        aux = np.array(x.shape, dtype=x.dtype)  # (rows, cols): each row's weight is 1, each class's too
        with _quiet(xp):
            logp = d[np.arange(x.shape[0]), t] - log_sum[:, 0]
            return _reduce(xp, -logp, reduction, aux[0]), (m + log_sum)[:, 0], aux
    logp, lse, _ = _chosen_log_prob(xp, x, t, w, ignore_index, smoothing, status, site)
    aux = xent_aux(xp, x, t, w, ignore_index)
    return _reduce(xp, -logp, reduction, aux[0]), lse, aux


def token_logprob_fwd(xp, x, t, status=None, site=0):
    """(logp, lse): logp_i = log_softmax(x)[i, t_i], NaN where t_i is out of range."""
    logp, lse, _ = _chosen_log_prob(xp, x, t, None, None, 0.0, status, site)
    return logp, lse


def _xent_grad(xp, x, t, lse, g, w=None, ignore_index=None, smoothing=0.0, aux=None):
    """g_i * (p_i a_i - onehot(t_i) b_i - e_i w) with p_i = softmax(x_i), b_i = (1 - e) w[t_i], e_i = e / C (0 for an
    ignored row) and a_i = b_i + e_i Σ w; NaN rows for invalid t, 0 * p_i for ignored ones (NaN where p_i is)."""
    wt, ignored, valid = _xent_rows(xp, x, t, w, ignore_index)
    onehot = xp.arange(x.shape[1])[None, :] == t[:, None]
    g = xp.where(valid, g, _s(x, xp.nan))
    b = _s(x, 1.0 - smoothing) * wt
    with _quiet(xp):  # inf - inf where lse is +-inf: NaN, as torch's gradient
        p = xp.exp(x - lse[:, None])
        if not smoothing:
            d = p * b[:, None] - xp.where(onehot, b[:, None], _s(x, 0))
        else:
            wsum = (aux if aux is not None else xent_aux(xp, x, t, w, ignore_index))[1]
            e = xp.where(ignored, _s(x, 0), _s(x, smoothing / max(x.shape[1], 1)))
            wc = xp.ones(x.shape[1], x.dtype) if w is None else w.astype(x.dtype, copy=False)
            d = p * (b + e * wsum)[:, None] - xp.where(onehot, b[:, None], _s(x, 0)) - e[:, None] * wc
        # an ignored row gets 0 * p, as torch's log_softmax backward of its zero gradient: NaN where p is NaN
        return xp.where(ignored[:, None], p * _s(x, 0), g[:, None] * d)


def softmax_xent_bwd(xp, x, t, lse, gloss, reduction="none", w=None, ignore_index=None, smoothing=0.0, aux=None):
    """gloss: (rows,) for 'none', 0-d for 'sum' and 'mean' (whose rows each get gloss / den, den = aux[0], the forward's
    summed row weights; recomputed when aux is None)."""
    if _plain(xp, x, t, w, ignore_index, smoothing):  # softmax(x) - onehot(t), times each row's upstream gradient
        with _quiet(xp):
            gloss = gloss / (aux[0] if aux is not None else _s(x, x.shape[0])) if reduction == "mean" else gloss
            p = np.exp(x - lse[:, None])
            p[np.arange(x.shape[0]), t] -= 1
            p *= gloss[:, None] if gloss.ndim else gloss
            return p
    if reduction != "none":
        if reduction == "mean":
            den = (aux if aux is not None else xent_aux(xp, x, t, w, ignore_index))[0]
            with _quiet(xp):
                gloss = gloss / den
        gloss = xp.broadcast_to(gloss, t.shape)
    return _xent_grad(xp, x, t, lse, gloss, w, ignore_index, smoothing, aux)


def token_logprob_bwd(xp, x, t, lse, glogp):
    return _xent_grad(xp, x, t, lse, -glogp)


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
