"""Launchers of reduce.cu: softmax, log_softmax and logsumexp over rows, forward and backward; column sums.
float16 and bfloat16 run in the kernels' own instantiations (computed in float, rounded once at the store)."""
from __future__ import annotations

from gpugrad.backend.kernels.launch import _column_sum, _launch_team_rows
from gpugrad.backend.kernels.names import LOW_CTYPES
from gpugrad.backend.kernels.validate import _in_math, _rows_in
from gpugrad.backend.reference.float16 import opmath, opmath_all


def _native_low(x, like=(), vectors=()):
    """Whether a "mixed" launcher's low-precision kernel takes these arrays as they are: x float16 / bfloat16, like
    of x's dtype, each vector (None allowed) of x's dtype or float32; or no low-precision array at all (the float
    and double kernels). Any other mix (float32 gy beside bfloat16 x, bfloat16 w beside float32 x) is computed in
    float32 as reference.opmath computes it (``_CAST``)."""
    vectors = [v for v in vectors if v is not None]
    if x.dtype.name in LOW_CTYPES:
        return (all(a.dtype == x.dtype for a in like)
                and all(v.dtype == x.dtype or v.dtype.name == "float32" for v in vectors))
    return not any(a.dtype.name in LOW_CTYPES for a in (*like, *vectors))


def softmax_fwd(xp, x):
    rt, x = _rows_in("softmax_fwd", x, low=True)
    y = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "softmax_fwd", x, (x, y))
    return y


def softmax_bwd(xp, y, gy):
    rt, y, gy = _rows_in("softmax_bwd", y, [gy], low=True)
    gx = rt.empty(y.shape, y.dtype)
    _launch_team_rows(rt, "reduce", "softmax_bwd", y, (y, gy, gx))
    return gx


def log_softmax_fwd(xp, x):
    rt, x = _rows_in("log_softmax_fwd", x, low=True)
    y = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "log_softmax_fwd", x, (x, y))
    return y


def log_softmax_bwd(xp, y, gy):
    rt, y, gy = _rows_in("log_softmax_bwd", y, [gy], low=True)
    gx = rt.empty(y.shape, y.dtype)
    _launch_team_rows(rt, "reduce", "log_softmax_bwd", y, (y, gy, gx))
    return gx


def logsumexp_fwd(xp, x):
    """lse (rows,) in x's dtype (for float16 / bfloat16 x the float result rounded once, as reference.opmath returns
    it; the logsumexp op saves a float32 lse by giving this float32 x, float16.opmath_array)."""
    rt, x = _rows_in("logsumexp_fwd", x, low=True)
    lse = rt.empty((x.shape[0],), x.dtype)
    _launch_team_rows(rt, "reduce", "logsumexp_fwd", x, (x, lse))
    return lse


def logsumexp_bwd(xp, x, lse, glse):
    """gx in x's dtype; beside float16 / bfloat16 x, lse and glse may be float32 (the op's saved lse) or x's dtype."""
    if not _native_low(x, vectors=(lse, glse)):
        return _CAST["logsumexp_bwd"](xp, x, lse, glse)
    rt, x, lse, glse = _rows_in("logsumexp_bwd", x, row_vectors=[lse, glse], low=True)
    gx = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "logsumexp_bwd", x, (x, _in_math(lse, x), _in_math(glse, x), gx))
    return gx


def sum_rows(xp, g):
    """Column sums of a 2-D array (the sum over axis 0) -> (cols,); deterministic. float16 / bfloat16 add in float32
    and are rounded once."""
    rt, g = _rows_in("sum_rows", g, low=True)
    rows, cols = g.shape
    if rows == 0 or cols == 0:
        return rt.zeros((cols,), g.dtype)
    return _column_sum(rt, g)

# Launchers with float16 and bfloat16 kernels of their own (names.LOW_KERNELS). "same": only arrays all of one low
# dtype are theirs, a mixed call (float32 gy beside bfloat16 y) is computed in float32 as before (reference.opmath);
# "mixed": logsumexp_bwd also takes the float32 lse the logsumexp op saves.
_MIXED = ("logsumexp_bwd",)
NATIVE_LOW = ("softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd", "logsumexp_fwd", "sum_rows",
              *_MIXED)
_CAST = {n: opmath(globals()[n]) for n in _MIXED}  # the float32 route for the mixes their kernels do not take
opmath_all(globals(), native={n: "mixed" if n in _MIXED else "same" for n in NATIVE_LOW})
