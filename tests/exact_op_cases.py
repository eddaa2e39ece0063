"""Closed-form rows for every registered op (``gpugrad.ops.REGISTRY``): chosen inputs, exact expected outputs.

The op table (tests/op_cases.py) takes a declared pointwise op's expected values from gpugrad's own NumPy reference,
so a formula wrong in both the kernel and the reference passes it; these rows do not read gpugrad at all.  Each
expected value is either written out by hand (cumprod of small integers, a permuted ``arange``, softmax([0, ln 2])
= [1/3, 2/3]) or a function of the exact inputs in mpmath at 50 digits (tests/exact.py), and is compared in
float64 and float32 to a few ulps.  Inputs include the special points: 0, +-1, negatives, large values, branch
points (softplus's threshold, clamp's bounds, a Huber loss at |d| = delta) and accuracy traps (log1p / expm1 /
sinh at 1e-10, variances of values near 1e6).  ``op`` names the registry entry a row covers: the op must appear in
the graph the row records (test_closed_forms.py checks it), so a row cannot pass by exercising another op.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction as Q
from typing import Callable

import numpy as np

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.ops.activation import Dropout
from gpugrad.ops.convert import ToDevice
from tests.exact import (FLOATS, MP, cross_entropy_mean, cross_entropy_rows, ew, exact, gelu_erf, gelu_tanh, layer_norm,
                         log_softmax, lse, sigmoid, softmax, softplus, where)

LN2, LN3 = math.log(2), math.log(3)


@dataclass(frozen=True)
class Exact:
    name: str
    op: str  # the registry entry the row covers
    call: Callable  # gpugrad Tensors (the inputs, in the run's dtype) -> Tensor
    inputs: tuple  # array-likes of floats
    want: object  # the expected value, or a function of the exact inputs (object arrays of mpf) returning it
    tol: dict | None = None  # {dtype: (rtol, atol)} where the default few ulps do not hold (say why)
    dtype: object = None  # the result's dtype when it is not the inputs'
    dtypes: tuple = FLOATS
    f: Callable | None = None  # a pointwise row's scalar closed form (tests/exact_kernel_cases.py differentiates it)
    params: tuple = ()  # and the op's parameters

    def expected(self, dtype):
        if not callable(self.want):
            return self.want
        return self.want(*[exact(np.asarray(a, dtype=dtype)) for a in self.inputs])


def tol(rtol64, rtol32, atol64=0.0, atol32=0.0):
    return {np.dtype(np.float64): (rtol64, atol64), np.dtype(np.float32): (rtol32, atol32)}


def pw(op, xs, f, *params, name="", call=None, **kw):
    """A pointwise row: ``Tensor.<op>(*params)`` at the points ``xs`` against ``f`` (mpf -> mpf) elementwise."""
    return Exact(name or (f"{op}{params}" if params else op), op, call or (lambda a: getattr(a, op)(*params)),
                 (xs,), ew(f), f=f, params=params, **kw)


def _trunc(x):
    return MP.floor(x) if x >= 0 else MP.ceil(x)


# 1 + tanh(z) (gelu) and 1 + erf(z) (exact gelu) cancel for x << 0 (1 + tanh(z) ~ 9e-8 at x = -5): the error is
# one rounding of tanh or erf (~1e-16 in float64, ~6e-8 in float32) times |x| / 2, absolute, in any implementation.
LEFT_TAIL = tol(1e-11, 5e-3, 1e-15, 3e-7)
TINY = [1e-10, -1e-10]  # log1p, expm1, sinh: 1 + x rounds away these digits; a naive formula fails by ~1e-7

POINTWISE_ROWS = [
    pw("relu", [-2.0, -0.5, 0.0, 1e-30, 0.5, 3.0], lambda x: max(x, 0)),
    pw("gelu", [-1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0], gelu_tanh, call=lambda a: a.gelu(approximate="tanh")),
    pw("gelu", [-3.0, -5.0], gelu_tanh, name="gelu-left-tail", call=lambda a: a.gelu(approximate="tanh"),
       tol=LEFT_TAIL),
    pw("gelu_erf", [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 6.0], gelu_erf, call=lambda a: a.gelu()),
    pw("gelu_erf", [-3.0, -5.0], gelu_erf, name="gelu_erf-left-tail", call=lambda a: a.gelu(), tol=LEFT_TAIL),
    pw("erf", [-6.0, -2.0, -0.5, 0.0, 1e-3, 0.5, 1.0, 3.0, 6.0], MP.erf),
    pw("sigmoid", [-30.0, -8.0, -1.0, 0.0, 1.0, 8.0, 30.0], sigmoid),
    pw("tanh", [-20.0, -1.0, -1e-4, 0.0, 0.5, 1.0, 20.0], MP.tanh),
    pw("softplus", [-30.0, -1.0, 0.0, 1.0, 19.5, 20.0, 20.5, 30.0], softplus(1, 20)),
    pw("softplus", [-3.0, 0.0, 4.9, 5.0, 5.1, 7.0], softplus(2, 10), 2.0, 10.0),
    pw("silu", [-20.0, -1.0, 0.0, 1.0, 6.0], lambda x: x * sigmoid(x)),
    pw("leaky_relu", [-2.0, -0.5, 0.0, 1.0], lambda x: where(x > 0, x, MP.mpf("0.01") * x)),
    pw("leaky_relu", [-2.0, 0.0, 3.0], lambda x: where(x > 0, x, MP.mpf("0.2") * x), 0.2),
    pw("elu", [-3.0, -1.0, -1e-3, 0.0, 2.0], lambda x: where(x > 0, x, MP.expm1(x))),
    pw("elu", [-3.0, -1.0, 0.0, 2.0], lambda x: where(x > 0, x, MP.expm1(x) / 2), 0.5),
    pw("sin", [-6.0, -1.0, 0.0, 0.5, 1.0, 3.0, 100.0], MP.sin),
    pw("cos", [-6.0, -1.0, 0.0, 0.5, 1.0, 3.0, 100.0], MP.cos),
    pw("log1p", [-0.5, 0.0, 1.0, 3.0, *TINY], MP.log1p),
    pw("expm1", [-5.0, -1.0, 0.0, 1.0, 5.0, *TINY], MP.expm1),
    pw("exp", [-10.0, -1.0, 0.0, 1e-10, 1.0, 10.0, 80.0], MP.exp),
    pw("log", [1e-3, 0.5, 1.0, 2.0, 10.0, 1e30], MP.log),
    pw("sqrt", [0.0, 0.25, 2.0, 4.0, 1e30], MP.sqrt),
    pw("floor", [-2.5, -2.0, -0.5, 0.0, 0.5, 1.5, 2.0], MP.floor),
    pw("ceil", [-2.5, -2.0, -0.5, 0.0, 0.5, 1.5, 2.0], MP.ceil),
    pw("trunc", [-2.5, -2.0, -0.5, 0.0, 0.5, 1.5, 2.0], _trunc),
    # half to even, as torch.round
    Exact("round", "round", lambda a: a.round(), ([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.4, -1.6],),
          [-2, -2, 0, 0, 2, 2, 1, -2]),
    Exact("sign", "sign", lambda a: a.sign(), ([-3.0, -0.0, 0.0, 1e-30, 2.0],), [-1, 0, 0, 1, 1]),
    Exact("frac", "frac", lambda a: a.frac(), ([-2.25, -0.5, 0.0, 0.75, 2.5],), [Q(-1, 4), Q(-1, 2), 0, Q(3, 4), Q(1, 2)]),
    pw("reciprocal", [-4.0, 0.25, 3.0, 1e10], lambda x: 1 / x),
    pw("rsqrt", [0.25, 2.0, 4.0, 1e10], lambda x: 1 / MP.sqrt(x)),
    pw("log2", [0.125, 1.0, 3.0, 1024.0], lambda x: MP.log(x, 2)),
    pw("log10", [1e-3, 1.0, 2.0, 1000.0], MP.log10),
    pw("exp2", [-3.0, -0.5, 0.0, 0.5, 10.0], lambda x: MP.mpf(2) ** x),
    pw("tan", [-1.2, -0.5, 0.0, 0.5, 1.0, 1.5], MP.tan),
    pw("asin", [-1.0, -0.5, 0.0, 0.5, 0.9, 1.0], MP.asin),
    pw("acos", [-1.0, -0.5, 0.0, 0.5, 0.9, 1.0], MP.acos),
    pw("atan", [-1e10, -1.0, 0.0, 0.5, 1.0, 1e10], MP.atan),
    pw("sinh", [-3.0, 0.0, 1.0, 10.0, 1e-5, *TINY], MP.sinh),
    pw("cosh", [-3.0, 0.0, 1e-5, 1.0, 10.0], MP.cosh),
]

A23 = [[1.5, -2.0, 0.0], [1e30, 0.25, -3.0]]
B3 = [0.5, 2.0, -0.125]
MASK = np.array([[True, False, True], [False, False, True]])

ARITH_ROWS = [
    Exact("add", "add", lambda a, b: a + b, (A23, B3), lambda a, b: a + b),
    Exact("add_scalar", "add", lambda a: 2.5 + a, (A23,), lambda a: 2.5 + a),
    Exact("sub", "sub", lambda a, b: a - b, (A23, B3), lambda a, b: a - b),
    Exact("rsub", "sub", lambda a: 1.0 - a, (B3,), [0.5, -1.0, 1.125]),
    Exact("mul", "mul", lambda a, b: a * b, (A23, B3), lambda a, b: a * b),
    Exact("rmul", "mul", lambda a: 2 * a.sin(), ([0.0, 1.0],), lambda a: 2 * ew(MP.sin)(a)),
    Exact("div", "div", lambda a, b: a / b, (A23, B3), lambda a, b: a / b),
    Exact("div_thirds", "div", lambda a, b: a / b, ([1.0, 2.0, -1.0], [3.0, 3.0, 7.0]), [Q(1, 3), Q(2, 3), Q(-1, 7)]),
    Exact("rdiv", "reciprocal", lambda a: 3.0 / a, ([4.0, -0.5, 3.0],), [Q(3, 4), -6, 1]),
    Exact("neg", "neg", lambda a: -a, (A23,), lambda a: -a),
    # 0 ** 0 = 1; a negative base with an integer exponent
    Exact("pow", "pow", lambda a, b: a ** b, ([2.0, 4.0, 0.5, 0.0, 9.0, -2.0, -2.0], [0.5, -0.5, 3.0, 0.0, 1.5, 3.0, 2.0]),
          lambda a, b: ew(lambda x, y: MP.power(x, y))(a, b)),
    Exact("pow_scalar", "pow", lambda a: a ** 3, ([-2.0, 0.5, 3.0],), [-8, Q(1, 8), 27]),
    Exact("rpow", "pow", lambda a: 2 ** a, ([-1.0, 0.5, 10.0],), [Q(1, 2), MP.sqrt(2), 1024]),
    Exact("maximum", "maximum", lambda a, b: a.maximum(b), ([1.0, -2.0, 3.0, -0.5], [2.0, -3.0, 3.0, 0.0]),
          [2, -2, 3, 0]),
    Exact("minimum", "minimum", lambda a, b: a.minimum(b), ([1.0, -2.0, 3.0, -0.5], [2.0, -3.0, 3.0, 0.0]),
          [1, -3, 3, Q(-1, 2)]),
    Exact("where", "where", lambda a, b: gpugrad.where(gpugrad.tensor(MASK), a, b), (A23, B3),
          [[1.5, 2.0, 0.0], [0.5, 2.0, -3.0]]),
    Exact("abs", "abs", lambda a: a.abs(), ([-2.0, -0.5, 0.0, 3.0],), [2, Q(1, 2), 0, 3]),
    # bounds included
    Exact("clamp", "clamp", lambda a: a.clamp(-0.5, 0.75), ([-1.0, -0.5, 0.0, 0.75, 2.0],),
          [Q(-1, 2), Q(-1, 2), 0, Q(3, 4), Q(3, 4)]),
    Exact("rounding_div_floor", "rounding_div", lambda a, b: a.div(b, rounding_mode="floor"),
          ([7.0, -7.0, 7.0, -7.0, 5.5], [2.0, 2.0, -2.0, -2.0, 0.5]), [3, -4, -4, 3, 11]),
    Exact("rounding_div_trunc", "rounding_div", lambda a, b: a.div(b, rounding_mode="trunc"),
          ([7.0, -7.0, 7.0, -7.0, 5.5], [2.0, 2.0, -2.0, -2.0, 0.5]), [3, -3, -3, 3, 11]),
    Exact("floordiv_op", "rounding_div", lambda a: a // 0.5, ([-1.25, 0.75, 2.0],), [-3, 1, 4]),
    # the sign of the divisor (Python's %) / of the dividend (C's fmod)
    Exact("remainder", "remainder", lambda a, b: a % b, ([7.0, -7.0, 7.0, -7.0, 5.5], [3.0, 3.0, -3.0, -3.0, 1.5]),
          [1, 2, -2, -1, 1]),
    Exact("fmod", "fmod", lambda a, b: a.fmod(b), ([7.0, -7.0, 7.0, -7.0, 5.5], [3.0, 3.0, -3.0, -3.0, 1.5]),
          [1, -1, 1, -1, 1]),
]

M23 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
NEAR_1E6 = [[1e6 + 1, 1e6 + 2, 1e6 + 3, 1e6 + 4]]  # a variance from E[x^2] - E[x]^2 loses every digit here
REDUCE_ROWS = [
    Exact("sum", "sum", lambda a: a.sum(), (M23,), 21),
    Exact("sum_dim", "sum", lambda a: a.sum(1), (M23,), [6, 15]),
    Exact("sum_keepdim", "sum", lambda a: a.sum(0, keepdim=True), (M23,), [[5, 7, 9]]),
    Exact("mean", "mean", lambda a: a.mean(), ([[1.0, 2.0], [3.0, 4.0]],), Q(5, 2)),
    Exact("mean_dim", "mean", lambda a: a.mean(0), (M23,), [Q(5, 2), Q(7, 2), Q(9, 2)]),
    Exact("max", "max", lambda a: a.max(), ([[-1000.0, -1001.0], [-999.5, -1002.0]],), Q(-1999, 2)),
    Exact("amax_dim", "max", lambda a: a.amax(1), ([[-1000.0, -1001.0], [-999.5, -1002.0]],), [-1000, Q(-1999, 2)]),
    Exact("min", "min", lambda a: a.min(), ([[3.0, -1.5], [0.0, 2.0]],), Q(-3, 2)),
    Exact("amin_dim", "min", lambda a: a.amin(0), ([[3.0, -1.5], [0.0, 2.0]],), [0, Q(-3, 2)]),
    # an even count: the lower of the two middle values, as torch
    Exact("median", "median", lambda a: a.median(), ([3.0, 1.0, 4.0, 1.0, 5.0, 9.0],), 3),
    Exact("median_2d", "median", lambda a: a.median(), ([[2.0, -7.0, 0.5], [8.0, 1.0, -1.0]],), Q(1, 2)),
    Exact("var", "var", lambda a: a.var(), ([1.0, 2.0, 3.0, 4.0],), Q(5, 3)),
    Exact("var_biased_dim", "var", lambda a: a.var(1, correction=0), ([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]],),
          [Q(5, 4), 0]),
    Exact("var_near_1e6", "var", lambda a: a.var(1), (NEAR_1E6,), [Q(5, 3)]),
    Exact("std", "std", lambda a: a.std(), ([1.0, 2.0, 3.0, 4.0],), MP.sqrt(MP.mpf(5) / 3)),
    Exact("std_near_1e6", "std", lambda a: a.std(1, correction=0), (NEAR_1E6,), [MP.sqrt(MP.mpf(5) / 4)]),
    Exact("norm", "norm", lambda a: a.norm(), ([3.0, -4.0],), 5),
    Exact("norm_dim", "norm", lambda a: a.norm(dim=1), ([[3.0, 4.0], [-6.0, 8.0]],), [5, 10]),
    Exact("norm_p1", "norm", lambda a: a.norm(1, dim=1), ([[3.0, -4.0], [-6.0, 8.0]],), [7, 14]),
    Exact("norm_inf", "norm", lambda a: a.norm(float("inf"), dim=1), ([[3.0, -4.0], [-6.0, 8.0]],), [4, 8]),
    Exact("norm_p3", "norm", lambda a: a.norm(3), ([3.0, -4.0],), MP.cbrt(91)),
    Exact("cumsum", "cumsum", lambda a: a.cumsum(0), ([1.0, 2.0, 3.0, 4.0],), [1, 3, 6, 10]),
    Exact("cumsum_dim1", "cumsum", lambda a: a.cumsum(1), (M23,), [[1, 3, 6], [4, 9, 15]]),
    Exact("cumprod", "cumprod", lambda a: a.cumprod(0), ([1.0, 2.0, 3.0, 4.0, 5.0],), [1, 2, 6, 24, 120]),
    Exact("cumprod_zero", "cumprod", lambda a: a.cumprod(-1), ([[2.0, 0.0, 3.0], [-1.0, 2.0, 0.5]],),
          [[2, 0, 0], [-1, -2, -1]]),
    Exact("prod", "cumprod", lambda a: a.prod(), ([1.0, 2.0, 3.0, 4.0, 5.0],), 120),
    Exact("logsumexp", "logsumexp", lambda a: a.logsumexp(-1), ([[0.0, LN2], [0.0, 0.0]],), lse),
    Exact("logsumexp_ln4", "logsumexp", lambda a: a.logsumexp(0), ([0.0, 0.0, 0.0, 0.0],), MP.log(4)),
    # a row max that starts at 0 instead of -inf gives log(0) = -inf here
    Exact("logsumexp_shifted", "logsumexp", lambda a: a.logsumexp(-1), ([[-1000.0, -1000.0, -1001.0]],), lse),
    Exact("softmax", "softmax", lambda a: a.softmax(-1), ([[0.0, LN2], [LN3, 0.0]],), softmax),
    Exact("softmax_thirds", "softmax", lambda a: a.softmax(-1), ([[0.0, LN2]],), [[Q(1, 3), Q(2, 3)]],
          tol=tol(1e-15, 1e-7)),
    Exact("softmax_shifted", "softmax", lambda a: a.softmax(-1), ([[-1000.0, -1000.0, -1000.0, -1000.0]],),
          [[Q(1, 4)] * 4]),
    Exact("softmax_dim0", "softmax", lambda a: a.softmax(0), ([[1.0, -1.0], [2.0, 3.0], [-2.0, 0.0]],),
          lambda a: softmax(a.T).T),
    # log(1 + e^-4) from the sum's logarithm (as torch): one rounding of the sum, ~1 ulp of 1, is absolute here
    Exact("log_softmax", "log_softmax", lambda a: a.log_softmax(-1), ([[0.0, LN2], [1.0, -3.0]],), log_softmax,
          tol=tol(1e-14, 1e-6, 2e-16, 1.2e-7)),
    Exact("log_softmax_thirds", "log_softmax", lambda a: a.log_softmax(-1), ([[0.0, LN2]],),
          [[-MP.log(3), MP.log(2) - MP.log(3)]], tol=tol(1e-15, 1e-7)),
    Exact("log_softmax_shifted", "log_softmax", lambda a: a.log_softmax(-1), ([[-1000.0, -1001.0, -1002.0]],),
          log_softmax),
]


def _arange(*shape):
    return np.arange(math.prod(shape), dtype=np.float64).reshape(shape)


IDX = np.array([2, 0, 2])
GATHER_IDX = np.array([[0, 2, 1], [1, 1, 0]])
SCATTER_IDX = np.array([[1, 0, 2], [2, 1, 0]])


def _setitem(a, v):
    y = a * 1.0
    y[gpugrad.tensor(np.array([2, 0]))] = v  # an index tensor: IndexPlace (a basic key takes copy_ into a view)
    return y


def _add_into_row(a, v):
    y = a * 1.0
    y[1].add_(v)
    return y


def _stale_view(a, v):
    y = a * 1.0
    head = y[0:2]
    y.mul_(v)  # the base changes after the view was taken
    return head + 0.0


def _copy_into(a, v):
    y = a * 1.0
    y.copy_(v)
    return y * a


MOVEMENT_ROWS = [
    Exact("reshape", "reshape", lambda a: a.reshape(3, 2), (_arange(6),), [[0, 1], [2, 3], [4, 5]]),
    Exact("view_flatten", "reshape", lambda a: a.reshape(-1), (_arange(2, 3),), [0, 1, 2, 3, 4, 5]),
    # y[k, i, j] = x[i, j, k] = 12 i + 4 j + k
    Exact("permute", "permute", lambda a: a.permute(2, 0, 1), (_arange(2, 3, 4),),
          [[[12 * i + 4 * j + k for j in range(3)] for i in range(2)] for k in range(4)]),
    Exact("transpose_T", "permute", lambda a: a.T, (_arange(2, 3),), [[0, 3], [1, 4], [2, 5]]),
    Exact("movedim", "permute", lambda a: a.movedim(0, -1), (_arange(2, 3),), [[0, 3], [1, 4], [2, 5]]),
    Exact("expand", "expand", lambda a: a.expand(2, 3), ([[1.5], [-2.0]],), [[1.5] * 3, [-2] * 3]),
    Exact("repeat", "expand", lambda a: a.repeat(2, 2), ([[1.0, 2.0]],), [[1, 2, 1, 2], [1, 2, 1, 2]]),
    Exact("squeeze", "squeeze", lambda a: a.squeeze(1), ([[[1.0, 2.0]], [[3.0, 4.0]]],), [[1, 2], [3, 4]]),
    Exact("unsqueeze", "unsqueeze", lambda a: a.unsqueeze(0), ([1.0, 2.0],), [[1, 2]]),
    Exact("index_slice", "index", lambda a: a[1:, ::2], (_arange(3, 4),), [[4, 6], [8, 10]]),
    Exact("index_ints", "index", lambda a: a[gpugrad.tensor(IDX)], (_arange(3, 2),), [[4, 5], [0, 1], [4, 5]]),
    Exact("index_mask", "index", lambda a: a[gpugrad.tensor(MASK)], (_arange(2, 3),), [0, 2, 5]),
    Exact("index_select", "index", lambda a: a.index_select(1, gpugrad.tensor(IDX)), (_arange(2, 3),),
          [[2, 0, 2], [5, 3, 5]]),
    Exact("flip", "index", lambda a: a.flip(0), ([1.0, 2.0, 3.0],), [3, 2, 1]),
    Exact("diagonal", "diagonal", lambda a: a.diagonal(), (_arange(3, 3),), [0, 4, 8]),
    Exact("diagonal_offset", "diagonal", lambda a: a.diagonal(1, 1, 0), (_arange(3, 3),), [3, 7]),
    Exact("trace", "diagonal", lambda a: a.trace(), (_arange(3, 3),), 12),
    Exact("cat", "cat", lambda a, b: gpugrad.cat([a, b], 1), ([[1.0], [2.0]], [[3.0, 4.0], [5.0, 6.0]]),
          [[1, 3, 4], [2, 5, 6]]),
    Exact("roll", "cat", lambda a: a.roll(1, 0), ([1.0, 2.0, 3.0],), [3, 1, 2]),
    Exact("stack", "stack", lambda a, b: gpugrad.stack([a, b], 1), ([1.0, 2.0], [3.0, 4.0]), [[1, 3], [2, 4]]),
    # y[i][j] = x[index[i][j]][j]
    Exact("gather", "gather", lambda a: a.gather(0, gpugrad.tensor(GATHER_IDX)), (_arange(3, 3),),
          [[0, 7, 5], [3, 4, 2]]),
    Exact("max_dim_values", "gather", lambda a: a.max(1).values, ([[1.0, 5.0, -2.0], [7.0, 0.5, 7.5]],), [5, 7.5]),
    Exact("sort_descending", "gather", lambda a: a.sort(0, descending=True).values, ([2.0, -1.0, 3.0, 0.5],),
          [3, 2, Q(1, 2), -1]),
    Exact("topk", "gather", lambda a: a.topk(2).values, ([2.0, -1.0, 3.0, 0.5],), [3, 2]),
    Exact("clone", "clone", lambda a: a.clone(), (A23,), lambda a: a),
    # float64 -> float32 rounds to the nearest float32 (1/3 -> 11184811 / 2^25); 1e-50 underflows to 0
    Exact("cast", "cast", lambda a: a.to(dtype=np.float32) * 1.0, ([1 / 3, 1e-50, 3.0e38, -0.1],),
          lambda a: a, dtype=np.float32, tol=tol(0, 0)),
    Exact("to_device", "to_device", lambda a: ToDevice.apply(a * 1.0, source=a._backend, target=a._backend),
          (B3,), B3),
    Exact("index_place", "index_place", _setitem, (_arange(3, 2), [-1.0, -2.0]), [[-1, -2], [2, 3], [-1, -2]]),
    Exact("diag_embed", "index_place", lambda a: gpugrad.diag(a, -1), ([1.0, 2.0],), [[0, 0, 0], [1, 0, 0], [0, 2, 0]]),
    Exact("copy_slices", "copy_slices", _add_into_row, (_arange(3, 2), [10.0, 20.0]), [[0, 1], [12, 23], [4, 5]]),
    Exact("as_view", "as_view", _stale_view, (_arange(3, 2), [[2.0, 3.0]] * 3), [[0, 3], [4, 9]]),
    Exact("overwrite", "overwrite", _copy_into, ([[1.0, 2.0], [3.0, 4.0]], [-1.0, 0.5]), [[-1, 1], [-3, 2]]),
    Exact("scatter", "scatter", lambda a, s: a.scatter(0, gpugrad.tensor(SCATTER_IDX), s),
          (np.zeros((3, 3)), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), [[0, 2, 6], [1, 5, 0], [4, 0, 3]]),
    Exact("scatter_add", "scatter", lambda a, s: gpugrad.scatter_add(a, 0, gpugrad.tensor(GATHER_IDX), s),
          (np.ones((3, 3)), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), [[2, 1, 7], [5, 6, 4], [1, 3, 1]]),
    Exact("index_add", "scatter", lambda a, s: a.index_add(0, gpugrad.tensor(IDX), s, alpha=2.0),
          (np.zeros((3, 2)), [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), [[6, 8], [0, 0], [12, 16]]),
    Exact("embedding", "embedding", lambda w: F.embedding(gpugrad.tensor(np.array([[4, 0], [1, 1]])), w),
          (_arange(5, 2),), [[[8, 9], [0, 1]], [[2, 3], [2, 3]]]),
]

MATMUL_ROWS = [
    Exact("matmul", "matmul", lambda a, b: a @ b, ([[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]),
          [[19, 22], [43, 50]]),
    Exact("matmul_dot", "matmul", lambda a, b: a @ b, ([1.0, 2.0, 3.0], [4.0, -5.0, 6.0]), 12),
    Exact("matmul_matvec", "matmul", lambda a, b: a @ b, ([[1.0, 2.0], [3.0, 4.0], [0.5, 0.0]], [1.0, -1.0]),
          [-1, -1, Q(1, 2)]),
    Exact("matmul_batched", "matmul", lambda a, b: a @ b, ([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]],
                                                          [[1.0, 2.0], [3.0, 4.0]]),
          [[[1, 2], [3, 4]], [[3, 4], [1, 2]]]),
    Exact("linear", "linear", lambda x, w, b: F.linear(x, w, b),
          ([[1.0, 2.0], [-1.0, 0.5]], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0.5, -0.5, 0.0]),
          [[Q(3, 2), Q(3, 2), 3], [Q(-1, 2), 0, Q(-1, 2)]]),
    Exact("linear_nobias", "linear", lambda x, w: F.linear(x, w), ([[1.0, 2.0]], [[3.0, -1.0]]), [[1]]),
    Exact("einsum_mm", "einsum", lambda a, b: gpugrad.einsum("ij,jk->ik", a, b),
          ([[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]), [[19, 22], [43, 50]]),
    Exact("einsum_bmm_t", "einsum", lambda a, b: gpugrad.einsum("bij,bkj->bik", a, b),
          ([[[1.0, 2.0]], [[0.0, 1.0]]], [[[3.0, 4.0], [1.0, 1.0]], [[2.0, 5.0], [-1.0, 0.0]]]),
          [[[11, 3]], [[5, 0]]]),
    Exact("einsum_diag", "einsum", lambda a: gpugrad.einsum("ii->i", a), (_arange(3, 3),), [0, 4, 8]),
    Exact("einsum_trace", "einsum", lambda a: gpugrad.einsum("ii", a), (_arange(3, 3),), 12),
    Exact("einsum_sum", "einsum", lambda a: gpugrad.einsum("ij->", a), (M23,), 21),
    Exact("einsum_outer", "einsum", lambda a, b: gpugrad.einsum("i,j->ij", a, b), ([1.0, 2.0], [3.0, -1.0, 0.5]),
          [[3, -1, Q(1, 2)], [6, -2, 1]]),
]

T2 = np.array([1, 0])
T3 = np.array([2, 0, 1])
X23 = [[0.0, LN2, LN3], [1.0, -1.0, 0.5]]
W3 = [0.5, 2.0, 1.0]


def _bce(x, t):
    return -(t * ew(lambda v: max(MP.log(v), -100) if v > 0 else -100)(x)
             + (1 - t) * ew(lambda v: max(MP.log(1 - v), -100) if v < 1 else -100)(x))


def _bce_logits(x, t, p=1):  # torch's docs: -[p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))]
    s = ew(sigmoid)(x)
    return -(p * t * ew(MP.log)(s) + (1 - t) * ew(MP.log)(1 - s))


def _smooth_l1(beta):
    return ew(lambda d: d * d / (2 * beta) if abs(d) < beta else abs(d) - MP.mpf(beta) / 2)


def _huber(delta):
    return ew(lambda d: d * d / 2 if abs(d) < delta else delta * (abs(d) - MP.mpf(delta) / 2))


D4 = [0.5, -2.0, 1.0, 0.0, -0.999, 3.0]  # |d| = 1 = beta / delta: the branch point
U4 = np.array([0.1, 0.6, 0.5, 0.9])  # randoms: kept where u >= p (0.5 included)

LOSS_ROWS = [
    # uniform logits: ln C for every target
    Exact("cross_entropy_ln4", "cross_entropy", lambda x: F.cross_entropy(x, gpugrad.tensor(np.array([2, 0]))),
          (np.zeros((2, 4)),), MP.log(4)),
    Exact("cross_entropy", "cross_entropy", lambda x: F.cross_entropy(x, gpugrad.tensor(T2), reduction="none"),
          (X23,), lambda x: cross_entropy_rows(x, T2)),
    Exact("cross_entropy_mean", "cross_entropy", lambda x: F.cross_entropy(x, gpugrad.tensor(T2)), (X23,),
          lambda x: cross_entropy_mean(x, T2)),
    Exact("cross_entropy_weight", "cross_entropy",
          lambda x, w: F.cross_entropy(x, gpugrad.tensor(T2), weight=w.detach()), (X23, W3),
          lambda x, w: cross_entropy_mean(x, T2, w)),
    Exact("cross_entropy_ignore", "cross_entropy",
          lambda x: F.cross_entropy(x, gpugrad.tensor(np.array([-100, 2])), reduction="sum"), (X23,),
          lambda x: cross_entropy_rows(x, np.array([-100, 2])).sum()),
    Exact("cross_entropy_smoothing", "cross_entropy",
          lambda x, w: F.cross_entropy(x, gpugrad.tensor(T2), weight=w.detach(), label_smoothing=0.25), (X23, W3),
          lambda x, w: cross_entropy_mean(x, T2, w, 0.25)),
    Exact("token_logprob", "token_logprob", lambda x: F.token_logprob(x, gpugrad.tensor(T2)), (X23,),
          lambda x: -cross_entropy_rows(x, T2)),
    Exact("token_logprob_thirds", "token_logprob", lambda x: F.token_logprob(x, gpugrad.tensor(np.array([1]))),
          ([[0.0, LN2]],), [MP.log(MP.mpf(2) / 3)], tol=tol(1e-15, 1e-7)),
    Exact("nll_loss", "nll_loss", lambda x: F.nll_loss(x, gpugrad.tensor(T3)), (_arange(3, 3),), -4),
    Exact("nll_loss_weight", "nll_loss", lambda x, w: F.nll_loss(x, gpugrad.tensor(T3), weight=w.detach()),
          (_arange(3, 3), W3), -5),
    # x = 0 or 1: torch clamps each log at -100, so the loss is 100, not inf
    Exact("binary_cross_entropy", "binary_cross_entropy",
          lambda x, t: F.binary_cross_entropy(x, t, reduction="none"),
          ([0.5, 0.25, 0.75, 0.0, 1.0, 1e-3, 0.0], [1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.0]), _bce),
    Exact("bce_ln2", "binary_cross_entropy", lambda x, t: F.binary_cross_entropy(x, t), ([0.5, 0.5], [0.0, 1.0]),
          MP.log(2)),
    Exact("bce_with_logits", "binary_cross_entropy_with_logits",
          lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"),
          ([0.0, 1.0, -1.0, 30.0, -30.0, 2.0], [1.0, 0.0, 0.5, 0.0, 1.0, 0.25]), _bce_logits),
    Exact("bce_with_logits_pos_weight", "binary_cross_entropy_with_logits",
          lambda x, t, p: F.binary_cross_entropy_with_logits(x, t, pos_weight=p.detach(), reduction="none"),
          ([0.0, 1.0, -2.0], [1.0, 0.5, 0.25], [3.0, 0.5, 2.0]), _bce_logits),
    Exact("mse_loss", "mse_loss", lambda x, t: F.mse_loss(x, t), ([1.0, -2.0, 0.5], [0.0, 1.0, 0.5]), Q(10, 3)),
    Exact("mse_loss_none", "mse_loss", lambda x, t: F.mse_loss(x, t, reduction="none"), ([[1.0, -2.0]], [[0.5, 0.5]]),
          [[Q(1, 4), Q(25, 4)]]),
    Exact("smooth_l1_loss", "smooth_l1_loss", lambda d: F.smooth_l1_loss(d, d.detach() * 0, reduction="none"), (D4,),
          _smooth_l1(1)),
    Exact("smooth_l1_loss_beta", "smooth_l1_loss",
          lambda d: F.smooth_l1_loss(d, d.detach() * 0, beta=0.5, reduction="sum"), ([0.25, -0.5, 2.0],),
          Q(1, 16) + Q(1, 4) + Q(7, 4)),
    Exact("huber_loss", "huber_loss", lambda d: F.huber_loss(d, d.detach() * 0, reduction="none"), (D4,),
          _huber(1)),
    Exact("huber_loss_delta", "huber_loss", lambda d: F.huber_loss(d, d.detach() * 0, delta=2.0, reduction="none"),
          ([1.0, -2.0, 3.0],), [Q(1, 2), 2, 4]),
    # eps = 0: (x - 5/2) / sqrt(5/4) = [-3, -1, 1, 3] / sqrt(5)
    Exact("layer_norm_eps0", "layer_norm", lambda x: F.layer_norm(x, (4,), eps=0.0), ([[1.0, 2.0, 3.0, 4.0]],),
          [[k / MP.sqrt(5) for k in (-3, -1, 1, 3)]]),
    Exact("layer_norm", "layer_norm", lambda x, w, b: F.layer_norm(x, (3,), w, b),
          ([[1.0, 2.0, 4.0], [-1.0, -1.0, 5.0]], [2.0, 0.5, -1.0], [0.0, 1.0, 0.25]), layer_norm),
    Exact("layer_norm_near_1e6", "layer_norm", lambda x: F.layer_norm(x, (4,)), (NEAR_1E6,), layer_norm),
    Exact("dropout", "dropout", lambda x: Dropout.apply(x, p=0.5, u=x._backend.asarray(U4, x.dtype)),
          ([1.0, -2.0, 3.0, 0.25],), [0, -4, 6, Q(1, 2)]),
    Exact("dropout_p0.25", "dropout", lambda x: Dropout.apply(x, p=0.25, u=x._backend.asarray(U4, x.dtype)),
          ([3.0, -3.0, 1.5, 0.75],), [0, -4, 2, 1]),
    Exact("bias_act_relu", "bias_act", lambda x, b: F.bias_act(x, b, "relu"), ([[1.0, -2.0], [-0.5, 0.5]], [0.25, 1.0]),
          [[Q(5, 4), 0], [0, Q(3, 2)]]),
    Exact("bias_act_identity", "bias_act", lambda x, b: F.bias_act(x, b, "identity"), ([[1.0, -2.0]], [0.25, 1.0]),
          [[Q(5, 4), -1]]),
    Exact("bias_act_gelu", "bias_act", lambda x, b: F.bias_act(x, b, "gelu"), ([[1.0, -2.0], [0.0, 0.5]], [0.0, 1.0]),
          lambda x, b: ew(gelu_tanh)(x + b)),
    Exact("bias_act_softplus", "bias_act", lambda x, b: F.bias_act(x, b, "softplus", 1.0, 20.0),
          ([[19.0, -1.0], [21.0, 0.0]], [0.5, 0.5]), lambda x, b: ew(softplus(1, 20))(x + b)),
    Exact("bias_act_leaky_relu", "bias_act", lambda x, b: F.bias_act(x, b, "leaky_relu", 0.25),
          ([[-1.0, 2.0]], [-1.0, 0.0]), [[Q(-1, 2), 2]]),
]

# issue 20: products with scaling, pointwise combinations with options
API_ROWS = [
    # 2 * [[19, 22], [43, 50]] + 0.5 * [[1, 2], [3, 4]]
    Exact("addmm", "addmm", lambda c, a, b: gpugrad.addmm(c, a, b, beta=0.5, alpha=2),
          ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]),
          [[Q(77, 2), 45], [Q(175, 2), 102]]),
    Exact("addmm_broadcast", "addmm", lambda c, a, b: c.addmm(a, b),
          ([10.0, -10.0], [[1.0, 2.0]], [[3.0, 0.5], [-1.0, 2.0]]), [[11, Q(-11, 2)]]),
    Exact("addcmul", "addcmul", lambda a, b, c: a.addcmul(b, c, value=-0.5), ([1.0, 2.0, 3.0], [2.0, -1.0, 0.5],
                                                                             [3.0, 4.0, -2.0]), [-2, 4, Q(7, 2)]),
    Exact("addcdiv", "addcdiv", lambda a, b, c: gpugrad.addcdiv(a, b, c, value=2), ([1.0, 2.0, 3.0], [1.0, -1.0, 2.0],
                                                                                   [3.0, 4.0, -8.0]),
          [Q(5, 3), Q(3, 2), Q(5, 2)]),
    Exact("lerp", "lerp", lambda a, b: a.lerp(b, 0.25), ([0.0, 1.0, -2.0], [4.0, 3.0, 2.0]), [1, Q(3, 2), -1]),
    # weight 1 gives end exactly (torch's second formula), 1/3 of the way in between
    Exact("lerp_tensor", "lerp", lambda a, b, w: gpugrad.lerp(a, b, w), ([0.0, 1.0, 1e30, 0.0], [4.0, 3.0, 0.1, 3.0],
                                                                         [0.0, 0.5, 1.0, 1 / 3]),
          lambda a, b, w: a + w * (b - a)),
    Exact("atan2", "atan2", lambda a, b: a.atan2(b),
          ([1.0, 1.0, -1.0, 0.0, 0.0, 1e-30, -2.0], [1.0, 0.0, -1.0, 1.0, -1.0, 1.0, 0.0]),
          lambda a, b: ew(MP.atan2)(a, b)),
    Exact("linalg_inv", "linalg_inv", lambda a: gpugrad.linalg.inv(a), ([[2.0, 1.0], [1.0, 1.0]],), [[1, -1], [-1, 2]]),
    Exact("linalg_inv_batch", "linalg_inv", lambda a: a.inverse(),
          ([[[4.0, 0.0], [0.0, 0.5]], [[0.0, 2.0], [-1.0, 0.0]]],), [[[Q(1, 4), 0], [0, 2]], [[0, -1], [Q(1, 2), 0]]]),
    # A = [[2, 1], [1, 3]]: A⁻¹ = [[3, -1], [-1, 2]] / 5
    Exact("linalg_solve", "linalg_solve", lambda a, b: gpugrad.linalg.solve(a, b),
          ([[2.0, 1.0], [1.0, 3.0]], [1.0, 2.0]), [Q(1, 5), Q(3, 5)], tol=tol(1e-15, 2e-7)),
    Exact("linalg_solve_matrix", "linalg_solve", lambda a, b: gpugrad.linalg.solve(a, b),
          ([[2.0, 1.0], [1.0, 3.0]], [[5.0, 0.0], [0.0, 5.0]]), [[3, -1], [-1, 2]], tol=tol(1e-15, 2e-7)),
    Exact("linalg_det", "linalg_det", lambda a: gpugrad.linalg.det(a),
          ([[[1.0, 2.0], [3.0, 4.0]], [[2.0, 0.0], [5.0, -3.0]]],), [-2, -6], tol=tol(1e-15, 2e-7)),
    Exact("det_3x3", "linalg_det", lambda a: a.det(), ([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 1.0, 4.0]],), 24,
          tol=tol(1e-15, 2e-7)),
    Exact("linalg_slogdet", "linalg_slogdet", lambda a: gpugrad.linalg.slogdet(a).logabsdet,
          ([[1.0, 2.0], [3.0, 4.0]],), MP.log(2), tol=tol(1e-15, 2e-7)),
    Exact("linalg_slogdet_sign", "linalg_slogdet", lambda a: gpugrad.slogdet(a).sign,
          ([[[1.0, 2.0], [3.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]], [[1.0, 2.0], [2.0, 4.0]]],), [-1, 1, 0]),
]

ROWS = POINTWISE_ROWS + ARITH_ROWS + REDUCE_ROWS + MOVEMENT_ROWS + MATMUL_ROWS + LOSS_ROWS + API_ROWS
