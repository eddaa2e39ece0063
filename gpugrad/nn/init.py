"""``nn.init``: fill a tensor in place from a distribution, as ``torch.nn.init`` does.

Every function writes into the existing buffer (``tensor.data`` keeps its identity), records nothing in the
graph, draws from ``gpugrad.random.generator`` (so ``gpugrad.manual_seed`` makes it reproducible) and returns
the tensor.
"""
from __future__ import annotations

import math

import numpy as np

from gpugrad.backend import on
from gpugrad.random import generator


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


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill(tensor, sample):
    """tensor[...] = sample(generator, shape, dtype) in place, outside the graph."""
    if tensor.dtype.kind not in "fV":
        raise TypeError(f"nn.init: expected a floating-point tensor, got {tensor.dtype}")
    # NumPy's generators draw float32 / float64 only: draw in float32 and cast for half precision
    dtype = tensor.dtype if tensor.dtype.itemsize >= 4 else np.dtype(np.float32)
    with on(tensor._backend):
        tensor._data[...] = sample(generator(tensor._backend), tensor.shape, dtype)
    tensor._version_counter[0] += 1
    return tensor


def uniform_(tensor, a=0.0, b=1.0):
    """U(a, b) in place."""
    if not a <= b:
        raise ValueError(f"uniform_: expects a <= b, got a={a}, b={b}")
    return _fill(tensor, lambda g, s, d: g.random(s, dtype=d) * d.type(b - a) + d.type(a))


def normal_(tensor, mean=0.0, std=1.0):
    """N(mean, std^2) in place."""
    if std < 0:
        raise ValueError(f"normal_: expects std >= 0, got {std}")
    return _fill(tensor, lambda g, s, d: g.standard_normal(s, dtype=d) * d.type(std) + d.type(mean))


def constant_(tensor, val):
    tensor._data.fill(val)
    tensor._version_counter[0] += 1
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def xavier_uniform_(tensor, gain=1.0):
    """U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0):
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """U(-bound, bound), bound = gain * sqrt(3 / fan) (He et al., 2015).

    nn.Linear uses a=sqrt(5), which gives bound = 1 / sqrt(fan_in).
    """
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor  # an empty weight: nothing to draw (torch warns and does the same)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """N(0, std^2), std = gain / sqrt(fan)."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))
