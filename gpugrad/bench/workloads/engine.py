"""Engine overhead against PyTorch's, measured in the same run: the cost of one op on a tiny tensor (forward +
backward, and forward alone), and a long chain that builds a graph of many nodes (``x = x * 1.0001 + 0.0``).

Tiny ops measure what the host spends per op (Python, the graph, the allocator); the long chain adds what a big
graph costs on top (memory, the cyclic garbage collector's passes over live nodes), which short chains never see.
"""
from __future__ import annotations

import gc
import time

import numpy as np

from gpugrad.bench.workloads.torch_peer import torch_for

ELEMENTS = 8  # tiny: the op's own arithmetic is a small part of its cost
CHAIN = 100_000  # ops in the long chain (each iteration is two: a multiply and an add)


def _leaf(impl, backend):
    if impl == "gpugrad":
        import gpugrad

        return gpugrad.tensor(np.ones(ELEMENTS, np.float32), device=backend.device, requires_grad=True)
    th, dev = torch_for(backend)
    if th is None:
        raise LookupError(dev)
    return th.ones(ELEMENTS, device=dev, requires_grad=True)


def tiny_chain(impl, backend, n_ops, backward=True):
    """fn() running ``n_ops`` multiplies of a tiny tensor forward (then backward): the per-op engine cost."""
    x = _leaf(impl, backend)

    def run():
        y = x
        for _ in range(n_ops):
            y = y * 1.0001
        if backward:
            y.sum().backward()
            x.grad = None

    return run


def long_chain(impl, backend, n_ops=CHAIN):
    """(forward seconds, backward seconds) of ``n_ops`` iterations of ``x = x * 1.0001 + 0.0`` (2 ops each), the GC
    left on as a user leaves it."""
    x = _leaf(impl, backend)
    gc.collect()
    t0 = time.perf_counter()
    y = x
    for _ in range(n_ops):
        y = y * 1.0001 + 0.0
    t1 = time.perf_counter()
    y.sum().backward()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def median_run(runs):
    """The (forward, backward) run whose total is the median of ``runs`` (the upper one of an even count)."""
    return sorted(runs, key=sum)[len(runs) // 2]


def run_engine(backend, timer, n_ops, tick=None, chain=None, chain_rounds=1):
    """Per-op cost forward + backward and forward alone (chains of ``n_ops`` tiny multiplies, repeated and
    interleaved by ``timer``), and the long chain of ``chain`` iterations (default: none on CUDA, where the host
    cost is not the measure, else CHAIN), ``chain_rounds`` times per implementation, interleaved (a slow spell of a
    shared machine then falls on both), its median run reported; gpugrad/torch ratios from the same run."""
    out = {"n_ops": n_ops, "us_per_op": {}, "forward_us_per_op": {}, "unavailable": {}}
    fns = {}
    for impl in ("gpugrad", "torch"):
        try:
            fns[impl] = tiny_chain(impl, backend, n_ops)
            fns[impl + ":forward"] = tiny_chain(impl, backend, n_ops, backward=False)
        except LookupError as e:
            out["unavailable"][impl] = str(e)
    for key, t in timer.many(fns).items():
        impl, _, part = key.partition(":")
        out["forward_us_per_op" if part else "us_per_op"][impl] = t.median / n_ops * 1e6
    if tick:
        for impl in ("gpugrad", "torch"):
            tick(f"engine {impl}")
    chain = (0 if backend.name != "cpu" else CHAIN) if chain is None else chain
    if chain:
        out["chain"] = {"iterations": chain, "ops": 2 * chain, "rounds": chain_rounds}
        runs = {impl: [] for impl in ("gpugrad", "torch") if impl not in out["unavailable"]}
        for _ in range(chain_rounds):
            for impl, done in runs.items():
                done.append(long_chain(impl, backend, chain))
        for impl, done in runs.items():
            fwd, bwd = median_run(done)
            out["chain"][impl] = {"forward_s": fwd, "backward_s": bwd, "total_s": fwd + bwd,
                                  "totals_s": [f + b for f, b in done]}
    us, fw, ch = out["us_per_op"], out["forward_us_per_op"], out.get("chain", {})
    out["gpugrad_vs_torch"] = us["gpugrad"] / us["torch"] if "torch" in us else None
    out["forward_gpugrad_vs_torch"] = fw["gpugrad"] / fw["torch"] if "torch" in fw else None
    out["chain_gpugrad_vs_torch"] = (ch["gpugrad"]["total_s"] / ch["torch"]["total_s"]
                                     if "gpugrad" in ch and "torch" in ch else None)
    return out
