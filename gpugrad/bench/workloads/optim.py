"""Optimizer workloads: one step over the MLP's parameters with fixed gradients (gpugrad's multi-tensor step,
the hand-written per-tensor update, torch.optim)."""
from __future__ import annotations

import numpy as np

from gpugrad.bench.workloads import baselines as B
from gpugrad.bench.workloads.mlp import MLP_SIZES
from gpugrad.bench.workloads.torch_peer import torch_for

OPTIMIZERS = ("sgd", "adam")
OPTIM_IMPLS = ("gpugrad", "baseline", "torch")


def optimizer_workload(kind, impl, backend, sizes=MLP_SIZES, seed=0):
    """fn() running one optimizer step over the MLP's parameters with fixed gradients: "sgd" (momentum 0.9, lr
    0.01) or "adam" (lr 1e-3); gpugrad's optimizer (one multi-tensor launch), the hand-written per-tensor update, or torch.optim. Raises LookupError when the implementation is unavailable."""
    rng = np.random.default_rng(seed)
    shapes = [s for fan_in, fan_out in zip(sizes[:-1], sizes[1:]) for s in ((fan_out, fan_in), (fan_out,))]
    host = [(rng.standard_normal(s, dtype=np.float32), rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    if impl.startswith("gpugrad"):
        import gpugrad

        try:
            from gpugrad import optim
        except ImportError as e:
            raise LookupError(f"gpugrad.optim is not importable: {e}") from None
        params = []
        for p, g in host:
            t = gpugrad.tensor(p, device=backend.device, requires_grad=True)
            t.grad = gpugrad.tensor(g, device=backend.device)
            params.append(t)
        opt = optim.SGD(params, lr=0.01, momentum=0.9) if kind == "sgd" else optim.Adam(params, lr=1e-3)
        return opt.step
    if impl == "baseline":
        xp = backend.xp
        ps = [(backend.asarray(p), backend.asarray(g)) for p, g in host]
        if kind == "sgd":
            bufs = [xp.zeros_like(p) for p, _ in ps]
            return lambda: [B.sgd_momentum(xp, p, g, b, 0.01, 0.9, 0.0, 0.0, False, False) for (p, g), b in zip(ps, bufs)]
        ms, vs, step = [xp.zeros_like(p) for p, _ in ps], [xp.zeros_like(p) for p, _ in ps], [0]

        def adam():
            step[0] += 1
            for (p, g), m, v in zip(ps, ms, vs):
                B.adam(xp, p, g, m, v, step[0], 1e-3, 0.9, 0.999, 1e-8, 0.0, False)
        return adam
    if impl == "torch":
        th, dev = torch_for(backend)
        if th is None:
            raise LookupError(dev)
        params = []
        for p, g in host:
            t = th.tensor(p, device=dev, requires_grad=True)
            t.grad = th.tensor(g, device=dev)
            params.append(t)
        opt = th.optim.SGD(params, lr=0.01, momentum=0.9) if kind == "sgd" else th.optim.Adam(params, lr=1e-3)
        return opt.step
    raise ValueError(f"unknown implementation {impl!r}; expected one of {OPTIM_IMPLS}")
