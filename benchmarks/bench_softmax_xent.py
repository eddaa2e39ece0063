"""Softmax cross-entropy: the fused loss kernels (forward: loss and lse; backward: softmax - onehot) and
``F.cross_entropy`` forward + backward, next to hand-written ``xp`` and PyTorch.

Run: pytest benchmarks/bench_softmax_xent.py --benchmark-enable
"""
from __future__ import annotations

import pytest

from gpugrad.bench.workloads.kernels import IMPLS, kernels
from gpugrad.bench.workloads.ops import OP_IMPLS, ops


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", kernels("loss"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", OP_IMPLS)
@pytest.mark.parametrize("case", ops("loss"), ids=lambda c: c.name)
def test_op_forward_backward(bench_op, case, impl, device):
    bench_op(case, impl, device)
