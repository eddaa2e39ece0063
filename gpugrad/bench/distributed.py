"""``gpugrad bench --distributed``: all-reduce bandwidth of the backend, and data-parallel training throughput at
N = 1 and N ranks, on this machine.

Bandwidths are nccl-tests' (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md): ``algbw = bytes / time`` and
``busbw = algbw * 2 (n - 1) / n``, the rate each rank's link carries in a ring all-reduce, comparable across rank
counts and with the link's own bandwidth. Training is the MLP of ``gpugrad bench`` and of the README's H200 step
model (784-1024-1024-10, SGD with momentum, float32) with a fixed batch per rank, so N ranks do N times the work
per step: ideal scaling is N times the samples/s of one. Each rank count runs without DDP too (the ranks train
independently): that is the machine's own ceiling, and DDP's distance to it is the cost of communication. Every
figure is the slowest rank's.

The measurements run inside an MPI job; :func:`run` starts one with ``mpiexec -n N`` per rank count and collects
rank 0's JSON. CPU ranks get one BLAS thread each unless ``OMP_NUM_THREADS`` says otherwise: N ranks then use N
cores, and threads of several ranks do not fight over them (on a small, shared machine that fight costs more than
the threads bring).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS = [784, 1024, 1024, 10]
SIZES = [4 << 10 << 2 * k for k in range(8)]  # 4 KiB .. 64 MiB: from latency-bound to bandwidth-bound
QUICK_SIZES = SIZES[:6]  # to 4 MiB


def _sync(device):
    import gpugrad

    if device.startswith("cuda"):
        gpugrad.cuda.synchronize(device)


def _slowest(seconds):
    """The largest of the ranks' ``seconds`` (every rank must call it)."""
    import gpugrad
    import gpugrad.distributed as dist

    t = gpugrad.tensor([seconds], dtype=gpugrad.float64, device="cpu")
    dist.all_reduce(t, dist.ReduceOp.MAX)
    return t.item()


def allreduce_sweep(device, sizes):
    """Per size in bytes: seconds per in-place float32 all_reduce, algbw and busbw in GB/s."""
    import gpugrad
    import gpugrad.distributed as dist

    n, rows = dist.get_world_size(), []
    for nbytes in sizes:
        t = gpugrad.zeros(nbytes // 4, device=device)
        iters = max(5, min(200, (64 << 20) // nbytes))
        for _ in range(3):
            dist.all_reduce(t)
        _sync(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        _sync(device)
        seconds = _slowest(time.perf_counter() - start) / iters
        algbw = nbytes / seconds / 1e9
        rows.append({"bytes": nbytes, "time_s": seconds, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (n - 1) / n})
    return rows


def train_throughput(device, batch, steps, ddp):
    """Samples/s over all ranks (``batch`` rows each), plain or wrapped in DistributedDataParallel."""
    import gpugrad
    import gpugrad.distributed as dist
    import gpugrad.nn.functional as F
    from gpugrad import nn, optim

    gpugrad.manual_seed(0)
    model = nn.MLP(LAYERS, device="cpu").to(device)
    net = nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = gpugrad.randn(batch, LAYERS[0], device=device), gpugrad.randint(0, LAYERS[-1], (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=False)  # .grad stays the bucket's view: nothing copied
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    _sync(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    seconds = _slowest(time.perf_counter() - start)
    n = dist.get_world_size()
    return {"ranks": n, "ddp": ddp, "batch_per_rank": batch, "step_s": seconds / steps,
            "samples_per_s": n * batch * steps / seconds}


def worker(argv=None):
    """One rank: ``python -m gpugrad.bench.distributed OUT.json --device D --batch B --steps S [--sizes ...]``."""
    import gpugrad.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--sizes", type=int, nargs="*", default=())
    args = p.parse_args(argv)
    dist.init_process_group("nccl" if args.device == "cuda" else "mpi")
    device = str(dist.group.get_group().nccl.device) if args.device == "cuda" else "cpu"
    result = {"allreduce": allreduce_sweep(device, args.sizes) if args.sizes else [],
              "train": [train_throughput(device, args.batch, args.steps, ddp) for ddp in (False, True)]}
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()


def run(device="cpu", ranks=2, quick=False):
    """Measure at 1 and ``ranks`` ranks, each in its own ``mpiexec`` job; returns the results as a dict."""
    mpiexec = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if mpiexec is None:
        raise RuntimeError("--distributed needs mpiexec: pip install 'gpugrad[distributed]'")
    batch, steps = (64, 10) if quick else (256, 30)
    results = {"backend": "nccl" if device == "cuda" else "mpi", "device": device, "ranks": ranks,
               "layers": LAYERS, "allreduce": [], "train": []}
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    for n in sorted({1, ranks}):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp, "result.json")
            sizes = [str(s) for s in (QUICK_SIZES if quick else SIZES)] if n == ranks and n > 1 else []
            cmd = [mpiexec, "-launcher", "fork", "-n", str(n), sys.executable, "-m", "gpugrad.bench.distributed",
                   str(out), "--device", device, "--batch", str(batch), "--steps", str(steps), "--sizes", *sizes]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if proc.returncode:
                raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
            got = json.loads(out.read_text())
        results["allreduce"] += got["allreduce"]
        results["train"] += [{**row, "threads_per_rank": int(threads)} for row in got["train"]]
    return results


def format_results(results, env):
    from gpugrad.bench.report import _table, device_name, fmt_bytes, fmt_time

    n, dev = results["ranks"], results["device"]
    grad_bytes = sum(a * b + b for a, b in zip(LAYERS, LAYERS[1:])) * 4
    lines = [f"== distributed: {results['backend']} on {device_name('cuda' if dev == 'cuda' else 'cpu', env)} ==",
             f"all_reduce, float32 in place, {n} ranks (busbw = algbw x 2(n-1)/n, as nccl-tests):"]
    lines.append(_table(["size", "time", "algbw GB/s", "busbw GB/s"],
                        [[fmt_bytes(r["bytes"]), fmt_time(r["time_s"]), f"{r['algbw_GBps']:.3g}",
                          f"{r['busbw_GBps']:.3g}"] for r in results["allreduce"]], ">>>>"))
    base = next(r["samples_per_s"] for r in results["train"] if r["ranks"] == 1 and not r["ddp"])
    lines += ["", f"training: MLP {'-'.join(map(str, LAYERS))} ({fmt_bytes(grad_bytes)} of gradients), SGD momentum, "
              f"{results['train'][0]['batch_per_rank']} rows per rank, float32:"]
    lines.append(_table(["ranks", "DDP", "threads/rank", "samples/s", "step", "vs 1 rank", "scaling eff."],
                        [[r["ranks"], "yes" if r["ddp"] else "no", r["threads_per_rank"], f"{r['samples_per_s']:,.0f}",
                          fmt_time(r["step_s"]), f"{r['samples_per_s'] / base:.2f}x",
                          f"{r['samples_per_s'] / base / r['ranks']:.0%}"] for r in results["train"]], ">>>>>>>"))
    return "\n".join(lines)


if __name__ == "__main__":
    worker()
