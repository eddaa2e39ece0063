"""Layer normalization and embedding lookup.  LayerNorm runs the ``layer_norm_fwd/bwd`` kernels (their NumPy
references on the CPU); Embedding is a gather whose VJP is a scatter-add."""
from __future__ import annotations

import math

from gpugrad.autograd.function import Op
from gpugrad.backend import deferred
from gpugrad.ops import register
from gpugrad.ops.kernel_op import KernelOp


@register("layer_norm")
class LayerNorm(KernelOp):
    """y = (x - mean) * rstd * w + b over the trailing ``w.ndim`` axes (``n`` elements),
    rstd = 1 / sqrt(var + eps) with the biased variance; w, b optional (None: no affine).

    VJP, with xhat = (x - mean) * rstd and g = gy * w:  gx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
    gw = Σ gy * xhat, gb = Σ gy over the leading axes.  The kernels see x as 2-D (rows, n).
    """

    @classmethod
    def backward_name(cls):
        return "NativeLayerNormBackward0"  # torch's name for the same node

    def _fwd(self, impl, xp, x, w=None, b=None):
        n = self.n
        # A view when x is contiguous (the usual case). With n = 0 (an empty normalized axis) reshape(-1, 0) cannot
        # infer the rows: any count gives the same empty results (torch's), so x's leading axes are taken as rows.
        x2 = x.reshape(-1, n) if n else x.reshape(math.prod(x.shape[:-1]), 0)
        w1 = None if w is None else w.reshape(n)
        y, mean, rstd = impl.layer_norm_fwd(xp, x2, w1, None if b is None else b.reshape(n), self.eps)
        self.shapes = (x.shape, None if w is None else w.shape)
        self.save_for_backward(x2, w1, mean, rstd)
        return y.reshape(x.shape)

    def _bwd(self, impl, xp, gy):
        x2, w1, mean, rstd = self.saved
        xshape, wshape = self.shapes
        gx, gw, gb = impl.layer_norm_bwd(xp, x2, w1, mean, rstd, gy.reshape(x2.shape))
        ng = self.needs_input_grad
        return (gx.reshape(xshape) if ng[0] else None,
                gw.reshape(wshape) if len(ng) > 1 and ng[1] else None,
                gb.reshape(wshape) if len(ng) > 2 and ng[2] else None)


@register("embedding")
class Embedding(Op):
    """y = weight[ids] (rows of a (num, dim) table; ``ids`` any shape of integers, a keyword parameter).

    VJP: gweight = zeros, then gweight[ids[k]] += gy[k] for every k: a scatter-add, so repeated ids add up.
    Rows at ``padding_idx`` get no gradient.
    """

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
