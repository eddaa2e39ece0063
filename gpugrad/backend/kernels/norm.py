"""Launchers of norm.cu: LayerNorm over the last axis, forward and backward (with the weight and bias
gradients as column sums)."""
from __future__ import annotations

from gpugrad.backend.kernels.launch import _column_out, _column_plan, _column_sum, _launch_team_rows
from gpugrad.backend.kernels.names import CTYPES, _expr
from gpugrad.backend.kernels.validate import _rows_in
from gpugrad.backend.reference.float16 import opmath_all


def _filled_if_none(rt, w, x, fill):
    """A layer without affine parameters (w is None) runs the same kernel with constant ones / zeros."""
    if w is None:
        w = rt.empty((x.shape[1],), x.dtype)
        w[...] = fill
    return w


def layer_norm_fwd(xp, x, w, b, eps):
    """(y, mean, rstd) over the last axis of a 2-D x; w, b (cols,) or None (no affine)."""
    name = "layer_norm_fwd"
    rt, x, w, b = _rows_in(name, x, col_vectors=[w, b])
    w, b = _filled_if_none(rt, w, x, 1), _filled_if_none(rt, b, x, 0)
    y = rt.empty(x.shape, x.dtype)
    mean, rstd = rt.empty((x.shape[0],), x.dtype), rt.empty((x.shape[0],), x.dtype)
    _launch_team_rows(rt, "norm", name, x, (x, w, b, y, mean, rstd), float(eps))
    return y, mean, rstd


def layer_norm_bwd(xp, x, w, mean, rstd, gy):
    """(gx, gw, gb) from the saved mean and rstd; w None means no affine (gw, gb still returned)."""
    name = "layer_norm_bwd"
    rt, x, gy, mean, rstd, w = _rows_in(name, x, like=[gy], row_vectors=[mean, rstd], col_vectors=[w])
    w = _filled_if_none(rt, w, x, 1)
    rows, cols = x.shape
    gx = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "norm", name, x, (x, w, mean, rstd, gy, gx))
    if rows == 0 or cols == 0:
        return gx, rt.zeros((cols,), x.dtype), rt.zeros((cols,), x.dtype)
    grid, per_chunk = _column_plan(rows, cols)
    (pw, gw), (pb, gb) = _column_out(rt, grid, cols, x.dtype), _column_out(rt, grid, cols, x.dtype)
    rt.raw_kernel("norm", _expr("layer_norm_bwd_wb", CTYPES[x.dtype.name]))(
        grid, (32, 8), (x, mean, rstd, gy, pw, pb, rows, cols, per_chunk))
    if gw is not None:
        return gx, gw, gb
    return gx, _column_sum(rt, pw), _column_sum(rt, pb)

opmath_all(globals())  # float16 in float32, exactly as the references (reference.opmath)
