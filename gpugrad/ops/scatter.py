"""Scatter along a dim: the transpose of gather (torch's scatter, scatter_add and, through them, index_add)."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import deferred
from gpugrad.core.args import canonical_axis, index_array
from gpugrad.core.op import Op, named as _named
from gpugrad.core.registry import composite, register
from gpugrad.core.tensor import TensorBase, as_operand


@register("scatter", inplace=True)
class Scatter(Op):
    """y = x with src written (``reduce=None``) or added (``reduce="add"``) where index points along ``axis``:
    ``y[index[i][j]][j] = src[i][j]`` for axis 0 (src may be a number; only its first index.shape elements are read).
    Linear in (x, src).  VJP: gx = gy, zeroed where written; gsrc = gather(gy, axis, index).
    """
    formula = "gx = gy (zeroed where written), gsrc = gy gathered at the index"
    linear = True
    promotes = "same"  # as torch: src must have the input's dtype

    def forward(self, xp, x, src):
        index, self.axis = self.index, canonical_axis(self.axis, x.ndim, "scatter")
        if index.dtype.kind not in "iu" or index.ndim != x.ndim:
            raise RuntimeError(f"scatter: index must be an integer tensor with as many dims as the input {x.shape}, "
                               f"got {index.dtype} of shape {index.shape}")
        deferred.check_range(index, x.shape[self.axis], RuntimeError, f"scatter(): index {{bad}} is out of bounds for "
                             f"dimension {self.axis} with size {x.shape[self.axis]} (input of shape {x.shape})")
        self.key = tuple(index if d == self.axis else xp.arange(n).reshape([-1 if e == d else 1 for e in
                                                                              range(index.ndim)])
                         for d, n in enumerate(index.shape))
        self.src_shape = getattr(src, "shape", None)
        part = src[tuple(slice(0, n) for n in index.shape)] if self.src_shape else src
        y = x.copy()
        if self.reduce == "add":
            xp.add.at(y, self.key, part)
        else:
            y[self.key] = part
        return y

    def backward(self, xp, gy):
        gx = gsrc = None
        if self.needs_input_grad[0]:
            gx = gy if self.reduce == "add" else gy.copy()
            if self.reduce != "add":
                gx[self.key] = 0
        if self.src_shape is not None and self.needs_input_grad[1]:
            gsrc = xp.zeros(self.src_shape, dtype=gy.dtype)
            gsrc[tuple(slice(0, n) for n in self.index.shape)] = gy[self.key]
        return gx, gsrc

    @staticmethod
    def scatter(input, dim, index, src=None, *, value=None, reduce=None):
        """A copy with ``src`` (a tensor, or a number as ``value``) written where ``index`` points along ``dim``
        (``reduce="add"``: added), as torch.scatter; the gradient flows to both."""
        if reduce not in (None, "add"):
            raise ValueError(f"scatter: reduce must be None or 'add', got {reduce!r}")
        src = value if src is None else src
        canonical_axis(dim, input.ndim, "scatter")  # before the operands' dtypes, as torch
        src = as_operand(src, input)
        out = Scatter.apply(input, src, index=index_array(index, input, "scatter"), axis=dim, reduce=reduce)
        return out if isinstance(src, TensorBase) else _named(out, "ScatterBackward1")  # torch's scatter.value


@composite("scatter_add", inplace=True)
def scatter_add(input, dim, index, src):
    return _named(Scatter.scatter(input, dim, index, src, reduce="add"), "ScatterAddBackward0")


@composite("index_add", inplace=True)
def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` added at ``index`` (a vector) along ``dim``; repeated indices add up."""
    d = canonical_axis(dim, input.ndim, "index_add")
    idx = index_array(index, input, "index_add")
    n = input.shape[d] if input.ndim else 1
    if input.ndim > 1 and not input.numel():  # torch's CPU kernel checks nothing then: no id reaches an element
        idx, source = idx[:0], source.narrow(d, 0, 0)
    where = f"index_add: ids must lie in [0, {n}) along dim {d} of the input {tuple(input.shape)}"
    # torch's CPU kernels: scatter_add_ along the first or last of 2+ dims with int64 ids and alpha 1 (its error),
    # else a loop over the ids (index_select's)
    if input.ndim > 1 and d in (0, input.ndim - 1) and idx.dtype == np.int64 and alpha == 1:
        deferred.check_range(idx, n, RuntimeError, f"index {{bad}} is out of bounds for dimension {d} with size {n} "
                             f"({where})")
    else:
        deferred.check_range(idx, n, IndexError, f"index out of range in self ({where}, got min {{lo}} and max {{hi}})")
    idx = idx.reshape([-1 if e == d else 1 for e in range(source.ndim)])
    source = source if alpha == 1 else source * alpha
    out = Scatter.scatter(input, d, input._backend.xp.broadcast_to(idx, source.shape), source, reduce="add")
    return _named(out, "IndexAddBackward0")
