"""References of optim.cu: torch.optim's SGD, Adam/AdamW, RMSprop and Adagrad updates, in place."""
from __future__ import annotations

import numpy as np

from gpugrad.backend.reference.common import _s
from gpugrad.backend.reference.float16 import opmath_all


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



# Multi-tensor updates (kernels/optim.py: one launch per 16 tensors): the per-tensor math over runs of n arrays, the
# hyperparameters read from `hyper` and Adam's step counts kept in int64 0-d arrays, as the kernels do on the device.
def _skipped(skip):
    """GradScaler's found_inf (a float32 (1,) array, or None): nonzero skips the whole step, as the kernels do."""
    return skip is not None and bool(skip[0] != 0)


def _runs(name, tensors, n, kinds):
    """``tensors`` as its runs of n arrays (parameters, gradients, states), there being one of ``kinds`` runs."""
    if len(tensors) != n * (len(tensors) // n if n else 0) or (n and len(tensors) // n not in kinds):
        raise ValueError(f"{name}: expected {' or '.join(map(str, kinds))} runs of {n} arrays, got {len(tensors)}")
    return [tensors[k * n:(k + 1) * n] for k in range(len(tensors) // n if n else 0)]


def sgd_multi_update_(xp, hyper, first_steps, *tensors, skip=None):
    """sgd_update_ of n = len(first_steps) tensors: ``tensors`` = n parameters, n gradients and, for momentum, n
    momentum buffers (given buffers mean momentum is applied); hyper = [lr, momentum, dampening, weight_decay,
    nesterov, maximize] (float64); ``first_steps[i]``: buffer i starts as d; maximize: g = -g first."""
    if _skipped(skip):
        return
    runs = _runs("sgd_multi_update_", tensors, len(first_steps), (2, 3))
    lr, momentum, dampening, weight_decay, nesterov, maximize = (float(h) for h in hyper)
    for i, first in enumerate(first_steps):
        buf = runs[2][i] if len(runs) == 3 else None
        g = -runs[1][i] if maximize else runs[1][i]
        _sgd(runs[0][i], g, buf, lr, momentum, dampening, weight_decay, nesterov != 0, first)


def adam_multi_update_(xp, hyper, ticket, decoupled, amsgrad, *tensors, skip=None):
    """adam_update_ of n tensors: ``tensors`` = n parameters, n gradients, n exp_avg, n exp_avg_sq, (``amsgrad``) n
    max_exp_avg_sq and n step counts (int64 0-d arrays, the steps taken so far: this is step count + 1, and each
    count advances by one); hyper = [lr, beta1, beta2, eps, weight_decay, maximize] (float64); ``ticket``: the
    kernel's block counter (unused here)."""
    if _skipped(skip):
        return
    k = 5 + bool(amsgrad)
    runs = _runs("adam_multi_update_", tensors, len(tensors) // k, (k,))
    lr, beta1, beta2, eps, weight_decay, maximize = (float(h) for h in hyper)
    for p, g, m, v, *vmax, step in zip(*runs):
        t = int(step) + 1
        _adam(xp, p, -g if maximize else g, m, v, vmax[0] if vmax else None, t, lr, beta1, beta2, eps, weight_decay,
              decoupled)
        step[...] = t


def rmsprop_multi_update_(xp, hyper, centered, momentum, *tensors, skip=None):
    """torch.optim.RMSprop of n tensors: ``tensors`` = n parameters, n gradients, n square_avg, (``centered``) n
    grad_avg, (``momentum``) n momentum buffers; hyper = [lr, alpha, eps, weight_decay, momentum, maximize]:
    g = -g (maximize); g += wd * p; sq = alpha * sq + (1 - alpha) * g^2; centered: ga = lerp(ga, g, 1 - alpha),
    avg = sqrt(sq - ga^2) + eps, else sqrt(sq) + eps; buf = momentum * buf + g / avg, p -= lr * buf, or
    p -= lr * g / avg."""
    if _skipped(skip):
        return
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


def adagrad_multi_update_(xp, hyper, ticket, *tensors, skip=None):
    """torch.optim.Adagrad of n tensors: ``tensors`` = n parameters, n gradients, n sums and n step counts (as
    adam_multi_update_'s); hyper = [lr, lr_decay, weight_decay, eps, maximize]: g = -g (maximize); g += wd * p;
    clr = lr / (1 + (step - 1) * lr_decay); sum += g^2; p -= clr * g / (sqrt(sum) + eps)."""
    if _skipped(skip):
        return
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


def amp_unscale_multi_(xp, scale, found_inf, *grads):
    """torch's _amp_foreach_non_finite_check_and_unscale_: each gradient times inv_scale = 1/scale (in double, rounded
    to float32, then to the gradient's dtype) in place; found_inf = 1 when any element of any gradient was inf or NaN
    before the multiply."""
    inv = np.float32(1.0 / float(scale.reshape(-1)[0]))
    for g in grads:
        if not xp.isfinite(g).all():
            found_inf.reshape(-1)[0] = 1.0
        g *= g.dtype.type(inv)


def amp_update_scale_(xp, scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """torch's _amp_update_scale_: after an inf or NaN (found_inf != 0), scale *= backoff and the tracker resets;
    else the tracker counts the clean step, and at growth_interval the scale grows (if still finite) and it resets."""
    s, t = scale.reshape(-1), tracker.reshape(-1)
    if found_inf.reshape(-1)[0] != 0:
        s[0], t[0] = np.float32(float(s[0]) * backoff_factor), 0  # in double, as the kernel
        return
    successful = int(t[0]) + 1
    if successful == growth_interval:
        with np.errstate(over="ignore"):  # an overflowing growth is dropped below, as the kernel drops it
            grown = np.float32(float(s[0]) * growth_factor)
        if np.isfinite(grown):
            s[0] = grown
        t[0] = 0
    else:
        t[0] = successful


def set_hyper_(xp, hyper, values):
    """hyper[:] = values (the CUDA version is an asynchronous host-to-device copy)."""
    hyper[...] = values


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
