"""``LayerNorm``."""
from __future__ import annotations

from gpugrad.creation import ones, zeros
from gpugrad.nn import functional as F
from gpugrad.nn.module import Module
from gpugrad.nn.parameter import Parameter


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing ``normalized_shape`` axes
    (biased variance); weight starts at 1, bias at 0.

    >>> ln = nn.LayerNorm(4)
    >>> ln(gpugrad.randn(2, 4)).mean(-1)   # ~0 per row
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = ns, eps, elementwise_affine
        affine = elementwise_affine
        self.register_parameter("weight", Parameter(ones(ns, device=device, dtype=dtype)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(ns, device=device, dtype=dtype)) if affine and bias else None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
