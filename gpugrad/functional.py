"""Top-level functions (``gpugrad.cat``, ``gpugrad.where``, ...) for ops that are not one tensor's method."""
from __future__ import annotations

from gpugrad.ops.arith import Where
from gpugrad.ops.movement import Cat, Stack
from gpugrad._tensor import Tensor, _index_array


def _tensors(xs, op):
    xs = list(xs)
    if not xs:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    return [x if isinstance(x, Tensor) else Tensor(x, device=xs[0].device if isinstance(xs[0], Tensor) else None)
            for x in xs]


def cat(tensors, axis=0):
    """Concatenate along an existing axis.  ``dim=`` is accepted as in torch via ``axis``."""
    return Cat.apply(*_tensors(tensors, "cat"), axis=axis)


def stack(tensors, axis=0):
    return Stack.apply(*_tensors(tensors, "stack"), axis=axis)


def where(cond, a, b):
    """Elementwise ``cond ? a : b``; gradients flow to a and b, never to the condition."""
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    if like is None:
        raise TypeError("where: at least one of a and b must be a Tensor")
    return Where.apply(like._other(a), like._other(b), cond=_index_array(cond, like, "where"))


def exp(x):
    return x.exp()


def log(x):
    return x.log()


def matmul(a, b):
    return a @ b


def maximum(a, b):
    return a.maximum(b)


def minimum(a, b):
    return a.minimum(b)


def logsumexp(x, axis=-1, keepdims=False):
    return x.logsumexp(axis, keepdims)
