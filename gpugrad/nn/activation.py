"""Activation layers and ``Dropout``: stateless wrappers over ``nn.functional``."""
from __future__ import annotations

from gpugrad.nn import functional as F
from gpugrad.nn.module import Module


class ReLU(Module):
    """y = max(x, 0)."""

    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    """GELU, tanh approximation.  NOTE: torch's default is the exact erf form (approximate='none'); gpugrad
    implements only 'tanh', so that is the default here and 'none' raises."""

    def __init__(self, approximate="tanh"):
        super().__init__()
        if approximate != "tanh":
            raise NotImplementedError("nn.GELU: only approximate='tanh' is implemented")
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class Tanh(Module):
    """y = tanh x."""

    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    """y = 1 / (1 + e^-x)."""

    def forward(self, x):
        return F.sigmoid(x)


class Dropout(Module):
    """While training, zero each element with probability p and scale the rest by 1 / (1 - p); identity in
    eval mode (``module.eval()``)."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
