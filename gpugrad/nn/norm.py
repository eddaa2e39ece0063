"""``LayerNorm``, ``BatchNorm1d`` and ``BatchNorm2d``."""
from __future__ import annotations

import numpy as np

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


class _BatchNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias per channel (axis 1), statistics over every other axis.

    Training: the batch's statistics normalize, and with ``track_running_stats`` the buffers running_mean /
    running_var (unbiased, as torch) follow them: running = (1 - momentum) running + momentum batch, or their
    cumulative average when ``momentum=None``. Eval (``.eval()``): the running statistics normalize (the batch's
    when not tracked)."""

    dims = ()  # the input ranks the layer takes

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = dict(device=device, dtype=dtype)
        self.register_parameter("weight", Parameter(ones(num_features, **kw)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(num_features, **kw)) if affine and bias else None)
        for name, value in (("running_mean", zeros), ("running_var", ones), ("num_batches_tracked", None)):
            buf = None if not track_running_stats else value(num_features, **kw) if value else \
                zeros((), dtype=np.int64, device=device)
            self.register_buffer(name, buf)

    def reset_running_stats(self):
        if self.track_running_stats:
            for buf, v in ((self.running_mean, 0), (self.running_var, 1), (self.num_batches_tracked, 0)):
                buf.fill_(v)

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            self.weight.data.fill_(1)
            if self.bias is not None:
                self.bias.data.fill_(0)

    def forward(self, input):
        if input.ndim not in self.dims:
            raise ValueError(f"expected {' or '.join(f'{d}D' for d in self.dims)} input (got {input.ndim}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        training = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, training, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) inputs."""
    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) inputs."""
    dims = (4,)
