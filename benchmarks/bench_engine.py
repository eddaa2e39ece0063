"""Engine overhead: microseconds per op (forward + backward) on tiny tensors, and long chains.

The per-op figure is (time of a chain of N tiny multiplies, forward + backward) / N, next to PyTorch eager
doing the same when it is installed, and to a plain NumPy loop doing the arithmetic without any autograd.
Run: pytest benchmarks/bench_engine.py --benchmark-enable
"""
from __future__ import annotations

import numpy as np
import pytest

from gpugrad.backend import get_backend
from gpugrad.bench.workloads.engine import CHAIN, long_chain, tiny_chain

N_TINY = 1000


def gpugrad_chain(n):
    return tiny_chain("gpugrad", get_backend("cpu"), n)


def numpy_chain(n):
    x = np.ones(4, np.float32)

    def run():
        y, g = x, np.ones(4, np.float32)
        for _ in range(n):
            y = y * np.float32(1.0001)
        for _ in range(n):
            g = g * np.float32(1.0001)
        return g

    return run


@pytest.mark.parametrize("impl", ["numpy", "gpugrad", "torch"])
def test_tiny_op_overhead(benchmark, impl):
    """1,000 tiny multiplies forward + backward; divide the time by 1,000 for µs per op."""
    benchmark.group = "engine-tiny-ops-x1000"
    if impl == "torch":
        torch = pytest.importorskip("torch")
        torch.set_num_threads(1)
        benchmark(tiny_chain("torch", get_backend("cpu"), N_TINY))
    else:
        benchmark({"numpy": numpy_chain, "gpugrad": gpugrad_chain}[impl](N_TINY))


@pytest.mark.parametrize("impl", ["gpugrad", "torch"])
def test_tiny_op_forward(benchmark, impl):
    """1,000 tiny multiplies, forward alone (the graph is recorded, no backward); divide by 1,000 for µs per op."""
    benchmark.group = "engine-tiny-ops-forward-x1000"
    if impl == "torch":
        pytest.importorskip("torch").set_num_threads(1)
    benchmark(tiny_chain(impl, get_backend("cpu"), N_TINY, backward=False))


@pytest.mark.parametrize("impl", ["gpugrad", "torch"])
def test_chain_of_100k_ops_against_torch(benchmark, impl):
    """x = x * 1.0001 + 0.0, 100,000 times (200,000 ops), forward then backward, the GC on: what a big graph costs
    beyond its ops (gpugrad bench's engine section reports the forward and backward split and the ratio)."""
    benchmark.group = "engine-chain-100k"
    if impl == "torch":
        pytest.importorskip("torch").set_num_threads(1)
    benchmark.pedantic(lambda: long_chain(impl, get_backend("cpu"), CHAIN), rounds=3, iterations=1)


@pytest.mark.parametrize("length", [10_000, 100_000])
def test_long_chain(benchmark, length):
    """Backward through a long chain: must not recurse, and time should grow linearly with length."""
    benchmark.group = "engine-chain"
    benchmark.pedantic(gpugrad_chain(length), rounds=3, iterations=1)
