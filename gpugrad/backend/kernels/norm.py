"""Launchers of norm.cu: LayerNorm over the last axis, forward and backward (with the weight and bias
gradients as column sums). float16 and bfloat16 x run in the kernels' own instantiations, which compute in float
and take w, b, mean and rstd in float32 (a float32 weight beside low-precision x is read as it is)."""
from __future__ import annotations

from gpugrad.backend.kernels.launch import _column_out, _column_plan, _column_sum, _launch_team_rows
from gpugrad.backend.kernels.names import STORAGE_CTYPES, _expr
from gpugrad.backend.kernels.reduce import _native_low
from gpugrad.backend.kernels.validate import _in_math, _math_dtype, _rows_in
from gpugrad.backend.reference.float16 import opmath, opmath_all


def _filled_if_none(rt, w, x, fill):
    """A layer without affine parameters (w is None) runs the same kernel with constant ones / zeros."""
    if w is None:
        w = rt.empty((x.shape[1],), _math_dtype(x))
        w[...] = fill
    return _in_math(w, x)


def layer_norm_fwd(xp, x, w, b, eps):
    """(y, mean, rstd) over the last axis of a 2-D x; w, b (cols,) or None (no affine). y in x's dtype, mean and rstd
    in its math dtype (float32 for float16 / bfloat16 x, as reference.opmath keeps them)."""
    name = "layer_norm_fwd"
    if not _native_low(x, vectors=(w, b)):
        return _CAST[name](xp, x, w, b, eps)
    rt, x, w, b = _rows_in(name, x, col_vectors=[w, b], low=True)
    w, b = _filled_if_none(rt, w, x, 1), _filled_if_none(rt, b, x, 0)
    y = rt.empty(x.shape, x.dtype)
    mean, rstd = rt.empty((x.shape[0],), _math_dtype(x)), rt.empty((x.shape[0],), _math_dtype(x))
    _launch_team_rows(rt, "norm", name, x, (x, w, b, y, mean, rstd), float(eps))
    return y, mean, rstd


def layer_norm_bwd(xp, x, w, mean, rstd, gy):
    """(gx, gw, gb) from the saved mean and rstd; w None means no affine (gw, gb still returned). All three in x's
    dtype (for float16 / bfloat16 x gw and gb are float32 sums rounded once, as reference.opmath returns them)."""
    name = "layer_norm_bwd"
    if not _native_low(x, like=(gy,), vectors=(w, mean, rstd)):
        return _CAST[name](xp, x, w, mean, rstd, gy)
    rt, x, gy, mean, rstd, w = _rows_in(name, x, like=[gy], row_vectors=[mean, rstd], col_vectors=[w], low=True)
    w, mean, rstd = _filled_if_none(rt, w, x, 1), _in_math(mean, x), _in_math(rstd, x)
    rows, cols = x.shape
    gx = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "norm", name, x, (x, w, mean, rstd, gy, gx))
    if rows == 0 or cols == 0:
        return gx, rt.zeros((cols,), x.dtype), rt.zeros((cols,), x.dtype)
    grid, per_chunk = _column_plan(rows, cols)
    (pw, gw), (pb, gb) = _column_out(rt, grid, cols, x.dtype), _column_out(rt, grid, cols, x.dtype)
    rt.raw_kernel("norm", _expr("layer_norm_bwd_wb", STORAGE_CTYPES[x.dtype.name]))(
        grid, (32, 8), (x, mean, rstd, gy, pw, pb, rows, cols, per_chunk))
    if gw is not None:
        return gx, gw.astype(x.dtype, copy=False), gb.astype(x.dtype, copy=False)
    return gx, _column_sum(rt, pw, x.dtype), _column_sum(rt, pb, x.dtype)

# Launchers with float16 and bfloat16 kernels of their own (names.LOW_KERNELS). "mixed": float32 arrays beside
# low-precision x are theirs too (layer_norm_bwd's saved mean and rstd; float32 w or b).
NATIVE_LOW = ("layer_norm_fwd", "layer_norm_bwd")
_CAST = {n: opmath(globals()[n]) for n in NATIVE_LOW}  # the float32 route for the mixes their kernels do not take
opmath_all(globals(), native=dict.fromkeys(NATIVE_LOW, "mixed"))
