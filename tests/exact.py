"""Exact expected values for the closed-form tables (tests/exact_op_cases.py, tests/exact_kernel_cases.py).

Expected values are computed in mpmath at 50 significant digits from the *exact* values of the inputs the run uses
(the float32 or float64 numbers they round to), then rounded once to the run's dtype: what is left between a result
and its expected value is the implementation's own error, held to a few ulps (rtol ~1e-14 in float64, ~1e-6 in
float32) where the op is well conditioned.  Nothing here calls gpugrad or its NumPy references.
"""
from __future__ import annotations

import mpmath
import numpy as np

MP = mpmath.MPContext()  # a context of our own: the 50 digits do not leak into other users of mpmath
MP.dps = 50

FLOATS = (np.float32, np.float64)
# (rtol, atol) per dtype unless a row says otherwise: a few ulps of a well-conditioned result
TOL = {np.dtype(np.float64): (1e-14, 0.0), np.dtype(np.float32): (1e-6, 0.0)}


def _one(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return MP.mpf(float(v)) if not isinstance(v, mpmath.mpf) else v


def exact(a) -> np.ndarray:
    """``a`` (an array or nested list of numbers) as an object array of mpf (floats) and ints, exactly."""
    a = np.asarray(a)
    out = np.empty(a.shape, dtype=object)
    for i, v in np.ndenumerate(a):
        out[i] = _one(v)
    return out


def ew(f):
    """``f`` (one mpf -> mpf, e.g. ``MP.erf``) applied elementwise to an object array or a number."""
    def run(*xs):
        return np.vectorize(f, otypes=[object])(*xs) if any(np.ndim(x) for x in xs) else f(*xs)

    return run


def to_float(want, dtype) -> np.ndarray:
    """The exact values rounded to ``dtype`` (through float64: mpf -> float rounds to nearest)."""
    a = np.asarray(want, dtype=object)
    out = np.empty(a.shape, dtype=np.float64)
    for i, v in np.ndenumerate(a):
        out[i] = float(v) if not isinstance(v, mpmath.mpc) else float("nan")  # a complex value: out of the domain
    return out.astype(dtype)


def assert_exact(got, want, dtype, tol=None, what=""):
    """``got`` (a NumPy array) against the exact ``want`` rounded to ``dtype``: same shape, |got - want| <= atol +
    rtol |want| elementwise (equal infinities and NaNs allowed)."""
    rtol, atol = (tol or TOL)[np.dtype(dtype)] if isinstance(tol or TOL, dict) else tol
    want = to_float(want, dtype)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=what)
        return
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True,
                               err_msg=what)


def vjp(f, xs, gy):
    """Σ_i gy_i ∂f_i/∂x_j for each x_j, by mpmath's high-precision numerical derivative: an independent check of a
    hand-derived backward formula.  ``f`` maps object arrays (the shapes of ``xs``) to an object array."""
    xs = [np.asarray(x, dtype=object) for x in xs]
    gy = np.asarray(gy, dtype=object)
    out = []
    for k, x in enumerate(xs):
        gx = np.empty(x.shape, dtype=object)
        for i in np.ndindex(x.shape):
            def along(t, k=k, i=i):
                moved = [a.copy() for a in xs]
                moved[k][i] = t
                return (np.asarray(f(*moved), dtype=object) * gy).sum()

            gx[i] = MP.diff(along, x[i])
        out.append(gx)
    return out
