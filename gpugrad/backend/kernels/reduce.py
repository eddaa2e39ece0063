"""Launchers of reduce.cu: softmax, log_softmax and logsumexp over rows, forward and backward; column sums."""
from __future__ import annotations

from gpugrad.backend.kernels.launch import _column_sum, _launch_team_rows
from gpugrad.backend.kernels.validate import _rows_in
from gpugrad.backend.reference.float16 import opmath_all


def softmax_fwd(xp, x):
    rt, x = _rows_in("softmax_fwd", x)
    y = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "softmax_fwd", x, (x, y))
    return y


def softmax_bwd(xp, y, gy):
    rt, y, gy = _rows_in("softmax_bwd", y, [gy])
    gx = rt.empty(y.shape, y.dtype)
    _launch_team_rows(rt, "reduce", "softmax_bwd", y, (y, gy, gx))
    return gx


def log_softmax_fwd(xp, x):
    rt, x = _rows_in("log_softmax_fwd", x)
    y = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "log_softmax_fwd", x, (x, y))
    return y


def log_softmax_bwd(xp, y, gy):
    rt, y, gy = _rows_in("log_softmax_bwd", y, [gy])
    gx = rt.empty(y.shape, y.dtype)
    _launch_team_rows(rt, "reduce", "log_softmax_bwd", y, (y, gy, gx))
    return gx


def logsumexp_fwd(xp, x):
    rt, x = _rows_in("logsumexp_fwd", x)
    lse = rt.empty((x.shape[0],), x.dtype)
    _launch_team_rows(rt, "reduce", "logsumexp_fwd", x, (x, lse))
    return lse


def logsumexp_bwd(xp, x, lse, glse):
    rt, x, lse, glse = _rows_in("logsumexp_bwd", x, row_vectors=[lse, glse])
    gx = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "logsumexp_bwd", x, (x, lse, glse, gx))
    return gx


def sum_rows(xp, g):
    """Column sums of a 2-D array (the sum over axis 0) -> (cols,); deterministic."""
    rt, g = _rows_in("sum_rows", g)
    rows, cols = g.shape
    if rows == 0 or cols == 0:
        return rt.zeros((cols,), g.dtype)
    return _column_sum(rt, g)

opmath_all(globals())  # float16 in float32, exactly as the references (reference.opmath)
