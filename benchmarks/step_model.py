"""A model of the MLP training step on an H200, on paper, from counts measured on the simulated device.

    GPUGRAD_CUDA_SIM=1 python benchmarks/step_model.py          # prints the README's table

The step is 784-1024-1024-10 ReLU, cross-entropy, SGD-momentum, float32 (no TF32, as CuPy's and PyTorch's
defaults). Per step it measures, with ``gpugrad.testing.cuda_sim``: kernel launches, host syncs and gpugrad graph
nodes. Then, with the constants below (public H200 figures and typical host costs, all stated, none measured on
a GPU here), it models:

- host time, eager: launches x HOST_PER_LAUNCH (CuPy's Python + driver per launch) + nodes x HOST_PER_NODE (gpugrad's
  forward + backward bookkeeping per op); graph replay: one GRAPH_LAUNCH;
- device time: GEMM flops / (FP32 peak x an efficiency for the batch) + bytes / (HBM bandwidth x 0.85) + one
  LAUNCH_GAP per kernel (back-to-back kernels never start instantly; smaller inside a graph);
- step time: max(host, device) when the step has no sync (the host queues ahead), host + device when it syncs.

Check it against real figures whenever a GPU is lent: ``scripts/gpu-check.sh`` measures the same step.
"""
from __future__ import annotations

import os
import sys

FP32_PEAK = 67e12  # H200 SXM FP32 (non-tensor-core) FLOP/s
HBM = 4.8e12  # H200 HBM3e bytes/s
GEMM_EFFICIENCY = {64: 0.25, 512: 0.6, 4096: 0.8}  # cuBLAS FP32 SGEMM fraction of peak at these M (typical)
HOST_PER_LAUNCH = 8e-6  # CuPy: argument processing + cuLaunchKernel for a cached kernel (6-25 us reported)
HOST_PER_NODE = 10e-6  # gpugrad: Op.apply + its backward node, measured ~5 us/op on a 2-core VM, doubled for CuPy
LAUNCH_GAP = {"eager": 2.5e-6, "graph": 1.0e-6}  # idle device time between consecutive kernels
GRAPH_LAUNCH = 10e-6  # cudaGraphLaunch host time
TORCH = {"launches": 23, "host_per_launch": 6e-6}  # PyTorch eager: its launches (foreach SGD) and per-op host cost
SIZES = (784, 1024, 1024, 10)
BEFORE = {64: (36, 2), 512: (39, 2), 4096: (39, 2)}  # launches and syncs before issue 9 (measured on the simulator)


def flops(batch):
    mm = sum(a * b for a, b in zip(SIZES[:-1], SIZES[1:]))
    return 2 * batch * (3 * mm - SIZES[0] * SIZES[1])  # forward, gW for all, gX for all but the first layer


def traffic(batch):
    params = sum(a * b + b for a, b in zip(SIZES[:-1], SIZES[1:]))
    acts = batch * sum(SIZES[1:])
    # weights read forward and backward, gradients written, SGD reads p, g, buf and writes p, buf; activations
    # written forward, read by the activation backward and by gW/gX, gradients of activations written and read
    return 4 * (params * (2 + 1 + 5) + acts * 6 + batch * SIZES[0] * 2)


def measure(batch):
    import gpugrad
    import gpugrad.nn as nn
    import gpugrad.nn.functional as F
    from gpugrad.core.engine import toposort
    from gpugrad.testing import cuda_sim

    gpugrad.manual_seed(0)
    model = nn.MLP(list(SIZES)).to("cuda")
    opt = gpugrad.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, t = gpugrad.randn(batch, SIZES[0], device="cuda"), gpugrad.randint(0, SIZES[-1], size=(batch,), device="cuda")
    nodes = []

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), t)
        nodes[:] = toposort([loss.grad_fn])
        loss.backward()
        opt.step()

    step()
    cuda_sim.reset_counters()
    step()
    c = cuda_sim.counters()
    return c["launches"], c["syncs"], len(nodes)


def model(batch, launches, syncs, nodes, mode):
    gemm = flops(batch) / (FP32_PEAK * GEMM_EFFICIENCY[batch])
    device = gemm + traffic(batch) / (HBM * 0.85) + launches * LAUNCH_GAP[mode]
    host = GRAPH_LAUNCH if mode == "graph" else launches * HOST_PER_LAUNCH + nodes * HOST_PER_NODE
    return (host + device if syncs else max(host, device)), host, device


def main():
    if not os.environ.get("GPUGRAD_CUDA_SIM"):
        sys.exit("run on the simulated device: GPUGRAD_CUDA_SIM=1 python benchmarks/step_model.py")
    print("| batch | gpugrad launches / syncs / nodes | host, eager | device | before (36-39 launches, 2 syncs) "
          "| **gpugrad eager** | **graph replay** | PyTorch eager | eager vs PyTorch | graph vs PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for batch in GEMM_EFFICIENCY:
        launches, syncs, nodes = measure(batch)
        eager, host, device = model(batch, launches, syncs, nodes, "eager")
        graph, _, _ = model(batch, launches, syncs, nodes, "graph")
        t_host = TORCH["launches"] * TORCH["host_per_launch"]
        t_dev = model(batch, TORCH["launches"], 0, 0, "eager")[2]
        torch = max(t_host, t_dev)
        before = model(batch, *BEFORE[batch], nodes, "eager")[0]
        print(f"| {batch} | {launches} / {syncs} / {nodes} | {host * 1e6:.0f} µs | {device * 1e6:.0f} µs | "
              f"{before * 1e6:.0f} µs | "
              f"{eager * 1e6:.0f} µs | {graph * 1e6:.0f} µs | {torch * 1e6:.0f} µs | {eager / torch:.2f}x | "
              f"{graph / torch:.2f}x |")


if __name__ == "__main__":
    main()
