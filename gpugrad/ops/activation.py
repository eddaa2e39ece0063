"""Activations, fused bias+activation and dropout.  Each runs the NumPy reference of its CUDA kernel on the CPU
(``backend/reference.py``) and the kernel itself on CUDA (``backend/kernels.py``): same names, same contract."""
from __future__ import annotations

from gpugrad.ops import register
from gpugrad.ops.kernel_op import KernelOp


class _Pointwise(KernelOp):
    """y = f(x) with a VJP that reads the saved output y (``uses="y"``) or the input x (``uses="x"``)."""

    fwd = bwd = None  # kernel names: "relu_fwd", "relu_bwd"
    uses = "y"

    def _fwd(self, impl, xp, x):
        y = getattr(impl, self.fwd)(xp, x)
        self.save_for_backward(y if self.uses == "y" else x)
        return y

    def _bwd(self, impl, xp, gy):
        return getattr(impl, self.bwd)(xp, self.saved[0], gy)


@register("relu")
class Relu(_Pointwise):
    """y = max(x, 0).  VJP: gx = 0 where y <= 0, else gy (a select: an inf/NaN gy there gives 0, as torch);
    subgradient 0 at x == 0."""
    fwd, bwd = "relu_fwd", "relu_bwd"

    def backward_graph(self, xp, gy):  # torch's threshold_backward(gy, y, 0) depends on y (derivative 0)
        return xp.depends(xp.where(self.saved[0] <= 0, 0, gy), self.saved[0])


@register("gelu")
class Gelu(_Pointwise):
    """GELU, tanh approximation (torch's approximate='tanh').  VJP from the saved input x:
    gx = gy * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2)), t = tanh(k (x + a x^3))."""
    fwd, bwd, uses = "gelu_fwd", "gelu_bwd", "x"

    def backward_graph(self, xp, gy):
        x = self.saved[0]
        k, a = 0.7978845608028654, 0.044715  # sqrt(2 / pi); the cubic coefficient
        t = (k * (x + a * x * x * x)).tanh()
        return gy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x))


@register("sigmoid")
class Sigmoid(_Pointwise):
    """y = 1 / (1 + e^-x).  VJP: gx = gy * y * (1 - y)."""
    fwd, bwd = "sigmoid_fwd", "sigmoid_bwd"

    def backward_graph(self, xp, gy):
        y = self.saved[0]
        return gy * y * (1 - y)


@register("tanh")
class Tanh(_Pointwise):
    """y = tanh x.  VJP: gx = gy * (1 - y^2)."""
    fwd, bwd = "tanh_fwd", "tanh_bwd"

    def backward_graph(self, xp, gy):
        y = self.saved[0]
        return gy * (1 - y * y)


@register("bias_act")
class BiasAct(KernelOp):
    """y = act(x + b), b broadcast along the last axis: one pass instead of two (fused kernel on CUDA).

    VJP: gz = act'(.) * gy; gx = gz; gb = gz summed over the leading axes (the bias gradient kernel on CUDA).
    """

    def _fwd(self, impl, xp, x, b):
        y, saved = impl.bias_act_fwd(xp, x, b, self.act)
        self.save_for_backward(saved)
        return y

    def _bwd(self, impl, xp, gy):
        return impl.bias_act_bwd(xp, self.saved[0], gy, self.act)


@register("dropout")
class Dropout(KernelOp):
    """y = x * mask / (1 - p) with mask ~ Bernoulli(1 - p), drawn from the backend's generator and saved.

    VJP: gx = gy * mask / (1 - p).
    """

    def _fwd(self, impl, xp, x):
        y, mask = impl.dropout_fwd(xp, x, self.p, self.u)
        self.u = None  # the randoms are consumed; only the (smaller) mask is kept for backward
        self.save_for_backward(mask)
        return y

    def _bwd(self, impl, xp, gy):
        return impl.dropout_bwd(xp, gy, self.saved[0], self.p)
