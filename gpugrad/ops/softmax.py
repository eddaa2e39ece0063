"""Row-wise softmax family over one axis.  Kernels work on the last axis of a 2-D array; other axes are moved
there first (a copy only when the axis is not already last) and back after (another copy: results are
C-contiguous, as torch's)."""
from __future__ import annotations

import math

from gpugrad.backend import reference as R
from gpugrad.core.args import canonical_axis, dims
from gpugrad.core.registry import register
from gpugrad.ops.kernel_op import KernelOp


def _rows(xp, x, axis, op):
    """x as (rows, n) with ``axis`` last, plus what it takes to undo it.  A 0-d x is one row of one element."""
    axis = canonical_axis(axis, x.ndim, op)
    if x.ndim == 0:
        return x.reshape(1, 1), (axis, ())
    moved = x if axis == x.ndim - 1 else xp.moveaxis(x, axis, -1)
    # The row count is explicit: reshape(-1, 0) cannot infer it when the softmax axis is empty.
    return moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1]), (axis, moved.shape)


def _unrows(xp, y2, undo, ndim):
    """The rows back in x's layout, C-contiguous (torch's results are: .view() of them must work)."""
    axis, moved_shape = undo
    y = y2.reshape(moved_shape)
    return y if axis == ndim - 1 or ndim == 0 else xp.ascontiguousarray(xp.moveaxis(y, -1, axis))


class _RowOp(KernelOp):
    fwd = bwd = None
    batched_jvp = True  # their JVPs reduce over the axis counted from the end

    def _fwd(self, impl, xp, x):
        x2, self.undo = _rows(xp, x, self.axis, self.op_name)
        self.ndim = x.ndim
        y = _unrows(xp, getattr(impl, self.fwd)(xp, x2), self.undo, x.ndim)
        # The output itself is saved, as torch saves it: an in-place change of it is caught. Over a non-last axis
        # the backward moves its rows again (a copy, where keeping the moved rows would keep a second output).
        self.save_for_backward(y)
        return y

    def _bwd(self, impl, xp, gy):
        y2, _ = _rows(xp, self.saved[0], self.axis, self.op_name)
        gy2, _ = _rows(xp, gy, self.axis, self.op_name)
        return _unrows(xp, getattr(impl, self.bwd)(xp, y2, gy2), self.undo, self.ndim)


@register("softmax")
class Softmax(_RowOp):
    """y = e^(x - max) / Σ e^(x - max).  VJP: gx = y * (gy - Σ gy*y)."""
    formula = "gx = y * (gy - Σ gy * y)"
    fwd, bwd = "softmax_fwd", "softmax_bwd"

    def _jvp(self, impl, xp, ins, out, ts):  # the Jacobian is symmetric: the VJP's formula on the tangent
        if self.ndim == 0:
            return out * (ts[0] - ts[0] * out)
        return out * (ts[0] - xp.sum(ts[0] * out, axis=self.undo[0] - self.ndim, keepdims=True))

    @staticmethod
    def softmax(input, dim=-1, **kw):
        return Softmax.apply(input, axis=dims(dim, False, kw, "softmax")["axis"])


@register("log_softmax")
class LogSoftmax(_RowOp):
    """y = x - logsumexp(x).  VJP: gx = gy - e^y * Σ gy."""
    formula = "gx = gy - softmax(x) * Σ gy"
    fwd, bwd = "log_softmax_fwd", "log_softmax_bwd"

    def _jvp(self, impl, xp, ins, out, ts):  # t - Σ softmax(x) t (the row's d logsumexp)
        if self.ndim == 0:
            return ts[0] - xp.exp(out) * ts[0]
        return ts[0] - xp.sum(xp.exp(out) * ts[0], axis=self.undo[0] - self.ndim, keepdims=True)

    @staticmethod
    def log_softmax(input, dim=-1, **kw):
        return LogSoftmax.apply(input, axis=dims(dim, False, kw, "log_softmax")["axis"])


@register("logsumexp")
class LogSumExp(KernelOp):
    """y = log Σ e^x over one axis (max-shifted for stability).  VJP: gx = gy * e^(x - y)."""
    formula = "gx = gy * e^(x - y)"
    batched_jvp = True

    def _fwd(self, impl, xp, x):
        x2, self.undo = _rows(xp, x, self.axis, self.op_name)
        self.ndim = x.ndim
        # NOTE: the lse the VJP reads keeps the kernels' math precision (float32 for float16 x, as cross-entropy's):
        # exp(x - lse) from the float16-rounded output would be off by up to e^(ulp / 2), 14% near -1000.
        lse = impl.logsumexp_fwd(xp, R.opmath_array(x2))
        # Save x itself, as torch (not x2, a copy when the axis is not last): an in-place change of x is caught, and
        # create_graph finds x among the inputs (tensor_xp.input_of).  Backward re-derives the rows.
        self.save_for_backward(x, lse)
        out_shape = self.undo[1][:-1]
        y = lse.astype(x.dtype, copy=False).reshape(out_shape)
        return xp.expand_dims(y, self.undo[0]) if self.keepdims and x.ndim else y

    def _bwd(self, impl, xp, gy):
        x, lse = self.saved
        x2, _ = _rows(xp, x, self.axis, self.op_name)
        gx2 = impl.logsumexp_bwd(xp, x2, lse, gy.reshape(-1))
        return _unrows(xp, gx2, self.undo, self.ndim)

    def _saved_on_tensors(self, xp):
        """x as the input it is, and its rows' lse recomputed with recorded ops (the saved lse is an intermediate)."""
        x = self.saved[0]
        x2, _ = _rows(xp, x, self.axis, self.op_name)
        return x, x2.logsumexp(-1)

    def _jvp(self, impl, xp, ins, out, ts):  # Σ softmax(x) t over the axis
        x, t = ins[0], ts[0]
        if self.ndim == 0:
            return t * xp.exp(x - out)
        axis = self.undo[0] - self.ndim  # from the end: a batch of tangents (B, *x.shape) sums the same axis
        y = out if self.keepdims else xp.expand_dims(out, axis)
        return xp.sum(xp.exp(x - y) * t, axis=axis, keepdims=self.keepdims)

    @staticmethod
    def logsumexp(input, dim=-1, keepdim=False, **kw):
        """log Σ e^x over ``dim``: an int, or a tuple of dims (moved last and flattened: one row each)."""
        a = dims(dim, keepdim, kw, "logsumexp")
        axis = a["axis"]
        if isinstance(axis, int) or not input.ndim:
            return LogSumExp.apply(input, axis=axis if isinstance(axis, int) else -1, keepdims=a["keepdims"])
        axes = sorted({canonical_axis(d, input.ndim, "logsumexp") for d in (range(input.ndim) if axis is None
                                                                              else axis)})
        if axis is not None and len(axes) != len(axis):
            raise RuntimeError(f"logsumexp: dim {axis} appears multiple times in the list of dims")
        rest = [d for d in range(input.ndim) if d not in axes]
        moved = input.permute(rest + axes)
        rows = moved.reshape(tuple(moved.shape[:len(rest)]) + (math.prod(moved.shape[len(rest):]),))
        y = LogSumExp.apply(rows, axis=-1, keepdims=False)
        if a["keepdims"]:
            y = y.reshape(tuple(1 if d in axes else n for d, n in enumerate(input.shape)))
        return y
