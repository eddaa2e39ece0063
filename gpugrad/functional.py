"""Top-level functions (``gpugrad.cat``, ``gpugrad.sort``, ...) and the Tensor methods that are compositions of ops.

Each behaviour is written once, and two tables make it both a function and a method, as in torch:

- ``METHODS``: functions defined here (first argument ``input``) that are also Tensor methods: ``x.sort(1)`` is
  ``gpugrad.sort(x, 1)``;
- ``MIRRORED``: Tensor methods that are also top-level functions: ``gpugrad.sum(x, 1)`` is ``x.sum(1)``.

Selections along a dim (max, min, median, mode, kthvalue, sort, topk) find their indices without a graph and take
the values with ``gather``, so the gradient goes to the returned indices (torch's value_selecting_reduction_backward:
``max(dim)`` sends all of gy to the index it returns, where ``amax`` splits it among ties).
"""
from __future__ import annotations

import builtins
import numbers
from collections import Counter

import numpy as np

from gpugrad import return_types
from gpugrad.ops.activation import POINTWISE_OPS
from gpugrad.ops.arith import Where
from gpugrad.ops.convert import IndexPlace
from gpugrad.ops.linalg import _LETTERS, Einsum, LinalgVectorNorm
from gpugrad.ops.matmul import Matmul
from gpugrad.ops.movement import Cat, Gather, Stack
from gpugrad.ops.reduce import Max, Median, Min, canonical_axis
from gpugrad.ops.scan import Cumprod, Cumsum
from gpugrad.ops.scatter import Scatter
from gpugrad._tensor import Tensor, _dim, _index_array, _make, _on_own_device


def _tensors(xs, op):
    xs = list(xs)
    if not xs:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    return [x if isinstance(x, Tensor) else Tensor(x, device=xs[0].device if isinstance(xs[0], Tensor) else None)
            for x in xs]


def _named(t, name):
    """``t`` with its node named as torch names it (a composition's last node would otherwise name it)."""
    if t._grad_fn is not None:
        t._grad_fn._name = name
    return t


def _sizes(args):
    """``f(2, 3)`` or ``f((2, 3))``, as torch's size arguments."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


def _axis(input, dim, op):
    return canonical_axis(dim, input.ndim, op)


def cat(tensors, dim=None, *, axis=None):
    """Concatenate along an existing dim (default 0).  NumPy's ``axis=`` is an alias of ``dim``."""
    return Cat.apply(*_tensors(tensors, "cat"), axis=_dim0(dim, axis, "cat"))


def stack(tensors, dim=None, *, axis=None):
    """Stack along a new dim (default 0).  NumPy's ``axis=`` is an alias of ``dim``."""
    return Stack.apply(*_tensors(tensors, "stack"), axis=_dim0(dim, axis, "stack"))


def _dim0(dim, axis, op):
    d = _dim(dim, False, {} if axis is None else {"axis": axis}, op)["axis"]
    return 0 if d is None else d


def hstack(tensors):
    return cat(tensors, 0 if all(t.ndim == 1 for t in tensors) else 1)


def vstack(tensors):
    return cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def where(condition, input=None, other=None):
    """Elementwise ``condition ? input : other``; gradients flow to input and other, never to the condition.
    ``where(condition)`` alone is ``nonzero(condition, as_tuple=True)``."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    like = input if isinstance(input, Tensor) else other if isinstance(other, Tensor) else None
    if like is None:
        raise TypeError("where: at least one of input and other must be a Tensor")
    return Where.apply(like._other(input), like._other(other), cond=_index_array(condition, like, "where"))


def _where_method(self, condition, y):
    return where(condition, self, y)


# -- selections along a dim: values (differentiable, by gather) and indices ------------------------------------------
@_on_own_device
def _pick(input, dim, keepdim, index_fn, kind, op, reduce=True):
    """``kind((values, indices))``: ``index_fn(xp, data, axis)`` gives the indices along ``axis`` (keepdims)."""
    if not input.ndim:  # a 0-d tensor is one element along dim 0 or -1, as in torch
        canonical_axis(dim, 0, op)
        return kind(t.reshape(()) for t in _pick(input.reshape(1), 0, True, index_fn, kind, op, reduce))
    d = _axis(input, dim, op)
    if reduce and input.shape[d] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size (input shape {tuple(input.shape)})")
    be = input._backend
    idx = index_fn(be.xp, input._data, d)
    name = f"{op.capitalize()}Backward{1 if op == 'median' else 0}"
    values, indices = _named(Gather.apply(input, index=idx, axis=d), name), _make(be.as_array(idx), be)
    if not keepdim:
        values, indices = _named(values.squeeze(d), name), indices.squeeze(d)
    return kind((values, indices))


def _argsort(xp, a, d, descending=False):
    """Stable indices that sort along d; descending keeps ties in order and puts NaN first, as torch."""
    if not descending:
        return xp.argsort(a, axis=d, kind="stable")
    return a.shape[d] - 1 - xp.flip(xp.argsort(xp.flip(a, d), axis=d, kind="stable"), d)


def _nth(n, op, d):
    """The indices of the n-th smallest value (0-based) along d."""
    def index(xp, a, axis):
        if not 0 <= n < a.shape[axis]:
            raise RuntimeError(f"{op}(): selected number k out of range for dimension {d}")
        return _argsort(xp, a, axis)[(slice(None),) * axis + (slice(n, n + 1),)]
    return index


def _extreme(op, arg, full):
    def f(input, dim=None, keepdim=False, **kw):
        if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
            return input.maximum(dim) if op == "max" else input.minimum(dim)
        a = _dim(dim, keepdim, kw, op)
        if a["axis"] is None:
            return full.apply(input, axis=None, keepdims=False)
        if isinstance(a["axis"], tuple):
            raise TypeError(f"{op}(): dim must be an int (use amax/amin to reduce several dims), got {a['axis']}")
        return _pick(input, a["axis"], a["keepdims"], lambda xp, x, d: xp.expand_dims(getattr(xp, arg)(x, axis=d), d),
                     getattr(return_types, op), op)
    f.__name__ = op
    f.__doc__ = (f"{op}() over all elements (gy split among ties), or along ``dim``: ``(values, indices)`` as "
                 f"gpugrad.return_types.{op} (gy to the index returned); ``{op}(a, b)`` is the elementwise {op}imum.")
    return f


max, min = _extreme("max", "argmax", Max), _extreme("min", "argmin", Min)  # noqa: A001


def aminmax(input, *, dim=None, keepdim=False):
    return return_types.aminmax((input.amin(dim, keepdim), input.amax(dim, keepdim)))


def median(input, dim=None, keepdim=False, **kw):
    """The lower median over all elements (gy split among ties), or along ``dim``: ``(values, indices)``; NaN (and
    its index) where a line has one, as torch."""
    a = _dim(dim, keepdim, kw, "median")
    if a["axis"] is None:
        return Median.apply(input, axis=None, keepdims=False)

    def index(xp, x, d):
        mid = _nth((x.shape[d] - 1) // 2, "median", d)(xp, x, d)
        nan = x != x
        return xp.where(xp.any(nan, axis=d, keepdims=True), xp.expand_dims(xp.argmax(nan, axis=d), d), mid)
    return _pick(input, a["axis"], a["keepdims"], index, return_types.median, "median")


def kthvalue(input, k, dim=-1, keepdim=False):
    """The k-th smallest value along ``dim`` (k from 1) and its index."""
    return _pick(input, dim, keepdim, lambda xp, x, d: _nth(k - 1, "kthvalue", dim)(xp, x, d),
                 return_types.kthvalue, "kthvalue")


def mode(input, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and the index of its last
    occurrence, as torch."""
    def index(xp, x, d):
        moved = xp.moveaxis(x, d, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        order = xp.argsort(rows, axis=1, kind="stable")
        s = xp.take_along_axis(rows, order, axis=1)
        run = xp.cumsum(xp.concatenate([xp.zeros((len(s), 1), dtype=bool), s[:, 1:] != s[:, :-1]], axis=1), axis=1)
        counts = xp.zeros(s.shape, dtype=xp.int32)
        xp.add.at(counts, (xp.arange(len(s))[:, None], run), 1)  # the length of each run of equal values
        best = xp.argmax(counts, axis=1)[:, None]  # the first longest run: the smallest of the most frequent values
        last = xp.take_along_axis(xp.cumsum(counts, axis=1), best, axis=1) - 1  # its last place in sorted order
        return xp.moveaxis(xp.take_along_axis(order, last, axis=1).reshape(moved.shape[:-1] + (1,)), -1, d)
    return _pick(input, dim, keepdim, index, return_types.mode, "mode")


def sort(input, dim=-1, descending=False, stable=False):
    """Sorted values along ``dim`` and the indices they came from (stable: equal values keep their order)."""
    return _pick(input, dim, True, lambda xp, x, d: _argsort(xp, x, d, descending), return_types.sort, "sort", False)


def argsort(input, dim=-1, descending=False, stable=False):
    return sort(input, dim, descending).indices


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    """The k largest (or smallest) values along ``dim``, in order, and their indices."""
    def index(xp, x, d):
        if not 0 <= k <= x.shape[d]:
            raise RuntimeError(f"topk(): selected index k={k} out of range for dimension {d} of size {x.shape[d]}")
        return _argsort(xp, x, d, largest)[(slice(None),) * d + (slice(0, k),)]
    return _pick(input, dim, True, index, return_types.topk, "topk", False)


# -- reductions and scans that are compositions ----------------------------------------------------------------------
def prod(input, dim=None, keepdim=False, *, dtype=None, **kw):
    """Π x over all elements or along ``dim``: the last of the cumulative products, so zeros get torch's gradients
    (the product of the others for a lone zero, 0 otherwise)."""
    x, a = input._cast(dtype), _dim(dim, keepdim, kw, "prod")
    if isinstance(a["axis"], tuple):
        raise TypeError(f"prod(): dim must be an int, got {a['axis']}")
    if a["axis"] is None or not x.ndim:
        out = prod(x.reshape(-1), 0)
        return _named(out.reshape((1,) * x.ndim if a["keepdims"] and a["axis"] is not None else ()), "ProdBackward0")
    d = _axis(x, a["axis"], "prod")
    if x.shape[d] == 0:  # the empty product: 1
        return _named(x.sum(d, a["keepdims"]) * 0 + 1, "ProdBackward1")
    y = Cumprod.apply(x, axis=d)
    return _named(y[(slice(None),) * d + (slice(-1, None) if a["keepdims"] else -1,)], "ProdBackward1")


def cumsum(input, dim, *, dtype=None):
    return Cumsum.apply(input._cast(dtype), axis=dim)


def cumprod(input, dim, *, dtype=None):
    return Cumprod.apply(input._cast(dtype), axis=dim)


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector p-norm over all elements or ``dim`` (an int or a tuple): p = "fro" or 2, 1, inf, -inf, 0, any
    number (torch.linalg.vector_norm's gradients: 0 where the norm is 0)."""
    if p is None or p == "fro":
        p = 2
    if isinstance(p, str):
        raise ValueError(f"norm: p={p!r} is a matrix norm that needs an SVD, which gpugrad does not have; use "
                         "p='fro' or a number")
    x = input._cast(dtype)
    if x._data.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {x.dtype}; "
                           "call .float() first")
    return LinalgVectorNorm.apply(x, ord=float(p), **_dim(dim, keepdim, {}, "norm"))


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return input.var(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return input.std(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


# -- shape and movement ----------------------------------------------------------------------------------------------
def _along(input, d, key):
    return input[(slice(None),) * d + (key,)]


def split(input, split_size_or_sections, dim=0):
    """Views of consecutive pieces along ``dim``: of ``split_size`` each (the last may be smaller), or of the given
    sizes."""
    d = _axis(input, dim, "split")
    n = input.shape[d]
    if isinstance(split_size_or_sections, numbers.Integral):
        s = int(split_size_or_sections)
        if s < 0 or (s == 0 and n):
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}"
                               if s == 0 else f"split expects split_size be non-negative, but got split_size={s}")
        sizes = [builtins.min(s, n - i) for i in range(0, n, s)] if n else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if builtins.sum(sizes) != n or builtins.min(sizes, default=0) < 0:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
    starts = np.cumsum([0] + sizes[:-1])
    return tuple(_along(input, d, slice(int(a), int(a) + k)) for a, k in zip(starts, sizes))


def chunk(input, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input.shape[_axis(input, dim, "chunk")]
    return split(input, -(-n // chunks) if n else [0] * chunks, dim)


def tensor_split(input, indices_or_sections, dim=0):
    d = _axis(input, dim, "tensor_split")
    n = input.shape[d]
    if isinstance(indices_or_sections, numbers.Integral):
        q, r = divmod(n, indices_or_sections)
        sizes = [q + 1] * r + [q] * (indices_or_sections - r)
    else:
        bounds = [0] + [builtins.min(builtins.max(int(i), 0), n) for i in indices_or_sections] + [n]
        sizes = [builtins.max(b - a, 0) for a, b in zip(bounds, bounds[1:])]
    return split(input, sizes, d)


def unbind(input, dim=0):
    d = _axis(input, dim, "unbind")
    return tuple(_along(input, d, i) for i in range(input.shape[d]))


def narrow(input, dim, start, length):
    d = _axis(input, dim, "narrow")
    n = input.shape[d]
    start = int(start) + (n if start < 0 else 0)
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return _along(input, d, slice(start, start + length))


def select(input, dim, index):
    d = _axis(input, dim, "select")
    if not -input.shape[d] <= index < input.shape[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at dimension "
                         f"{d}")
    return _along(input, d, int(index))


def movedim(input, source, destination):
    src = [_axis(input, s, "movedim") for s in (source if isinstance(source, (tuple, list)) else (source,))]
    dst = [_axis(input, s, "movedim") for s in (destination if isinstance(destination, (tuple, list)) else
                                                (destination,))]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError(f"movedim: Invalid source {source} or destination {destination}: they must be as many, "
                           "without repeats")
    order = [a for a in range(input.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return input.permute(order)


def swapaxes(input, axis0, axis1):
    return input.transpose(axis0, axis1)


def unflatten(input, dim, sizes):
    d = _axis(input, dim, "unflatten")
    return input.reshape(input.shape[:d] + tuple(sizes) + input.shape[d + 1:])


def flip(input, *dims, **kw):
    """A copy with the order along ``dims`` reversed."""
    dims = _sizes(dims) if dims else _sizes((kw.pop("dims"),)) if "dims" in kw else None
    if dims is None or kw:
        raise TypeError("flip() missing 1 required positional argument: 'dims'")
    key = [slice(None)] * builtins.max(input.ndim, 1)
    for d in dims:
        key[_axis(input, d, "flip")] = slice(None, None, -1)
    key = key[:input.ndim]  # a 0-d tensor: nothing to reverse
    return _named(input[tuple(key)].clone(), "FlipBackward0")


def fliplr(input):
    return flip(input, 1)


def flipud(input):
    return flip(input, 0)


def roll(input, shifts, dims=None):
    """Elements shifted along ``dims`` (wrapping around); over the flattened tensor without dims."""
    if dims is None:
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    shifts, dims = _sizes((shifts,)), _sizes((dims,))
    out = input
    for s, d in zip(shifts, dims):
        d = _axis(input, d, "roll")
        n = input.shape[d]
        s = int(s) % n if n else 0
        if s:
            out = cat([_along(out, d, slice(n - s, None)), _along(out, d, slice(0, n - s))], d)
    return _named(out if out is not input else input.clone(), "RollBackward0")


def repeat(input, *sizes):
    """The tensor tiled ``sizes`` times along each dim (new leading dims for extra sizes)."""
    sizes = _sizes(sizes)
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    shape = (1,) * (len(sizes) - input.ndim) + tuple(input.shape)
    pairs = [v for n in shape for v in (1, n)]
    big = [v for r, n in zip(sizes, shape) for v in (r, n)]
    out = input.reshape(pairs).expand(big).reshape([r * n for r, n in zip(sizes, shape)])
    return _named(out, "RepeatBackward0")


def tile(input, dims):
    dims = tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


def repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """Each element repeated ``repeats`` times (an int, or one count per element) along ``dim`` (flattened if
    None)."""
    if dim is None:
        input, dim = input.reshape(-1), 0
    d = _axis(input, dim, "repeat_interleave")
    if isinstance(repeats, numbers.Integral):
        x = input.unsqueeze(d + 1)
        return x.expand(x.shape[:d + 1] + (int(repeats),) + x.shape[d + 2:]).flatten(d, d + 1)
    xp = input._backend.xp
    reps = _index_array(repeats, input, "repeat_interleave")
    return index_select(input, d, xp.repeat(xp.arange(input.shape[d]), reps))


@_on_own_device
def _triangle(input, diagonal, lower):
    op = "tril" if lower else "triu"
    if input.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")
    xp = input._backend.xp
    above = xp.arange(input.shape[-1])[None, :] - xp.arange(input.shape[-2])[:, None]  # j - i
    keep = above <= diagonal if lower else above >= diagonal
    return _named(Where.apply(input, xp.zeros((), input._data.dtype), cond=keep), op.capitalize() + "Backward0")


def tril(input, diagonal=0):
    return _triangle(input, diagonal, True)


def triu(input, diagonal=0):
    return _triangle(input, diagonal, False)


@_on_own_device
def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal (offset above it if > 0, below if < 0) of the planes (dim1, dim2), as the last dim."""
    x = movedim(input, (dim1, dim2), (-2, -1))
    n = builtins.max(builtins.min(x.shape[-2] + builtins.min(offset, 0), x.shape[-1] - builtins.max(offset, 0)), 0)
    i = x._backend.xp.arange(n)
    return _named(x[..., i - builtins.min(offset, 0), i + builtins.max(offset, 0)], "DiagonalBackward0")


@_on_own_device
def diag(input, diagonal=0):
    """A 1-D tensor placed on a diagonal of a square matrix, or a matrix's diagonal."""
    if input.ndim == 2:
        return globals()["diagonal"](input, diagonal)
    if input.ndim != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    n, k = input.shape[0], abs(diagonal)
    i = input._backend.xp.arange(n)
    key = (i, i + diagonal) if diagonal >= 0 else (i - diagonal, i)
    return _named(IndexPlace.apply(input, key=key, shape=(n + k, n + k)), "DiagEmbedBackward0")


def trace(input):
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return _named(diagonal(input).sum(), "TraceBackward0")


def index_select(input, dim, index):
    idx = _index_array(index, input, "index_select")
    if idx.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector, got shape {tuple(idx.shape)}")
    return _named(_along(input, _axis(input, dim, "index_select"), idx.reshape(-1)), "IndexSelectBackward0")


def masked_select(input, mask):
    m = _index_array(mask, input, "masked_select")
    shape = np.broadcast_shapes(input.shape, m.shape)
    return input.expand(shape)[input._backend.xp.broadcast_to(m, shape)]


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """A copy with ``src`` (a tensor, or a number as ``value``) written where ``index`` points along ``dim``
    (``reduce="add"``: added), as torch.scatter; the gradient flows to both."""
    if reduce not in (None, "add"):
        raise ValueError(f"scatter: reduce must be None or 'add', got {reduce!r}")
    src = value if src is None else src
    return Scatter.apply(input, input._other(src), index=_index_array(index, input, "scatter"), axis=dim,
                         reduce=reduce)


def scatter_add(input, dim, index, src):
    return scatter(input, dim, index, src, reduce="add")


def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` added at ``index`` (a vector) along ``dim``; repeated indices add up."""
    d = _axis(input, dim, "index_add")
    idx = _index_array(index, input, "index_add").reshape([-1 if e == d else 1 for e in range(source.ndim)])
    source = source if alpha == 1 else source * alpha
    return scatter(input, d, input._backend.xp.broadcast_to(idx, source.shape), source, reduce="add")


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    return where(input.isnan(), 0.0, input).sum(dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    return nansum(input, dim, keepdim, dtype=dtype) / input.isnan().logical_not().sum(dim, keepdim)


def round(input, *, decimals=0):  # noqa: A001 - torch's name
    """Round half to even, at ``decimals`` places (negative: tens, hundreds, ...), as torch."""
    r = POINTWISE_OPS["round"].apply
    return r(input) if not decimals else r(input * 10.0 ** decimals) / 10.0 ** decimals


def take_along_dim(input, indices, dim=None):
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    return input.gather(dim, indices)


@_on_own_device
def nonzero(input, *, as_tuple=False):
    xp, be = input._backend.xp, input._backend
    if as_tuple:
        return tuple(_make(be.as_array(i), be) for i in xp.nonzero(input._data.reshape(input.shape or (1,))))
    return _make(be.as_array(xp.argwhere(input._data)), be)


def argwhere(input):
    return nonzero(input)


@_on_own_device
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002 - torch's name
    """The distinct values (sorted; along ``dim``: the distinct slices), with the inverse indices and the counts if
    asked (a tuple then, as torch)."""
    be = input._backend
    out = be.xp.unique(input._data if dim is not None else input._data.reshape(-1), return_inverse=return_inverse,
                       return_counts=return_counts, axis=None if dim is None else _axis(input, dim, "unique"))
    if not (return_inverse or return_counts):
        return _make(be.as_array(out), be)
    out = [_make(be.as_array(a), be) for a in out]
    if return_inverse and dim is None:
        out[1] = out[1].reshape(input.shape)
    return tuple(out)


# -- products ---------------------------------------------------------------------------------------------------------
def _need(t, ndim, what, op):
    if not isinstance(t, Tensor) or t.ndim != ndim:
        raise RuntimeError(f"{op}: {what} must be a {ndim}-D tensor, got "
                           f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}")


def matmul(input, other):
    return input @ other


def mm(input, mat2):
    _need(input, 2, "self", "mm")
    _need(mat2, 2, "mat2", "mm")
    return Matmul.apply(input, mat2)


def bmm(input, mat2):
    _need(input, 3, "batch1", "bmm")
    _need(mat2, 3, "batch2", "bmm")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {tuple(input.shape)} and {tuple(mat2.shape)}")
    return Matmul.apply(input, mat2)


def mv(input, vec):
    _need(input, 2, "self", "mv")
    _need(vec, 1, "vec", "mv")
    return Matmul.apply(input, vec)


def dot(input, other):
    _need(input, 1, "self", "dot")
    _need(other, 1, "other", "dot")
    if input.shape != other.shape:
        raise RuntimeError(f"dot: inconsistent tensor size, expected tensor [{input.shape[0]}] and src "
                           f"[{other.shape[0]}] to have the same number of elements")
    return Matmul.apply(input, other)


def outer(input, vec2):
    _need(input, 1, "self", "outer")
    _need(vec2, 1, "vec2", "outer")
    return _named(input.reshape(-1, 1) * vec2, "MulBackward0")


ger = outer


def einsum(equation, *operands):
    """Einstein summation as torch's: "ij,jk->ik", implicit outputs ("ij,jk"), "..." for broadcast dims, operands
    given one by one or as a list; size-1 dims broadcast.  One differentiable op (ops/linalg.py)."""
    operands = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else operands
    if not all(isinstance(x, Tensor) for x in operands):
        raise TypeError(f"einsum(): operands must be Tensors, got {[type(x).__name__ for x in operands]}")
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    subs = lhs.split(",")
    if len(subs) != len(operands):
        raise RuntimeError(f"einsum(): {'more' if len(operands) > len(subs) else 'fewer'} operands were provided than "
                           f"specified in the equation {equation!r}")
    free = iter(builtins.sorted(set(_LETTERS) - set(eq)))
    ell = builtins.max([x.ndim - len(s) + 3 for s, x in zip(subs, operands) if "..." in s], default=0)
    dots = "".join(next(free) for _ in range(ell))
    for i, (s, x) in enumerate(zip(subs, operands)):
        subs[i] = s.replace("...", dots[ell - (x.ndim - len(s) + 3):] if x.ndim - len(s) + 3 > 0 else "")
        if len(subs[i]) != x.ndim or not subs[i].isalpha():
            raise RuntimeError(f"einsum(): the subscripts {s!r} of operand {i} do not match its {x.ndim} dimensions "
                               f"(shape {tuple(x.shape)}) in {equation!r}")
    counts = Counter("".join(subs))
    out = out.replace("...", dots) if arrow else dots + "".join(builtins.sorted(c for c in counts if counts[c] == 1
                                                                                and c not in dots))
    if any(c not in counts for c in out) or len(set(out)) != len(out):
        raise RuntimeError(f"einsum(): the output subscripts {out!r} must be distinct and appear in an input, in "
                           f"{equation!r}")
    size = {}
    for s, x in zip(subs, operands):
        for c, n in zip(s, x.shape):
            if size.get(c, 1) not in (1, n) and n != 1:
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for an operand of shape {tuple(x.shape)}, "
                                   f"which does not broadcast with {size[c]}, in {equation!r}")
            size[c] = n if size.get(c, 1) == 1 else size[c]
    operands = [x if all(size[c] == n for c, n in zip(s, x.shape)) else x.expand([size[c] for c in s])
                for s, x in zip(subs, operands)]
    return Einsum.apply(*operands, equation=",".join(subs) + "->" + out)


# -- comparisons ------------------------------------------------------------------------------------------------------
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return input._values("isclose", other, rtol=rtol, atol=atol, equal_nan=equal_nan)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return builtins.bool(isclose(input, other, rtol, atol, equal_nan).all())


def equal(input, other):
    return tuple(input.shape) == tuple(other.shape) and builtins.bool((input == other).all())


def _view_as(input, other):
    return input.view(other.shape)


def _reshape_as(input, other):
    return input.reshape(other.shape)


def _type_as(input, other):
    return input.to(dtype=other.dtype)


# The functions above that are also Tensor methods, and the methods that are also top-level functions.
METHODS = ("max", "min", "aminmax", "median", "kthvalue", "mode", "sort", "argsort", "topk", "prod", "cumsum",
           "cumprod", "norm", "split", "chunk", "tensor_split", "unbind", "narrow", "select", "movedim", "swapaxes",
           "unflatten", "flip", "fliplr", "flipud", "roll", "repeat", "tile", "repeat_interleave", "tril", "triu",
           "diagonal", "diag", "trace", "index_select", "masked_select", "take_along_dim", "nonzero", "argwhere",
           "unique", "mm", "bmm", "mv", "dot", "outer", "ger", "isclose", "allclose", "equal", "scatter", "scatter_add",
           "index_add", "nansum", "nanmean", "round")
MIRRORED = ("sum", "mean", "amax", "amin", "argmax", "argmin", "all", "any", "count_nonzero", "var", "std",
            "logsumexp", "softmax", "log_softmax", "reshape", "transpose", "permute", "t", "squeeze", "unsqueeze",
            "flatten", "gather", "masked_fill", "clamp", "clip", "clamp_min", "clamp_max", "abs", "neg", "square",
            "add", "sub", "mul", "div", "pow", "maximum", "minimum", "floor_divide", "remainder", "fmod", "eq", "ne",
            "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not",
            "logical_and", "logical_or", "logical_xor", "numel", "broadcast_to", "clone", "detach")
for _name in METHODS:
    setattr(Tensor, _name, globals()[_name])
Tensor.moveaxis, Tensor.swapdims, Tensor.where = movedim, swapaxes, _where_method
Tensor.view_as, Tensor.reshape_as, Tensor.type_as = _view_as, _reshape_as, _type_as
for _name in ("scatter", "scatter_add", "index_add", "masked_fill", "clamp_min", "clamp_max", "fmod", "remainder"):
    setattr(Tensor, _name + "_", lambda self, *a, _f=getattr(Tensor, _name), _n=_name + "_", **k: self._inplace(
        _n, lambda: _f(self, *a, **k)))


def _mirror(name):
    method = getattr(Tensor, name)

    def f(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}(): argument 'input' must be a Tensor, not {type(input).__name__}")
        return method(input, *args, **kwargs)

    f.__name__, f.__qualname__, f.__doc__ = name, name, method.__doc__
    return f


POINTWISE = {n: _mirror(n) for n, op in POINTWISE_OPS.items() if op.decl.top}  # gpugrad.sin, gpugrad.exp, ...
# Everything gpugrad re-exports from here (gpugrad/__init__.py); mirrors stay out of this module's namespace, where
# sum, all, abs, round would hide Python's.
TOP = {**{n: globals()[n] for n in (*METHODS, "cat", "stack", "hstack", "vstack", "where", "matmul", "einsum",
                                    "var_mean", "std_mean")},
       **{n: _mirror(n) for n in (*MIRRORED, *(p + "_" for p in POINTWISE), "clamp_", "clamp_min_", "clamp_max_",
                                  "detach_", "fill_", "zero_", "dropout", "get_device")},
       **POINTWISE, "moveaxis": movedim, "swapdims": swapaxes, "concat": cat, "concatenate": cat}
TOP.update(negative=TOP["neg"], absolute=TOP["abs"], arcsin=TOP["asin"], arccos=TOP["acos"], arctan=TOP["atan"])


def _write(out, result, name):
    """torch's ``out=``: the result written into ``out`` (resized if its shape differs), which is returned."""
    if isinstance(result, tuple):  # (values, indices) as torch.return_types.max_out
        kind = getattr(return_types, type(result).__name__ + "_out", type(result))
        return kind(_write(o, r, name) for o, r in zip(out, result))
    if result.requires_grad:
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad; call it without out=")
    if out.shape == result.shape:
        return out.copy_(result)
    out.data = result
    return out


def _with_out(name, f):
    def g(*args, out=None, **kwargs):
        result = f(*args, **kwargs)
        return result if out is None else _write(out, result, name)

    g.__name__, g.__qualname__, g.__doc__ = name, name, f.__doc__
    return g


TOP = {n: _with_out(n, f) for n, f in TOP.items()}
