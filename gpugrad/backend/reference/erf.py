"""erf on arrays of either float type, for the exact GELU and erf (CuPy and NumPy have no erf of their own)."""
from __future__ import annotations

from gpugrad.backend.reference.common import _quiet, _s

# W. J. Cody's rational approximations of erf (Math. Comp. 23, 1969; SPECFUN CALERF), within 3 ulp of the float64 erf
# (tests/nn/test_nn.py holds them to math.erf): erf on |x| <= 0.5, erfc on (0.5, 4] and beyond, where exp(-x^2) is
# split as exp(-s^2) exp(-(x - s)(x + s)), s = x rounded down to 1/16, so x^2 adds no rounding error.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03,
          1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
          8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
          2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
          3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
          6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
          2.33520497626869185e-3)
_SQRT1_2, _INV_SQRT_PI, _INV_SQRT_2PI = 0.7071067811865476, 0.5641895835477563, 0.3989422804014327


def _ratio(z, num, den, lead):
    """(((lead z + num0) z + num1) z + ...) / (((z + den0) z + den1) z + ...): Cody's Horner form."""
    xn, xd = z * lead, z
    for a, b in zip(num[:-1], den[:-1]):
        xn, xd = (xn + a) * z, (xd + b) * z
    return (xn + num[-1]) / (xd + den[-1])


def _erf(xp, x):
    """erf(x) on arrays (each of Cody's ranges computed on its own elements only); on Tensors (autograd's
    ``tensor_xp``, for double backward) the differentiable erf op."""
    if hasattr(xp, "erf"):
        return xp.erf(x)
    x = xp.asarray(x)  # NumPy gives 0-d results as scalars
    y, out = xp.abs(x), x.copy()  # NaN stays NaN
    with _quiet(xp):
        s = y <= 0.5
        xs = x[s]
        out[s] = xs * _ratio(xs * xs, _ERF_A[:4], _ERF_B, _ERF_A[4])
        for m, far in ((~s & (y <= 4), False), (y > 4, True)):
            xm, ym = x[m], y[m]
            z = 1 / (ym * ym)
            r = (_s(x, _INV_SQRT_PI) - z * _ratio(z, _ERF_P[:5], _ERF_Q, _ERF_P[5])) / ym if far else \
                _ratio(ym, _ERF_C[:8], _ERF_D, _ERF_C[8])
            sq = xp.floor(ym * 16) / 16
            erfc = xp.where(ym >= 27, _s(x, 0), xp.exp(-sq * sq) * xp.exp(-(ym - sq) * (ym + sq)) * r)
            out[m] = xp.where(xm < 0, erfc - 1, 1 - erfc)
    return out
