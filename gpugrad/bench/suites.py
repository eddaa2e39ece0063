"""A ``gpugrad bench`` run of one device: which sections it measures (kernels, matmul, MLP, engine; the
workloads live in ``gpugrad.bench.workloads``), at which sizes, and the JSON-ready result, reported after every
section so that a run cut short keeps what finished."""
from __future__ import annotations

import dataclasses

from gpugrad.backend import get_backend
from gpugrad.bench.timing import timer_for
from gpugrad.bench.workloads.engine import run_engine
from gpugrad.bench.workloads.inputs import Inputs
from gpugrad.bench.workloads.kernels import KERNELS, peak_copy, peak_vector_copy, run_kernels
from gpugrad.bench.workloads.matmul import run_matmuls
from gpugrad.bench.workloads.mlp import MLP_IMPLS, run_mlp


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and repeats for one device. ``shape``: (rows, cols) of the float32 kernel inputs; the peak copy moves
    a buffer of the same size (``copy_bytes``), so kernels and peak see the same level of the memory hierarchy;
    ``matmul_peak_n``: the square GEMM giving the matmul peak; ``tiny_ops``: the engine's tiny-op chain length;
    ``chain``: iterations of the engine's long chain (0: none; on a GPU the host cost is not the measure);
    ``mlp_repeats``: samples per MLP implementation (a step is long: fewer are needed); ``chain_rounds``: runs of
    the long chain per implementation, interleaved (one run each is noisy: gpugrad/torch ranged 0.87x-1.17x over
    twelve runs on a shared 2-core machine)."""

    shape: tuple
    repeats: int
    batches: tuple
    matmul_peak_n: int
    tiny_ops: int
    min_sample_s: float
    mlp_repeats: int
    chain: int = 0
    chain_rounds: int = 3
    amp: str | None = None  # "bf16" / "fp16": the MLP section also times gpugrad's step under autocast

    @property
    def copy_bytes(self):
        return self.shape[0] * self.shape[1] * 4

    @property
    def steps(self):
        """Progress ticks a run of this config makes."""
        return len(KERNELS) + 3 * len(self.batches) + (len(MLP_IMPLS) + bool(self.amp)) * len(self.batches) + 2


def config_for(device_name, quick=False, shape=None):
    """Defaults: full runs use 64 MiB (CPU: past the per-core caches and most of a typical L3) and 256 MiB (GPU:
    past an H100/H200's 50-60 MB L2) arrays; ``--quick`` keeps a whole CPU run under ~30 s on 2 cores. A simulated
    CUDA device (which computes on the CPU) gets the CPU's sizes."""
    if device_name == "cuda" and not get_backend("cuda").simulated:
        cfg = Config(shape=(8192, 4096), repeats=10, batches=(64, 512, 4096), matmul_peak_n=4096, tiny_ops=200,
                     min_sample_s=0.002, mlp_repeats=10)
        if not quick:
            cfg = dataclasses.replace(cfg, shape=(8192, 8192), repeats=30, matmul_peak_n=8192, tiny_ops=1000,
                                      min_sample_s=0.01, mlp_repeats=30)
    else:
        cfg = Config(shape=(1024, 2048), repeats=5, batches=(512,), matmul_peak_n=1024, tiny_ops=200,
                     min_sample_s=0.004, mlp_repeats=5, chain=10_000)
        if not quick:  # the MLP at batches 64 and 512, the long chain at 100,000 (issue 19's measures)
            # NOTE: 21 MLP samples, not 9: over 9 the batch-64 gpugrad/torch ratio of one build ranged 0.84x-1.12x
            # in consecutive runs on a shared 2-core machine (each sample is settled, so this adds ~15 s)
            cfg = dataclasses.replace(cfg, shape=(4096, 4096), repeats=9, batches=(64, 512), matmul_peak_n=2048,
                                      tiny_ops=1000, min_sample_s=0.02, mlp_repeats=21, chain=100_000)
    return dataclasses.replace(cfg, shape=tuple(shape)) if shape else cfg


SECTIONS = ("kernels", "matmul", "mlp", "engine")  # in the order run_device runs them
SIMULATED_NOTE = "simulated CUDA device (GPUGRAD_CUDA_SIM, computing on the CPU): its timings are not GPU figures"


def run_device(device_name, config, tick=None, sections=SECTIONS, on_update=None):
    """Every figure of ``sections`` for one device as a JSON-ready dict. ``on_update(result)`` is called with the
    dict so far before the first section and after each (``gpugrad bench`` rewrites its --json there, so a run cut
    short keeps what finished)."""
    be = get_backend(device_name)
    timer = timer_for(be, repeats=config.repeats, min_sample_s=config.min_sample_s)
    run = {  # each section's inputs live only while it runs: the kernels' are freed before the MLP allocates
        "kernels": lambda: dict(zip(("kernels", "peak_bandwidth"), run_kernels(
            Inputs(be, *config.shape), timer, peak_copy(be, config.copy_bytes), tick=tick,
            vector_copy=peak_vector_copy(be, config.copy_bytes)))),
        # (matmul operands are shaped per case, so their Inputs' own shape is unused)
        "matmul": lambda: {"matmul": run_matmuls(Inputs(be, 1, 1, seed=2), timer, config.matmul_peak_n,
                                                 config.batches, tick=tick)},
        "mlp": lambda: {"mlp": run_mlp(be, timer, config.batches, config.mlp_repeats, tick=tick, amp=config.amp)},
        "engine": lambda: {"engine": run_engine(be, timer, config.tiny_ops, tick=tick, chain=config.chain,
                                                 chain_rounds=config.chain_rounds)},
    }
    result = {"device": device_name, "simulated": be.simulated,
              "config": {**dataclasses.asdict(config), "copy_bytes": config.copy_bytes}}
    if be.simulated:
        result["note"] = SIMULATED_NOTE
    on_update = on_update or (lambda result: None)
    on_update(result)
    for section in sections:
        result.update(run[section]())
        on_update(result)
    return result
