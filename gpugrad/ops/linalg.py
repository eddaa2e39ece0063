"""Einstein summation and vector norms."""
from __future__ import annotations

import math

from gpugrad.autograd.function import Op
from gpugrad.ops import register
from gpugrad.ops.reduce import _keep, _Reduce


@register("einsum")
class Einsum(Op):
    """y = einsum(equation, *xs) for an explicit equation of letters ("ij,jk->ik": no "...", operands' sizes equal;
    ``gpugrad.einsum`` rewrites torch's forms into it).

    VJP of operand i: the einsum of gy with the other operands into operand i's letters; a letter summed in operand i
    alone comes back as a ones vector (broadcast), and a repeated letter ("ii") as an identity matrix (a diagonal).
    JVP: the product rule, Σ_i einsum(..., t_i, ...).
    """
    double_backward = True
    promotes = "same"  # as torch: mixed dtypes are an error

    def forward(self, xp, *xs):
        self.ins, self.out = self.equation.split("->")
        self.ins = self.ins.split(",")
        self.save_for_backward(*xs)
        y = xp.einsum(self.equation, *xs, optimize=len(xs) > 1)
        # NOTE: NumPy returns a view of the input for a pure transpose or diagonal ("ij->ji", "ii->i"): copy it
        return xp.array(y, copy=True) if len(xs) == 1 and set(self.ins[0]) == set(self.out) else y

    def backward(self, xp, gy):
        return tuple(self._vjp(xp, gy, i) if need else None for i, need in enumerate(self.needs_input_grad))

    def _vjp(self, xp, gy, i):
        xs, sub, fresh = self.saved, self.ins[i], iter(sorted(set(_LETTERS) - set(self.equation)))
        terms, args = [self.out], [gy]
        terms += [s for j, s in enumerate(self.ins) if j != i]
        args += [x for j, x in enumerate(xs) if j != i]
        have, target, be, dtype = set("".join(terms)), "", self._be, getattr(gy, "_data", gy).dtype
        for letter, n in zip(sub, xs[i].shape):
            if letter in target:  # a repeat: an identity matrix joins it to its first occurrence
                new = next(fresh)
                terms.append(letter + new)
                args.append(be.xp.eye(n, dtype=dtype))
                target += new
                continue
            if letter not in have:  # summed in this operand only: broadcast back
                terms.append(letter)
                args.append(be.xp.ones(n, dtype=dtype))
            target += letter
        return xp.einsum(",".join(terms) + "->" + target, *args, optimize=len(args) > 1)

    def jvp(self, xp, ins, out, ts):
        parts = [xp.einsum(self.equation, *ins[:i], t, *ins[i + 1:], optimize=len(ins) > 1)
                 for i, t in enumerate(ts) if t is not None]
        return sum(parts[1:], parts[0])


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@register("norm")
class LinalgVectorNorm(_Reduce):
    """y = (Σ |x|^p)^(1/p) over axes (p = ``ord``: inf is max |x|, -inf min |x|, 0 the count of non-zeros).

    VJP gx = gy * D and JVP Σ D * t with D = ∂y/∂x (torch's norm_backward): sign(x) |x|^(p-1) / y^(p-1), so x / y
    for p = 2 and sign(x) for p = 1; for ±inf sign(x) split evenly among the elements attaining y; 0 for p = 0, and 0
    where y = 0 or x = 0 (a subgradient where the norm is not differentiable).
    """
    double_backward = True
    full_suffix = axis_suffix = "0"

    def forward(self, xp, x):
        axes, p, k = self._setup(x), self.ord, self.keepdims
        if abs(p) == math.inf and any(x.shape[a] == 0 for a in self.axes):
            raise IndexError(f"linalg.vector_norm cannot compute the {p} norm on an empty tensor because the "
                             "operation does not have an identity")
        a = xp.abs(x)
        y = (xp.amax(a, axis=axes, keepdims=k) if p == math.inf else xp.amin(a, axis=axes, keepdims=k)
             if p == -math.inf else xp.sum(x != 0, axis=axes, keepdims=k).astype(x.dtype) if p == 0
             else xp.sum(a, axis=axes, keepdims=k) if p == 1 else xp.sqrt(xp.sum(x * x, axis=axes, keepdims=k))
             if p == 2 else xp.sum(a ** p, axis=axes, keepdims=k) ** (1.0 / p))
        self.save_for_backward(x, y)
        return y

    def _d(self, xp, x, y):
        p, y = self.ord, _keep(xp, y, self.axes, self.keepdims)
        if p == 0:
            return xp.zeros_like(x)
        if p == 1:
            return xp.sign(x)
        if abs(p) == math.inf:
            hit = xp.abs(x) == y
            return xp.where(hit, xp.sign(x), 0) / xp.sum(xp.where(hit, 1.0, 0.0), axis=self.axes, keepdims=True)
        ys = xp.where(y == 0, 1, y)  # NOTE: safe operands inside the where, so its other branch has no NaN derivative
        if p == 2:
            return xp.where(y == 0, 0, x / ys)
        bad = (y == 0) | (x == 0)
        xs = xp.where(bad, 1, x)
        return xp.where(bad, 0, xp.sign(xs) * xp.abs(xs) ** (p - 1) / ys ** (p - 1))

    def backward(self, xp, gy):
        x, y = self.saved
        return _keep(xp, gy, self.axes, self.keepdims) * self._d(xp, x, y)

    def jvp(self, xp, ins, out, ts):
        return xp.sum(self._d(xp, ins[0], out) * ts[0], axis=self.axes, keepdims=self.keepdims)
