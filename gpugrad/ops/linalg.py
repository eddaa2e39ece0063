"""Einstein summation and vector norms."""
from __future__ import annotations

import builtins
import math
from collections import Counter

import numpy as np

from gpugrad.backend import reference as R
from gpugrad.core.args import dims, with_dtype
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.core.tensor import TensorBase
from gpugrad.dtypes import scalar_type_name
from gpugrad.ops.reduce import _keep, _Reduce


def _einsum(xp, equation, *xs):
    """einsum; bfloat16 operands (which NumPy's einsum refuses) in float32, the result rounded once, as torch."""
    low = [x.dtype for x in xs if getattr(x, "dtype", None) == R.BF16]
    if low and xp is np:
        y = np.einsum(equation, *(x.astype(np.float32) if x.dtype == R.BF16 else x for x in xs), optimize=len(xs) > 1)
        return y.astype(low[0])
    return xp.einsum(equation, *xs, optimize=len(xs) > 1)


@register("einsum", method=False, function=True)
class Einsum(Op):
    """y = einsum(equation, *xs) for an explicit equation of letters ("ij,jk->ik": no "...", operands' sizes equal;
    ``gpugrad.einsum`` rewrites torch's forms into it).

    VJP of operand i: the einsum of gy with the other operands into operand i's letters; a letter summed in operand i
    alone comes back as a ones vector (broadcast), and a repeated letter ("ii") as an identity matrix (a diagonal).
    JVP: the product rule, Σ_i einsum(..., t_i, ...).
    """
    formula = "g_i = einsum of gy with the other operands into operand i's subscripts"
    double_backward = True
    promotes = True  # as torch, where nothing is summed (a product: mul); contractions refuse (the frontend)

    # torch's einsum contracts rearranged (permuted, reshaped: often copied) operands with bmm and saves those: a
    # later in-place change of an operand is legal there, so this node copies what it saved first (Op.private_saved)
    @property
    def private_saved(self):
        return tuple(range(len(self.saved or ())))

    def forward(self, xp, *xs):
        self.ins, self.out = self.equation.split("->")
        self.ins = self.ins.split(",")
        self.save_for_backward(*xs)
        y = _einsum(xp, self.equation, *xs)
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
        return _einsum(xp, ",".join(terms) + "->" + target, *args)

    def jvp(self, xp, ins, out, ts):
        parts = [_einsum(xp, self.equation, *ins[:i], t, *ins[i + 1:])
                 for i, t in enumerate(ts) if t is not None]
        return sum(parts[1:], parts[0])

    @staticmethod
    def einsum(equation, *operands):
        """Einstein summation as torch's: "ij,jk->ik", implicit outputs ("ij,jk"), "..." for broadcast dims,
        operands given one by one or as a list; size-1 dims broadcast.  One differentiable op."""
        operands = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else operands
        if not all(isinstance(x, TensorBase) for x in operands):
            raise TypeError(f"einsum(): operands must be Tensors, got {[type(x).__name__ for x in operands]}")
        eq = equation.replace(" ", "")
        lhs, arrow, out = eq.partition("->")
        subs = lhs.split(",")
        if len(subs) != len(operands):
            raise RuntimeError(f"einsum(): {'more' if len(operands) > len(subs) else 'fewer'} operands were provided "
                               f"than specified in the equation {equation!r}")
        free = iter(sorted(set(_LETTERS) - set(eq)))
        ell = max([x.ndim - len(s) + 3 for s, x in zip(subs, operands) if "..." in s], default=0)
        dots = "".join(next(free) for _ in range(ell))
        for i, (s, x) in enumerate(zip(subs, operands)):
            subs[i] = s.replace("...", dots[ell - (x.ndim - len(s) + 3):] if x.ndim - len(s) + 3 > 0 else "")
            if len(subs[i]) != x.ndim or not subs[i].isalpha():
                raise RuntimeError(f"einsum(): the subscripts {s!r} of operand {i} do not match its {x.ndim} "
                                   f"dimensions (shape {tuple(x.shape)}) in {equation!r}")
        counts = Counter("".join(subs))
        out = out.replace("...", dots) if arrow else dots + "".join(sorted(c for c in counts if counts[c] == 1
                                                                           and c not in dots))
        if any(c not in counts for c in out) or len(set(out)) != len(out):
            raise RuntimeError(f"einsum(): the output subscripts {out!r} must be distinct and appear in an input, in "
                               f"{equation!r}")
        size = {}
        for s, x in zip(subs, operands):
            for c, n in zip(s, x.shape):
                if size.get(c, 1) not in (1, n) and n != 1:
                    raise RuntimeError(f"einsum(): subscript {c} has size {n} for an operand of shape "
                                       f"{tuple(x.shape)}, which does not broadcast with {size[c]}, in {equation!r}")
                size[c] = n if size.get(c, 1) == 1 else size[c]
        operands = [x if all(size[c] == n for c, n in zip(s, x.shape)) else x.expand([size[c] for c in s])
                    for s, x in zip(subs, operands)]
        dtypes = [x.dtype for x in operands]
        if len(set(dtypes)) > 1 and set("".join(subs)) - set(out):  # as torch: a contraction (bmm) does not promote
            other = next(d for d in dtypes if d != dtypes[0])
            raise RuntimeError(f"einsum(): expected scalar type {scalar_type_name(dtypes[0])} but found "
                               f"{scalar_type_name(other)}: operands of {equation!r} that are summed over must share "
                               "a dtype; convert them with .to(dtype)")
        return Einsum.apply(*operands, equation=",".join(subs) + "->" + out)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@register("norm", node="LinalgVectorNormBackward0")
class LinalgVectorNorm(_Reduce):
    """y = (Σ |x|^p)^(1/p) over axes (p = ``ord``: inf is max |x|, -inf min |x|, 0 the count of non-zeros).

    VJP gx = gy * D and JVP Σ D * t with D = ∂y/∂x (torch's norm_backward): sign(x) |x|^(p-1) / y^(p-1), so x / y
    for p = 2 and sign(x) for p = 1; for ±inf sign(x) split evenly among the elements attaining y; 0 for p = 0, and 0
    where y = 0 or x = 0 (a subgradient where the norm is not differentiable).
    """
    formula = "gx = gy * sign(x) |x|^(p-1) / y^(p-1)"
    double_backward = True
    full_suffix = axis_suffix = "0"

    def forward(self, xp, x):
        axes, p, k = self._setup(x), self.ord, self.keepdims
        empty = [a for a in self.axes if x.shape[a] == 0]
        if (p < 0 or p == math.inf) and empty:  # min, max and 1 / Σ |x|^p of nothing: torch's words (and typo)
            given = self.axis if isinstance(self.axis, (tuple, list)) else (self.axis,)
            where = ("an empty tensor because" if self.axis is None else
                     f"the dimension {next(g for g in given if g % x.ndim == empty[0])}because this dimension is "
                     "empty and")
            raise RuntimeError(f"linalg.vector_norm cannot compute the {p:g} norm on {where} the operation does not "
                               "have an identity")
        a = xp.abs(x)
        with R._quiet(xp):  # a negative p at x = 0: 0 ** p = inf, and inf ** (1 / p) = 0, as torch, quietly
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
        if self.ord == 0:  # piecewise constant: no gradient at all (None, as torch's), not zeros
            return None
        x, y = self.saved
        return _keep(xp, gy, self.axes, self.keepdims) * self._d(xp, x, y)

    def jvp(self, xp, ins, out, ts):
        if self.ord == 0:  # zeros, as torch's (not 0 * t: a NaN or inf of t stays out)
            return xp.zeros_like(out)
        return xp.sum(self._d(xp, ins[0], out) * ts[0], axis=self.axes, keepdims=self.keepdims)

    @staticmethod
    def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
        """The vector p-norm over all elements or ``dim`` (an int or a tuple): p = "fro" or 2, 1, inf, -inf, 0, any
        number (torch.linalg.vector_norm's gradients: 0 where the norm is 0)."""
        if p is None or p == "fro":
            p = 2
        if isinstance(p, str):
            raise ValueError(f"norm: p={p!r} is a matrix norm that needs an SVD, which gpugrad does not have; use "
                             "p='fro' or a number")
        x = with_dtype(input, dtype)
        if x._data.dtype.kind not in "fcV":
            raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                               f"{x.dtype}; call .float() first")
        return LinalgVectorNorm.apply(x, ord=builtins.float(p), **dims(dim, keepdim, {}, "norm"))
