"""Optimizer updates: the one-buffer sgd_update_ / adam_update_ kernels (kernel / hand-written ``xp`` / torch
in-place ops); a whole optimizer step over the MLP's parameters (``gpugrad.optim``: one multi-tensor launch) next to the
hand-written per-tensor loop and ``torch.optim``; and a whole training step with ``zero_grad()`` to None or to
zeros: the trade-off that decided against flat storage (zeroed gradient buffers cost a fill, and backward then accumulates into them instead
of handing its fresh gradients over).

Run: pytest benchmarks/bench_optim.py --benchmark-enable
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad import nn, optim
from gpugrad.backend import get_backend
from gpugrad.bench.workloads.kernels import IMPLS, kernels
from gpugrad.bench.workloads.mlp import MLP_SIZES
from gpugrad.bench.workloads.optim import OPTIM_IMPLS, OPTIMIZERS, optimizer_workload
from gpugrad.nn import functional as F


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", kernels("optim"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", OPTIM_IMPLS)
@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_optimizer_step(bench, benchmark, kind, impl, device):
    sizes = MLP_SIZES if not benchmark.disabled else (20, 32, 32, 10)
    bench(f"optimizer {kind} step, MLP {'-'.join(map(str, sizes))} [{device}]",
          lambda: optimizer_workload(kind, impl, get_backend(device), sizes), device)


def training_step(kind, zero_grad, device, sizes, batch=64):
    """fn() running zero_grad() ("none": to None, "zeros": to zeros in place), forward, backward and step of the
    MLP."""
    gpugrad.manual_seed(0)
    model = nn.MLP(list(sizes), device=device)
    opt = (optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if kind == "sgd"
           else optim.Adam(model.parameters(), lr=1e-3))
    rng = np.random.default_rng(0)
    x = gpugrad.tensor(rng.standard_normal((batch, sizes[0]), dtype=np.float32), device=device)
    t = gpugrad.tensor(rng.integers(0, sizes[-1], batch), device=device)

    def step():
        opt.zero_grad(set_to_none=zero_grad == "none")
        F.cross_entropy(model(x), t).backward()
        opt.step()

    return step


@pytest.mark.parametrize("zero_grad", ["none", "zeros"])
@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_training_step(bench, benchmark, kind, zero_grad, device):
    sizes = MLP_SIZES if not benchmark.disabled else (20, 32, 32, 10)
    bench(f"training step, {kind}, MLP {'-'.join(map(str, sizes))} batch 64 [{device}]",
          lambda: training_step(kind, zero_grad, device, sizes), device)
