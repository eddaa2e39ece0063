"""What anomaly mode (gpugrad.autograd.detect_anomaly) costs: the MLP training step (784-1024-1024-10, ReLU,
cross-entropy, SGD, float32; gpugrad.bench.workloads.mlp.mlp_steps) with it on and off.

    python benchmarks/bench_anomaly.py [--repeats 101] [--steps 2]     # CPU ratios; launches/syncs on a (simulated) GPU
    pytest benchmarks/bench_anomaly.py --benchmark-enable              # the two steps side by side

The ratio is the median over repeats of (time of ``steps`` steps on) / (time of ``steps`` steps off), run back to
back in alternating order: drift cancels out of each ratio, and the median drops the repeats another process
disturbed (a short block, many repeats: the shared 2-core VMs are noisy).
"""
from __future__ import annotations

import argparse
import statistics
import time

import pytest

from gpugrad import autograd
from gpugrad.backend import get_backend
from gpugrad.bench.workloads.mlp import mlp_steps


def _step(device, batch):
    step = mlp_steps(get_backend(device), batch, impls=("gpugrad",))["gpugrad"]
    sync = get_backend(device).xp.cuda.Device().synchronize if device == "cuda" else (lambda: None)

    def run(anomaly):
        with autograd.set_detect_anomaly(anomaly):  # the forward too: it records where each node was made
            step()
        sync()

    return run


@pytest.mark.parametrize("anomaly", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("batch", [64, 512])
def test_mlp_step(benchmark, device, batch, anomaly):
    run = _step(device, batch)
    benchmark.group = f"anomaly-mlp-step-{device}-b{batch}"
    benchmark(run, anomaly)


def ratio(device, batch, repeats, steps):
    run = _step(device, batch)
    for anomaly in (True, False):
        run(anomaly)  # warm-up: gradient buffers, the flags array
    ratios = []
    for r in range(repeats):
        times = {}
        for anomaly in ((True, False) if r % 2 else (False, True)):
            t0 = time.perf_counter()
            for _ in range(steps):
                run(anomaly)
            times[anomaly] = time.perf_counter() - t0
        ratios.append(times[True] / times[False])
    return statistics.median(ratios), min(ratios), max(ratios)


def device_counts(batch):
    """Launches and syncs of one step, anomaly off and on, on the simulated device (GPUGRAD_CUDA_SIM=1)."""
    from gpugrad.testing import cuda_sim

    run, out = _step("cuda", batch), {}
    for anomaly in (False, True):
        run(anomaly)
        cuda_sim.reset_counters()
        with autograd.set_detect_anomaly(anomaly):
            run(anomaly)
        out[anomaly] = {k: cuda_sim.counters()[k] for k in ("launches", "syncs", "allocs")}
    return out


def main():
    import gpugrad
    from gpugrad.testing import cuda_sim

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=101)
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    for batch in (64, 512):
        med, lo, hi = ratio("cpu", batch, args.repeats, args.steps)
        print(f"cpu batch {batch}: step with anomaly mode / without = {med:.3f}x (min {lo:.3f}, max {hi:.3f})")
    if gpugrad.cuda.is_available():
        for batch in (64, 512):
            if cuda_sim.enabled():
                print(f"simulated cuda batch {batch}: off/on {device_counts(batch)}")
            else:
                med, lo, hi = ratio("cuda", batch, args.repeats, args.steps)
                print(f"cuda batch {batch}: {med:.3f}x (min {lo:.3f}, max {hi:.3f})")


if __name__ == "__main__":
    main()
