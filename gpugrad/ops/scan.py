"""Scans along one axis: cumulative sums and products (torch's cumsum, cumprod)."""
from __future__ import annotations

from gpugrad.core.args import canonical_axis, with_dtype
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.ops.arith import Where


def _rcumsum(xp, g, axis):
    """Σ_{j >= i} g_j along axis: the transpose of cumsum."""
    return xp.flip(xp.cumsum(xp.flip(g, axis), axis=axis), axis)


class _Scan(Op):
    def forward(self, xp, x):
        self.axis = canonical_axis(self.axis, x.ndim, self.op_name)
        # NOTE: a 0-d tensor is one element along axis 0 (as torch); NumPy's scans refuse axis=0 there
        return getattr(xp, self.op_name)(x.reshape(x.shape or (1,)), axis=self.axis).reshape(x.shape)


@register("cumsum", inplace=True)
class Cumsum(_Scan):
    """y_i = Σ_{j <= i} x_j along ``axis``.  VJP: gx_i = Σ_{j >= i} gy_j (the reversed cumulative sum)."""
    formula = "gx_i = Σ_{j >= i} gy_j"
    linear = True

    def backward(self, xp, gy):
        return _rcumsum(xp, gy.reshape(gy.shape or (1,)), self.axis).reshape(gy.shape)

    def jvp_batched(self, ts, out, batch):
        return Cumsum.apply(ts[0], axis=self.axis + 1) if out.ndim else ts[0]

    @staticmethod
    def cumsum(input, dim, *, dtype=None):
        return Cumsum.apply(with_dtype(input, dtype), axis=dim)


@register("cumprod", inplace=True)
class Cumprod(_Scan):
    """y_i = Π_{j <= i} x_j along ``axis``, with zeros handled as torch's cumprod_backward does.

    Along a line with its first zero at z (y' = the cumprod with x_z replaced by 1):
    VJP: gx_i = Σ_{j >= i} gy_j y_j / x_i for i < z;  gx_z = Σ_{j >= z} gy_j y'_j;  0 after z.
    JVP: ty_j = y_j Σ_{i <= j} t_i / x_i for j < z;  ty_j = t_z y'_j from z on.
    Under create_graph both use the Jacobian J[k, j] = Π_{i <= j, i != k} x_i (j >= k) instead: n² per line, but
    differentiable at the zeros too, where the formulas above drop how y depends on x_z.
    """
    formula = "gx_i = Σ_{j >= i} gy_j y_j / x_i (zeros as torch's cumprod_backward)"

    def forward(self, xp, x):
        self.save_for_backward(x)
        return super().forward(xp, x)

    def _parts(self, xp, x):
        """(before the first zero, at the first zero, x with 1 from the first zero on, y') for each line."""
        zero = x == 0
        seen = xp.cumsum(zero, axis=self.axis)
        before, first = seen == 0, zero & (seen == 1)
        return before, first, xp.where(before, x, 1), xp.cumprod(xp.where(first, 1, x), axis=self.axis)

    def _jacobian(self, x):
        """J[..., k, j] for the line along axis moved last (Tensors: recorded ops)."""
        line = x.movedim(self.axis, -1)
        n = line.shape[-1]
        others = Where.apply(1.0, line.unsqueeze(-2), cond=self._be.xp.eye(n, dtype=bool))  # row k: x_k -> 1
        return others.cumprod(-1).triu()

    def backward(self, xp, gy):
        x = self.saved[0]
        if not x.ndim:
            return gy
        before, first, xs, yp = self._parts(xp, x)
        a = self.axis
        return (xp.where(before, _rcumsum(xp, gy * xp.where(before, yp, 0), a) / xs, 0)
                + xp.where(first, _rcumsum(xp, gy * yp, a), 0))

    def _through_jacobian(self, x, v, forward):
        """J t (``forward``: Σ_{k <= j} t_k J[k, j]) or J^T gy (Σ_{j >= k} J[k, j] gy_j) on Tensors, summing only the
        terms above J's diagonal (a select, not a product with J's zeros): a NaN or inf in v reaches only the entries
        it feeds, as in torch (a matmul would spread it over the line, NaN * 0)."""
        xp, n = self._be.xp, x.shape[self.axis]
        line = v.movedim(self.axis, -1)
        jac = self._jacobian(x)
        terms = line.unsqueeze(-1) * jac if forward else jac * line.unsqueeze(-2)
        upper = xp.triu(xp.ones((n, n), dtype=bool))
        return Where.apply(terms, 0.0, cond=upper).sum(-2 if forward else -1).movedim(-1, self.axis)

    def backward_graph(self, xp, gy):
        x = self.saved[0]
        if not x.ndim:
            return gy * 1
        return self._through_jacobian(x, gy, forward=False)

    def jvp(self, xp, ins, out, ts):
        x, t = ins[0], ts[0]
        if not x.ndim:
            return t
        if not isinstance(x, self._be.array_type):  # Tensors: differentiable again
            return self._through_jacobian(x, t, forward=True)
        before, first, xs, yp = self._parts(xp, x)
        a = self.axis
        return xp.where(before, out * xp.cumsum(xp.where(before, t, 0) / xs, axis=a),
                        xp.cumsum(xp.where(first, t, 0), axis=a) * yp)

    @staticmethod
    def cumprod(input, dim, *, dtype=None):
        return Cumprod.apply(with_dtype(input, dtype), axis=dim)
