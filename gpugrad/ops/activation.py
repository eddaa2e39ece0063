"""Activations, fused bias+activation and dropout.  Each runs the NumPy reference of its CUDA kernel on the CPU
(``backend/reference.py``) and the kernel itself on CUDA (``backend/kernels.py``): same names, same contract."""
from __future__ import annotations

import inspect

from gpugrad.backend import reference as R
from gpugrad.core import tensor_xp
from gpugrad.core.registry import composite, register
from gpugrad.ops.declarations import POINTWISE
from gpugrad.ops.kernel_op import KernelOp


class PointwiseOp(KernelOp):
    """y = f(x) for a row of ``ops/declarations.py`` (``decl``).  Its one derivative formula g * f' (the ``*_bwd``
    kernel on CUDA, its reference on the CPU, ``decl.df`` for kernel-less ops) gives the VJP (g = gy), the JVP
    (g = the tangent) and, run on Tensors, the double backward."""

    decl = None
    batched_jvp = True

    @classmethod
    def make(cls, decl):
        body = {"decl": decl, "__doc__": f"{decl.name}: see ops/declarations.py.", "__module__": __name__,
                "formula": f"gx = gy * {decl.name}'(x)" + (f", from the saved {decl.saves}" if decl.saves else ""),
                # as torch: integers go through exp, sin, ... as the default float dtype
                "promotes": not decl.ints and "float"}
        if decl.node:
            body["node_name"] = decl.node
        op = type(decl.camel, (cls,), body)
        if decl.frontend:
            setattr(op, decl.name, staticmethod(_frontend(op, decl)))
        return register(decl.name, method=decl.frontend, function=decl.top and decl.frontend, inplace=decl.frontend)(op)

    def _args(self):
        return tuple(getattr(self, p, d) for p, d in self.decl.params)

    def _f(self, impl, xp, x):
        d = self.decl
        return getattr(impl, f"{d.name}_fwd")(xp, x, *self._args()) if d.kernel else d.f(xp, x, *self._args())

    def _df(self, impl, xp, s, g):
        d = self.decl
        return getattr(impl, f"{d.name}_bwd")(xp, s, g, *self._args()) if d.kernel else d.df(xp, s, g, *self._args())

    def _fwd(self, impl, xp, x):
        y = self._f(impl, xp, x)
        if self.decl.saves:
            self.save_for_backward(x if self.decl.saves == "x" else y)
        return y

    def _bwd(self, impl, xp, gy):
        return self._df(impl, xp, self.saved[0] if self.saved else None, gy)

    def backward_graph(self, xp, gy):
        if not self.saved:  # a constant derivative (rounding: 0, frac: 1): no graph through x, as torch's
            return self._df(R, xp, None, gy)
        s = self.saved[0]
        gx = self._df(R, xp, s, gy)
        # A select (relu, leaky_relu at 0) reads s only through a comparison: torch's result still depends on s
        # (with derivative 0), so it requires grad.
        return xp.depends(gx, s) if s.requires_grad and not gx.requires_grad else gx

    def _jvp(self, impl, xp, ins, out, ts):
        s, t = ins[0] if self.decl.saves == "x" else out, ts[0]
        if t.shape != s.shape:  # B directions at once (forward_ad.make_batched_dual): the kernels want equal shapes
            s = xp.broadcast_to(s, t.shape)
        return self._df(impl, xp, s, t)


def _frontend(op, decl):
    """``f(input, *params)`` for a declared pointwise op, with the declaration's parameter names and defaults, as
    in torch."""
    names = [p for p, _ in decl.params]

    def f(input, *args, **kwargs):
        if len(args) > len(names) or set(kwargs) - set(names):
            raise TypeError(f"{decl.name}() takes parameters {tuple(names)}, got {args} and {sorted(kwargs)}")
        params = dict(decl.params)
        params.update(zip(names, args))
        params.update(kwargs)
        return op.apply(input, **params)

    f.__doc__ = f"{decl.name}({', '.join(f'{p}={d}' for p, d in decl.params)}): see gpugrad/ops/declarations.py"
    f.__signature__ = inspect.Signature([inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d) for p, d in decl.params])
    return f


POINTWISE_OPS = {name: PointwiseOp.make(d) for name, d in POINTWISE.items()}


@composite("gelu", function=False, inplace=True)
def gelu(input, approximate="none"):
    """GELU as torch: the exact erf form (op gelu_erf) or approximate='tanh' (op gelu)."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"gelu: approximate argument must be either none or tanh, got {approximate!r}")
    return POINTWISE_OPS["gelu_erf" if approximate == "none" else "gelu"].apply(input)


@register("bias_act")
class BiasAct(KernelOp):
    """y = act(x + b), b broadcast along the last axis: one pass instead of two (fused kernel on CUDA).

    VJP: gz = act'(.) * gy; gx = gz; gb = gz summed over the leading axes (the bias gradient kernel on CUDA).
    JVP: act'(.) * (tx + tb), the same g * f' kernel.  x and b are kept too (copied if changed in place, as they are
    only read by a double backward, which recomputes z = x + b on Tensors).
    """
    formula = "gx = gy * act'(x + b), gb = Σ gy * act'(x + b) over the leading axes"
    params = ()
    private_saved = (1, 2)

    def _fwd(self, impl, xp, x, b):
        y, saved = impl.bias_act_fwd(xp, x, b, self.act, *self.params)
        if self.act == "identity":  # its VJP reads nothing: keep x (privately) in the output's place, as torch's
            saved, self.private_saved = x, (0, 1, 2)  # x + b saves nothing that y's in-place change could touch
        self.save_for_backward(saved, x, b)
        return y

    def _bwd(self, impl, xp, gy):
        return impl.bias_act_bwd(xp, self.saved[0], gy, self.act, *self.params)

    def _g_df(self, impl, xp, s, g):
        return g if self.act == "identity" else getattr(impl, f"{self.act}_bwd")(xp, s, g, *self.params)

    def backward_graph(self, xp, gy):
        saved, x, b = self.saved
        s = x + b if R._saves_x(self.act) else saved  # saved is then this node's output y
        gz = self._g_df(R, xp, s, gy)
        if s.requires_grad and not gz.requires_grad:
            gz = xp.depends(gz, s)
        lead = tuple(range(gz.ndim - 1))  # none for a 1-D x: sum(axis=()) would be torch's sum over every axis
        return gz, gz.sum(axis=lead) if lead else gz

    def _jvp(self, impl, xp, ins, out, ts):
        x, b = ins[:2]
        tz = ts[0] if ts[1] is None else ts[1] if ts[0] is None else ts[0] + ts[1]
        if not R._saves_x(self.act):
            s = out
        else:  # z = x + b: what forward saved, or recomputed with recorded ops on Tensors
            s = x + b if xp is tensor_xp else self.saved[0]
        return self._g_df(impl, xp, s, tz)


@register("dropout")
class Dropout(KernelOp):
    """y = x * mask / (1 - p) with mask ~ Bernoulli(1 - p), drawn from the backend's generator and saved.

    VJP: gx = gy * mask / (1 - p).
    """
    formula = "gx = gy * mask / (1 - p)"

    def _fwd(self, impl, xp, x):
        # torch's nodes: a multiply by the scaled mask on the CPU, its fused native_dropout on CUDA
        self._name = "MulBackward0" if impl is R else "NativeDropoutBackward0"
        y, mask = impl.dropout_fwd(xp, x, self.p, self.u)
        self.u = None  # the randoms are consumed; only the (smaller) mask is kept for backward
        self.save_for_backward(mask)
        return y

    def _bwd(self, impl, xp, gy):
        return impl.dropout_bwd(xp, gy, self.saved[0], self.p)

    def backward_graph(self, xp, gy):  # linear in gy, with the saved mask
        return R.dropout_bwd(xp, gy, self.saved[0], self.p)

    def _jvp(self, impl, xp, ins, out, ts):
        return impl.dropout_bwd(xp, ts[0], self.saved[0], self.p)
