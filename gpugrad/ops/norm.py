"""Layer normalization and embedding lookup.  LayerNorm runs the ``layer_norm_fwd/bwd`` kernels (their NumPy
references on the CPU); Embedding is a gather whose VJP is a scatter-add."""
from __future__ import annotations

import math

from gpugrad.backend import deferred
from gpugrad.core import tensor_xp
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.core.tensor import TensorBase
from gpugrad.ops.kernel_op import KernelOp


@register("layer_norm")
class LayerNorm(KernelOp):
    """y = (x - mean) * rstd * w + b over the trailing ``w.ndim`` axes (``n`` elements),
    rstd = 1 / sqrt(var + eps) with the biased variance; w, b optional (None: no affine).

    VJP, with xhat = (x - mean) * rstd and g = gy * w:  gx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
    gw = Σ gy * xhat, gb = Σ gy over the leading axes.  The kernels see x as 2-D (rows, n).
    """
    formula = "gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * w, gw = Σ gy * xhat, gb = Σ gy"

    node_name = "NativeLayerNormBackward0"  # torch's name for the same node

    def _fwd(self, impl, xp, x, w=None, b=None):
        n = self.n
        # A view when x is contiguous (the usual case). With n = 0 (an empty normalized axis) reshape(-1, 0) cannot
        # infer the rows: any count gives the same empty results (torch's), so x's leading axes are taken as rows.
        x2 = x.reshape(-1, n) if n else x.reshape(math.prod(x.shape[:-1]), 0)
        w1 = None if w is None else w.reshape(n)
        y, mean, rstd = impl.layer_norm_fwd(xp, x2, w1, None if b is None else b.reshape(n), self.eps)
        self.shapes = (x.shape, w.shape if w is not None else None if b is None else b.shape)
        # x itself, not its rows x2 (a copy when x is not contiguous): create_graph finds it among the inputs
        self.save_for_backward(x, w1, mean, rstd)
        return y.reshape(x.shape)

    def _as_rows(self, x):
        n = self.n
        return x.reshape((-1, n) if n else (math.prod(x.shape[:-1]), 0))

    def _bwd(self, impl, xp, gy):
        x, w1, mean, rstd = self.saved
        x2 = self._as_rows(x)
        xshape, wshape = self.shapes
        gx, gw, gb = impl.layer_norm_bwd(xp, x2, w1, mean, rstd, gy.reshape(x2.shape))
        anchor = next((a for a in (x2, w1) if isinstance(a, TensorBase) and a.requires_grad), None)
        if xp is tensor_xp and anchor is not None:
            # torch's one backward op has x and the weight among its inputs, so its gw and gb require grad, but it
            # has no formula for their gradients there: a leaf's .grad stays None
            on = anchor.reshape(-1)[:1].sum()
            gw, gb = (g if g is None or g.requires_grad else xp.depends(g, on, undefined=True) for g in (gw, gb))
        ng = self.needs_input_grad
        return (gx.reshape(xshape) if ng[0] else None,
                gw.reshape(wshape) if len(ng) > 1 and ng[1] else None,
                gb.reshape(wshape) if len(ng) > 2 and ng[2] else None)

    def _rows(self, xp, x):
        """(x as rows, xhat, rstd (rows, 1)): from the saved statistics on arrays, recomputed with recorded ops on
        Tensors (so a double backward or a Hessian product differentiates through them)."""
        x2 = self._as_rows(x)
        if xp is tensor_xp:
            mean = x2.mean(axis=-1, keepdims=True)
            centered = x2 - mean
            rstd = ((centered * centered).mean(axis=-1, keepdims=True) + self.eps) ** -0.5
            return x2, centered * rstd, rstd
        _, _, mean, rstd = self.saved
        rstd = rstd.astype(x2.dtype)[:, None]
        return x2, (x2 - mean.astype(x2.dtype)[:, None]) * rstd, rstd

    def _jvp(self, impl, xp, ins, out, ts):
        """dy = rstd (t - mean(t) - xhat mean(t xhat)) w + xhat tw + tb."""
        x, w, b = (tuple(ins) + (None, None))[:3]
        tx, tw, tb = (tuple(ts) + (None, None))[:3]
        x2, xhat, rstd = self._rows(xp, x)
        n = max(self.n, 1)
        dy = 0.0
        if tx is not None:
            t2 = tx.reshape(x2.shape)
            dy = rstd * (t2 - xp.sum(t2, axis=-1, keepdims=True) / n - xhat * xp.sum(t2 * xhat, axis=-1, keepdims=True) / n)
            if w is not None:
                dy = dy * w.reshape(self.n)
        if tw is not None:
            dy = dy + xhat * tw.reshape(self.n)
        if tb is not None:
            dy = dy + tb.reshape(self.n)
        if not hasattr(dy, "reshape"):  # no input had a tangent that reaches y
            return out * 0
        # only w's or b's tangent: (n,), broadcast over the rows
        return dy.reshape(x.shape) if dy.ndim == 2 else xp.broadcast_to(dy, x2.shape).reshape(x.shape)

    def _saved_on_tensors(self, xp):
        """x and w as the inputs they are, and the row statistics recomputed from x with recorded ops, so that the
        reference VJP on Tensors differentiates through them (gb = Σ gy needs no b)."""
        x, w1 = self.saved[0], self.saved[1]
        x2, _, rstd = self._rows(xp, x)
        w = xp.input_of(self, 1).reshape(self.n) if w1 is not None else None
        return x, w, x2.mean(axis=-1), rstd.reshape(-1)


@register("embedding")
class Embedding(Op):
    """y = weight[ids] (rows of a (num, dim) table; ``ids`` any shape of integers, a keyword parameter).

    VJP: gweight = zeros, then gweight[ids[k]] += gy[k] for every k: a scatter-add, so repeated ids add up.
    Rows at ``padding_idx`` get no gradient.
    """
    formula = "gweight[ids[k]] += gy[k]"
    linear = True

    padding_idx = None

    def forward(self, xp, weight):
        ids, num = self.ids, weight.shape[0]
        if ids.dtype.kind not in "iu":
            raise TypeError(f"embedding: ids must be integers, got {ids.dtype}")
        # NOTE: CuPy would wrap a bad id around: checked without a sync, raised now on the CPU and at the next read
        # on CUDA (backend/deferred.py)
        deferred.check_range(ids, num, IndexError, f"embedding: id {{bad}} is out of range for a table of {num} "
                             f"rows (valid: 0..{num - 1})")
        self.wshape = weight.shape
        return xp.take(weight, ids, axis=0)

    def backward(self, xp, gy):
        ids = self.ids.reshape(-1)
        gw = xp.zeros(self.wshape, dtype=gy.dtype)
        xp.add.at(gw, ids, gy.reshape(ids.size, self.wshape[1]))  # unbuffered: duplicates accumulate (gw[ids] += would not)
        if self.padding_idx is not None:
            gw[self.padding_idx] = 0
        return gw
