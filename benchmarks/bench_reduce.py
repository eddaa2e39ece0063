"""Row reductions: softmax, log_softmax, logsumexp (forward and backward), sum_rows, layer_norm.

Kernel groups: ``kernel`` (the launcher the backend runs) / ``baseline`` (hand-written ``xp``) / ``torch``; op
groups: the autograd op forward + backward next to hand-written forward + backward and torch autograd.
Run: pytest benchmarks/bench_reduce.py --benchmark-enable
"""
from __future__ import annotations

import pytest

from gpugrad.bench.workloads.kernels import IMPLS, kernels
from gpugrad.bench.workloads.ops import OP_IMPLS, ops


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", kernels("reduce", "norm"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", OP_IMPLS)
@pytest.mark.parametrize("case", ops("reduce", "norm"), ids=lambda c: c.name)
def test_op_forward_backward(bench_op, case, impl, device):
    bench_op(case, impl, device)
