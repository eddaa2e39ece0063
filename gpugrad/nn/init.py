"""``nn.init``: fill a tensor in place from a distribution, as ``torch.nn.init`` does.

Every function writes into the existing buffer (``tensor.data`` keeps its identity), records nothing in the
graph, draws from ``generator=`` or the device's default generator (so ``gpugrad.manual_seed`` makes it
reproducible) and returns the tensor.  torch's older names without the trailing underscore (``uniform``,
``xavier_normal``, ...) still work and warn, as torch's do.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from gpugrad.backend import on
from gpugrad.core.grad_mode import no_grad
from gpugrad.core.tensor import make
from gpugrad.random import generator as _rng_of


def calculate_gain(nonlinearity, param=None):
    """The gain that keeps activations' variance stable through ``nonlinearity`` (torch's table).

    linear / conv / sigmoid: 1; tanh: 5/3; relu: sqrt(2); leaky_relu: sqrt(2 / (1 + slope^2)) (slope 0.01 by
    default); selu: 3/4.
    """
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) of a weight (out, in, *kernel): in * receptive field, out * receptive field."""
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower() if isinstance(mode, str) else mode
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


_fan = _calculate_correct_fan


def _fill(tensor, sample, gen=None):
    """tensor[...] = sample(generator, shape, dtype) in place, outside the graph."""
    if tensor.dtype.kind not in "fV":
        raise TypeError(f"nn.init: expected a floating-point tensor, got {tensor.dtype}")
    # NumPy's generators draw float32 / float64 only: draw in float32 and cast for half precision
    dtype = tensor.dtype if tensor.dtype.itemsize >= 4 else np.dtype(np.float32)
    with on(tensor._backend):
        tensor._data[...] = sample(_rng_of(tensor._backend, gen), tensor.shape, dtype)
    tensor._version_counter[0] += 1
    return tensor


def _write(tensor, array):
    """tensor[...] = array in place (a value computed here, not drawn), outside the graph."""
    with on(tensor._backend):
        tensor._data[...] = array
    tensor._version_counter[0] += 1
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """U(a, b) in place."""
    if not a <= b:
        raise ValueError(f"uniform_: expects a <= b, got a={a}, b={b}")
    return _fill(tensor, lambda g, s, d: g.random(s, dtype=d) * d.type(b - a) + d.type(a), generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """N(mean, std^2) in place."""
    if std < 0:
        raise ValueError(f"normal_: expects std >= 0, got {std}")
    return _fill(tensor, lambda g, s, d: g.standard_normal(s, dtype=d) * d.type(std) + d.type(mean), generator)


def _erfinv(be, u):
    """erf⁻¹(u) for u in (-1, 1): Giles's single-precision approximation ("Approximating the erfinv function",
    GPU Computing Gems, 2010), then two Newton steps on erf (gpugrad's erf op) to the dtype's precision."""
    xp = be.xp
    w = -xp.log((1 - u) * (1 + u))
    small, big = w - 2.5, xp.sqrt(xp.maximum(w, 5.0)) - 3
    p_small = sum(c * small ** k for k, c in enumerate((1.50140941, 0.246640727, -0.00417768164, -0.00125372503,
                                                        0.000218580870, -4.39150654e-06, -3.5233877e-06,
                                                        3.43273939e-07, 2.81022636e-08)))
    p_big = sum(c * big ** k for k, c in enumerate((2.83297682, 1.00167406, 0.00943887047, -0.0076224613,
                                                    0.00573950773, -0.00367342844, 0.00134934322,
                                                    0.000100950558, -0.000200214257)))
    y = xp.where(w < 5, p_small, p_big) * u
    with no_grad():
        for _ in range(2):
            err = make(be.as_array(y), be).erf()._data - u
            y = y - err / (2 / math.sqrt(math.pi) * xp.exp(-y * y))
    return y


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std^2) truncated to [a, b], in place: inverse-CDF draws (uniform between the CDF's values at a and
    b, through erf⁻¹), so each value is drawn once, however narrow the window."""
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)
    lo, hi = (0.5 * (1 + math.erf((v - mean) / (std * math.sqrt(2)))) for v in (a, b))
    uniform_(tensor, 2 * lo - 1, 2 * hi - 1, generator=generator)
    be = tensor._backend
    with on(be):
        u = be.xp.clip(tensor._data.astype(np.float64), -1 + 1e-16, 1 - 1e-16)  # erf⁻¹(+-1) is infinite
        x = _erfinv(be, u) * (std * math.sqrt(2.0)) + mean
        return _write(tensor, be.xp.clip(x, a, b).astype(tensor._data.dtype))


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix in place (the dims after the first flattened): Q of the QR decomposition of a
    normal matrix, its columns' signs fixed by R's diagonal so Q is Haar-distributed (Saxe et al., 2013), times gain."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows, cols = tensor.shape[0], tensor.numel() // tensor.shape[0]
    be = tensor._backend
    xp = be.xp
    with on(be):
        flat = _rng_of(be, generator).standard_normal((rows, cols), dtype=np.float64)
        if rows < cols:
            flat = flat.T
        q, r = xp.linalg.qr(flat)
        q = q * xp.sign(xp.diagonal(r))
        if rows < cols:
            q = q.T
        return _write(tensor, (q * gain).reshape(tensor.shape).astype(tensor._data.dtype))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """A sparse 2-D matrix in place: N(0, std^2) values with ceil(sparsity * rows) of each column's set to 0, at
    random rows (Martens, 2010)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = math.ceil(sparsity * rows)
    normal_(tensor, 0.0, std, generator=generator)
    be = tensor._backend
    with on(be):
        # each column's rows in a random order: the first `zeros` of them become 0
        rank = be.xp.argsort(be.xp.argsort(_rng_of(be, generator).random((rows, cols), dtype=np.float64), axis=0),
                             axis=0)
        return _write(tensor, be.xp.where(rank >= zeros, tensor._data, 0))


def dirac_(tensor, groups=1):
    """A convolution weight (3-D, 4-D or 5-D) that passes its input through: a 1 at the kernel's centre from each
    input channel to the output channel of the same index, in each of ``groups`` groups; 0 elsewhere."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if tensor.shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = tensor.shape[0] // groups
    out = np.zeros(tensor.shape, tensor._data.dtype)
    centre = tuple(n // 2 for n in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, tensor.shape[1])):
            out[(g * per_group + d, d) + centre] = 1
    return _write(tensor, tensor._backend.asarray(out))


def eye_(tensor):
    """The identity matrix in place (2-D; rectangular ones get ones on the main diagonal)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, tensor._backend.xp.eye(*tensor.shape, dtype=tensor._data.dtype))


def constant_(tensor, val):
    tensor._data.fill(val)
    tensor._version_counter[0] += 1
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-bound, bound), bound = gain * sqrt(3 / fan) (He et al., 2015).

    nn.Linear uses a=sqrt(5), which gives bound = 1 / sqrt(fan_in).
    """
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor  # an empty weight: nothing to draw (torch warns and does the same)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std^2), std = gain / sqrt(fan)."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def _deprecated(new):
    old = new.__name__[:-1]

    def init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new.__name__}`.", FutureWarning,
                      stacklevel=2)
        return new(*args, **kwargs)

    init.__name__ = init.__qualname__ = old
    init.__doc__ = f"Deprecated: ``{new.__name__}``."
    return init


# torch's old names, which warn
uniform, normal, constant = _deprecated(uniform_), _deprecated(normal_), _deprecated(constant_)
xavier_uniform, xavier_normal = _deprecated(xavier_uniform_), _deprecated(xavier_normal_)
kaiming_uniform, kaiming_normal = _deprecated(kaiming_uniform_), _deprecated(kaiming_normal_)
orthogonal, sparse, dirac, eye = _deprecated(orthogonal_), _deprecated(sparse_), _deprecated(dirac_), _deprecated(eye_)
