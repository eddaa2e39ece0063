"""Engine overhead: a chain of tiny multiplies forward and backward, per op, against PyTorch's."""
from __future__ import annotations

import numpy as np

from gpugrad.bench.workloads.torch_peer import torch_for


def tiny_chain(impl, backend, n_ops):
    """fn() running ``n_ops`` multiplies of a 4-element tensor forward, then backward: the per-op engine cost."""
    if impl == "gpugrad":
        import gpugrad

        x = gpugrad.tensor(np.ones(4, np.float32), device=backend.device, requires_grad=True)
    else:
        th, dev = torch_for(backend)
        if th is None:
            raise LookupError(dev)
        x = th.ones(4, device=dev, requires_grad=True)

    def run():
        y = x
        for _ in range(n_ops):
            y = y * 1.0001
        y.sum().backward()
        x.grad = None

    return run


def run_engine(backend, timer, n_ops, tick=None):
    out = {"n_ops": n_ops, "us_per_op": {}, "unavailable": {}}
    fns = {}
    for impl in ("gpugrad", "torch"):
        try:
            fns[impl] = tiny_chain(impl, backend, n_ops)
        except LookupError as e:
            out["unavailable"][impl] = str(e)
    for impl, t in timer.many(fns).items():
        out["us_per_op"][impl] = t.median / n_ops * 1e6
    if tick:
        for impl in ("gpugrad", "torch"):
            tick(f"engine {impl}")
    us = out["us_per_op"]
    out["gpugrad_vs_torch"] = us["gpugrad"] / us["torch"] if "torch" in us else None
    return out
