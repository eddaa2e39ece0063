"""Elementwise kernels and ops: relu, gelu, sigmoid, tanh (forward and backward), bias_act, dropout, accumulate_.

Kernel groups: the launcher the backend runs (``kernel``: the NumPy reference on the CPU, the CUDA kernel on CUDA),
the same math hand-written against ``xp`` (``baseline``) and PyTorch eager (``torch``). Op groups: the autograd op
forward + backward (``gpugrad``, e.g. ``x.relu()`` then ``backward``) next to hand-written forward + backward and
torch autograd. Workloads live in gpugrad/bench/workloads/, shared with ``gpugrad bench``.
Run: pytest benchmarks/bench_elementwise.py --benchmark-enable   (CI: --benchmark-disable, tiny sizes, one call each)
"""
from __future__ import annotations

import pytest

from gpugrad.bench.workloads.kernels import IMPLS, kernels
from gpugrad.bench.workloads.ops import OP_IMPLS, ops


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", kernels("elementwise"), ids=lambda c: c.id)
def test_kernel(bench_kernel, case, impl, device):
    bench_kernel(case, impl, device)


@pytest.mark.parametrize("impl", OP_IMPLS)
@pytest.mark.parametrize("case", ops("elementwise"), ids=lambda c: c.name)
def test_op_forward_backward(bench_op, case, impl, device):
    bench_op(case, impl, device)
