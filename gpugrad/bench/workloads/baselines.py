"""The baselines: each workload written by hand against ``xp`` (NumPy on the CPU, CuPy on CUDA), as one would
write it without gpugrad; shared by the kernel, op and optimizer workloads."""
from __future__ import annotations

import math

from gpugrad.backend import reference


def reference_of(name):
    """The NumPy baseline of a pointwise kernel is its reference (backend/reference/): the formula is written
    once (ops/declarations.py), and the ratio then measures only what gpugrad adds around it."""
    return lambda xp, *args: getattr(reference, name)(xp, *args)


def bias_relu_bwd(xp, y, gy, act):
    return reference.bias_act_bwd(xp, y, gy, act)


def logsumexp(xp, x):
    m = x.max(axis=1, keepdims=True)
    return (m + xp.log(xp.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def softmax(xp, x):
    e = xp.exp(x - x.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def softmax_bwd(xp, y, gy):
    gx = gy * y
    gx -= y * gx.sum(axis=1, keepdims=True)
    return gx


def log_softmax(xp, x):
    z = x - x.max(axis=1, keepdims=True)
    z -= xp.log(xp.exp(z).sum(axis=1, keepdims=True))
    return z


def xent_fwd(xp, x, t):
    lse = logsumexp(xp, x)
    return lse - x[xp.arange(x.shape[0]), t], lse


def xent_bwd(xp, x, t, lse, gloss):
    g = xp.exp(x - lse[:, None])
    g[xp.arange(x.shape[0]), t] -= 1
    g *= gloss[:, None]
    return g


def layer_norm(xp, x, w, b, eps):
    mean = x.mean(axis=1)
    xc = x - mean[:, None]
    rstd = 1 / xp.sqrt((xc * xc).mean(axis=1) + eps)
    y = xc * rstd[:, None]
    y *= w
    y += b
    return y, mean, rstd


def layer_norm_bwd(xp, x, w, mean, rstd, gy):
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = gy * w
    gx = g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True)
    gx *= rstd[:, None]
    return gx, (gy * xhat).sum(axis=0), gy.sum(axis=0)


def sgd_momentum(xp, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    # NOTE: written for the benchmarked setting only (dampening 0, no weight decay, not Nesterov, not step 1)
    buf *= momentum
    buf += g
    p -= lr * buf


def adam(xp, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    # NOTE: written for the benchmarked setting only (no weight decay)
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
    denom = xp.sqrt(v)
    denom /= math.sqrt(1 - beta2**step)
    denom += eps
    p -= (lr / (1 - beta1**step)) * m / denom
