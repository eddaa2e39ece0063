"""Functions written with other ops: selections (max(dim), sort, topk), shape functions (split, flip, repeat),
products (mm, bmm, dot), comparisons, and the other compositions torch offers as Tensor methods and functions.

Each is registered with ``@composite``: the registry binds it as ``Tensor.<name>`` (first argument ``input``) and
``gpugrad.<name>``, and as ``Tensor.<name>_`` where torch has the in-place form, as it does an op's frontend.

Selections along a dim (max, min, median, mode, kthvalue, sort, topk) find their indices without a graph and take
the values with ``gather``, so the gradient goes to the returned indices (torch's value_selecting_reduction_backward:
``max(dim)`` sends all of gy to the index it returns, where ``amax`` splits it among ties).
"""
from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from gpugrad import return_types
from gpugrad.backend import deferred
from gpugrad.core.args import canonical_axis, dims as _dim, index_array as _index_array, sizes as _sizes, with_dtype
from gpugrad.core.op import named as _named
from gpugrad.core.registry import composite
from gpugrad.core.tensor import TensorBase, as_operand, make as _make, on_own_device as _on_own_device
from gpugrad.core.views import mark_multi_output, shares_memory
from gpugrad.dtypes import scalar_type_name
from gpugrad.ops.activation import POINTWISE_OPS
from gpugrad.ops.arith import Where
from gpugrad.ops.convert import IndexPlace
from gpugrad.ops.matmul import Matmul
from gpugrad.ops.movement import Cat, Diagonal, Gather, Pieces, tensors_of
from gpugrad.ops.reduce import Extrema, Max, Median, Min
from gpugrad.ops.scan import Cumprod


def _axis(input, dim, op):
    return canonical_axis(dim, input.ndim, op)


@composite("hstack", method=False)
def hstack(tensors):
    tensors = [t.reshape(1) if not t.ndim else t for t in tensors_of(tensors, "hstack")]  # atleast_1d, as torch
    return Cat.cat(tensors, 0 if tensors[0].ndim == 1 else 1)  # torch's rule: by the first tensor's rank


@composite("vstack", method=False)
def vstack(tensors):
    return Cat.cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors_of(tensors, "vstack")], 0)


def _at_least(ndim, name):
    """torch.atleast_<ndim>d: one tensor, or a tuple for several (or for one list), each viewed with ndim axes or
    more: 0-d by reshape, 1-d as (1, n) and (1, n, 1), 2-d as (m, n, 1), as torch's unsqueezes do."""
    def at_least(*tensors):
        many = len(tensors) != 1 or isinstance(tensors[0], (list, tuple))
        out = []
        for t in tensors_of(tensors[0] if len(tensors) == 1 and many else tensors, name):
            if t.ndim == 0:
                t = t.reshape((1,) * ndim)
            elif t.ndim == 1 and ndim >= 2:
                t = t.unsqueeze(0).unsqueeze(-1) if ndim == 3 else t.unsqueeze(0)
            elif t.ndim == 2 and ndim == 3:
                t = t.unsqueeze(-1)
            out.append(t)
        return tuple(out) if many else out[0]
    at_least.__name__ = at_least.__qualname__ = name
    return composite(name, method=False)(at_least)


atleast_1d, atleast_2d, atleast_3d = (_at_least(n, f"atleast_{n}d") for n in (1, 2, 3))


@composite("dstack", method=False)
def dstack(tensors):
    return Cat.cat(atleast_3d(tensors_of(tensors, "dstack")), 2)


@composite("column_stack", method=False)
def column_stack(tensors):
    return Cat.cat([t.reshape(t.numel(), 1) if t.ndim < 2 else t for t in tensors_of(tensors, "column_stack")], 1)


@composite("row_stack", method=False)
def row_stack(tensors):
    return vstack(tensors)


@composite("where", method=False)
def where(condition, input=None, other=None):
    """Elementwise ``condition ? input : other``; gradients flow to input and other, never to the condition.
    ``where(condition)`` alone is ``nonzero(condition, as_tuple=True)``."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    like = input if isinstance(input, TensorBase) else other if isinstance(other, TensorBase) else None
    if like is None:
        raise TypeError("where: at least one of input and other must be a Tensor")
    return Where.apply(as_operand(input, like), as_operand(other, like), cond=_index_array(condition, like, "where"))


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
        if isinstance(dim, TensorBase):  # torch.max(a, b): the elementwise maximum
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


max = composite("max")(_extreme("max", "argmax", Max))  # noqa: A001 - torch's names
min = composite("min")(_extreme("min", "argmin", Min))  # noqa: A001


@composite("aminmax")
def aminmax(input, *, dim=None, keepdim=False):
    results = (input.amin(dim, keepdim), input.amax(dim, keepdim))
    if results[0]._grad_fn is not None:  # recorded: one node for both, as torch's
        Extrema(input, results)
    return return_types.aminmax(results)


@composite("median")
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


@composite("kthvalue")
def kthvalue(input, k, dim=-1, keepdim=False):
    """The k-th smallest value along ``dim`` (k from 1) and its index."""
    return _pick(input, dim, keepdim, lambda xp, x, d: _nth(k - 1, "kthvalue", dim)(xp, x, d),
                 return_types.kthvalue, "kthvalue")


@composite("mode")
def mode(input, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and the index of its last
    occurrence, as torch."""
    def index(xp, x, d):
        moved = xp.moveaxis(x, d, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        order = xp.argsort(rows, axis=1, kind="stable")
        s = xp.take_along_axis(rows, order, axis=1)
        new = (s[:, 1:] != s[:, :-1]) & ~((s[:, 1:] != s[:, 1:]) & (s[:, :-1] != s[:, :-1]))  # NaNs: one run, as torch
        run = xp.cumsum(xp.concatenate([xp.zeros((len(s), 1), dtype=bool), new], axis=1), axis=1)
        counts = xp.zeros(s.shape, dtype=xp.int32)
        xp.add.at(counts, (xp.arange(len(s))[:, None], run), 1)  # the length of each run of equal values
        best = xp.argmax(counts, axis=1)[:, None]  # the first longest run: the smallest of the most frequent values
        last = xp.take_along_axis(xp.cumsum(counts, axis=1), best, axis=1) - 1  # its last place in sorted order
        return xp.moveaxis(xp.take_along_axis(order, last, axis=1).reshape(moved.shape[:-1] + (1,)), -1, d)
    return _pick(input, dim, keepdim, index, return_types.mode, "mode")


@composite("sort")
def sort(input, dim=-1, descending=False, stable=False):
    """Sorted values along ``dim`` and the indices they came from (stable: equal values keep their order)."""
    return _pick(input, dim, True, lambda xp, x, d: _argsort(xp, x, d, descending), return_types.sort, "sort", False)


@composite("argsort")
def argsort(input, dim=-1, descending=False, stable=False):
    return sort(input, dim, descending).indices


@composite("topk")
def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    """The k largest (or smallest) values along ``dim``, in order, and their indices."""
    # NOTE: as torch, a 0-d tensor gives its element for k = 0 too (its results are 0-d, so they hold one element)
    n = 1 if not input.ndim and k == 0 else k

    def index(xp, x, d):
        if not 0 <= n <= x.shape[d]:
            raise RuntimeError(f"topk(): selected index k={k} out of range for dimension {d} of size {x.shape[d]}")
        return _argsort(xp, x, d, largest)[(slice(None),) * d + (slice(0, n),)]
    return _pick(input, dim, True, index, return_types.topk, "topk", False)


# -- reductions and scans that are compositions ----------------------------------------------------------------------
@composite("prod")
def prod(input, dim=None, keepdim=False, *, dtype=None, **kw):
    """Π x over all elements or along ``dim``: the last of the cumulative products, so zeros get torch's gradients
    (the product of the others for a lone zero, 0 otherwise)."""
    x, a = with_dtype(input, dtype), _dim(dim, keepdim, kw, "prod")
    if isinstance(a["axis"], tuple):
        raise TypeError(f"prod(): dim must be an int, got {a['axis']}")
    if a["axis"] is None or not x.ndim:
        if a["axis"] is not None:
            _axis(x, a["axis"], "prod")  # a 0-d input takes dim 0 or -1, as torch
        out = prod(x.reshape(-1), 0)
        return _named(out.reshape((1,) * x.ndim if a["keepdims"] and a["axis"] is not None else ()), "ProdBackward0")
    d = _axis(x, a["axis"], "prod")
    if x.shape[d] == 0:  # the empty product: 1
        return _named(x.sum(d, a["keepdims"]) * 0 + 1, "ProdBackward1")
    y = Cumprod.apply(x, axis=d)
    # a tensor of its own, as torch's (not a view into the cumulative products: in-place writes and saved-value
    # checks treat it as torch does)
    return _named(y[(slice(None),) * d + (slice(-1, None) if a["keepdims"] else -1,)].clone(), "ProdBackward1")


@composite("var_mean", method=False)
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return input.var(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


@composite("std_mean", method=False)
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return input.std(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


# -- shape and movement ----------------------------------------------------------------------------------------------
def _along(input, d, key):
    return input[(slice(None),) * d + (key,)]


@composite("split")
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
    named = "Split" if isinstance(split_size_or_sections, numbers.Integral) else "SplitWithSizes"
    return _grouped(input, _split_views(input, sizes, d, named), d, False, named + "Backward0")


def _split_views(input, sizes, d, name):
    """Views of consecutive pieces of ``sizes`` along ``d``: outputs of the multi-view op ``name`` (None: plain)."""
    starts = np.cumsum([0] + list(sizes[:-1]))
    out = tuple(_along(input, d, slice(int(a), int(a) + k)) for a, k in zip(starts, sizes))
    return out if name is None else tuple(mark_multi_output(t, name, i) for i, t in enumerate(out))


def _grouped(input, pieces, d, stacked, name):
    """The views as the outputs of one node, as torch's unbind and split give them (see ops.movement.Pieces)."""
    if pieces and pieces[0]._grad_fn is not None:
        Pieces(input, pieces, d, stacked, name)
    return pieces


@composite("chunk")
def chunk(input, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input.shape[_axis(input, dim, "chunk")]
    return split(input, -(-n // chunks) if n else [0] * chunks, dim)


@composite("tensor_split")
def tensor_split(input, indices_or_sections, dim=0):
    d = _axis(input, dim, "tensor_split")
    n = input.shape[d]
    if isinstance(indices_or_sections, numbers.Integral):
        q, r = divmod(n, indices_or_sections)
        sizes = [q + 1] * r + [q] * (indices_or_sections - r)
    else:
        bounds = [0] + [builtins.min(builtins.max(int(i), 0), n) for i in indices_or_sections] + [n]
        sizes = [builtins.max(b - a, 0) for a, b in zip(bounds, bounds[1:])]
    return _split_views(input, sizes, d, None)  # as torch: separate slices, not one node, and writable in place


@composite("unbind")
def unbind(input, dim=0):
    d = _axis(input, dim, "unbind")
    pieces = tuple(mark_multi_output(_along(input, d, i), "Unbind", i) for i in range(input.shape[d]))
    return _grouped(input, pieces, d, True, "UnbindBackward0")


@composite("narrow")
def narrow(input, dim, start, length):
    d = _axis(input, dim, "narrow")
    n = input.shape[d]
    start = int(start) + (n if start < 0 else 0)
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return _along(input, d, slice(start, start + length))


@composite("select")
def select(input, dim, index):
    d = _axis(input, dim, "select")
    if not -input.shape[d] <= index < input.shape[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at dimension "
                         f"{d}")
    return _along(input, d, int(index))


@composite("movedim")
def movedim(input, source, destination):
    if not input.ndim:  # dims 0 and -1 name the one element's place: the tensor itself, as a view
        for d in _sizes((source,)) + _sizes((destination,)):
            _axis(input, d, "movedim")
        return input.permute(())
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


@composite("swapaxes")
def swapaxes(input, axis0, axis1):
    return input.transpose(axis0, axis1)


@composite("unflatten")
def unflatten(input, dim, sizes):
    d = _axis(input, dim, "unflatten")
    sizes, n = tuple(sizes), input.shape[d] if input.ndim else 1
    if -1 in sizes:  # the inferred size, explicit: with an empty dim elsewhere, reshape could not infer it
        known = math.prod(k for k in sizes if k != -1)
        sizes = tuple((n // known if known else 0) if k == -1 else k for k in sizes)
    if math.prod(sizes) != n:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {d} ({n}) in "
                           "the input tensor")
    return input.reshape(input.shape[:d] + sizes + input.shape[d + 1:])


@composite("flip")
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


@composite("fliplr")
def fliplr(input):
    if input.ndim < 2:
        raise RuntimeError(f"fliplr: Input must be >= 2-d, got a tensor of shape {tuple(input.shape)}.")
    return flip(input, 1)


@composite("flipud")
def flipud(input):
    if input.ndim < 1:
        raise RuntimeError("flipud: Input must be >= 1-d, got a 0-d tensor.")
    return flip(input, 0)


@composite("roll")
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
            out = Cat.cat([_along(out, d, slice(n - s, None)), _along(out, d, slice(0, n - s))], d)
    return _named(out if out is not input else input.clone(), "RollBackward0")


@composite("repeat")
def repeat(input, *sizes):
    """The tensor tiled ``sizes`` times along each dim (new leading dims for extra sizes)."""
    if not sizes:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    sizes = _sizes(sizes)
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    shape = (1,) * (len(sizes) - input.ndim) + tuple(input.shape)
    pairs = [v for n in shape for v in (1, n)]
    big = [v for r, n in zip(sizes, shape) for v in (r, n)]
    out = _fresh(input.reshape(pairs).expand(big).reshape([r * n for r, n in zip(sizes, shape)]), input)
    return _named(out, "RepeatBackward0")


def _fresh(out, input):
    """``out`` in memory of its own: a reshape of an expand is a view of ``input`` where NumPy can stride it (a
    size-1 axis repeated), and repeat, tile and repeat_interleave return new storage, as torch's."""
    return out.clone() if shares_memory(out, input) else out


@composite("tile")
def tile(input, dims):
    dims = tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


@composite("repeat_interleave")
def repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """Each element repeated ``repeats`` times (an int, or one count per element) along ``dim`` (flattened if
    None)."""
    if dim is None:
        input, dim = input.reshape(-1), 0
    d = _axis(input, dim, "repeat_interleave")
    if isinstance(repeats, numbers.Integral):
        x = input.unsqueeze(d + 1)
        return _fresh(x.expand(x.shape[:d + 1] + (int(repeats),) + x.shape[d + 2:]).flatten(d, d + 1), input)
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


@composite("tril")
def tril(input, diagonal=0):
    return _triangle(input, diagonal, True)


@composite("triu")
def triu(input, diagonal=0):
    return _triangle(input, diagonal, False)


@composite("diag")
@_on_own_device
def diag(input, diagonal=0):
    """A 1-D tensor placed on a diagonal of a square matrix, or a matrix's diagonal."""
    if input.ndim == 2:  # a copy of the diagonal (torch's diag_copy), not a view of it as diagonal()
        return _named(Diagonal.diagonal(input, diagonal).clone(), "DiagonalBackward0")
    if input.ndim != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    n, k = input.shape[0], abs(diagonal)
    i = input._backend.xp.arange(n)
    key = (i, i + diagonal) if diagonal >= 0 else (i - diagonal, i)
    return _named(IndexPlace.apply(input, key=key, shape=(n + k, n + k)), "DiagEmbedBackward0")


@composite("trace")
def trace(input):
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return _named(Diagonal.diagonal(input).sum(), "TraceBackward0")


@composite("index_select")
@_on_own_device
def index_select(input, dim, index):
    """The entries at ``index`` (a vector of ids in [0, n): a negative id is an error, as in torch, not a count from
    the end) along ``dim``."""
    idx = _index_array(index, input, "index_select")
    if idx.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector, got shape {tuple(idx.shape)}")
    d = _axis(input, dim, "index_select")
    if not input.ndim and idx.size != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {idx.size} value(s)")
    n = input.shape[d] if input.ndim else 1
    if n == 0 and idx.size and input.ndim > 1:  # (a 1-D empty input: the range check's IndexError, as torch)
        raise RuntimeError(f"index_select(): self indexing axis dim should be positive (dim {d} of the input "
                           f"{tuple(input.shape)} is empty)")
    # checked without a sync on CUDA (backend/deferred.py): raised now on the CPU, at the next read on CUDA
    deferred.check_range(idx, n, IndexError, f"index_select(): index out of range in self: ids must lie in [0, {n}) "
                         f"along dim {d} of the input {tuple(input.shape)}, got min {{lo}} and max {{hi}}")
    if not input.ndim:
        return _named(input.reshape(1)[idx.reshape(-1)].reshape(()), "IndexSelectBackward0")
    return _named(_along(input, d, idx.reshape(-1)), "IndexSelectBackward0")


@composite("masked_select")
def masked_select(input, mask):
    m = _index_array(mask, input, "masked_select")
    shape = np.broadcast_shapes(input.shape, m.shape)
    return input.expand(shape)[input._backend.xp.broadcast_to(m, shape)]


@composite("nansum")
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    return _named(where(input.isnan(), 0.0, input).sum(dim, keepdim, dtype=dtype), "NansumBackward0")


@composite("nanmean")
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    return nansum(input, dim, keepdim, dtype=dtype) / input.isnan().logical_not().sum(dim, keepdim)


@composite("round", inplace=True)
def round(input, *, decimals=0):  # noqa: A001 - torch's name
    """Round half to even, at ``decimals`` places (negative: tens, hundreds, ...), as torch."""
    r = POINTWISE_OPS["round"].apply
    return r(input) if not decimals else r(input * 10.0 ** decimals) / 10.0 ** decimals


@composite("take_along_dim")
def take_along_dim(input, indices, dim=None):
    """``input``'s entries at ``indices`` along ``dim`` (over the flattened input without one); the other dims
    broadcast against each other, as torch's (gather's index is cut to the input instead)."""
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))  # as torch: negative ids are not wrapped here
    if not input.ndim:
        raise IndexError(f"take_along_dim(): Dimension specified as {dim} but tensor has no dimensions")
    d = _axis(input, dim, "take_along_dim")
    if input.ndim != indices.ndim:
        raise RuntimeError(f"take_along_dim(): input and indices should have the same number of dimensions, but got "
                           f"{input.ndim} dimensions for input, and {indices.ndim} dimensions for indices")
    if input.ndim:
        rest = np.broadcast_shapes(*(tuple(t.shape[:d]) + (1,) + tuple(t.shape[d + 1:]) for t in (input, indices)))
        input = input.expand(rest[:d] + (input.shape[d],) + rest[d + 1:])
        indices = indices.expand(rest[:d] + (indices.shape[d],) + rest[d + 1:])
    return input.gather(d, _wrapped_indices(indices, input.shape[d]))


def _wrapped_indices(indices, size):
    """take_along_dim's indices along a dim, the negative ones counted from the end as torch's (gather's are not):
    no host read. An index outside [-size, size) is then gather's error, where torch's CPU kernel reads past the
    dim without a check."""
    idx = indices._data if isinstance(indices, TensorBase) else indices
    if getattr(idx, "dtype", None) is None or idx.dtype.kind not in "iu":
        return indices  # gather refuses it, with its message
    xp = indices._backend.xp
    return _make(xp.where(idx < 0, idx + size, idx), indices._backend)


@composite("nonzero")
@_on_own_device
def nonzero(input, *, as_tuple=False):
    xp, be = input._backend.xp, input._backend
    if as_tuple:
        return tuple(_make(be.as_array(i), be) for i in xp.nonzero(input._data.reshape(input.shape or (1,))))
    return _make(be.as_array(xp.argwhere(input._data)), be)


@composite("argwhere")
def argwhere(input):
    return nonzero(input)


@composite("unique")
@_on_own_device
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002 - torch's name
    """The distinct values (sorted; along ``dim``: the distinct slices), with the inverse indices and the counts if
    asked (a tuple then, as torch)."""
    be = input._backend
    if dim is not None and any(n == 0 for d, n in enumerate(input.shape) if d != _axis(input, dim, "unique")):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    if dim is None:  # every NaN its own value, as torch's (NumPy and CuPy merge them by default)
        out = be.xp.unique(input._data.reshape(-1), return_inverse=return_inverse, return_counts=return_counts,
                           equal_nan=False)
    else:
        out = be.xp.unique(input._data, return_inverse=return_inverse, return_counts=return_counts,
                           axis=_axis(input, dim, "unique"))
    if not (return_inverse or return_counts):
        return _make(be.as_array(out), be)
    out = [_make(be.as_array(a), be) for a in out]
    if return_inverse and dim is None:
        out[1] = out[1].reshape(input.shape)
    return tuple(out)


# -- products ---------------------------------------------------------------------------------------------------------
def _need(t, ndim, what, op):
    if not isinstance(t, TensorBase) or t.ndim != ndim:
        raise RuntimeError(f"{op}: {what} must be a {ndim}-D tensor, got "
                           f"{tuple(t.shape) if isinstance(t, TensorBase) else type(t).__name__}")


@composite("mm")
def mm(input, mat2):
    _need(input, 2, "self", "mm")
    _need(mat2, 2, "mat2", "mm")
    return Matmul.apply(input, mat2)


@composite("bmm")
def bmm(input, mat2):
    _need(input, 3, "batch1", "bmm")
    _need(mat2, 3, "batch2", "bmm")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {tuple(input.shape)} and {tuple(mat2.shape)}")
    return Matmul.apply(input, mat2)


@composite("mv")
def mv(input, vec):
    _need(input, 2, "self", "mv")
    _need(vec, 1, "vec", "mv")
    return Matmul.apply(input, vec)


@composite("dot")
def dot(input, other):
    _need(input, 1, "self", "dot")
    _need(other, 1, "other", "dot")
    if input.shape != other.shape:
        raise RuntimeError(f"dot: inconsistent tensor size, expected tensor [{input.shape[0]}] and src "
                           f"[{other.shape[0]}] to have the same number of elements")
    return Matmul.apply(input, other)


@composite("outer")
def outer(input, vec2):
    _need(input, 1, "self", "outer")
    _need(vec2, 1, "vec2", "outer")
    return _named(input.reshape(-1, 1) * vec2, "MulBackward0")


@composite("ger")
def ger(input, vec2):
    return outer(input, vec2)


# -- comparisons ------------------------------------------------------------------------------------------------------
@composite("isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    if isinstance(other, TensorBase) and other.dtype != input.dtype:  # as torch: no promotion
        raise RuntimeError(f"isclose(): {scalar_type_name(input.dtype)} did not match {scalar_type_name(other.dtype)}: "
                           f"input is {input.dtype} and other {other.dtype}; convert one with .to(dtype)")
    return input._values("isclose", other, rtol=rtol, atol=atol, equal_nan=equal_nan)


@composite("allclose")
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return builtins.bool(isclose(input, other, rtol, atol, equal_nan).all())


@composite("equal")
def equal(input, other):
    return tuple(input.shape) == tuple(other.shape) and builtins.bool((input == other).all())


# -- views and aliases that torch offers as methods and functions ----------------------------------------------------
@composite("transpose")
def transpose(input, dim0=None, dim1=None):
    """The view with ``dim0`` and ``dim1`` swapped (all axes reversed without them)."""
    if dim0 is None:
        return input.permute(tuple(reversed(range(input.ndim))))
    if not input.ndim:  # dims 0 and -1 both name the one element's place, as in torch
        _axis(input, dim0, "transpose")
        _axis(input, dim1, "transpose")
        return _named(input.permute(()), "TransposeBackward0")
    axes = list(range(input.ndim))
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return _named(input.permute(tuple(axes)), "TransposeBackward0")


@composite("t")
def t(input):
    """The transpose of a matrix (a vector or a number as it is)."""
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D; use "
                           "transpose(dim0, dim1)")
    return _named(input.permute(tuple(reversed(range(input.ndim)))), "TBackward0")


@composite("flatten")
def flatten(input, start_dim=0, end_dim=-1):
    s, e = _axis(input, start_dim, "flatten"), _axis(input, end_dim, "flatten")
    if s > e:
        raise RuntimeError(f"flatten() has invalid args: start_dim cannot come after end_dim (got {start_dim} and "
                           f"{end_dim} for a tensor of shape {tuple(input.shape)})")
    if not input.ndim:
        return input.reshape(1)
    # the flattened size, not -1: with an empty dim elsewhere, -1 would be ambiguous
    return input.reshape(input.shape[:s] + (math.prod(input.shape[s:e + 1]),) + input.shape[e + 1:])


@composite("masked_fill", inplace=True)
@_on_own_device
def masked_fill(input, mask, value):
    """``value`` where ``mask`` is True (a number, or a 0-d Tensor that then gets the gradient there)."""
    mask = _index_array(mask, input, "masked_fill")
    fill = value if isinstance(value, TensorBase) else \
        _make(input._backend.xp.asarray(value, dtype=input._data.dtype), input._backend)
    return Where.apply(fill, input, cond=mask)


@composite("moveaxis")
def moveaxis(input, source, destination):
    return movedim(input, source, destination)


@composite("swapdims")
def swapdims(input, dim0, dim1):
    return swapaxes(input, dim0, dim1)
