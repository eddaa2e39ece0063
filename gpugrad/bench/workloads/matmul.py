"""Matmul workloads: the GEMMs of the MLP's hidden layer, forward and backward, against a large square one."""
from __future__ import annotations

import dataclasses

from gpugrad.backend import cublas
from gpugrad.bench.timing import Timing
from gpugrad.bench.workloads.torch_peer import _to_torch, torch_for


@dataclasses.dataclass(frozen=True)
class MatmulCase:
    """``a @ b``, a (m, k) and b (k, n), laid out as gpugrad's Linear has them: ``ta`` / ``tb`` make the operand
    a transposed view (of a C-contiguous (k, m) / (n, k) array), as ``x @ w.T`` and ``gy.T @ x`` pass it to BLAS."""

    name: str
    m: int
    n: int
    k: int
    ta: bool = False
    tb: bool = False

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def operands(self, inputs):
        a = inputs.normal(10, (self.k, self.m)).T if self.ta else inputs.normal(10, (self.m, self.k))
        b = inputs.normal(11, (self.n, self.k)).T if self.tb else inputs.normal(11, (self.k, self.n))
        return a, b


def mlp_matmuls(batch, width=1024):
    """The three GEMMs of the MLP's hidden Linear(width, width) at a batch: forward, grad input, grad weight."""
    return (MatmulCase(f"linear fwd x@Wᵀ b{batch}", batch, width, width, tb=True),
            MatmulCase(f"linear bwd gy@W b{batch}", batch, width, width),
            MatmulCase(f"linear bwd gyᵀ@x b{batch}", width, width, batch, ta=True))


def matmul_workload(case, impl, inputs):
    be, xp = inputs.backend, inputs.xp
    a, b = case.operands(inputs)
    if impl == "kernel" and be.name == "cuda":  # gpugrad's own cuBLAS calls (capturable); the baseline is CuPy's
        return lambda: cublas.matmul(a, b)
    if impl in ("kernel", "baseline"):  # on the CPU gpugrad's matmul *is* xp.matmul (BLAS)
        return lambda: xp.matmul(a, b)
    th, dev = torch_for(be)
    if th is None:
        raise LookupError(dev)
    ta, tb = _to_torch(th, dev, a), _to_torch(th, dev, b)  # NOTE: .T views stay views; torch sees the strides
    return lambda: th.matmul(ta, tb)


def run_matmuls(inputs, timer, peak_n, batches, tick=None):
    """{"peak": the square peak_n GEMM, "cases": the MLP GEMMs with GFLOP/s and the fraction of that peak}; the
    peak GEMM is sampled interleaved with every case, as the copy is with the kernels."""
    peak_case = MatmulCase(f"peak {peak_n}^3", peak_n, peak_n, peak_n)
    peak_fn = matmul_workload(peak_case, "kernel", inputs)
    rows, peak_samples = [], []
    for case in (c for b in batches for c in mlp_matmuls(b)):
        t = timer.many({"gemm": matmul_workload(case, "kernel", inputs), "peak": peak_fn})
        peak_samples += t["peak"].samples
        rows.append({"name": case.name, "m": case.m, "n": case.n, "k": case.k, "flops": case.flops,
                     **t["gemm"].as_dict(), "gflops": case.flops / t["gemm"].median / 1e9})
        if tick:
            tick(case.name)
    peak_t = Timing(tuple(peak_samples))
    peak = {"name": peak_case.name, "m": peak_n, "n": peak_n, "k": peak_n, "flops": peak_case.flops,
            **peak_t.as_dict(), "gflops": peak_case.flops / peak_t.median / 1e9}
    for r in rows:
        r["fraction_of_peak"] = r["gflops"] / peak["gflops"]
    return {"peak": peak, "cases": rows}
