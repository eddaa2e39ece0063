"""Row reductions: softmax, log_softmax, logsumexp (forward and backward), sum_rows, layer_norm.

Kernel groups: ``kernel`` (the launcher the backend runs) / ``baseline`` (hand-written ``xp``) / ``torch``; op
groups: the autograd op forward + backward next to hand-written forward + backward and torch autograd.
Run: pytest benchmarks/bench_reduce.py --benchmark-enable
"""
from __future__ import annotations

import pytest

from gpugrad.bench import suites


@pytest.mark.parametrize("impl", suites.IMPLS)
@pytest.mark.parametrize("case", suites.kernels("reduce", "norm"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", suites.OP_IMPLS)
@pytest.mark.parametrize("case", suites.ops("reduce", "norm"), ids=lambda c: c.name)
def test_op_forward_backward(bench_op, case, impl, device):
    bench_op(case, impl, device)
