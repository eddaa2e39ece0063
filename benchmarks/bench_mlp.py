"""MLP training step (784-1024-1024-10, ReLU, cross-entropy, SGD, float32): gpugrad next to the hand-written
baseline (NumPy on the CPU, CuPy on CUDA) and PyTorch eager, in one run.

On CUDA, gpugrad's step also runs as a CUDA graph (gpugrad_graph: captured once after a warm-up step, replayed)
at batch 64, 512 and 4096, next to PyTorch CUDA eager in the same run.

Run: pytest benchmarks/bench_mlp.py --benchmark-enable
Targets: gpugrad within 1.10x of the NumPy step at batch 512 (the ratio at batch 64 is reported too); on CUDA,
batch 4096 no slower than PyTorch eager.  The workloads are gpugrad.bench.workloads.mlp.mlp_steps, as in `gpugrad bench`.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpugrad.backend import get_backend
from gpugrad.bench.workloads.mlp import MLP_IMPLS, mlp_steps

# NOTE: CUDA graphs exist only on CUDA, so the cpu cases leave gpugrad_graph out rather than skip it
CASES = [pytest.param(device, batch, impl, id=f"{device}-{batch}-{impl}",
                      marks=[pytest.mark.gpu] if device == "cuda" else [])
         for device, batches in (("cpu", (64, 512)), ("cuda", (64, 512, 4096))) for batch in batches
         for impl in MLP_IMPLS if device == "cuda" or impl != "gpugrad_graph"]


@pytest.mark.parametrize("device,batch,impl", CASES)
def test_mlp_step(benchmark, device, batch, impl):
    steps = mlp_steps(get_backend(device), batch, impls=(impl,))
    if isinstance(steps[impl], str):
        pytest.skip(steps[impl])
    sync = get_backend(device).xp.cuda.Device().synchronize if device == "cuda" else (lambda: None)

    def step():
        steps[impl]()
        sync()

    benchmark.group = f"mlp-step-{device}-b{batch}"
    benchmark(step)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_steps_compute_the_same_thing(device):
    """The benchmark compares like with like: every step (graph replay included) gives the same losses from the
    same start."""
    steps = mlp_steps(get_backend(device), 64)
    assert isinstance(steps["gpugrad_graph"], str) is (device == "cpu")
    def value(loss):  # a NumPy/CuPy 0-d array, a gpugrad tensor or a torch tensor
        return float(loss.detach() if hasattr(loss, "detach") else loss)

    losses = {k: [value(s()) for _ in range(3)] for k, s in steps.items() if not isinstance(s, str)}
    for impl, got in losses.items():
        np.testing.assert_allclose(got, losses["baseline"], rtol=2e-5, err_msg=impl)
    assert losses["baseline"][2] < losses["baseline"][0]
