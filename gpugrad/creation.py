"""Tensor creation as torch: ``tensor``, ``zeros``, ``ones``, ``full``, ``empty``, ``eye``, ``arange``, ``linspace``,
``logspace``, ``rand``, ``randn``, ``randint``, ``randperm``, ``normal``, their ``*_like`` forms, and ``from_dlpack``.

Dtypes are inferred as torch infers them: Python floats take the default dtype (``set_default_dtype``), ints
int64, bools bool; NumPy data keeps its dtype. Tensors go to the default device unless ``device=`` says otherwise.
"""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from gpugrad.backend import backend_of, dlpack, get_backend, is_array, on, ranges
from gpugrad.backend.threads import get_num_threads
from gpugrad.core.tensor import TensorBase, make, new
from gpugrad.core.tensor_xp import depends
from gpugrad.dtypes import DEFAULTS, default_complex, to_np
from gpugrad.random import generator as generator_of


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new leaf tensor holding a copy of ``data`` (nested lists, a number, a NumPy/CuPy array or a Tensor).

    >>> gpugrad.tensor([[1.0, 2.0]], requires_grad=True).shape
    gpugrad.Size([1, 2])
    """
    return new(data, dtype=dtype, device=device, requires_grad=requires_grad)


def as_tensor(data, dtype=None, device=None):
    """A tensor that shares ``data``'s memory when it is already an array of that dtype on that device
    (no copy), else a converted copy, as torch.as_tensor."""
    if isinstance(data, TensorBase):
        return data.to(device=device, dtype=dtype) if (device or dtype) else data
    if is_array(data):
        src = backend_of(data)
        if (device is None or get_backend(device) is src) and (dtype is None or to_np(dtype) == data.dtype):
            return make(data, src)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array):
    """A CPU tensor sharing ``array``'s memory."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    return as_tensor(array, device="cpu")


def from_dlpack(ext_tensor):
    """A tensor sharing the memory of any DLPack producer: a NumPy or CuPy array, a torch tensor, a gpugrad Tensor
    (zero copy). CPU data becomes a CPU tensor, CUDA data a CUDA tensor on its device."""
    if isinstance(ext_tensor, TensorBase):
        return ext_tensor.detach()
    if is_array(ext_tensor):
        return as_tensor(ext_tensor)
    if not hasattr(ext_tensor, "__dlpack_device__"):
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__ (a tensor or array), "
                        f"got {type(ext_tensor).__name__}")
    kind, index = ext_tensor.__dlpack_device__()
    if kind == 1:  # kDLCPU
        try:
            return as_tensor(np.from_dlpack(ext_tensor))
        except (BufferError, TypeError, RuntimeError):  # NumPy has no bfloat16 in DLPack: read that capsule ourselves
            array = dlpack.import_bf16(ext_tensor)
            if array is None:
                raise
            return as_tensor(array)
    if kind == 2:  # kDLCUDA
        be = get_backend(f"cuda:{index}")
        with on(be):
            return as_tensor(be.xp.from_dlpack(ext_tensor))
    raise RuntimeError(f"from_dlpack: DLPack device type {kind} is neither the CPU (1) nor CUDA (2)")


def _size(size, op, keyword=None):
    """torch's size arguments: f(2, 3), f((2, 3)), f([2, 3]), f(Size), f(size=(2, 3))."""
    if keyword is not None:
        size = (keyword,)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    try:
        shape = tuple(operator.index(s) for s in size)
    except TypeError:
        raise TypeError(f"{op}(): size must be a tuple of ints, got {tuple(size)!r}") from None
    if any(s < 0 for s in shape):
        raise RuntimeError(f"{op}(): Trying to create tensor with negative dimension: {list(shape)}")
    return shape


def _new(fill, shape, dtype, device, requires_grad):
    be = get_backend(device)
    with on(be):
        t = make(be.as_array(fill(be, shape, to_np(dtype) or DEFAULTS.float)), be)
    return t.requires_grad_() if requires_grad else t


def zeros(*shape, size=None, dtype=None, device=None, requires_grad=False):
    return _new(lambda be, s, d: be.xp.zeros(s, dtype=d), _size(shape, "zeros", size), dtype, device, requires_grad)


def ones(*shape, size=None, dtype=None, device=None, requires_grad=False):
    return _new(lambda be, s, d: be.xp.ones(s, dtype=d), _size(shape, "ones", size), dtype, device, requires_grad)


def empty(*shape, size=None, dtype=None, device=None, requires_grad=False, pin_memory=False):
    return _new(lambda be, s, d: be.xp.empty(s, dtype=d), _size(shape, "empty", size), dtype, device, requires_grad)


def _number_dtype(value):
    """The dtype torch gives a Python number: bool, int64, the default float or complex dtype."""
    return np.dtype(np.bool_) if isinstance(value, (bool, np.bool_)) else np.dtype(np.int64) if isinstance(
        value, numbers.Integral) else DEFAULTS.float if isinstance(value, numbers.Real) else default_complex()


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    dtype = _number_dtype(fill_value) if dtype is None else dtype
    return _new(lambda be, s, d: be.xp.full(s, fill_value, dtype=d), _size((size,), "full"), dtype, device,
                requires_grad)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    """The n x m identity (m defaults to n)."""
    n, m = _size((n, n if m is None else m), "eye")
    return _new(lambda be, s, d: be.xp.eye(n, m, dtype=d), (), dtype, device, requires_grad)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """Values from start (default 0) to end (excluded) by step: int64 when all three are integers, else the
    default float dtype.  As torch computes them: element i is start + i * step in float64, rounded once to the
    dtype (no accumulated rounding), and there are ceil((end - start) / step) of them (computed in float64); an
    int64 range takes start, end and step truncated to integers first."""
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if hasattr(v, "item") else v for v in (start, end, step))
    is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    d = (np.dtype(np.int64) if is_int else DEFAULTS.float) if dtype is None else to_np(dtype)
    if d.kind == "b":
        raise NotImplementedError("\"arange_cpu\" not implemented for 'Bool'")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if step == 0:
        raise RuntimeError("step must be nonzero")
    lo, hi, by = (int(start), int(end), int(step)) if d.kind in "iu" else (start, end, step)
    if d == np.int64 and by == 0:  # a fractional step that truncates to 0
        raise ValueError("step must be nonzero")
    if (hi - lo) * (by if d == np.int64 else step) < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if d == np.int64:
        sgn = (by > 0) - (by < 0)
        n = int((hi - lo + by - sgn) / by) if abs(hi - lo) < 2 ** 52 else (hi - lo + by - sgn) // by
    else:
        n = math.ceil((float(end) - float(start)) / float(step))

    def fill(be, s, _):
        if d.kind in "iu":
            return (lo + by * be.xp.arange(n, dtype=np.int64)).astype(d)
        if be.on_host and d.kind in "fV":  # torch's CPU values, bit for bit (backend/ranges.py)
            return ranges.arange(start, step, n, d, get_num_threads())
        return (float(start) + float(step) * be.xp.arange(n, dtype=np.float64)).astype(d)
    return _new(fill, (), d, device, requires_grad)


def _host_number(v):
    return v.item() if hasattr(v, "item") else v


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    """``steps`` evenly spaced values from start to end (both included): on the CPU torch's values bit for bit
    (``backend/ranges.py``: from both ends, fused multiply-adds in the dtype); on CUDA computed in float64 and
    rounded once (integer dtypes truncate, as torch's do)."""
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    d = to_np(dtype) or DEFAULTS.float
    start, end = _host_number(start), _host_number(end)

    def fill(be, s, _):
        if be.on_host:
            return ranges.linspace(start, end, steps, d)
        return be.xp.linspace(start, end, steps).astype(d)
    return _new(fill, (), d, device, requires_grad)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    """``steps`` values from base**start to base**end, evenly spaced on a log scale: on the CPU torch's values bit
    for bit (``backend/ranges.py``: its float64 exponents and libm's pow)."""
    if steps < 0:
        raise RuntimeError(f"logspace: number of steps must be non-negative, got {steps}")
    d = to_np(dtype) or DEFAULTS.float
    start, end = _host_number(start), _host_number(end)

    def fill(be, s, _):
        if be.on_host and d.kind != "c":
            return ranges.logspace(start, end, steps, float(base), d)
        return (base ** linspace(start, end, steps, dtype=np.float64, device=be.device)._data).astype(d)
    return _new(fill, (), d, device, requires_grad)


def floating(dtype, op):
    d = to_np(dtype) or DEFAULTS.float
    if d.kind not in "fV":
        raise NotImplementedError(f"{op}: draws floating-point values, got dtype {d}; use randint for integers")
    return d


def draw(name, be, gen, s, d):
    """NumPy's and CuPy's generators draw float32 and float64: float16 is drawn in float32 and rounded."""
    return getattr(generator_of(be, gen), name)(s, dtype=d if d.itemsize >= 4 else np.float32).astype(d, copy=False)


def rand(*shape, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform [0, 1) samples from ``generator`` or the device's default generator (``gpugrad.manual_seed``)."""
    return _new(lambda be, s, d: draw("random", be, generator, s, d), _size(shape, "rand", size),
                floating(dtype, "rand"), device, requires_grad)


def randn(*shape, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples from ``generator`` or the device's default generator."""
    return _new(lambda be, s, d: draw("standard_normal", be, generator, s, d), _size(shape, "randn", size),
                floating(dtype, "randn"), device, requires_grad)


def randint(low=0, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    """Integers in [low, high): ``randint(high, size)`` or ``randint(low, high, size)``; int64 by default."""
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() missing the required argument 'size' (a tuple of ints)")
    if low >= high:
        raise RuntimeError(f"randint: expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return _new(lambda be, s, d: generator_of(be, generator).integers(low, high, size=s).astype(d),
                _size((size,), "randint"), np.int64 if dtype is None else dtype, device, requires_grad)



def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64 by default)."""
    if n < 0:
        raise RuntimeError(f"randperm: n must be greater or equal to 0, got {n}")
    # NOTE: the order of n uniform draws: CuPy's generators have no permutation()
    return _new(lambda be, s, d: be.xp.argsort(generator_of(be, generator).random(n)).astype(d), (),
                np.int64 if dtype is None else dtype, device, requires_grad)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    """Normal samples: ``normal(mean, std, size)`` with numbers, or Tensors ``mean``/``std`` (their broadcast
    shape). As torch's, the result depends on Tensor means and stds with derivative 0 (no reparametrization)."""
    like = mean if isinstance(mean, TensorBase) else std if isinstance(std, TensorBase) else None
    if like is None and size is None:
        raise TypeError("normal(): give a size with float mean and std, or Tensor mean/std")
    shape = np.broadcast_shapes(*(t.shape for t in (mean, std) if isinstance(t, TensorBase))) if like is not None \
        else _size((size,), "normal")
    dtype = like.dtype if like is not None else dtype
    z = randn(shape, generator=generator, dtype=dtype, device=like.device if like is not None else device)
    y = (z * std + mean).detach()
    for t in (mean, std):
        y = depends(y, t) if isinstance(t, TensorBase) and t.requires_grad else y
    return y if like is not None else y.requires_grad_(requires_grad)


def _like(fn, t, dtype, device, requires_grad, *args, **kwargs):
    return fn(*args, t.shape, dtype=t.dtype if dtype is None else dtype, device=device or t.device,
              requires_grad=requires_grad, **kwargs)


def zeros_like(input, *, dtype=None, device=None, requires_grad=False):
    return _like(zeros, input, dtype, device, requires_grad)


def ones_like(input, *, dtype=None, device=None, requires_grad=False):
    return _like(ones, input, dtype, device, requires_grad)


def empty_like(input, *, dtype=None, device=None, requires_grad=False):
    return _like(empty, input, dtype, device, requires_grad)


def rand_like(input, *, generator=None, dtype=None, device=None, requires_grad=False):
    return _like(rand, input, dtype, device, requires_grad, generator=generator)


def randn_like(input, *, generator=None, dtype=None, device=None, requires_grad=False):
    return _like(randn, input, dtype, device, requires_grad, generator=generator)


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False):
    return full(input.shape, fill_value, dtype=input.dtype if dtype is None else dtype, device=device or input.device,
                requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    return randint(low, high, input.shape, generator=generator, dtype=input.dtype if dtype is None else dtype,
                   device=device or input.device, requires_grad=requires_grad)
