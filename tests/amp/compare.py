"""One comparison of an op's result and gradients with torch's, at a tolerance relative to each array's scale."""
from __future__ import annotations

import numpy as np

import gpugrad


def name(dt):
    """A dtype's name without its module: 'bfloat16' for gpugrad.bfloat16 and torch.bfloat16."""
    return str(dt).rpartition(".")[2]


def _close(got, want, tol):
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def assert_matches_torch(torch, y, ty, ours, theirs, tol, grad_tol):
    """``y`` (from the gpugrad inputs ``ours``) against torch's ``ty`` (from ``theirs``): the dtype, the values within
    ``tol`` of their scale, then the gradients of a random cotangent: dtypes and values within ``grad_tol``."""
    assert name(y.dtype) == name(ty.dtype), f"{y.dtype} vs torch's {ty.dtype}"
    _close(y.detach().float().numpy(), ty.detach().float().numpy(), tol)
    if not ty.requires_grad:
        return
    u = np.random.default_rng(1).standard_normal(tuple(ty.shape))
    y.backward(gpugrad.tensor(u).to(y.dtype))
    ty.backward(torch.tensor(u).to(ty.dtype))
    for a, b in zip(ours, theirs):
        if b.grad is not None:
            assert name(a.grad.dtype) == name(b.grad.dtype)
            _close(a.grad.float().numpy(), b.grad.float().numpy(), grad_tol)
