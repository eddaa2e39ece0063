"""Operators and value tests: ``+ - * / ** @``, comparisons and logic (no graph), ``argmax``/``all``/``isnan``..."""
from __future__ import annotations

from gpugrad.core.args import dims
from gpugrad.core.tensor import TensorBase, as_operand, make, on_own_device
from gpugrad.ops.arith import Abs, Add, Div, Mul, Neg, Pow, Sub
from gpugrad.ops.matmul import Matmul
from gpugrad.ops.rounding import Remainder, RoundingDiv


class ArithmeticMethods:
    __slots__ = ()

    # NOTE: the dunders are the hottest Python in gpugrad (every `a * b`): one call into the op, nothing else.
    def __add__(self, o): return Add.apply(self, as_operand(o, self))
    # NOTE: torch evaluates `2 + x` and `2 * x` as x.add(2) and x.mul(2): the tensor is the first input (next_functions)
    def __radd__(self, o): return Add.apply(self, as_operand(o, self))
    def __sub__(self, o): return Sub.apply(self, as_operand(o, self))
    def __rsub__(self, o): return Sub.apply(as_operand(o, self), self)
    def __mul__(self, o): return Mul.apply(self, as_operand(o, self))
    def __rmul__(self, o): return Mul.apply(self, as_operand(o, self))
    def __truediv__(self, o): return Div.apply(self, as_operand(o, self))
    def __rtruediv__(self, o):
        o = as_operand(o, self)  # torch computes 2 / x as x.reciprocal() * 2 (values and nodes)
        return Div.apply(o, self) if isinstance(o, TensorBase) else Mul.apply(self.reciprocal(), o)

    def __pow__(self, o): return Pow.apply(self, as_operand(o, self))
    def __rpow__(self, o): return Pow.apply(as_operand(o, self), self)
    def __matmul__(self, o): return Matmul.apply(self, as_operand(o, self))
    def __rmatmul__(self, o): return Matmul.apply(as_operand(o, self), self)
    def __neg__(self): return Neg.apply(self)
    def __pos__(self): return self
    def __abs__(self): return Abs.apply(self)
    # // and % as Python's (integers stay integers), fmod as C's
    def __floordiv__(self, o): return RoundingDiv.apply(self, as_operand(o, self), mode="floor")
    def __rfloordiv__(self, o): return RoundingDiv.apply(as_operand(o, self), self, mode="floor")
    def __mod__(self, o): return Remainder.apply(self, as_operand(o, self))
    def __rmod__(self, o): return Remainder.apply(as_operand(o, self), self)

    def square(self):
        return self * self

    # -- comparisons and logic: results carry no gradient -------------------------------------------------------
    @on_own_device
    def _compare(self, o, fn):
        o = as_operand(o, self)
        od = o._data if isinstance(o, TensorBase) else o
        return make(self._backend.as_array(fn(self._data, od)), self._backend)  # 0-d: an array, not a scalar

    def __eq__(self, o): return self._compare(o, lambda a, b: a == b)
    def __ne__(self, o): return self._compare(o, lambda a, b: a != b)
    def __lt__(self, o): return self._compare(o, lambda a, b: a < b)
    def __le__(self, o): return self._compare(o, lambda a, b: a <= b)
    def __gt__(self, o): return self._compare(o, lambda a, b: a > b)
    def __ge__(self, o): return self._compare(o, lambda a, b: a >= b)
    def __and__(self, o): return self._compare(o, lambda a, b: a & b)
    def __or__(self, o): return self._compare(o, lambda a, b: a | b)
    def __xor__(self, o): return self._compare(o, lambda a, b: a ^ b)
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    __hash__ = object.__hash__  # defining __eq__ would otherwise drop it: identity hashing keeps dict keys working

    @on_own_device
    def __invert__(self):
        return make(self._backend.as_array(~self._data), self._backend)

    @on_own_device
    def _values(self, name, *others, **kw):
        """``xp.<name>(data, *others, **kw)`` as a tensor without a graph: tests of values, logic, indices."""
        args = [o._data if isinstance(o, TensorBase) else o for o in (as_operand(o, self) for o in others)]
        return make(self._backend.as_array(getattr(self._backend.xp, name)(self._data, *args, **kw)), self._backend)

    def isnan(self): return self._values("isnan")
    def isinf(self): return self._values("isinf")
    def isfinite(self): return self._values("isfinite")
    def isposinf(self): return self._values("isposinf")
    def isneginf(self): return self._values("isneginf")
    def signbit(self): return self._values("signbit")
    def logical_not(self): return self._values("logical_not")
    def logical_and(self, other): return self._values("logical_and", other)
    def logical_or(self, other): return self._values("logical_or", other)
    def logical_xor(self, other): return self._values("logical_xor", other)

    def argmax(self, dim=None, keepdim=False, **kw): return self._values("argmax", **dims(dim, keepdim, kw, "argmax"))
    def argmin(self, dim=None, keepdim=False, **kw): return self._values("argmin", **dims(dim, keepdim, kw, "argmin"))
    def all(self, dim=None, keepdim=False, **kw): return self._values("all", **dims(dim, keepdim, kw, "all"))
    def any(self, dim=None, keepdim=False, **kw): return self._values("any", **dims(dim, keepdim, kw, "any"))

    def count_nonzero(self, dim=None):
        return self._values("count_nonzero", axis=dims(dim, False, {}, "count_nonzero")["axis"])

    # -- aliases of registered frontends, as torch spells them --------------------------------------------------
    def clip(self, min=None, max=None): return self.clamp(min, max)
    def clamp_min(self, min): return self.clamp(min)
    def clamp_max(self, max): return self.clamp(None, max)
    def clip_(self, min=None, max=None): return self.clamp_(min, max)
    def clamp_min_(self, min): return self.clamp_(min)
    def clamp_max_(self, max): return self.clamp_(None, max)
