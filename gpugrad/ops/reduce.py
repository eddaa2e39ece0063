"""Reductions over an axis (or all axes).  VJPs put the reduced axes back (keepdims) and broadcast gy."""
from __future__ import annotations

import math

from gpugrad.core.args import canonical_axis, dims, moment, with_dtype
from gpugrad.core.node import Node, SeveralOutputs, grad_edge
from gpugrad.core.op import Op
from gpugrad.core.registry import composite, register


def _axes(axis, ndim, op):
    """The reduced axes, sorted; () for a 0-d tensor, whose only axis (0 or -1) has nothing to reduce."""
    if axis is None:
        return tuple(range(ndim))
    axes = [canonical_axis(a, ndim, op) for a in (axis if isinstance(axis, tuple) else (axis,))]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: axis {axis} names an axis twice")
    return tuple(sorted(axes)) if ndim else ()


def _keep(xp, gy, axes, keepdims):
    """gy reshaped so it broadcasts against the input (reduced axes restored as size 1)."""
    if keepdims or not axes:
        return gy
    for a in axes:
        gy = xp.expand_dims(gy, a)
    return gy


class _Reduce(Op):
    """Shared bookkeeping: normalized ``axes``, the name torch uses for full vs axis reductions."""

    full_suffix, axis_suffix = "0", "1"

    def _setup(self, x):
        self.axes = _axes(self.axis, x.ndim, self.op_name)
        self.in_shape = x.shape
        full = self.axis is None
        self._name = self.node_name[:-1] + (self.full_suffix if full else self.axis_suffix)
        return self.axes if x.ndim else None


@register("sum")
class Sum(_Reduce):
    """y = Σ x over axes.  VJP: gx = broadcast(gy).  Named SumBackward0 (all axes) / SumBackward1 (axis)."""
    formula = "gx = gy, broadcast"
    linear = True
    double_backward = True

    def forward(self, xp, x):
        return xp.sum(x, axis=self._setup(x), keepdims=self.keepdims)

    def backward(self, xp, gy):
        return xp.broadcast_to(_keep(xp, gy, self.axes, self.keepdims), self.in_shape)

    def jvp_batched(self, ts, out, batch):
        return type(self).apply(ts[0], axis=tuple(a + 1 for a in self.axes), keepdims=self.keepdims)

    @staticmethod
    def sum(input, dim=None, keepdim=False, *, dtype=None, **kw):
        return Sum.apply(with_dtype(input, dtype), **dims(dim, keepdim, kw, "sum"))


@register("mean")
class Mean(_Reduce):
    """y = mean of x over axes.  VJP: gx = broadcast(gy) / n."""
    formula = "gx = gy / n, broadcast"
    linear = True
    double_backward = True

    def forward(self, xp, x):
        axes = self._setup(x)
        self.count = 1
        for a in self.axes:
            self.count *= x.shape[a]
        if self.count == 0:  # NaN, as torch; NumPy's mean would warn "Mean of empty slice" on the way (nan * 0 is quiet)
            return xp.sum(x, axis=axes, keepdims=self.keepdims) * float("nan")
        return xp.mean(x, axis=axes, keepdims=self.keepdims)

    jvp_batched = Sum.jvp_batched

    def backward(self, xp, gy):
        # max(count, 1): with nothing reduced, x (so gx) has no elements; gy / 0 would only warn
        return xp.broadcast_to(_keep(xp, gy, self.axes, self.keepdims) / max(self.count, 1), self.in_shape)

    @staticmethod
    def mean(input, dim=None, keepdim=False, *, dtype=None, **kw):
        x = with_dtype(input, dtype)
        if x._data.dtype.kind not in "fcV":
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                               f"complex dtype. Got: {x.dtype}; pass dtype= or call .float() first")
        return Mean.apply(x, **dims(dim, keepdim, kw, "mean"))


class _Extreme(_Reduce):
    """max/min (torch's amax/amin).  VJP: gy flows to the elements equal to the extreme, split evenly among ties.

    NOTE: as torch's amax, gy / count is multiplied by the mask, not selected: a NaN or inf gy spreads NaN over its
    row (NaN * 0), and a row whose extreme is NaN (no element equals it: count 0) has a NaN gradient.
    """

    full_suffix, axis_suffix = "1", "0"
    double_backward = True
    amax = False  # called as amax/amin: torch's AmaxBackward0 / AminBackward0 over any dims

    def forward(self, xp, x):
        axes = self._setup(x)
        if self.amax:
            self._name = self.np_name.capitalize() + "Backward0"
        if any(x.shape[a] == 0 for a in self.axes):  # only a reduced axis must be non-empty: (0, 3).max(1) is (0,)
            raise (RuntimeError if self.axis is None else IndexError)(
                f"{self.op_name}(): cannot reduce an empty tensor of shape {x.shape} over axes {self.axes}: "
                "Expected reduction dim to be specified for input.numel() == 0 / to have non-zero size")
        y = self._extreme(xp, x, axes)
        self.save_for_backward(x, y)
        return y if self.keepdims else (xp.squeeze(y, axis=axes) if axes else y)

    def backward(self, xp, gy):
        x, y = self.saved
        hit = x == y
        count = xp.sum(xp.where(hit, 1.0, 0.0), axis=self.axes, keepdims=True)
        # torch's (gy / count) * mask, as selects (NumPy would warn about gy / 0 and inf * 0): NaN where count is 0,
        # and off the mask 0, or NaN where the share is inf or NaN
        share = xp.where(count > 0, _keep(xp, gy, self.axes, self.keepdims) / xp.maximum(count, 1.0), float("nan"))
        return xp.where(hit, share, xp.where(xp.abs(share) < float("inf"), 0.0, float("nan")))

    def _extreme(self, xp, x, axes):
        return getattr(xp, self.np_name)(x, axis=axes, keepdims=True)

    def jvp(self, xp, ins, out, ts):  # torch's amax JVP: the mean of the tangent over the elements that tie
        x, t = ins[0], ts[0]
        hit = x == _keep(xp, out, self.axes, self.keepdims)
        count = xp.sum(xp.where(hit, 1.0, 0.0), axis=self.axes, keepdims=self.keepdims)
        return xp.sum(xp.where(hit, t, 0.0), axis=self.axes, keepdims=self.keepdims) / count


@register("max")
class Max(_Extreme):
    """y = max of x over axes (torch's amax; ``max(dim)`` is a composition in functional.py)."""
    formula = "gx = gy split evenly among the elements equal to the max"
    np_name = "amax"


@register("min")
class Min(_Extreme):
    """y = min of x over axes (torch's amin)."""
    formula = "gx = gy split evenly among the elements equal to the min"
    np_name = "amin"


@composite("amax")
def amax(input, dim=(), keepdim=False, **kw):
    return Max.apply(input, amax=True, **dims(dim, keepdim, kw, "amax"))


@composite("amin")
def amin(input, dim=(), keepdim=False, **kw):
    return Min.apply(input, amax=True, **dims(dim, keepdim, kw, "amin"))


class Extrema(SeveralOutputs, Node):
    """torch's one node of aminmax's (min, max), AminmaxBackward0: each result is one of its outputs, so a hook on
    one runs whenever the other's gradient is taken or captured, as in torch. Its VJP is the sum of those of the
    amin and amax nodes that computed the results (each split evenly among ties), which also saved and check their
    values, gave the results their tangents and differentiate again under create_graph."""

    n_outputs = 2

    def __init__(self, input, results):
        self._be = input._backend
        self._parts = [r._grad_fn for r in results]
        self.next_functions = ((grad_edge(input), 0),)
        self._in_meta = ((input._data.shape, input._data.dtype),)
        for k, r in enumerate(results):
            r._grad_fn = self.output_slot(k, (r._data.shape, r._data.dtype))

    def name(self):
        return "AminmaxBackward0"

    def run_backward(self, grads, create_graph):
        self.call_hooks_of_unused_outputs(grads)
        total = None
        for node, g in zip(self._parts, grads):
            if g is not None:
                (gx,) = node.run_backward(g, create_graph)
                total = gx if total is None else total + gx
            elif node._saved_refs is not None or node._released:  # torch's node saved both results: it checks both
                node._check_saved()
        return (total,)

    def release(self):
        for node in self._parts:
            node.release()


@register("median")
class Median(_Extreme):
    """torch.median() over all elements: the lower of the two middle values, NaN if any is NaN.  VJP and JVP as
    max()'s: gy split evenly among the elements equal to it (torch's evenly_distribute_backward)."""
    formula = "gx = gy split evenly among the elements equal to the median"
    full_suffix = "0"

    def forward(self, xp, x):
        if x.size == 0:  # as torch: the median of nothing is NaN (its gradient is empty)
            self._setup(x)
            y = xp.full((1,) * x.ndim, float("nan"), dtype=x.dtype)
            self.save_for_backward(x, y)
            return y.reshape(())
        return super().forward(xp, x)

    def jvp(self, xp, ins, out, ts):
        if math.prod(ins[0].shape) == 0:  # as torch: the tangent of the median of nothing is 0 (not 0 / 0)
            return xp.zeros_like(out)
        return super().jvp(xp, ins, out, ts)

    def _extreme(self, xp, x, axes):
        s = xp.sort(x.reshape(-1))
        return xp.where(s[-1] != s[-1], s[-1], s[(s.size - 1) // 2]).reshape((1,) * x.ndim)


def _mean(xp, x, axes, n):
    """The mean over ``axes`` (keepdims); over an empty axis the empty sum (0): NumPy's mean would warn "Mean of
    empty slice" there, and the variance is NaN anyway (0 / (0 - correction) <= 0)."""
    return xp.mean(x, axis=axes, keepdims=True) if n else xp.sum(x, axis=axes, keepdims=True)


@register("var")
class Var(_Reduce):
    """y = Σ (x - mean)^2 / (n - correction).  VJP: gx = gy * 2 (x - mean) / (n - correction).

    With n <= correction the result is inf (NaN where all x are equal) and the gradient is inf/NaN, as in torch.
    """
    formula = "gx = gy * 2 (x - mean) / (n - correction)"
    double_backward = True
    full_suffix = axis_suffix = "0"

    def forward(self, xp, x):
        axes = self._setup(x)
        n = 1
        for a in self.axes:
            n *= x.shape[a]
        self.dof = n - self.correction
        self.n = n
        centered = x - _mean(xp, x, axes, n)
        # Save the input, not `centered`: under create_graph the VJP must see how centered depends on x.
        self.save_for_backward(x)
        ss = xp.sum(centered * centered, axis=axes, keepdims=self.keepdims)
        if self.dof > 0:
            return ss / self.dof
        # torch divides by max(dof, 0): ss / 0 without the divide-by-zero warning (NaN ss stays NaN)
        return xp.where(ss > 0, ss.dtype.type("inf"), ss.dtype.type("nan"))

    def backward(self, xp, gy):
        return self._vjp(xp, self.saved[0], gy)

    def jvp(self, xp, ins, out, ts):  # d var = 2 Σ (x - mean) t / (n - correction)
        if not self.n:  # nothing reduced: 0, as torch (not 0 * 2 / 0)
            return xp.zeros_like(out)
        x = ins[0]
        centered = x - _mean(xp, x, self.axes, self.n)
        if self.dof > 0:
            return xp.sum(centered * ts[0], axis=self.axes, keepdims=self.keepdims) * (2.0 / self.dof)
        if self.axis is None or not self.in_shape:  # the VJP's constant factor (see _vjp)
            return xp.sum(ts[0] * xp.where(centered == 0, float("nan"), float("inf")), axis=self.axes,
                          keepdims=self.keepdims)
        # torch's var_jvp over given axes scales each term before the sum: 2 / 0 = inf times a 0 term is NaN
        return xp.sum(centered * ts[0] * (2.0 / self.dof if self.dof else float("inf")), axis=self.axes,
                      keepdims=self.keepdims)

    def _vjp(self, xp, x, gy):
        centered = x - _mean(xp, x, self.axes, self.n)
        g = _keep(xp, gy, self.axes, self.keepdims)
        if self.dof > 0:
            return g * centered * (2.0 / self.dof)
        # NOTE: n <= correction follows torch's var_backward: over all axes (or a 0-d input) gy * (NaN where x equals
        # its mean, else inf); over given axes the usual formula, with 2 / 0 = inf (and 2 / dof for dof < 0).
        if self.axis is None or not self.in_shape:
            return g * xp.where(centered == 0, float("nan"), float("inf"))
        return g * centered * (2.0 / self.dof if self.dof else float("inf"))

    @staticmethod
    def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **kw):
        return Var.apply(input, **moment(dim, unbiased, keepdim, correction, kw, "var"))


@register("std")
class Std(Var):
    """y = sqrt(var(x)).  VJP: the variance's VJP of gy / (2 y), with 0 where y == 0, as torch's std_backward:
    a row of equal values (y = 0) gets a 0 gradient, not gy * inf * 0 = NaN (inf / NaN y stay as var's VJP)."""
    formula = "gx = gy * (x - mean) / ((n - correction) * y)"

    def forward(self, xp, x):
        y = xp.sqrt(super().forward(xp, x))
        self.save_for_backward(x, y)
        return y

    def backward(self, xp, gy):
        x, y = self.saved
        zero = y == 0
        return self._vjp(xp, x, xp.where(zero, 0.0, gy / xp.where(zero, 1.0, y + y)))

    def jvp(self, xp, ins, out, ts):  # d std = d var / (2 std), 0 where std == 0 (as the VJP)
        zero = out == 0
        return xp.where(zero, 0.0, super().jvp(xp, ins, out, ts) / xp.where(zero, 1.0, out + out))

    @staticmethod
    def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **kw):
        return Std.apply(input, **moment(dim, unbiased, keepdim, correction, kw, "std"))
