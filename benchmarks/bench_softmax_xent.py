"""Softmax cross-entropy: the fused loss kernels (forward: loss and lse; backward: softmax - onehot) and
``F.cross_entropy`` forward + backward, next to hand-written ``xp`` and PyTorch.

Run: pytest benchmarks/bench_softmax_xent.py --benchmark-enable
"""
from __future__ import annotations

import pytest

from gpugrad.bench import suites


@pytest.mark.parametrize("impl", suites.IMPLS)
@pytest.mark.parametrize("case", suites.kernels("loss"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", suites.OP_IMPLS)
@pytest.mark.parametrize("case", suites.ops("loss"), ids=lambda c: c.name)
def test_op_forward_backward(bench_op, case, impl, device):
    bench_op(case, impl, device)
