"""Top-level functions (``gpugrad.cat``, ``gpugrad.where``, ...) for ops that are not one tensor's method."""
from __future__ import annotations

from gpugrad.ops.activation import POINTWISE_OPS
from gpugrad.ops.arith import Where
from gpugrad.ops.movement import Cat, Stack
from gpugrad._tensor import Tensor, _index_array


def _tensors(xs, op):
    xs = list(xs)
    if not xs:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    return [x if isinstance(x, Tensor) else Tensor(x, device=xs[0].device if isinstance(xs[0], Tensor) else None)
            for x in xs]


def _axis_or_dim(axis, dim, op):
    if axis is not None and dim is not None:
        raise TypeError(f"{op}: give the axis as axis= or as dim= (its torch name), not both")
    return axis if axis is not None else dim if dim is not None else 0


def cat(tensors, axis=None, *, dim=None):
    """Concatenate along an existing axis (default 0).  ``dim=`` is accepted as an alias of ``axis``, as in torch."""
    return Cat.apply(*_tensors(tensors, "cat"), axis=_axis_or_dim(axis, dim, "cat"))


def stack(tensors, axis=None, *, dim=None):
    """Stack along a new axis (default 0).  ``dim=`` is accepted as an alias of ``axis``, as in torch."""
    return Stack.apply(*_tensors(tensors, "stack"), axis=_axis_or_dim(axis, dim, "stack"))


def where(cond, a, b):
    """Elementwise ``cond ? a : b``; gradients flow to a and b, never to the condition."""
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    if like is None:
        raise TypeError("where: at least one of a and b must be a Tensor")
    return Where.apply(like._other(a), like._other(b), cond=_index_array(cond, like, "where"))


def matmul(a, b):
    return a @ b


def maximum(a, b):
    return a.maximum(b)


def minimum(a, b):
    return a.minimum(b)


def logsumexp(x, axis=-1, keepdims=False):
    return x.logsumexp(axis, keepdims)


def _pointwise(name):
    method = getattr(Tensor, name)

    def f(input, *args, **kwargs):
        return method(input, *args, **kwargs)

    f.__name__, f.__doc__ = name, method.__doc__
    return f


POINTWISE = {n: _pointwise(n) for n, op in POINTWISE_OPS.items() if op.decl.top}  # gpugrad.sin, gpugrad.exp, ...
globals().update(POINTWISE)
