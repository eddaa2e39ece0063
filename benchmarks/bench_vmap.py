"""What gpugrad.func.vmap buys over a Python loop over the samples: an elementwise-heavy function, a matmul-heavy one
and per-sample gradients of an MLP (vmap(grad(loss))), float32 on the CPU.

    python benchmarks/bench_vmap.py [--repeats 21] [--batch 256]     # loop / vmap ratios (and torch's, if installed)
    pytest benchmarks/bench_vmap.py --benchmark-enable              # each workload's loop and vmap side by side

The ratio is the median over repeats of (time of the loop) / (time of vmap), run back to back in alternating order
(drift cancels out of each ratio; the median drops repeats another process disturbed).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pytest

import gpugrad

WORKLOADS = ("elementwise", "matmul", "per_sample_grad")


def _workload(lib, name, batch):
    """(function of one sample, its batched inputs, in_dims) for ``lib`` (gpugrad or torch)."""
    rng = np.random.default_rng(0)

    def t(a):
        return lib.tensor(a.astype(np.float32))
    if name == "elementwise":
        def f(x):
            y = x.sin() * x.exp() + (x * 0.5).tanh()
            return (y - y.mean()) / (y.std() + 1.0)
        return f, (t(rng.standard_normal((batch, 512))),), 0
    if name == "matmul":
        w1, w2 = t(rng.standard_normal((64, 64)) * 0.1), t(rng.standard_normal((64, 64)) * 0.1)

        def f(x):
            return ((x @ w1).relu() @ w2).softmax(-1)
        return f, (t(rng.standard_normal((batch, 16, 64))),), 0
    p = {"w1": t(rng.standard_normal((128, 32)) * 0.1), "b1": t(np.zeros(128)),
         "w2": t(rng.standard_normal((10, 128)) * 0.1), "b2": t(np.zeros(10))}

    def loss(q, x, y):
        h = (x @ q["w1"].T + q["b1"]).tanh()
        return ((h @ q["w2"].T + q["b2"] - y) ** 2).mean()
    fn = gpugrad.func if lib is gpugrad else lib.func
    return fn.grad(loss), (p, t(rng.standard_normal((batch, 32))), t(rng.standard_normal((batch, 10)))), (None, 0, 0)


def runners(lib, name, batch):
    """(loop, vmapped): two callables computing the same batch of results."""
    f, args, in_dims = _workload(lib, name, batch)
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    fn = gpugrad.func if lib is gpugrad else lib.func
    batched = fn.vmap(f, in_dims=in_dims)

    def loop():
        outs = [f(*[a if d is None else a[i] for a, d in zip(args, dims)]) for i in range(batch)]
        return outs if isinstance(outs[0], dict) else lib.stack(outs)

    return loop, lambda: batched(*args)


@pytest.mark.parametrize("impl", ["loop", "vmap"])
@pytest.mark.parametrize("name", WORKLOADS)
def test_vmap_vs_loop(benchmark, name, impl):
    loop, vmapped = runners(gpugrad, name, 256)
    benchmark.group = f"vmap-{name}-b256"
    benchmark(loop if impl == "loop" else vmapped)


def ratio(lib, name, batch, repeats):
    loop, vmapped = runners(lib, name, batch)
    loop(), vmapped()  # warm-up
    ratios, times = [], {"loop": [], "vmap": []}
    for r in range(repeats):
        once = {}
        for which, fn in ((("loop", loop), ("vmap", vmapped)) if r % 2 else (("vmap", vmapped), ("loop", loop))):
            t0 = time.perf_counter()
            fn()
            once[which] = time.perf_counter() - t0
            times[which].append(once[which])
        ratios.append(once["loop"] / once["vmap"])
    return statistics.median(ratios), min(ratios), max(ratios), {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    libs = [gpugrad]
    try:
        import torch  # an optional peer: the same ratio for torch.func.vmap
        libs.append(torch)
    except ImportError:
        pass
    for name in WORKLOADS:
        for lib in libs:
            med, lo, hi, t = ratio(lib, name, args.batch, args.repeats)
            print(f"{lib.__name__:8s} {name:16s} batch {args.batch}: loop / vmap = {med:.1f}x (min {lo:.1f}, "
                  f"max {hi:.1f}); median loop {t['loop'] * 1e3:.2f} ms, vmap {t['vmap'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
