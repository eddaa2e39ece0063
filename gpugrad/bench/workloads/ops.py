"""Op workloads: autograd ops forward and backward (the graph built from leaves each call, as a training step
builds it), against the hand-written forward and backward and PyTorch autograd."""
from __future__ import annotations

import dataclasses
from typing import Callable

from gpugrad.backend import reference
from gpugrad.bench.workloads import baselines as B
from gpugrad.bench.workloads.kernels import layer_norm_inputs, one_input
from gpugrad.bench.workloads.torch_peer import _to_torch, torch_for

OP_IMPLS = ("gpugrad", "baseline", "torch")


@dataclasses.dataclass(frozen=True)
class OpCase:
    """An autograd op: ``make(xp, inputs)`` -> arguments (arrays, then non-array ones); ``grad`` the indices of
    arrays that require grad; ``gg(*tensors)`` / ``torch(th, *tensors)`` the forward; ``baseline(xp, *args, gy)``
    the hand-written forward and, when gy is not None, backward: returns (y, grads)."""

    name: str
    family: str
    make: Callable
    gg: Callable
    torch: Callable
    baseline: Callable
    grad: tuple = (0,)


def _unary_base(fwd, bwd_from_y):
    def base(xp, x, gy):
        y = fwd(xp, x)
        return y, (None if gy is None else (bwd_from_y(xp, x, y, gy),))
    return base


def _ce_base(xp, x, t, gy):
    n = x.shape[0]
    lse = B.logsumexp(xp, x)
    loss = (lse - x[xp.arange(n), t]).mean()
    if gy is None:
        return loss, None
    return loss, (B.xent_bwd(xp, x, t, lse, xp.full((n,), gy / n, dtype=x.dtype)),)


def _ln_op_base(xp, x, w, b, gy):
    y, mean, rstd = B.layer_norm(xp, x, w, b, 1e-5)
    return y, (None if gy is None else B.layer_norm_bwd(xp, x, w, mean, rstd, gy))


def _matmul_base(xp, a, b, gy):
    y = a @ b
    return y, (None if gy is None else (gy @ b.T, a.T @ gy))


def _linear_base(xp, x, w, b, gy):
    y = x @ w.T
    y += b
    return y, (None if gy is None else (gy @ w, gy.T @ x, gy.sum(axis=0)))


def _F():
    import gpugrad.nn.functional as F

    return F


OPS = (
    OpCase("relu", "elementwise", one_input, lambda x: x.relu(), lambda th, x: th.relu(x),
           _unary_base(B.reference_of("relu_fwd"), lambda xp, x, y, gy: reference.relu_bwd(xp, y, gy))),
    OpCase("gelu", "elementwise", one_input, lambda x: x.gelu(approximate="tanh"),
           lambda th, x: th.nn.functional.gelu(x, approximate="tanh"),
           _unary_base(B.reference_of("gelu_fwd"), lambda xp, x, y, gy: reference.gelu_bwd(xp, x, gy))),
    OpCase("sigmoid", "elementwise", one_input, lambda x: x.sigmoid(), lambda th, x: th.sigmoid(x),
           _unary_base(B.reference_of("sigmoid_fwd"), lambda xp, x, y, gy: reference.sigmoid_bwd(xp, y, gy))),
    OpCase("tanh", "elementwise", one_input, lambda x: x.tanh(), lambda th, x: th.tanh(x),
           _unary_base(B.reference_of("tanh_fwd"), lambda xp, x, y, gy: reference.tanh_bwd(xp, y, gy))),
    OpCase("bias_act[relu]", "elementwise", lambda xp, s: (s.normal(0), s.vector(0)),
           lambda x, b: _F().bias_act(x, b, "relu"), lambda th, x, b: th.relu(x + b),
           lambda xp, x, b, gy: (lambda y: (y, None if gy is None else B.bias_relu_bwd(xp, y, gy, "relu")))(
               xp.maximum(x + b, 0)), grad=(0, 1)),
    OpCase("softmax", "reduce", one_input, lambda x: x.softmax(-1), lambda th, x: th.softmax(x, -1),
           _unary_base(B.softmax, lambda xp, x, y, gy: B.softmax_bwd(xp, y, gy))),
    OpCase("log_softmax", "reduce", one_input, lambda x: x.log_softmax(-1), lambda th, x: th.log_softmax(x, -1),
           _unary_base(B.log_softmax,
                       lambda xp, x, y, gy: gy - xp.exp(y) * gy.sum(axis=1, keepdims=True))),
    OpCase("logsumexp", "reduce", one_input, lambda x: x.logsumexp(-1), lambda th, x: th.logsumexp(x, -1),
           _unary_base(B.logsumexp, lambda xp, x, y, gy: xp.exp(x - y[:, None]) * gy[:, None])),
    OpCase("sum(axis=0)", "reduce", one_input, lambda x: x.sum(axis=0), lambda th, x: x.sum(0),
           _unary_base(lambda xp, x: x.sum(axis=0), lambda xp, x, y, gy: xp.broadcast_to(gy, x.shape))),
    OpCase("layer_norm", "norm", lambda xp, s: layer_norm_inputs(xp, s)[:3],
           lambda x, w, b: _F().layer_norm(x, x.shape[-1], w, b),
           lambda th, x, w, b: th.nn.functional.layer_norm(x, (x.shape[-1],), w, b), _ln_op_base, grad=(0, 1, 2)),
    OpCase("cross_entropy", "loss", lambda xp, s: (s.normal(0), s.targets()),
           lambda x, t: _F().cross_entropy(x, t), lambda th, x, t: th.nn.functional.cross_entropy(x, t), _ce_base),
    OpCase("matmul", "matmul", lambda xp, s: (s.normal(0), s.normal(1, (s.cols, s.cols))),
           lambda a, b: a @ b, lambda th, a, b: a @ b, _matmul_base, grad=(0, 1)),
    OpCase("linear", "matmul", lambda xp, s: (s.normal(0), s.normal(1, (s.cols, s.cols)), s.vector(2)),
           lambda x, w, b: _F().linear(x, w, b), lambda th, x, w, b: th.nn.functional.linear(x, w, b),
           _linear_base, grad=(0, 1, 2)),
)
OP_BY_NAME = {c.name: c for c in OPS}


def ops(*families):
    return [c for c in OPS if not families or c.family in families]


def op_workload(case, impl, inputs):
    """fn() running the op forward, then backward with a ones upstream gradient, building the graph from leaves
    that require grad each call as a training step does; raises LookupError when unavailable here."""
    import gpugrad

    be, xp = inputs.backend, inputs.xp
    args = case.make(xp, inputs)
    if impl == "baseline":
        y, _ = case.baseline(xp, *args, None)
        gy = xp.ones_like(y) if y.ndim else 1.0
        return lambda: case.baseline(xp, *args, gy)
    if impl == "gpugrad":
        ts = [gpugrad.tensor(a, device=be.device, requires_grad=i in case.grad) if hasattr(a, "shape") else a
              for i, a in enumerate(args)]
        leaves = [ts[i] for i in case.grad]
        y = case.gg(*ts)
        gy = gpugrad.tensor(xp.ones_like(y.detach()._data), device=be.device) if y.ndim else None

        def run():
            y = case.gg(*ts)
            y.backward(gy)
            for t in leaves:
                t.grad = None
            return y

        return run
    if impl == "torch":
        th, dev = torch_for(be)
        if th is None:
            raise LookupError(dev)
        ts = [_to_torch(th, dev, a) for a in args]
        for i in case.grad:
            ts[i] = ts[i].detach().clone().requires_grad_(True)
        leaves = [ts[i] for i in case.grad]
        y = case.torch(th, *ts)
        gy = th.ones_like(y) if y.ndim else None

        def run_torch():
            y = case.torch(th, *ts)
            y.backward(gy)
            for t in leaves:
                t.grad = None
            return y

        return run_torch
    raise ValueError(f"unknown implementation {impl!r}; expected one of {OP_IMPLS}")
