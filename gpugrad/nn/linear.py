"""``Linear`` and the shape-only layers ``Identity`` and ``Flatten``."""
from __future__ import annotations

import math

from gpugrad.creation import empty
from gpugrad.nn import functional as F, init
from gpugrad.nn.module import Module
from gpugrad.nn.parameter import Parameter


class Linear(Module):
    """y = x @ weightᵀ + bias, weight (out_features, in_features), bias (out_features,).

    Init as torch: weight ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), bias ~ the same U,
    drawn from the seeded generator (``gpugrad.manual_seed``).

    >>> layer = nn.Linear(3, 2)
    >>> layer(gpugrad.ones(4, 3)).shape
    (4, 2)
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = Parameter(empty(out_features, in_features, device=device, dtype=dtype))
        self.register_parameter("bias", Parameter(empty(out_features, device=device, dtype=dtype)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    """y = x (a placeholder; constructor arguments are ignored, as in torch)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    """Collapse axes start_dim..end_dim into one: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split axis ``dim`` into ``unflattened_size``: (N, 12) -> (N, 3, 4) for Unflatten(1, (3, 4))."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        dim = self.dim % input.ndim if input.ndim else 0
        return input.reshape(*input.shape[:dim], *self.unflattened_size, *input.shape[dim + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
