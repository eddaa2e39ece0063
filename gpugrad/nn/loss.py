"""Loss layers: ``CrossEntropyLoss`` and ``MSELoss``."""
from __future__ import annotations

from gpugrad.nn import functional as F
from gpugrad.nn.module import Module

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    """-log softmax(logits)[target] per row, reduced by mean | sum | none; logits (N, C), integer target (N,)."""

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, self.reduction)


class MSELoss(_Loss):
    """(input - target)^2, reduced by mean | sum | none."""

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)
