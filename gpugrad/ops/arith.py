"""Pointwise arithmetic.  Each VJP may return gradients in the broadcast shape: the engine sums them back."""
from __future__ import annotations

import math
import numbers

import numpy as np

from gpugrad.backend import reference as R
from gpugrad.core.forward import tangent_of
from gpugrad.core.forward_state import STATE as FORWARD, pause, set_tangent
from gpugrad.core.op import Op, named
from gpugrad.core.promotion import _np_result_type
from gpugrad.core.registry import REGISTRY, register
from gpugrad.core.tensor import TensorBase, as_operand, new


@register("add", inplace=True)
class Add(Op):
    """y = a + alpha * b (torch's alpha=, 1 by default).  VJP: ga = gy, gb = alpha * gy."""
    formula = "ga = gy, gb = alpha * gy"
    promotes = True
    double_backward = linear = batched_jvp = True
    alpha = 1

    def forward(self, xp, a, b):
        return a + b if self.alpha == 1 else a + b * self.alpha

    def backward(self, xp, gy):
        return gy, (gy if self.alpha == 1 else gy * self.alpha)

    @staticmethod
    def add(input, other, *, alpha=1):
        """input + alpha * other."""
        return _with_alpha(Add, input, as_operand(other, input), alpha)


@register("sub", inplace=True)
class Sub(Op):
    """y = a - alpha * b (torch's alpha=, 1 by default).  VJP: ga = gy, gb = -alpha * gy.  ``2 - x`` is torch's rsub
    (RsubBackward1)."""
    formula = "ga = gy, gb = -alpha * gy"
    promotes = True
    double_backward = linear = batched_jvp = True
    alpha = 1

    # as torch (core/promotion.py reads it, where the operands still have their own dtypes)
    refuses_bool = ("Subtraction, the `-` operator, with {} is not supported. If you are trying to invert a mask, use "
                    "the `~` or `logical_not()` operator instead.")

    def forward(self, xp, a, b):
        if not isinstance(a, xp.ndarray):
            self._name = "RsubBackward1"
        return a - b if self.alpha == 1 else a - b * self.alpha

    def backward(self, xp, gy):
        if not self.needs_input_grad[1]:
            return gy, None
        return gy, (-gy if self.alpha == 1 else gy * -self.alpha)

    @staticmethod
    def sub(input, other, *, alpha=1):
        """input - alpha * other."""
        return _with_alpha(Sub, input, as_operand(other, input), alpha)


def _with_alpha(cls, input, other, alpha):
    if alpha == 1:
        return cls.apply(input, other)
    _check_alpha(input, other, alpha)
    return cls.apply(input, other, alpha=alpha)


def _check_alpha(input, other, alpha):
    """As torch: a float alpha with integer operands would silently become an integer or promote; refuse it."""
    if isinstance(alpha, float) and all(getattr(t, "dtype", np.dtype(type(t))).kind in "biu" for t in (input, other)):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


@register("mul", inplace=True)
class Mul(Op):
    """y = a * b.  VJP: ga = gy * b, gb = gy * a (each saved only if the other side needs it)."""
    formula = "ga = gy * b, gb = gy * a"
    promotes = True
    double_backward = elementwise = batched_jvp = True

    def forward(self, xp, a, b):
        ga_needs, gb_needs = self.needs_input_grad
        # Save only what a needed gradient reads, so `y.mul_(2)` on a graph tensor stays legal.
        self.save_for_backward(b if ga_needs else None, a if gb_needs else None)
        return a * b

    def backward(self, xp, gy):
        b, a = self.saved
        return (gy * b if b is not None else None), (gy * a if a is not None else None)

    @staticmethod
    def mul(input, other):
        return Mul.apply(input, as_operand(other, input))


@register("div", inplace=True)
class Div(Op):
    """y = a / b.  VJP: ga = gy / b, gb = -gy * (a / b) / b.

    Saves what torch saves, so the same in-place changes are legal: b, and a when b needs a gradient; never y.
    For a Python-scalar a, torch computes b.reciprocal() * a and keeps only its own intermediate, so b is kept
    privately (copied if changed in place)."""
    formula = "ga = gy / b, gb = -gy * a / b²"
    promotes = "float"  # true division: integers divide in the default float dtype
    double_backward = elementwise = batched_jvp = True

    def forward(self, xp, a, b):
        needs_b = self.needs_input_grad[1]
        self.save_for_backward(b, a if needs_b else None)
        if needs_b and isinstance(a, numbers.Number):
            self.private_saved = (0,)
        return a / b

    def backward(self, xp, gy):
        b, a = self.saved
        ga = gy / b if self.needs_input_grad[0] else None
        gb = -gy * (a / b) / b if self.needs_input_grad[1] else None
        return ga, gb

    def jvp(self, xp, ins, out, ts):  # torch's (ta - tb y) / b: at b = 0 infinite, not inf - inf = NaN
        b, (ta, tb) = ins[1], ts
        with R._quiet(xp):
            num = ta if tb is None else -tb * out if ta is None else ta - tb * out
            return num / b

    @staticmethod
    def div(input, other, *, rounding_mode=None):
        """input / other; ``rounding_mode`` "trunc" or "floor" rounds the quotient (then no gradient)."""
        if rounding_mode not in (None, "trunc", "floor"):
            raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                               f"{rounding_mode!r}")
        other = as_operand(other, input)
        if rounding_mode is None:
            return Div.apply(input, other)
        return REGISTRY["rounding_div"].apply(input, other, mode=rounding_mode)


@register("neg", inplace=True)
class Neg(Op):
    """y = -x.  VJP: gx = -gy."""
    formula = "gx = -gy"
    double_backward = linear = batched_jvp = True

    def forward(self, xp, x):
        if x.dtype == bool:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                               "invert a mask, use the `~` or `logical_not()` operator instead.")
        return -x

    def backward(self, xp, gy):
        return -gy

    @staticmethod
    def neg(input):
        return Neg.apply(input)


@register("pow", inplace=True, number_input=True)
class Pow(Op):
    """y = a ** b.  VJP (torch's pow_backward): ga = gy * b * a**(b-1), 0 where b == 0 (even at a == 0);
    gb = gy * y * log(a), 0 where a == 0 and b >= 0, NaN where a < 0 (the log of a negative number)."""
    formula = "ga = gy * b * a^(b-1), gb = gy * y * log(a)"
    promotes = True
    double_backward = elementwise = batched_jvp = True
    number_edges = False  # as torch's pow.Tensor_Scalar / pow.Scalar: a Python number is no input of the node

    def forward(self, xp, a, b):
        # torch's overloads: x ** t PowBackward1, x ** c PowBackward0, c ** x PowBackward2
        self._name = ("PowBackward1" if isinstance(b, xp.ndarray) else "PowBackward0") if isinstance(a, xp.ndarray) \
            else "PowBackward2"
        # torch computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt: NaN at -inf, where NumPy's pow gives inf and 0
        if type(b) is float and abs(b) == 0.5:
            with R._quiet(xp):  # rsqrt(0) = inf, quietly, as torch
                y = xp.sqrt(a) if b > 0 else 1 / xp.sqrt(a)
        elif _integral(xp, a) and _integral(xp, b):
            y = _integer_power(xp, a, b)
        else:
            y = a ** b
        # As torch: x ** c saves x only (y may then change in place); c ** x and x ** t save the output too.
        self.save_for_backward(a, b, None if isinstance(b, numbers.Number) else y)
        return y

    def backward(self, xp, gy):
        a, b, y = self.saved
        ga = gb = None
        if self.needs_input_grad[0]:
            with R._quiet(xp):  # 0 ** (b - 1) = inf for b < 1 (masked where b == 0), as torch's
                if isinstance(b, numbers.Number):  # a Python scalar exponent: decide here, no `where` on the hot path
                    # x ** 0: zeros as torch's pow_backward, not gy * 0 (NaN where gy is NaN or inf)
                    ga = xp.zeros_like(gy) if b == 0 else gy * b * a ** (b - 1)
                else:  # b == 0 would give 0 * a**-1 = NaN at a == 0
                    ga = xp.where(b == 0, 0, gy * b * a ** (b - 1))
        if self.needs_input_grad[1]:
            if isinstance(a, numbers.Number):  # a Python scalar base
                log_a = math.log(a) if a > 0 else -math.inf if a == 0 else math.nan
                gb = gy * y * log_a if a != 0 else gy * xp.where(b >= 0, 0, log_a)
            else:  # y * log(a) -> 0 as a -> 0+ for b > 0; torch defines 0 at b == 0 too, and -inf for b < 0
                # NOTE: log of a with its zeros replaced: these also run as recorded ops (create_graph, forward
                # mode), where NumPy's warnings about log(0) cannot be silenced
                zero = a == 0  # (constants there: y * log(a) would put 0 * inf into second derivatives)
                with R._quiet(xp):
                    gb = gy * xp.where(zero, xp.where(b >= 0, 0.0, -math.inf), y * xp.log(xp.where(zero, 1.0, a)))
        return ga, gb

    @staticmethod
    def pow(input, exponent):
        """input ** exponent; ``torch.pow(2, x)`` takes a Python number as the base."""
        if not isinstance(input, TensorBase):
            return Pow.apply(as_operand(input, exponent), exponent)
        return Pow.apply(input, as_operand(exponent, input))



def _integral(xp, v):
    return isinstance(v, int) and not isinstance(v, bool) if not isinstance(v, xp.ndarray) else v.dtype.kind in "iu"


def _integer_power(xp, a, b):
    """Integer a ** b as torch: a negative Python exponent is an error; a negative exponent in a tensor gives 1 for a
    base of 1, +-1 for -1 and 0 for any other base (NumPy refuses both cases with a ValueError)."""
    if not isinstance(b, xp.ndarray):
        if b < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return a ** b
    negative = b < 0  # NOTE: no .any(): on CUDA that would be a sync per integer pow
    y = a ** xp.where(negative, 0, b)
    odd = (b % 2) != 0
    small = xp.where(a == 1, 1, xp.where(a == -1, xp.where(odd, -1, 1), 0))
    return xp.where(negative, small, y).astype(y.dtype, copy=False)


@register("maximum")
class Maximum(Op):
    """y = max(a, b).  VJP: gy goes to the larger input; on ties it is split evenly; with a NaN, to both (as torch)."""
    formula = "ga = gy where a > b, gb = gy where b > a (halved on ties)"
    promotes = True
    double_backward = elementwise = batched_jvp = True

    def forward(self, xp, a, b):
        self.save_for_backward(a, b)
        return xp.maximum(a, b)

    def backward(self, xp, gy):
        a, b = self.saved
        return _split(xp, gy, a < b, a > b, a == b)

    def jvp(self, xp, ins, out, ts):
        return _pick_tangent(xp, ins, ts, ins[0] > ins[1])

    @staticmethod
    def maximum(input, other):
        return Maximum.apply(input, as_operand(other, input))


@register("minimum")
class Minimum(Op):
    """y = min(a, b).  VJP like maximum with the comparison flipped."""
    formula = "ga = gy where a < b, gb = gy where b < a (halved on ties)"
    promotes = True
    double_backward = elementwise = batched_jvp = True

    def forward(self, xp, a, b):
        self.save_for_backward(a, b)
        return xp.minimum(a, b)

    def backward(self, xp, gy):
        a, b = self.saved
        return _split(xp, gy, a > b, a < b, a == b)

    def jvp(self, xp, ins, out, ts):
        return _pick_tangent(xp, ins, ts, ins[0] < ins[1])

    @staticmethod
    def minimum(input, other):
        return Minimum.apply(input, as_operand(other, input))


def _pick_tangent(xp, ins, ts, a_wins):
    """torch's JVP of maximum/minimum, tb + m (ta - tb) with m = 1 where a wins, 1/2 on ties, 0 else (b's where a
    comparison with NaN is false both ways, where the VJP sends gy to both: the JVP is not its transpose in torch
    either); as torch, a NaN or inf tangent reaches every element (m * inf)."""
    ta, tb = (t if t is not None else 0.0 for t in ts)
    m = xp.where(ins[0] == ins[1], 0.5, xp.where(a_wins, 1.0, 0.0))
    with R._quiet(xp):  # 0 * inf: NaN, quietly, as torch
        return tb + m * (ta - tb)


def _split(xp, gy, a_loses, b_loses, tie):
    """As torch: gy (half of it on ties) goes to each side but the loser, so where a comparison with NaN is false
    both ways, both sides get all of gy."""
    g = xp.where(tie, gy * 0.5, gy)
    return xp.where(a_loses, 0, g), xp.where(b_loses, 0, g)


@register("where", method=False, function=False)  # where(condition, input, other): functional.where
class Where(Op):
    """y = cond ? a : b (cond is a non-differentiable keyword).  VJP: ga = gy where cond, gb = gy elsewhere;
    ``a_undefined`` (tensor_xp.depends): no gradient for a, not even zeros."""
    formula = "ga = gy where cond, gb = gy elsewhere"
    promotes = True
    double_backward = linear = batched_jvp = True
    a_undefined = False

    def forward(self, xp, a, b):
        y = xp.where(self.cond, a, b)
        want = a.dtype if hasattr(a, "dtype") else b.dtype  # after promotion: a Python number is weak
        return y if y.dtype == want else y.astype(want)  # NumPy widens where(c, 0.0, bfloat16) to float32

    def backward(self, xp, gy):
        cond = self.cond
        return None if self.a_undefined else xp.where(cond, gy, 0), xp.where(cond, 0, gy)


@register("abs", inplace=True)
class Abs(Op):
    """y = |x|.  VJP: gx = gy * sign(x); subgradient 0 at x == 0, as torch."""
    formula = "gx = gy * sign(x)"
    double_backward = elementwise = batched_jvp = True

    def forward(self, xp, x):
        self.save_for_backward(x)
        return xp.abs(x)

    def backward(self, xp, gy):
        # torch's gy * sgn(x), a product (sgn(NaN) = 0): an inf gy at x == 0 and a NaN tangent give NaN, as in torch
        (x,) = self.saved
        dt = gy.dtype
        with R._quiet(xp):  # inf * 0, quietly, as torch
            return gy * ((x > 0).astype(dt) - (x < 0).astype(dt))

    def backward_graph(self, xp, gy):  # torch's formula: the result depends on x (derivative 0), so requires grad
        return gy * xp.sign(self.saved[0])

    @staticmethod
    def abs(input):
        return Abs.apply(input)


@register("clamp", inplace=True, node="ClampBackward1")  # torch's clamp with number bounds
class Clamp(Op):
    """y = min(max(x, lo), hi).  VJP: gx = gy inside [lo, hi] (boundaries included, as torch), else 0."""
    formula = "gx = gy inside [min, max] (bounds included), else 0"
    double_backward = elementwise = batched_jvp = True

    def forward(self, xp, x):
        self.save_for_backward(x)
        return xp.clip(x, self.lo, self.hi).astype(x.dtype, copy=False)  # NumPy widens bfloat16 by a float bound

    def backward(self, xp, gy):
        (x,) = self.saved
        inside = True
        if self.lo is not None:
            inside = x >= self.lo
        if self.hi is not None:
            inside = (x <= self.hi) if inside is True else inside & (x <= self.hi)
        return xp.where(inside, gy, 0)

    @staticmethod
    def clamp(input, min=None, max=None):
        """min(max(x, min), max); a Tensor bound gets the gradient where it binds (x beyond it), as in torch."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        if not isinstance(min, TensorBase) and not isinstance(max, TensorBase):
            if isinstance(input, TensorBase) and input._data.dtype.kind in "biu":
                # as torch: the bounds take part in the result type, so an integer tensor with a float bound gives
                # the default float dtype (and clamp_ on it refuses: the result cannot be cast back)
                want = _np_result_type((input, *(b for b in (min, max) if b is not None)))
                if want != input._data.dtype:
                    input = input.to(dtype=want)
            return Clamp.apply(input, lo=min, hi=max)
        lo, hi = (None if b is None else as_operand(b, input) for b in (min, max))
        y = _clamp_to_tensors(input, lo, hi)
        if FORWARD.level is not None:
            _clamp_tangent(y, input, lo, hi)
        return named(y, "ClampBackward0")  # torch's node for tensor bounds (clamp.Tensor)


def _clamp_tangent(y, x, lo, hi):
    """torch's clamp_jvp, which parts from the gradients' rule (_clamp_to_tensors) at ties: with one bound, x's
    tangent only strictly inside it (x > min, x < max), the bound's elsewhere (NaN included); with both, the bound's
    only strictly outside them, and max's wherever min > max."""
    tx, tl, th = (tangent_of(v) for v in (x, lo, hi))
    if tx is None and tl is None and th is None:
        return
    with pause():
        zero = new(0.0, dtype=y.dtype, device=y.device)
        if FORWARD.batch is not None:  # B directions: (B, *v.shape), each lined up with y's trailing axes
            tx, tl, th = (t if t is None or v.ndim == y.ndim else
                          t.reshape((t.shape[0],) + (1,) * (y.ndim - v.ndim) + tuple(v.shape))
                          for t, v in ((tx, x), (tl, lo), (th, hi)))
        tx, tl, th = (zero if t is None else t for t in (tx, tl, th))
        if hi is None:
            t = Where.apply(tx, tl, cond=(x > lo)._data)
        elif lo is None:
            t = Where.apply(tx, th, cond=(x < hi)._data)
        else:
            t = Where.apply(th, Where.apply(tl, Where.apply(th, tx, cond=(x > hi)._data), cond=(x < lo)._data),
                            cond=(lo > hi)._data)
    set_tangent(y, t if t.dtype == y.dtype else t.to(y.dtype))


def _clamp_to_tensors(x, lo, hi):
    """clamp with Tensor bounds, torch's values and gradients (clamp_backward_min_max): x where lo <= x <= hi, lo where
    x < lo < hi, hi where x > hi or hi < lo, lo (= hi) with no gradient where x is beyond lo == hi; NaN wherever x or a
    bound is NaN, with the gradient of the masks (each comparison with NaN is False)."""
    if hi is None:
        take = ((x, x >= lo), (lo, x < lo))
    elif lo is None:
        take = ((x, x <= hi), (hi, x > hi))
    else:
        take = ((x, (x >= lo) & (x <= hi)), (lo, (x < lo) & (lo < hi)), (hi, (x > hi) | (hi < lo)))
    nan = x.isnan()
    for b in (lo, hi):
        if isinstance(b, TensorBase):
            nan = nan | b.isnan()
        elif b is not None and b != b:
            nan = nan | True
    rest = lo if lo is not None else hi  # reached only where lo == hi (or through a NaN)
    rest = rest.detach() if isinstance(rest, TensorBase) else new(rest, dtype=x.dtype, device=x.device)
    y = Where.apply(float("nan"), rest, cond=nan._data)
    stray = None  # where a mask selected despite a NaN (x NaN with hi < lo, say): torch's value is NaN there, but
    for value, mask in reversed(take):  # the gradient goes where the mask says
        y = Where.apply(value, y, cond=mask._data)
        stray = mask if stray is None else stray | mask
    return Where.apply(y + float("nan"), y, cond=(stray & nan)._data)
