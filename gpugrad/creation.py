"""Tensor creation: ``tensor``, ``zeros``, ``ones``, ``full``, ``empty``, ``arange``, ``rand``, ``randn``, ..."""
from __future__ import annotations

import numbers

import numpy as np

from gpugrad.backend import backend_of, get_backend, is_array, on
from gpugrad.random import generator

DEFAULT_FLOAT = np.dtype(np.float32)


def _dtype(dtype):
    return None if dtype is None else np.dtype(dtype)


def _to_array(data, dtype=None, device=None):
    """(array, backend) for any array-like; Python floats default to float32 as in torch."""
    from gpugrad._tensor import Tensor

    dtype = _dtype(dtype)
    if isinstance(data, Tensor):
        data = data._data
    if is_array(data):
        src = backend_of(data)
        # Host data goes to the default device, as lists do; device arrays (and tensors) stay where they are.
        be = src if device is None and src.name != "cpu" else get_backend(device)
        if be is not src:
            data = src.to_host(data) if be.name == "cpu" else be.asarray(data)
        array = be.xp.array(data, dtype=dtype, copy=True) if be.name == "cpu" else be.asarray(data, dtype).copy()
        return array, be
    be = get_backend(device)
    host = np.asarray(data, dtype=dtype)
    if dtype is None and host.dtype == np.float64 and not _has_numpy_floats(data):
        host = host.astype(DEFAULT_FLOAT)  # Python floats are float32 unless asked otherwise, as in torch
    if host.dtype == object:
        raise TypeError(f"tensor(): cannot make a tensor from {type(data).__name__} data")
    return (host if be.name == "cpu" else be.asarray(host)), be


def _has_numpy_floats(data):
    if isinstance(data, np.floating):
        return data.dtype == np.float64
    if isinstance(data, (list, tuple)) and data:
        return _has_numpy_floats(data[0])
    return False


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new leaf tensor holding a copy of ``data`` (list, scalar, NumPy/CuPy array or Tensor).

    >>> gpugrad.tensor([[1.0, 2.0]], requires_grad=True).shape
    (1, 2)
    """
    from gpugrad._tensor import Tensor

    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


def as_tensor(data, dtype=None, device=None):
    """A tensor that shares ``data``'s memory when it is already an array of that dtype on that device
    (no copy), else a converted copy, as torch.as_tensor."""
    from gpugrad._tensor import Tensor, _make

    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype) if (device or dtype) else data
    if is_array(data):
        src = backend_of(data)
        if (device is None or get_backend(device) is src) and (dtype is None or np.dtype(dtype) == data.dtype):
            return _make(data, src)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array):
    """A CPU tensor sharing ``array``'s memory."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    return as_tensor(array, device="cpu")


def _new(fill, shape, dtype, device, requires_grad):
    from gpugrad._tensor import _make

    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    be = get_backend(device)
    with on(be):
        t = _make(fill(be, shape, _dtype(dtype) or DEFAULT_FLOAT), be)
    return t.requires_grad_() if requires_grad else t


def zeros(*shape, dtype=None, device=None, requires_grad=False):
    return _new(lambda be, s, d: be.xp.zeros(s, dtype=d), shape, dtype, device, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad=False):
    return _new(lambda be, s, d: be.xp.ones(s, dtype=d), shape, dtype, device, requires_grad)


def empty(*shape, dtype=None, device=None, requires_grad=False):
    return _new(lambda be, s, d: be.xp.empty(s, dtype=d), shape, dtype, device, requires_grad)


def full(shape, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None and isinstance(fill_value, (bool, np.bool_)):
        dtype = np.bool_
    elif dtype is None and isinstance(fill_value, numbers.Integral):
        dtype = np.int64
    return _new(lambda be, s, d: be.xp.full(s, fill_value, dtype=d), (shape,), dtype, device, requires_grad)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dtype = _dtype(dtype) or (np.dtype(np.int64) if is_int else DEFAULT_FLOAT)
    return _new(lambda be, s, d: be.xp.arange(start, end, step, dtype=d), ((),), dtype, device, requires_grad)


def rand(*shape, dtype=None, device=None, requires_grad=False):
    """Uniform [0, 1) samples from the device's generator (seeded by ``gpugrad.manual_seed``)."""
    return _new(lambda be, s, d: generator(be).random(s, dtype=d), shape, dtype, device, requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad=False):
    """Standard normal samples from the device's generator."""
    return _new(lambda be, s, d: generator(be).standard_normal(s, dtype=d), shape, dtype, device, requires_grad)


def randint(low, high=None, size=(), dtype=np.int64, device=None):
    if high is None:
        low, high = 0, low
    return _new(lambda be, s, d: generator(be).integers(low, high, size=s).astype(d), (size,), dtype, device, False)
