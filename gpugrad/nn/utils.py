"""``nn.utils``: gradient clipping and flattening parameters to one vector, as ``torch.nn.utils``.

Nothing here syncs with the device: the clip factor stays a 0-d tensor (unless ``error_if_nonfinite`` asks)."""
from __future__ import annotations

import math

from gpugrad._tensor import Tensor
from gpugrad.core.grad_mode import no_grad
from gpugrad.creation import tensor
from gpugrad.ops.movement import Cat, Stack


def _params(parameters):
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _norm(t, p):
    a = t.abs()
    return a.max() if p == math.inf else a.min() if p == -math.inf else (a ** p).sum() ** (1.0 / p)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale every gradient in place by min(1, max_norm / (total + 1e-6)), total the ``norm_type`` norm of all of
    them together (the norm of the per-gradient norms); returns total (a 0-d tensor)."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    p = float(norm_type)
    with no_grad():
        if not grads:

            return tensor(0.0)
        total = _norm(Stack.stack([_norm(g, p) for g in grads]), p)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"The total norm of order {p} for gradients from `parameters` is non-finite, so it "
                               "cannot be clipped. To disable this error and scale the gradients by the non-finite "
                               "norm anyway, set `error_if_nonfinite=False`")
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(dtype=g.dtype))
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient in place to [-clip_value, clip_value]."""
    with no_grad():
        for p in _params(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters):
    """One 1-D tensor of every parameter, flattened and concatenated in order."""
    return Cat.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-D ``vec`` into the parameters, in order (the inverse of the above)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    offset = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[offset:offset + n].reshape(p.shape))
            offset += n
