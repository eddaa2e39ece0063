"""Matrix products: the three GEMMs of the MLP's hidden Linear(1024, 1024) (forward x@Wᵀ, grad input gy@W, grad
weight gyᵀ@x) as gpugrad runs them (``xp.matmul``: BLAS / cuBLAS) next to ``torch.matmul``, and the ``matmul`` and
``linear`` ops forward + backward next to hand-written ``xp`` and torch autograd, and Linear's short-batch product
order against NumPy's direct one. extra_info carries GFLOP/s.

Run: pytest benchmarks/bench_matmul.py --benchmark-enable
"""
from __future__ import annotations

import numpy as np
import pytest

from gpugrad.backend.reference import matmul_nt
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


@pytest.mark.parametrize("order", ["direct", "linear"])
@pytest.mark.parametrize("m, k", [(8, 1024), (32, 784), (64, 784), (64, 1024)])
def test_short_batch_linear(bench, benchmark, m, k, order):
    # The CPU rule of backend/reference/float16.py (matmul_nt): a short float32 batch against a wide weight as (w @ xᵀ)ᵀ copied to rows
    # ("linear", what Linear runs) next to NumPy's direct x @ wᵀ; a ratio above 1 on a CPU says the rule is wrong there
    rng = np.random.default_rng(m)
    x, w = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((1024, k), dtype=np.float32)
    run = (lambda: x @ w.T) if order == "direct" else (lambda: matmul_nt(x, w))
    bench(f"linear x@Wᵀ m{m} k{k} n1024 [cpu]", lambda: run, "cpu", flops=2 * m * k * 1024)
