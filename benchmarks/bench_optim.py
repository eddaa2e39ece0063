"""Optimizer updates: the fused sgd_update_ / adam_update_ kernels on one flat buffer (kernel / hand-written
``xp`` / torch in-place ops), and a whole optimizer step over the MLP's parameters: ``gpugrad.optim`` per tensor
and ``flat=True`` (one launch per buffer), the hand-written per-tensor loop, and ``torch.optim``.

Run: pytest benchmarks/bench_optim.py --benchmark-enable
"""
from __future__ import annotations

import pytest

from gpugrad.backend import get_backend
from gpugrad.bench import suites


@pytest.mark.parametrize("impl", suites.IMPLS)
@pytest.mark.parametrize("case", suites.kernels("optim"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", suites.OPTIM_IMPLS)
@pytest.mark.parametrize("kind", suites.OPTIMIZERS)
def test_optimizer_step(bench, benchmark, kind, impl, device):
    sizes = suites.MLP_SIZES if not benchmark.disabled else (20, 32, 32, 10)
    bench(f"optimizer {kind} step, MLP {'-'.join(map(str, sizes))} [{device}]",
          lambda: suites.optimizer_workload(kind, impl, get_backend(device), sizes), device)
