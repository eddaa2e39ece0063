"""An ``xp``-like namespace over Tensors, so an op's VJP written against ``xp`` can run on Tensors and record
a graph of its own (``create_graph=True``): higher-order gradients with no second copy of each rule.

The kernels' NumPy references (``backend/reference``) run on it too: the fused ops' double backward *is* their
reference VJP on Tensors. Arrays they build from non-differentiable data (targets, masks, index ranges) stay arrays of
the node's device (``on_device`` tells which), and mix with Tensors as constants.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from gpugrad.backend import backend_of
from gpugrad.core.forward_state import tangent_of_output
from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import TensorBase, make


def _const(array, like=None):
    return make(array, like._backend if like is not None else backend_of(array))


def _cond(c):
    return c._data if isinstance(c, TensorBase) else c


on_tensors = True  # what a function written against xp asks to tell Tensors from arrays
inf, nan = np.inf, np.nan
_DEVICE = threading.local()  # the backend of the node whose VJP runs on Tensors (per thread)


@contextlib.contextmanager
def on_device(backend):
    """Array-building functions (arange, zeros, ones) make arrays of ``backend`` inside the block."""
    prev = getattr(_DEVICE, "backend", None)
    _DEVICE.backend = backend
    try:
        yield
    finally:
        _DEVICE.backend = prev


def _xp():
    be = getattr(_DEVICE, "backend", None)
    return np if be is None else be.xp


def arange(*args, **kwargs):
    return _xp().arange(*args, **kwargs)


def zeros(shape, dtype=float):
    return _xp().zeros(shape, dtype)


def ones(shape, dtype=float):
    return _xp().ones(shape, dtype)


def asarray(value, dtype=None):
    return _xp().asarray(value, dtype=dtype)


def where(cond, a, b):
    if not isinstance(a, TensorBase) and not isinstance(b, TensorBase):
        if not isinstance(cond, TensorBase):  # nothing differentiable: an array (the references' index algebra)
            return _xp().where(cond, a, b)
        xp = np if isinstance(_cond(cond), (bool, np.ndarray)) else backend_of(_cond(cond)).xp
        return _const(xp.where(_cond(cond), a, b))
    return REGISTRY["where"].apply(a, b, cond=_cond(cond))


def zeros_like(x):
    return _const(x._backend.xp.zeros_like(x._data), x)


def depends(value, on, undefined=False):
    """``value``, recorded as depending on ``on`` with derivative 0: torch's VJPs that read an input through a
    piecewise-constant function (abs: gy * sgn(x); relu: threshold_backward(gy, y)) give create_graph gradients that
    require grad.  A where() that selects nothing from ``on``: its gradient there is exactly 0. ``undefined``: no
    gradient at all reaches ``on`` (torch's undefined one: a leaf's .grad stays None), as where a backward op of
    torch's has ``on`` among its inputs but no formula for it."""
    return REGISTRY["where"].apply(on, value, cond=on._backend.xp.zeros((), dtype=bool), a_undefined=undefined)


def sign(x):
    """torch's sgn(x): the sign (0 for NaN, where NumPy's is NaN) as a Tensor whose derivative is 0."""
    d = x._data
    return depends(_const(x._backend.as_array((d > 0).astype(d.dtype) - (d < 0).astype(d.dtype)), x), x)


def sum(x, axis=None, keepdims=False):  # noqa: A001 - mirrors xp.sum
    return x.sum(axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    return x.mean(axis=axis, keepdims=keepdims)


def broadcast_to(x, shape):
    return x.expand(shape)


def expand_dims(x, axis):
    return x.unsqueeze(axis)


def squeeze(x, axis=None):
    return x.squeeze(axis)


def moveaxis(x, source, destination):
    return x.movedim(source, destination)


def ascontiguousarray(x):
    return x.contiguous()


def swapaxes(x, a, b):
    return x.transpose(a, b)


def transpose(x, axes):
    return x.permute(axes)


def matmul(a, b):
    return a @ b


def exp(x):
    return x.exp()


def log(x):
    return x.log()


def sqrt(x):
    return x.sqrt()


def abs(x):  # noqa: A001
    return x.abs()


def maximum(a, b):
    return a.maximum(b)


def minimum(a, b):
    return a.minimum(b)


def tanh(x):
    return x.tanh()


def sin(x):
    return x.sin()


def cos(x):
    return x.cos()


def log1p(x):
    return x.log1p()


def expm1(x):
    return x.expm1()


def erf(x):
    return x.erf()


def cumsum(x, axis):
    return x.cumsum(axis)


def cumprod(x, axis):
    return x.cumprod(axis)


def flip(x, axis):
    return x.flip(axis)


def trunc(x):
    return x.trunc()


def einsum(equation, *operands, optimize=False):
    return REGISTRY["einsum"].apply(*operands, equation=equation)


def saved_as_tensors(node):
    """The node's saved arrays as Tensors that remember where they came from, so VJPs differentiate through them."""
    out = []
    for s, ref in zip(node.saved, node._saved_refs or [None] * len(node.saved)):
        if s is None or not hasattr(s, "shape"):  # None or a Python scalar operand: stays as it is
            out.append(s)
        elif ref is None:
            out.append(make(s, node._be))
        elif ref[0] == "in":
            out.append(ref[1])
        elif ref[0] in ("inview", "outview"):
            # A reshaped view of an input or of the output: ops that support create_graph use such views only
            # in comparisons (max's keepdims result), never differentiate through them.
            out.append(make(s, node._be))
        else:  # the node's own output: a tensor produced by this very node
            t = make(s, node._be, requires_grad=True)
            t._grad_fn = node
            out.append(tangent_of_output(t, node))
    return tuple(out)


def output_of(node, array):
    """``array`` (the node's output values) as a Tensor produced by ``node``: differentiating through it
    differentiates through the node again (for VJPs written in terms of the output, like softmax's)."""
    t = make(array, node._be, requires_grad=True)
    t._grad_fn = node
    return tangent_of_output(t, node)


def input_of(node, i):
    """The input Tensor whose buffer (or a view of it) the node saved as ``saved[i]``."""
    ref = node._saved_refs[i] if node._saved_refs else None
    if ref is None or not ref[0].startswith("in"):
        raise RuntimeError(f"{node.name()}: saved value {i} is not one of its inputs")
    return ref[1]
