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
    # y = x unless x < 0, as torch.relu and the kernel's select: NaN and -0.0 pass through (np.maximum(x, 0) would
    # give +0.0 for -0.0).
    if xp is not np or x.dtype.kind not in "fV" or x.dtype.itemsize not in _BITS:
        return xp.maximum(x, _s(x, 0))
    if _MAXIMUM_IS_RELU.get(x.dtype) and x.flags.c_contiguous:
        return _relu_by_maximum(x)
    return _relu_by_mask(x)


def _relu_by_mask(x):
    # NOTE: the bit mask of relu_bwd: three passes, ~1.5x faster than np.maximum with a scalar (512x1024 float32:
    # 0.22 ms vs 0.33), and right on every platform
    bits = _BITS[x.dtype.itemsize]
    mask = np.asarray(np.subtract(x < 0, 1, dtype=bits))
    return np.bitwise_and(np.asarray(x).view(bits), mask, out=mask).view(x.dtype)


# On x86 NumPy's maximum is MAXPS / MAXPD, in its vector loops and in its scalar tail (loops_minmax.dispatch.c.src:
# npyv_maxn and the SSE scalar_max_f), which return the second operand unless the first is greater or a NaN. So
# maximum(0, x) is (0 > x ? 0 : x): torch's relu bit for bit (-0.0 and x's NaNs kept) in one pass, ~1.7x faster than
# the mask (512x1024 float32: 0.11 ms vs 0.19). Other CPUs (NEON's FMAX orders -0.0 below +0.0) and builds differ,
# so the equivalence is probed at import on every special value in every position a loop can put it, and the mask
# stays wherever it fails. Contiguous x only: its rows of a zero row are then one contiguous inner loop each.
_RELU_ROW = 4096  # elements per row of a zero row: a multiple of every vector loop's stride, 16-32 KiB in L1
_ZERO_ROWS = {np.dtype(t): np.zeros(_RELU_ROW, t) for t in (np.float32, np.float64)}
for _row in _ZERO_ROWS.values():
    _row.flags.writeable = False  # shared by every call (and thread): a write would corrupt every ReLU after it


def _relu_by_maximum(x):
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    n = flat.size
    zero = _ZERO_ROWS[x.dtype]
    whole = n - n % _RELU_ROW
    if whole:
        np.maximum(zero, flat[:whole].reshape(-1, _RELU_ROW), out=out[:whole].reshape(-1, _RELU_ROW))
    if whole < n:
        np.maximum(zero[:n - whole], flat[whole:], out=out[whole:])
    return out.reshape(x.shape)


def _maximum_probe(dtype):
    """Whether maximum(0, x) gives _relu_by_mask's bits for every special value (signed zeros, NaNs of both signs and
    a signalling one, infinities, subnormals, the extremes) at every position of rows of 1 to 40 elements (scalar
    tails, vector remainders, unrolled bodies: each row one inner loop, as _relu_by_maximum's), and whether
    _relu_by_maximum itself does over a row and a tail. ~0.8 ms."""
    info, bits = np.finfo(dtype), _BITS[np.dtype(dtype).itemsize]
    specials = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, info.smallest_subnormal,
                         -info.smallest_subnormal, info.max, -info.max, 1.0, -1.0], dtype)
    quiet_bit = bits(1) << (info.nmant - 1)
    specials = np.concatenate([specials, (specials[2:3].view(bits) ^ quiet_bit | 1).view(dtype)])  # signalling NaN
    k = specials.size
    zero = _ZERO_ROWS[np.dtype(dtype)]
    for n in range(1, 41):
        rows = specials[(np.arange(k)[:, None] + np.arange(n)) % k]  # row r: the specials rotated by r
        if not np.array_equal(np.maximum(zero[:n], rows).view(bits), _relu_by_mask(rows).view(bits)):
            return False
    x = np.resize(specials, 2 * _RELU_ROW + 29)
    return np.array_equal(_relu_by_maximum(x).view(bits), _relu_by_mask(x).view(bits))


_MAXIMUM_IS_RELU = {d: _maximum_probe(d) for d in _ZERO_ROWS}


def relu_bwd(xp, y, gy):
    # gx = 0 where y <= 0 (subgradient 0 at 0), else gy, as torch's threshold_backward and the kernel: a select, so
    # an inf/NaN gy is dropped where y <= 0 and a NaN y passes gy (gy * (y > 0) would give NaN, then 0).
    if xp is not np:
        return xp.where(y <= 0, 0, gy)
    # NOTE: not np.where, which is ~6x slower: gy's bits times 1 where kept, times 0 (+0.0) where not, an exact
    # integer product (512x1024 float32: 0.16 ms, against 0.19 for a subtract-made mask ANDed in)
    keep = np.asarray(np.less_equal(y, 0))  # (asarray: a 0-d y gives a NumPy scalar)
    np.logical_not(keep, out=keep)  # y > 0 or NaN
    bits = _BITS[gy.dtype.itemsize]
    return np.asarray(np.multiply(np.asarray(gy).view(bits), keep, dtype=bits)).view(gy.dtype)


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
    # torch's branches: x <= 0 takes alpha e^x (so NaN takes g). e^x clamped by a select, not minimum(x, 0): on
    # Tensors (the double backward) a select has derivative 0 at x = 0, where minimum's tie takes half, and torch's
    # elu_double_backward masks by x < 0
    with _quiet(xp):
        return xp.where(x <= 0, g * alpha * xp.exp(xp.where(x < 0, x, 0.0)), g)


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
