"""Exact expected values for the closed-form tables (tests/exact_op_cases.py, tests/exact_kernel_cases.py).

Expected values are computed in mpmath at 50 significant digits from the *exact* values of the inputs the run uses
(the float32 or float64 numbers they round to), then rounded once to the run's dtype: what is left between a result
and its expected value is the implementation's own error, held to a few ulps (rtol ~1e-14 in float64, ~1e-6 in
float32) where the op is well conditioned.  Nothing here calls gpugrad or its NumPy references: the closed forms at
the end are written from the ops' definitions (torch's documentation where it defines them), on object arrays of mpf.
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
        return np.vectorize(f, otypes=[object])(*xs) if any(isinstance(x, np.ndarray) for x in xs) else f(*xs)

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
    got = np.asarray(got)
    if got.dtype.kind in "iub":  # ids, masks, status words: exactly
        want = np.asarray(want, dtype=object).astype(got.dtype)
        assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = (tol or TOL)[np.dtype(dtype)]
    want = to_float(want, dtype)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
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
                return np.sum(np.asarray(f(*moved), dtype=object) * gy)

            gx[i] = MP.diff(along, x[i])
        out.append(gx)
    return out


# ---- closed forms, from the definitions (object arrays of mpf in, the same out) -------------------------------------
def where(c, a, b):
    return a if c else b


def sigmoid(x):
    return 1 / (1 + MP.exp(-x))


def gelu_tanh(x):
    """torch's gelu(approximate='tanh'): x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return x / 2 * (1 + MP.tanh(MP.sqrt(2 / MP.pi) * (x + MP.mpf("0.044715") * x ** 3)))


def gelu_erf(x):
    """torch's gelu(): x Phi(x) = x/2 (1 + erf(x / sqrt 2))."""
    return x / 2 * (1 + MP.erf(x / MP.sqrt(2)))


def softplus(beta=1, threshold=20):
    """torch: log(1 + e^(beta x)) / beta, and x itself where beta x > threshold."""
    return lambda x: x if beta * x > threshold else MP.log(1 + MP.exp(beta * x)) / beta


def lse(x):
    """log Σ e^x over the last axis."""
    return ew(MP.log)(ew(MP.exp)(x).sum(-1))


def softmax(x):
    e = ew(MP.exp)(x)
    return e / e.sum(-1, keepdims=True)


def log_softmax(x):
    return x - lse(x)[..., None]


def cross_entropy_rows(x, t, w=None, e=0, ignore=-100):
    """torch's cross-entropy per row of logits x (N, C): (1 - e) w_t (lse - x_t) + e / C Σ_c w_c (lse - x_c), 0 where
    t == ignore, NaN where t is another id outside [0, C)."""
    rows, classes = x.shape
    w = np.ones(classes, dtype=object) if w is None else w
    e, out, l = MP.mpf(e), [], lse(x)
    for i in range(rows):
        if t[i] == ignore:
            out.append(MP.mpf(0))
        elif not 0 <= t[i] < classes:
            out.append(MP.nan)
        else:
            out.append((1 - e) * w[t[i]] * (l[i] - x[i, t[i]])
                       + e / classes * sum(w[c] * (l[i] - x[i, c]) for c in range(classes)))
    return np.array(out, dtype=object)


def cross_entropy_mean(x, t, w=None, e=0, ignore=-100):
    """The 'mean' reduction: the rows' sum over the summed weights w_t of the rows not ignored (torch's)."""
    w1 = np.ones(x.shape[1], dtype=object) if w is None else w
    return cross_entropy_rows(x, t, w, e, ignore).sum() / sum(w1[k] for k in t if k != ignore)


def layer_norm(x, w=1, b=0, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * w + b over the last axis, var biased."""
    n = x.shape[-1]
    mean = x.sum(-1, keepdims=True) / n
    var = ((x - mean) ** 2).sum(-1, keepdims=True) / n
    return (x - mean) / ew(MP.sqrt)(var + MP.mpf(eps)) * w + b
