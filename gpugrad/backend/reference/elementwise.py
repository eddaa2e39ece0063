"""References of elementwise.cu: every declared pointwise op forward and backward (f and g * f'), bias +
activation, dropout, accumulate_ and copy_."""
from __future__ import annotations

import math

import numpy as np

from gpugrad.backend.reference.common import _quiet, _s
from gpugrad.backend.reference.erf import _INV_SQRT_2PI, _INV_SQRT_PI, _SQRT1_2, _erf
from gpugrad.backend.reference.float16 import opmath_all
from gpugrad.ops.declarations import POINTWISE

_GELU_K, _GELU_A = 0.7978845608028654, 0.044715  # sqrt(2 / pi) and the cubic coefficient of the tanh approximation

_BITS = {2: np.int16, 4: np.int32, 8: np.int64}  # same-size integer views of float16/32/64


# ---- elementwise: the pointwise ops of ops/declarations.py ----------------------------------------------------
# <op>_fwd(xp, x, *params) = f(x); <op>_bwd(xp, saved, g, *params) = g * f'(x) from what the op saves (x or y):
# the VJP with g = gy, the JVP with g = a tangent. Written against xp so the double backward can run the same formula
# on Tensors (autograd/tensor_xp.py). Each mirrors its pw:: struct in kernels/elementwise.cu.
def relu_fwd(xp, x):
    # y = x unless x < 0, as torch.relu and the kernel's select: NaN and -0.0 pass through (np.maximum would give
    # +0.0 for -0.0).
    if xp is not np or x.dtype.kind not in "fV" or x.dtype.itemsize not in _BITS:
        return xp.maximum(x, _s(x, 0))
    # NOTE: the bit mask of relu_bwd, ~1.5x faster than np.maximum with a scalar (512x1024 float32: 0.22 ms vs 0.33)
    bits = _BITS[x.dtype.itemsize]
    mask = np.asarray(np.subtract(x < 0, 1, dtype=bits))
    return np.bitwise_and(np.asarray(x).view(bits), mask, out=mask).view(x.dtype)


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
    # e^min(x, 0): the branch a where drops never overflows (on Tensors under create_graph or forward mode, where
    # these run as ops and _quiet cannot silence NumPy)
    with _quiet(xp):
        return xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0)) * alpha)


def elu_bwd(xp, x, g, alpha):
    with _quiet(xp):
        return xp.where(x > 0, g, g * alpha * xp.exp(xp.minimum(x, 0)))


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


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
