"""Stage 1 of scripts/gpu-check.sh: does gpugrad work on this CUDA device, and how fast, in about two minutes.

    python scripts/gpu_smoke.py OUT.json [--warm all|step|none] [--parts kernels,step,bench]

Parts, each written to OUT.json as soon as it is done (a kill keeps the finished ones; "finished" lists them):
``device`` (is_available, the GPU), ``warm_up`` (the raw kernels compiled in a thread pool: how many, seconds),
``kernels`` (one launcher of each family against its NumPy reference, first call and check), ``step`` (the MLP
training step eager and replayed as a CUDA graph: first-call seconds, kernel launches and host syncs of one step,
median step time, their losses; PyTorch's when it runs here) and ``bench`` (one number per benchmark family).
Launches and syncs come from ``gpugrad.testing.cuda_sim.counters()`` on the simulated device and from PyTorch's
profiler (CUPTI: every kernel of the process, CuPy's too) on a GPU; without PyTorch they are None, with the reason.
Exit status: 0 every check passed, 1 one failed (the part says which and why), 3 no usable CUDA device.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

import gpugrad
from gpugrad.backend import get_backend, kernels, reference
from gpugrad.bench.report import cuda_device_info
from gpugrad.bench.timing import timer_for
from gpugrad.bench.workloads.engine import run_engine
from gpugrad.bench.workloads.inputs import Inputs, _flatten
from gpugrad.bench.workloads.kernels import KERNEL_BY_ID, peak_copy, peak_vector_copy, run_kernels
from gpugrad.bench.workloads.matmul import run_matmuls
from gpugrad.bench.workloads.mlp import MLP_SIZES, mlp_steps
from gpugrad.bench.workloads.ops import OP_BY_NAME, op_workload
from gpugrad.bench.workloads.optim import optimizer_workload
from gpugrad.bench.workloads.torch_peer import torch_for

FAMILY_KERNELS = {"elementwise": "relu_fwd", "reduce": "softmax_fwd", "loss": "softmax_xent_fwd",
                  "norm": "layer_norm_fwd", "optim": "adam_update_", "check": "check_finite"}
STEP_LAUNCHERS = ("bias_act_fwd", "bias_act_bwd", "softmax_xent_fwd", "softmax_xent_bwd", "sgd_multi_update_",
                  "accumulate_", "copy_", "sum_rows")
SYNC_CALLS = ("Synchronize", "cudaMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD")  # host waits (blocking copies too)
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cuGraphLaunch")


class Report:
    """The JSON result, rewritten (atomically) after every part."""

    def __init__(self, path):
        self.path, self.data, self.ok = path, {"finished": [], "failed": []}, True

    def part(self, name, fn):
        t0 = time.perf_counter()
        try:
            entry = fn()
            ok = entry.pop("ok", True)
        except Exception as e:  # one part failing must not hide the others
            entry, ok = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}, False
        entry["seconds"] = round(time.perf_counter() - t0, 3)
        self.data[name] = entry
        self.data["finished"].append(name)
        if not ok:
            self.data["failed"].append(name)
            self.ok = False
        self.save()
        print(f"gpu-smoke: {name}: {'ok' if ok else 'FAILED'} in {entry['seconds']:.1f} s: "
              f"{json.dumps(entry, default=str)[:600]}", flush=True)
        return entry

    def save(self):
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, default=float)
        os.replace(tmp, self.path)


def _sync(be):
    be.xp.cuda.Device(be.device.index).synchronize()


def _host(be, a):
    return be.to_host(a) if hasattr(a, "shape") and not isinstance(a, np.ndarray) else a


def check_kernels(be):
    """Each family's launcher once on the device (its first call compiles unless warmed) against the reference."""
    xp, inputs, out, ok = be.xp, Inputs(be, 64, 300, seed=3), {}, True
    for family, name in FAMILY_KERNELS.items():
        if name == "check_finite":
            host = np.arange(300, dtype=np.float32)
            host[[3, 7]] = np.nan, np.inf
            args = [xp.zeros((2, 2), np.int64), 1, 5, be.asarray(host)]
            inplace = (0,)
        else:
            case = KERNEL_BY_ID[name]
            args = [a.copy() if i in case.inplace else a for i, a in enumerate(case.make(xp, inputs))]
            inplace = case.inplace
        want_args = [_host(be, a) for a in args]
        t0 = time.perf_counter()
        got = getattr(kernels, name)(xp, *args)
        _sync(be)
        first = time.perf_counter() - t0
        want = getattr(reference, name)(np, *want_args)
        got, want = ([args[i] for i in inplace], [want_args[i] for i in inplace]) if inplace else \
            (_flatten(got), _flatten(want))
        err = max(float(np.max(np.abs(np.asarray(_host(be, g), np.float64) - np.asarray(w, np.float64))))
                  if np.size(w) else 0.0 for g, w in zip(got, want))
        good = len(got) == len(want) and err <= 1e-4
        ok &= good
        out[family] = {"launcher": name, "first_call_s": round(first, 4), "max_abs_error": err, "ok": good}
    return {**out, "ok": ok}


def _counts_sim(fn):
    from gpugrad.testing import cuda_sim  # the simulated device's own counters (only ever imported there)

    cuda_sim.reset_counters()
    fn()
    c = cuda_sim.counters()
    return {"launches": c["launches"], "syncs": c["syncs"], "source": "gpugrad.testing.cuda_sim.counters()"}


def profiler_counts(events):
    """(kernels run on the GPU, host launch calls, host syncs) from torch.profiler events: (name, on_gpu) pairs."""
    gpu = [n for n, on_gpu in events if on_gpu and not n.startswith(("Memcpy", "Memset"))]
    host = [n for n, on_gpu in events if not on_gpu]
    return (len(gpu), sum(n.startswith(LAUNCH_CALLS) for n in host),
            sum(any(s in n for s in SYNC_CALLS) and "Async" not in n for n in host))


def _counts_gpu(be, fn):
    th, why = torch_for(be)
    if th is None:
        return {"launches": None, "syncs": None, "why": why}
    try:
        from torch.profiler import ProfilerActivity, profile  # optional: only with PyTorch built with CUDA

        _sync(be)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            _sync(be)  # NOTE: this one sync is ours: subtracted below
        kernels_run, launches, syncs = profiler_counts(
            [(e.name, str(getattr(e, "device_type", "")).endswith("CUDA")) for e in prof.events()])
    except Exception as e:  # a profiler that cannot trace here costs the counts, not the step's other figures
        return {"launches": None, "syncs": None, "why": f"torch.profiler failed: {type(e).__name__}: {e}"}
    return {"launches": launches, "kernels": kernels_run, "syncs": syncs - 1,
            "source": "torch.profiler (CUPTI), to confirm on a GPU"}


def training_step(be, timer):
    """The MLP SGD step, eager and graph-replayed (PyTorch eager too when it runs here); each implementation has a
    model of its own, all from the same parameters on the same batch, so their first losses agree."""
    sizes, batch = ((20, 32, 32, 10), 16) if be.simulated else (MLP_SIZES, 64)
    out, steps = {"sizes": list(sizes), "batch": batch}, {}
    for impl in ("gpugrad", "gpugrad_graph", "torch"):  # eager first: its first step is the cold one
        t0 = time.perf_counter()
        step = mlp_steps(be, batch, sizes=sizes, impls=(impl,))[impl]  # the graph: a warm-up step and the capture
        if isinstance(step, str):
            out[impl] = {"unavailable": step}
            continue
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        loss = float(step())  # waits for the step
        steps[impl] = step
        entry = out[impl] = {"build_s": round(built, 4), "first_step_s": round(time.perf_counter() - t0, 4),
                             "first_loss": loss}
        if impl != "torch":
            entry.update(_counts_sim(step) if be.simulated else _counts_gpu(be, step))
    for impl, t in timer.many(steps).items():
        out[impl].update(median_step_s=t.median, samples_per_s=batch / t.median)
    eager, graph = out["gpugrad"], out["gpugrad_graph"]
    out["graph_vs_eager"] = graph["median_step_s"] / eager["median_step_s"]
    if "median_step_s" in out["torch"]:
        out["eager_vs_torch"] = eager["median_step_s"] / out["torch"]["median_step_s"]
        out["graph_vs_torch"] = graph["median_step_s"] / out["torch"]["median_step_s"]
    return {**out, "ok": bool(np.isclose(eager["first_loss"], graph["first_loss"], rtol=1e-5))}


def bench_numbers(be, timer):
    """One number per benchmark family (the full figures are stage 3's)."""
    rows, cols = (64, 128) if be.simulated else (4096, 4096)
    nbytes = rows * cols * 4
    krow, peak = run_kernels(Inputs(be, rows, cols), timer, peak_copy(be, nbytes), cases=[KERNEL_BY_ID["relu_fwd"]],
                             vector_copy=peak_vector_copy(be, nbytes))
    mm = run_matmuls(Inputs(be, 1, 1, seed=2), timer, 256 if be.simulated else 4096, (512,))
    ops_in = Inputs(be, rows, cols)
    op = timer.many({impl: op_workload(OP_BY_NAME["cross_entropy"], impl, ops_in) for impl in ("gpugrad", "baseline")})
    sizes = (20, 32, 32, 10) if be.simulated else MLP_SIZES
    opt = timer.many({impl: optimizer_workload("adam", impl, be, sizes) for impl in ("gpugrad", "baseline")})
    engine = run_engine(be, timer, 200)
    return {"kernels": {"relu_fwd_gbs": krow[0]["gbs"], "relu_fwd_fraction_of_peak": krow[0]["fraction_of_peak"],
                        "peak_gbs": peak["gbs"], "shape": [rows, cols]},
            "matmul": {"case": mm["cases"][0]["name"], "gflops": mm["cases"][0]["gflops"],
                       "fraction_of_peak": mm["cases"][0]["fraction_of_peak"]},
            "ops": {"cross_entropy_fwd_bwd_s": op["gpugrad"].median,
                    "vs_baseline": op["gpugrad"].median / op["baseline"].median},
            "optim": {"adam_step_s": opt["gpugrad"].median,
                      "vs_baseline": opt["gpugrad"].median / opt["baseline"].median},
            "engine": {"us_per_op": engine["us_per_op"]["gpugrad"], "vs_torch": engine["gpugrad_vs_torch"]}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSON file to write (rewritten after every part)")
    ap.add_argument("--warm", choices=("all", "step", "none"), default="all",
                    help="compile before the first launch, in threads: every instantiation for float32 and float64 "
                         "(all: later test processes find them in the disk cache), those the smoke uses, or none")
    ap.add_argument("--repeats", type=int, default=5, help="timing samples per figure")
    ap.add_argument("--parts", default="kernels,step,bench",
                    help="which of kernels,step,bench to run (comma-separated; device and warm_up always run)")
    args = ap.parse_args(argv)
    report = Report(args.out)
    if not gpugrad.cuda.is_available():
        report.data["device"] = {"available": False, "reason": gpugrad.cuda.unavailable_reason()}
        report.save()
        print(f"gpu-smoke: no usable CUDA device: {gpugrad.cuda.unavailable_reason()}", flush=True)
        return 3
    be = get_backend("cuda")
    report.part("device", lambda: {"available": True, "simulated": be.simulated, **cuda_device_info()})
    launchers = None if args.warm == "all" else (*FAMILY_KERNELS.values(), *STEP_LAUNCHERS)
    dtypes = ("float32", "float64") if args.warm == "all" else ("float32",)
    report.part("warm_up", lambda: {"mode": args.warm, "built": 0 if args.warm == "none" else
                                    kernels.warm_up(launchers, dtypes), "cpus": os.cpu_count()})
    timer = timer_for(be, repeats=args.repeats, min_sample_s=0.001)
    parts = {"kernels": lambda: check_kernels(be), "step": lambda: training_step(be, timer),
             "bench": lambda: bench_numbers(be, timer)}
    for name in (p for p in parts if p in args.parts.split(",")):
        report.part(name, parts[name])
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
