"""Matrix products: the three GEMMs of the MLP's hidden Linear(1024, 1024) (forward x@Wᵀ, grad input gy@W, grad
weight gyᵀ@x) as gpugrad runs them (``xp.matmul``: BLAS / cuBLAS) next to ``torch.matmul``, and the ``matmul`` and
``linear`` ops forward + backward next to hand-written ``xp`` and torch autograd. extra_info carries GFLOP/s.

Run: pytest benchmarks/bench_matmul.py --benchmark-enable
"""
from __future__ import annotations

import pytest

from gpugrad.bench.workloads.inputs import shared_inputs
from gpugrad.bench.workloads.matmul import matmul_workload, mlp_matmuls
from gpugrad.bench.workloads.ops import OP_IMPLS, ops


def _gemms(enabled, device):
    if not enabled:
        return mlp_matmuls(32, width=64)
    return mlp_matmuls(4096 if device == "cuda" else 512)


@pytest.mark.parametrize("impl", ["kernel", "torch"])  # gpugrad's matmul *is* xp.matmul: no separate baseline
@pytest.mark.parametrize("which", range(3), ids=["fwd", "grad_x", "grad_w"])
def test_gemm(bench, benchmark, which, impl, device):
    case = _gemms(not benchmark.disabled, device)[which]
    inputs = shared_inputs(device, 1, 1)
    bench(f"gemm {case.name} [{device}]", lambda: matmul_workload(case, impl, inputs), device,
          flops=case.flops)


@pytest.mark.parametrize("impl", OP_IMPLS)
@pytest.mark.parametrize("case", ops("matmul"), ids=lambda c: c.name)
def test_op_forward_backward(bench_op, benchmark, case, impl, device):
    # (batch, features) inputs against a (features, features) weight: the MLP's hidden layer when enabled
    bench_op(case, impl, device, shape=(512, 1024) if not benchmark.disabled else (32, 64))
