"""Array-module references for every kernel in ``kernels/*.cu`` (``xp`` is numpy or cupy; no CuPy import here).

Each function has the signature of its launcher in ``backend/kernels.py``; the CPU backend runs these, and the
tests hold the kernels to them. They accept any layout, keep the input dtype (scalars are rounded to it first, as
the kernels do) and follow the kernels' conventions for the edge cases: NaN for out-of-range class ids, -inf
logsumexp for all -inf rows, a mask and not a NaN-propagating product in dropout.
float16 is handled here once, by :func:`opmath`, which wraps every function of this module and every launcher:
float16 arrays are computed in float32 and the results rounded back, the same on every device.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import math

import numpy as np

_GELU_K, _GELU_A = 0.7978845608028654, 0.044715  # sqrt(2 / pi) and the cubic coefficient of the tanh approximation


def _quiet(xp):
    """NumPy warns on exp overflow (sigmoid of very negative x is a correct 0); CuPy has no errstate."""
    errstate = getattr(xp, "errstate", None)
    return errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore") if errstate else contextlib.nullcontext()


# ---- float16: float32 math, float16 storage, on every device ---------------------------------------------------
# PyTorch's "opmath": float16 is a storage type. The kernels are float/double templates and NumPy's float16 math
# rounds every intermediate, so both implementations compute float16 inputs in float32 through the one wrapper
# below and return float16 results: the CPU and CUDA results of a float16 op are the float32 result, rounded.
_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)
# Results an op only saves for its own backward stay float32, as PyTorch keeps layer norm's mean/rstd: a float16
# mean or rstd loses the digits that xhat = (x - mean) * rstd needs, and a float16 lse (|lse| ~ 10) shifts every
# probability exp(x - lse) of the cross-entropy gradient by up to ~4 float16 ulps.
_KEEP_FLOAT32 = {"layer_norm_fwd": (1, 2), "softmax_xent_fwd": (1, 2), "token_logprob_fwd": (1,)}
_IN_PLACE = {"accumulate_": 0, "copy_": 0}  # the argument a function updates in place (and returns)
# Optimizer updates refuse float16 parameters instead of computing them in float32 in place: p and the state would
# still be stored in float16, where Adam's (1 - beta2) * g^2 rounds to 0 for |g| < ~5e-3 (float16 stops at 6e-8;
# then lr * m / eps explodes) and a step below half an ulp of p (p ~ 1: |lr * d| < 5e-4) is rounded away, so
# training stalls or diverges silently. float32 master parameters (.float()) are the standard fix.
_UPDATES = {"sgd_update_": "SGD", "adam_update_": "Adam/AdamW", "sgd_multi_update_": "SGD",
            "adam_multi_update_": "Adam/AdamW", "rmsprop_multi_update_": "RMSprop", "adagrad_multi_update_": "Adagrad"}


def float16_params_error(optimizer, shape, dtype) -> TypeError:
    """The one refusal of float16 parameters, raised by the optimizers and by both implementations of the updates."""
    return TypeError(f"{optimizer}: got a parameter of shape {tuple(shape)} and dtype {np.dtype(dtype)}; float16 "
                     "parameters are not supported on any device (float16 steps and optimizer state round small "
                     "updates and Adam's small g^2 to 0): keep float32 master parameters with p.float() (or "
                     "model.float()) before building the optimizer")


def _narrow(out, keep, seen):
    """float32 results back to float16 (one copy per distinct array: bias_act returns y twice)."""
    if isinstance(out, tuple):
        return tuple(o if i in keep else _narrow(o, (), seen) for i, o in enumerate(out))
    return seen.setdefault(id(out), out.astype(_HALF)) if getattr(out, "dtype", None) == _FLOAT else out


def opmath(fn):
    """Wrap a kernel function ``fn(xp, *arrays, **params)`` (a reference here, a launcher in kernels.py) so that
    float16 array arguments are computed in float32; when the first array argument is float16, float32 results
    come back as float16 (but for ``_KEEP_FLOAT32``). Without float16 arguments ``fn`` runs as it is."""
    name = fn.__name__
    keep, in_place = _KEEP_FLOAT32.get(name, ()), _IN_PLACE.get(name)

    @functools.wraps(fn)
    def run(xp, *args, **params):
        if not any(getattr(a, "dtype", None) == _HALF for a in args):
            return fn(xp, *args, **params)
        if name in _UPDATES:
            half = next(a for a in args if getattr(a, "dtype", None) == _HALF)  # multi-tensor: not args[0]
            raise float16_params_error(f"{_UPDATES[name]} ({name})", half.shape, half.dtype)
        first = next(a for a in args if hasattr(a, "dtype"))
        wide = tuple(a.astype(_FLOAT) if getattr(a, "dtype", None) == _HALF else a for a in args)
        out = fn(xp, *wide, **params)
        if in_place is not None:  # the caller's buffer keeps its identity: the float32 sum is written back into it
            args[in_place][...] = wide[in_place]
            return args[in_place]
        return _narrow(out, keep, {}) if first.dtype == _HALF else out

    return run


def opmath_array(a):
    """``a`` in the dtype the kernels compute it in (float16 -> float32, as :func:`opmath`), for an op that keeps
    a result beyond one call in that precision (logsumexp's saved lse)."""
    return a.astype(_FLOAT) if a.dtype == _HALF else a


def opmath_all(namespace):
    """Wrap every kernel function of a module (public, first parameter ``xp``) with :func:`opmath`; called at the
    end of this module and of kernels.py, so the references and the launchers take float16 the same way."""
    for name, f in list(namespace.items()):
        if inspect.isfunction(f) and not name.startswith("_") and f.__code__.co_varnames[:1] == ("xp",):
            namespace[name] = opmath(f)


_BITS = {2: np.int16, 4: np.int32, 8: np.int64}  # same-size integer views of float16/32/64


def _s(x, value):
    """A scalar rounded to x's dtype, so arithmetic stays in x's precision whatever the NumPy promotion rules."""
    return x.dtype.type(value)


# ---- elementwise: the pointwise ops of ops/declarations.py ----------------------------------------------------
# <op>_fwd(xp, x, *params) = f(x); <op>_bwd(xp, saved, g, *params) = g * f'(x) from what the op saves (x or y):
# the VJP with g = gy, the JVP with g = a tangent. Written against xp so the double backward can run the same formula
# on Tensors (autograd/tensor_xp.py). Each mirrors its pw:: struct in kernels/elementwise.cu.
def relu_fwd(xp, x):
    return xp.maximum(x, _s(x, 0))  # NaN passes through, as torch.relu


def relu_bwd(xp, y, gy):
    # gx = 0 where y <= 0 (subgradient 0 at 0), else gy, as torch's threshold_backward and the kernel: a select, so
    # an inf/NaN gy is dropped where y <= 0 and a NaN y passes gy (gy * (y > 0) would give NaN, then 0).
    if xp is not np:
        return xp.where(y <= 0, 0, gy)
    # NOTE: a bit mask, not np.where, which is ~6x slower: all-ones where gy is kept, zeros (+0.0) where not, ANDed
    # into gy's bits; ~1.1x the time of the product (benchmarks: 512x1024 float32).
    bits = _BITS[gy.dtype.itemsize]
    mask = xp.asarray(xp.subtract(y <= 0, 1, dtype=bits))  # 0 - 1 = all ones where y > 0 or NaN, 1 - 1 = 0 where
    # y <= 0 (asarray: a 0-d y gives a NumPy scalar)
    return xp.bitwise_and(gy.view(bits), mask, out=mask).view(gy.dtype)


def gelu_fwd(xp, x):
    with _quiet(xp):  # x^3 overflows for |x| > ~5e102 (float64) / 7e12 (float32): tanh(+-inf) = +-1 is still right
        return _s(x, 0.5) * x * (1 + xp.tanh(_s(x, _GELU_K) * (x + _s(x, _GELU_A) * x * x * x)))


def gelu_bwd(xp, x, gy):
    k, a = _s(x, _GELU_K), _s(x, _GELU_A)
    with _quiet(xp):  # as gelu_fwd (where x^2 overflows too, 0 * inf is NaN: torch's gradient is NaN there too)
        x2 = x * x
        t = xp.tanh(k * (x + a * x2 * x))
        return gy * (_s(x, 0.5) * (1 + t) + _s(x, 0.5) * x * (1 - t * t) * k * (1 + _s(x, 3) * a * x2))


# W. J. Cody's rational approximations of erf (Math. Comp. 23, 1969; SPECFUN CALERF), within 3 ulp of the float64 erf
# (tests/nn/test_nn.py holds them to math.erf): erf on |x| <= 0.5, erfc on (0.5, 4] and beyond, where exp(-x^2) is
# split as exp(-s^2) exp(-(x - s)(x + s)), s = x rounded down to 1/16, so x^2 adds no rounding error.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03,
          1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
          8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
          2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
          3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
          6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
          2.33520497626869185e-3)
_SQRT1_2, _INV_SQRT_PI, _INV_SQRT_2PI = 0.7071067811865476, 0.5641895835477563, 0.3989422804014327


def _ratio(z, num, den, lead):
    """(((lead z + num0) z + num1) z + ...) / (((z + den0) z + den1) z + ...): Cody's Horner form."""
    xn, xd = z * lead, z
    for a, b in zip(num[:-1], den[:-1]):
        xn, xd = (xn + a) * z, (xd + b) * z
    return (xn + num[-1]) / (xd + den[-1])


def _erf(xp, x):
    """erf(x) on arrays (each of Cody's ranges computed on its own elements only); on Tensors (autograd's
    ``tensor_xp``, for double backward) the differentiable erf op."""
    if hasattr(xp, "erf"):
        return xp.erf(x)
    x = xp.asarray(x)  # NumPy gives 0-d results as scalars
    y, out = xp.abs(x), x.copy()  # NaN stays NaN
    with _quiet(xp):
        s = y <= 0.5
        xs = x[s]
        out[s] = xs * _ratio(xs * xs, _ERF_A[:4], _ERF_B, _ERF_A[4])
        for m, far in ((~s & (y <= 4), False), (y > 4, True)):
            xm, ym = x[m], y[m]
            z = 1 / (ym * ym)
            r = (_s(x, _INV_SQRT_PI) - z * _ratio(z, _ERF_P[:5], _ERF_Q, _ERF_P[5])) / ym if far else \
                _ratio(ym, _ERF_C[:8], _ERF_D, _ERF_C[8])
            sq = xp.floor(ym * 16) / 16
            erfc = xp.where(ym >= 27, _s(x, 0), xp.exp(-sq * sq) * xp.exp(-(ym - sq) * (ym + sq)) * r)
            out[m] = xp.where(xm < 0, erfc - 1, 1 - erfc)
    return out


def erf_fwd(xp, x):
    return _erf(xp, x)


def erf_bwd(xp, x, g):
    with _quiet(xp):
        return g * (_s(x, 2 * _INV_SQRT_PI) * xp.exp(-(x * x)))


def gelu_erf_fwd(xp, x):
    """GELU, exact (torch's default approximate='none'): x Φ(x) = x/2 (1 + erf(x / sqrt 2)), in torch's order."""
    return x * _s(x, 0.5) * (1 + _erf(xp, x * _s(x, _SQRT1_2)))


def gelu_erf_bwd(xp, x, g):
    """g (Φ(x) + x φ(x)), φ the standard normal density."""
    with _quiet(xp):  # x^2 overflows to inf for huge |x|: exp(-inf) = 0, the right limit
        cdf = _s(x, 0.5) * (1 + _erf(xp, x * _s(x, _SQRT1_2)))
        return g * (cdf + x * (xp.exp(_s(x, -0.5) * x * x) * _s(x, _INV_SQRT_2PI)))


def sigmoid_fwd(xp, x):
    with _quiet(xp):
        return 1 / (1 + xp.exp(-x))


def sigmoid_bwd(xp, y, gy):
    return gy * y * (1 - y)


def tanh_fwd(xp, x):
    return xp.tanh(x)


def tanh_bwd(xp, y, gy):
    return gy * (1 - y * y)


def softplus_fwd(xp, x, beta, threshold):
    with _quiet(xp):  # exp overflows on the branch where() does not take
        return xp.where(x * beta > threshold, x, xp.log1p(xp.exp(x * beta)) / beta)


def softplus_bwd(xp, x, g, beta, threshold):
    with _quiet(xp):
        z = xp.exp(x * beta)
        return xp.where(x * beta > threshold, g, g * z / (z + 1))


def silu_fwd(xp, x):
    with _quiet(xp):
        return x / (1 + xp.exp(-x))


def silu_bwd(xp, x, g):
    s = sigmoid_fwd(xp, x)
    return g * s * (1 + x * (1 - s))


def leaky_relu_fwd(xp, x, negative_slope):
    return xp.where(x > 0, x, x * negative_slope)


def leaky_relu_bwd(xp, x, g, negative_slope):
    return xp.where(x > 0, g, g * negative_slope)


def elu_fwd(xp, x, alpha):
    with _quiet(xp):
        return xp.where(x > 0, x, xp.expm1(x) * alpha)


def elu_bwd(xp, x, g, alpha):
    with _quiet(xp):
        return xp.where(x > 0, g, g * alpha * xp.exp(x))


def sin_fwd(xp, x):
    return xp.sin(x)


def sin_bwd(xp, x, g):
    return g * xp.cos(x)


def cos_fwd(xp, x):
    return xp.cos(x)


def cos_bwd(xp, x, g):
    return -g * xp.sin(x)


def log1p_fwd(xp, x):
    with _quiet(xp):
        return xp.log1p(x)


def log1p_bwd(xp, x, g):
    return g / (1 + x)


def expm1_fwd(xp, x):
    with _quiet(xp):
        return xp.expm1(x)


def expm1_bwd(xp, y, g):
    return g * (y + 1)


def identity_fwd(xp, z):
    return z


def identity_bwd(xp, s, gy):
    return gy.copy()


def bias_act_fwd(xp, x, b, act, *params):
    """(y, saved): y = act(x + b); saved = z = x + b for an act whose g * f' reads its input, else y."""
    z = x + b
    y = globals()[f"{act}_fwd"](xp, z, *params)
    return (y, z) if _saves_x(act) else (y, y)


def bias_act_bwd(xp, x_or_y, gy, act, *params):
    """(gz, gb): gz = dL/dz from the saved value, gb = gz summed over every axis but the last."""
    gz = globals()[f"{act}_bwd"](xp, x_or_y, gy, *params)
    return gz, gz.reshape(math.prod(gz.shape[:-1]), gz.shape[-1]).sum(axis=0)


def _saves_x(act):
    from gpugrad.ops.declarations import POINTWISE

    return act in POINTWISE and POINTWISE[act].saves == "x"


def _dropout_scale(p):
    return 0.0 if p == 1 else 1.0 / (1.0 - p)


def dropout_fwd(xp, x, p, u):
    """(y, mask): mask = u >= p, y = x * mask / (1 - p) (0 where dropped, even for inf/NaN x)."""
    mask = u >= _s(u, p)
    return xp.where(mask, x * _s(x, _dropout_scale(p)), _s(x, 0)), mask


def dropout_bwd(xp, gy, mask, p):
    return xp.where(mask, gy * _s(gy, _dropout_scale(p)), _s(gy, 0))


def accumulate_(xp, acc, g):
    xp.add(acc, g, out=acc)
    return acc


def copy_(xp, dst, src):
    dst[...] = src
    return dst


# ---- row reductions over the last axis of a 2-D array ----------------------------------------------------------
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
    return y * (gy - (gy * y).sum(axis=-1, keepdims=True))


def log_softmax_fwd(xp, x):
    d, _, log_sum = _shifted_log_sum(xp, x)
    with _quiet(xp):
        return d - log_sum


def log_softmax_bwd(xp, y, gy):
    return gy - xp.exp(y) * gy.sum(axis=-1, keepdims=True)


def sum_rows(xp, g):
    return g.sum(axis=0)


# ---- losses and device-side range checks --------------------------------------------------------------------------
# A failed range check is recorded, not raised, in `status` (int64, kernels/common.cuh STATUS_WORDS): the first
# failure's site id and the min and max of the ids it saw; an earlier failure is kept. None: no record.
REDUCTIONS = ("none", "sum", "mean")


def _record_range(status, site, ids, n):
    if status is None or not ids.size or int(status[0]) != 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= n:
        status[:3] = (site, lo, hi)


def check_index(xp, ids, n, status, site):
    """Record (site, min, max) in status when an id of ``ids`` (any shape) lies outside [0, n)."""
    _record_range(status, site, ids, n)


def check_finite(xp, flags, node, epoch, *arrays):
    """Record in flags[node] (int64 (nodes, 2)) whether any of ``arrays`` (None allowed) holds a NaN ([node, 0]) or
    +-inf ([node, 1]), as epoch * 2**32 + INT_MAX - the index of the first such array (the larger value is kept)."""
    row = flags[node]
    for o, a in enumerate(arrays):
        if a is not None and not xp.isfinite(a).all():  # the common case in one pass; then which kind
            for col, bad in ((0, xp.isnan(a).any()), (1, xp.isinf(a).any())):
                if bad:
                    row[col] = max(row[col], (epoch << 32) + 2**31 - 1 - o)


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
        return total / den


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


def softmax_xent_fwd(xp, x, t, reduction="none", status=None, site=0, w=None, ignore_index=None, smoothing=0.0):
    """(loss, lse, aux): loss_i = -(1 - e) w[t_i] log_softmax(x)[i, t_i] - e / C Σ_c w_c log_softmax(x)[i, c] (torch's
    class weights w, label smoothing e), 0 where t_i == ignore_index, NaN where t_i is outside [0, cols) (recorded in
    status), reduced by ``reduction`` ('mean' divides by the summed row weights); lse per row; aux = xent_aux."""
    logp, lse, _ = _chosen_log_prob(xp, x, t, w, ignore_index, smoothing, status, site)
    aux = xent_aux(xp, x, t, w, ignore_index)
    return _reduce(xp, -logp, reduction, aux[0]), lse, aux


def token_logprob_fwd(xp, x, t, status=None, site=0):
    """(logp, lse): logp_i = log_softmax(x)[i, t_i], NaN where t_i is out of range."""
    logp, lse, _ = _chosen_log_prob(xp, x, t, None, None, 0.0, status, site)
    return logp, lse


def _xent_grad(xp, x, t, lse, g, w=None, ignore_index=None, smoothing=0.0, aux=None):
    """g_i * (p_i a_i - onehot(t_i) b_i - e_i w) with p_i = softmax(x_i), b_i = (1 - e) w[t_i], e_i = e / C (0 for an
    ignored row) and a_i = b_i + e_i Σ w; NaN rows for invalid t, 0 rows for ignored ones."""
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
        return xp.where(ignored[:, None], _s(x, 0), g[:, None] * d)


def softmax_xent_bwd(xp, x, t, lse, gloss, reduction="none", w=None, ignore_index=None, smoothing=0.0, aux=None):
    """gloss: (rows,) for 'none', 0-d for 'sum' and 'mean' (whose rows each get gloss / den, den = aux[0], the forward's
    summed row weights; recomputed when aux is None)."""
    if reduction != "none":
        if reduction == "mean":
            den = (aux if aux is not None else xent_aux(xp, x, t, w, ignore_index))[0]
            with _quiet(xp):
                gloss = gloss / den
        gloss = xp.broadcast_to(gloss, t.shape)
    return _xent_grad(xp, x, t, lse, gloss, w, ignore_index, smoothing, aux)


def token_logprob_bwd(xp, x, t, lse, glogp):
    return _xent_grad(xp, x, t, lse, -glogp)


# ---- layer norm ---------------------------------------------------------------------------------------------------
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


# ---- optimizers (in place, return None) ----------------------------------------------------------------------------
def sgd_update_(xp, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """torch.optim.SGD: d = g + wd * p; buf = d (first step) or momentum * buf + (1 - dampening) * d;
    d = d + momentum * buf (nesterov) or buf; p -= lr * d."""
    _sgd(p, g, buf if momentum != 0 else None, lr, momentum, dampening, weight_decay, nesterov, first_step)


def _sgd(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """sgd_update_ of one tensor; buf None: no momentum."""
    # In-place updates (same roundings as the out-of-place formulas): the CPU step allocates only d's temporaries.
    d = g + _s(p, weight_decay) * p if weight_decay != 0 else g
    if buf is not None:
        mom = _s(p, momentum)
        if first_step:
            buf[...] = d
        else:
            buf *= mom
            buf += d if dampening == 0 else _s(p, 1.0 - dampening) * d
        d = d + mom * buf if nesterov else buf
    p -= _s(p, lr) * d


def adam_update_(xp, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """torch.optim.Adam (L2: g += wd * p) or AdamW (decoupled: p *= 1 - lr * wd), then
    m = lerp(m, g, 1 - beta1), v = beta2 * v + (1 - beta2) * g^2,
    p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), bc_k = 1 - beta_k ** step (step counts from 1)."""
    _adam(xp, p, g, m, v, None, step, lr, beta1, beta2, eps, weight_decay, decoupled)


def _adam(xp, p, g, m, v, vmax, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """adam_update_, and with amsgrad (``vmax`` not None): vmax = max(vmax, v), read in place of v."""
    bc1, bc2 = 1.0 - beta1**step, 1.0 - beta2**step
    if weight_decay != 0:
        if decoupled:
            p[...] = p * _s(p, 1.0 - lr * weight_decay)
        else:
            g = g + _s(p, weight_decay) * p
    _lerp(m, g, _s(p, 1.0 - beta1))
    v *= _s(p, beta2)
    v += _s(p, 1.0 - beta2) * g * g
    if vmax is not None:
        xp.maximum(vmax, v, out=vmax)
    p += _s(p, -lr / bc1) * (m / (xp.sqrt(v if vmax is None else vmax) / _s(p, bc2**0.5) + _s(p, eps)))



# Multi-tensor updates (kernels.py: one launch per 16 tensors): the per-tensor math over runs of n arrays, the
# hyperparameters read from `hyper` and Adam's step counts kept in int64 0-d arrays, as the kernels do on the device.
def _runs(name, tensors, n, kinds):
    """``tensors`` as its runs of n arrays (parameters, gradients, states), there being one of ``kinds`` runs."""
    if len(tensors) != n * (len(tensors) // n if n else 0) or (n and len(tensors) // n not in kinds):
        raise ValueError(f"{name}: expected {' or '.join(map(str, kinds))} runs of {n} arrays, got {len(tensors)}")
    return [tensors[k * n:(k + 1) * n] for k in range(len(tensors) // n if n else 0)]


def sgd_multi_update_(xp, hyper, first_steps, *tensors):
    """sgd_update_ of n = len(first_steps) tensors: ``tensors`` = n parameters, n gradients and, for momentum, n
    momentum buffers (given buffers mean momentum is applied); hyper = [lr, momentum, dampening, weight_decay,
    nesterov, maximize] (float64); ``first_steps[i]``: buffer i starts as d; maximize: g = -g first."""
    runs = _runs("sgd_multi_update_", tensors, len(first_steps), (2, 3))
    lr, momentum, dampening, weight_decay, nesterov, maximize = (float(h) for h in hyper)
    for i, first in enumerate(first_steps):
        buf = runs[2][i] if len(runs) == 3 else None
        g = -runs[1][i] if maximize else runs[1][i]
        _sgd(runs[0][i], g, buf, lr, momentum, dampening, weight_decay, nesterov != 0, first)


def adam_multi_update_(xp, hyper, ticket, decoupled, amsgrad, *tensors):
    """adam_update_ of n tensors: ``tensors`` = n parameters, n gradients, n exp_avg, n exp_avg_sq, (``amsgrad``) n
    max_exp_avg_sq and n step counts (int64 0-d arrays, the steps taken so far: this is step count + 1, and each
    count advances by one); hyper = [lr, beta1, beta2, eps, weight_decay, maximize] (float64); ``ticket``: the
    kernel's block counter (unused here)."""
    k = 5 + bool(amsgrad)
    runs = _runs("adam_multi_update_", tensors, len(tensors) // k, (k,))
    lr, beta1, beta2, eps, weight_decay, maximize = (float(h) for h in hyper)
    for p, g, m, v, *vmax, step in zip(*runs):
        t = int(step) + 1
        _adam(xp, p, -g if maximize else g, m, v, vmax[0] if vmax else None, t, lr, beta1, beta2, eps, weight_decay,
              decoupled)
        step[...] = t


def rmsprop_multi_update_(xp, hyper, centered, momentum, *tensors):
    """torch.optim.RMSprop of n tensors: ``tensors`` = n parameters, n gradients, n square_avg, (``centered``) n
    grad_avg, (``momentum``) n momentum buffers; hyper = [lr, alpha, eps, weight_decay, momentum, maximize]:
    g = -g (maximize); g += wd * p; sq = alpha * sq + (1 - alpha) * g^2; centered: ga = lerp(ga, g, 1 - alpha),
    avg = sqrt(sq - ga^2) + eps, else sqrt(sq) + eps; buf = momentum * buf + g / avg, p -= lr * buf, or
    p -= lr * g / avg."""
    k = 3 + bool(centered) + bool(momentum)
    runs = _runs("rmsprop_multi_update_", tensors, len(tensors) // k, (k,))
    lr, alpha, eps, weight_decay, mom, maximize = (float(h) for h in hyper)
    for p, g, sq, *rest in zip(*runs):
        g = -g if maximize else g
        g = g + _s(p, weight_decay) * p if weight_decay != 0 else g
        sq *= _s(p, alpha)
        sq += _s(p, 1.0 - alpha) * g * g
        var = sq
        if centered:
            _lerp(rest[0], g, _s(p, 1.0 - alpha))
            var = sq - rest[0] * rest[0]
        avg = xp.sqrt(var) + _s(p, eps)
        if momentum:
            rest[-1] *= _s(p, mom)
            rest[-1] += g / avg
            p -= _s(p, lr) * rest[-1]
        else:
            p -= _s(p, lr) * (g / avg)


def adagrad_multi_update_(xp, hyper, ticket, *tensors):
    """torch.optim.Adagrad of n tensors: ``tensors`` = n parameters, n gradients, n sums and n step counts (as
    adam_multi_update_'s); hyper = [lr, lr_decay, weight_decay, eps, maximize]: g = -g (maximize); g += wd * p;
    clr = lr / (1 + (step - 1) * lr_decay); sum += g^2; p -= clr * g / (sqrt(sum) + eps)."""
    runs = _runs("adagrad_multi_update_", tensors, len(tensors) // 4, (4,))
    lr, lr_decay, weight_decay, eps, maximize = (float(h) for h in hyper)
    for p, g, total, step in zip(*runs):
        g = -g if maximize else g
        g = g + _s(p, weight_decay) * p if weight_decay != 0 else g
        total += g * g
        p -= _s(p, lr / (1 + int(step) * lr_decay)) * (g / (xp.sqrt(total) + _s(p, eps)))
        step[...] = int(step) + 1


def _lerp(a, b, w):
    """a = lerp(a, b, w) in place, torch.lerp's two-sided formula (exact at w = 1)."""
    if w < 0.5:
        a += w * (b - a)
    else:
        a[...] = b - (b - a) * (1 - w)


def set_hyper_(xp, hyper, values):
    """hyper[:] = values (the CUDA version is an asynchronous host-to-device copy)."""
    hyper[...] = values

opmath_all(globals())
