"""Activations, fused bias+activation and dropout.  Each runs the NumPy reference of its CUDA kernel on the CPU
(``backend/reference.py``) and the kernel itself on CUDA (``backend/kernels.py``): same names, same contract."""
from __future__ import annotations

from gpugrad.autograd.function import Op
from gpugrad.backend import kernels as K
from gpugrad.backend import reference as R
from gpugrad.ops import register


class _Pointwise(Op):
    """y = f(x) with a VJP that reads the saved output y (``uses="y"``) or the input x (``uses="x"``)."""

    fwd = bwd = None  # kernel names: "relu_fwd", "relu_bwd"
    uses = "y"

    def forward(self, xp, x):
        return self._fwd(getattr(R, self.fwd), xp, x)

    def forward_cuda(self, xp, x):
        return self._fwd(getattr(K, self.fwd), xp, x)

    def _fwd(self, impl, xp, x):
        y = impl(xp, x)
        self.save_for_backward(y if self.uses == "y" else x)
        return y

    def backward(self, xp, gy):
        return getattr(R, self.bwd)(xp, self.saved[0], gy)

    def backward_cuda(self, xp, gy):
        return getattr(K, self.bwd)(xp, self.saved[0], gy)


@register("relu")
class Relu(_Pointwise):
    """y = max(x, 0).  VJP: gx = gy * (y > 0); subgradient 0 at x == 0, as torch."""
    fwd, bwd = "relu_fwd", "relu_bwd"

    def backward_graph(self, xp, gy):
        return xp.where(self.saved[0] > 0, gy, 0)


@register("gelu")
class Gelu(_Pointwise):
    """GELU, tanh approximation (torch's approximate='tanh').  VJP from the saved input x."""
    fwd, bwd, uses = "gelu_fwd", "gelu_bwd", "x"


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
class BiasAct(Op):
    """y = act(x + b), b broadcast along the last axis: one pass instead of two (fused kernel on CUDA).

    VJP: gz = act'(.) * gy; gx = gz; gb = gz summed over the leading axes (the bias gradient kernel on CUDA).
    """

    def forward(self, xp, x, b):
        return self._fwd(R, xp, x, b)

    def forward_cuda(self, xp, x, b):
        return self._fwd(K, xp, x, b)

    def _fwd(self, impl, xp, x, b):
        y, saved = impl.bias_act_fwd(xp, x, b, self.act)
        self.save_for_backward(saved)
        return y

    def backward(self, xp, gy):
        return R.bias_act_bwd(xp, self.saved[0], gy, self.act)

    def backward_cuda(self, xp, gy):
        return K.bias_act_bwd(xp, self.saved[0], gy, self.act)


@register("dropout")
class Dropout(Op):
    """y = x * mask / (1 - p) with mask ~ Bernoulli(1 - p), drawn from the backend's generator and saved.

    VJP: gx = gy * mask / (1 - p).
    """

    def forward(self, xp, x):
        return self._fwd(R, xp, x)

    def forward_cuda(self, xp, x):
        return self._fwd(K, xp, x)

    def _fwd(self, impl, xp, x):
        y, mask = impl.dropout_fwd(xp, x, self.p, self.u)
        self.u = None  # the randoms are consumed; only the (smaller) mask is kept for backward
        self.save_for_backward(mask)
        return y

    def backward(self, xp, gy):
        return R.dropout_bwd(xp, gy, self.saved[0], self.p)

    def backward_cuda(self, xp, gy):
        return K.dropout_bwd(xp, gy, self.saved[0], self.p)
