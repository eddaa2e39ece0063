"""How results are shown: text tables, the environment block of the JSON file, a bar chart of fractions of peak."""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform

import numpy as np


# ---- environment -----------------------------------------------------------------------------------------------------
def _version(*dists):
    for d in dists:
        try:
            return importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas():
    try:
        cfg = np.show_config(mode="dicts")  # NumPy >= 1.26
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # older NumPy, or a build without the section
        return None


def cuda_device_info():
    """{"name", "compute_capability", "memory_gib", "runtime"} of CUDA device 0, or {"unavailable": reason}."""
    from gpugrad import cuda
    from gpugrad.backend import get_backend

    if not cuda.is_available():
        return {"unavailable": cuda.unavailable_reason()}
    rt = get_backend("cuda").xp.cuda.runtime  # all CuPy access goes through the backend
    props = rt.getDeviceProperties(0)
    name = props["name"]
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "memory_gib": round(props["totalGlobalMem"] / 2**30, 1), "runtime": rt.runtimeGetVersion(),
            "driver": rt.driverGetVersion(), "count": cuda.device_count()}


def environment():
    from gpugrad import __version__
    from gpugrad.backend import HOST_MALLOC
    from gpugrad.bench.workloads.torch_peer import torch_module

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    th = torch_module()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpugrad": __version__,
        "numpy": np.__version__,
        "cupy": _version("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
        "torch": th.__version__ if th is not None else None,
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": usable, "blas": _blas(),
                "torch_threads": th.get_num_threads() if th is not None else None,
                "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                          "MKL_NUM_THREADS") if k in os.environ},
                "host_malloc": vars(HOST_MALLOC)},  # process-wide: torch's step in the same run gets it too
        "cuda": cuda_device_info(),
    }


def device_name(device, env):
    if device == "cuda":
        return env["cuda"].get("name", "CUDA")
    c = env["cpu"]
    return f"{c['model']}, {c['usable_cores']} cores"


# ---- text ------------------------------------------------------------------------------------------------------------
def fmt_time(s):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_bytes(n):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _table(header, rows, align):
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if a == "<" else c.rjust(w) for c, w, a in zip(r, widths, align))  # noqa
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def _spread(r):
    """The IQR relative to the median, in percent."""
    return f"{100 * r['iqr_s'] / r['median_s']:.0f}%" if r["median_s"] > 0 else ""


def format_device(result, env):
    """The tables of one device's results (of the sections it has: ``gpugrad bench --sections`` may skip some)."""
    d = result["device"]
    out = [f"== {d}: {device_name(d, env)} =="] + ([f"NOTE: {result['note']}"] if "note" in result else [])
    for section, lines in (("kernels", _format_kernels), ("matmul", _format_matmul), ("mlp", _format_mlp),
                           ("engine", _format_engine)):
        if section in result:
            out += lines(result)
    return "\n".join(out)


def _format_kernels(result):
    d, pk = result["device"], result["peak_bandwidth"]
    out = [f"peak bandwidth: {pk['gbs']:.1f} GB/s (copy of {fmt_bytes(pk['copy_bytes'])}, IQR {_spread(pk)})"
           if "vector_copy" not in pk else  # a GPU: the larger of cudaMemcpy and gpugrad's float4 copy kernel
           f"peak bandwidth: {pk['gbs']:.1f} GB/s, the larger of two copies of {fmt_bytes(pk['copy_bytes'])}: "
           f"cudaMemcpy {pk['memcpy']['gbs']:.1f} GB/s (IQR {_spread(pk['memcpy'])}), float4 copy kernel "
           f"{pk['vector_copy']['gbs']:.1f} GB/s (IQR {_spread(pk['vector_copy'])})",
           f"kernels ({'NumPy references' if d == 'cpu' else 'CUDA kernels'}), "
           f"{'x'.join(map(str, result['config']['shape']))} {result['kernels'][0]['dtype']}:"]
    out.append(_table(["kernel", "family", "bytes", "time", "IQR", "GB/s", "of peak"],
                      [[r["name"], r["family"], fmt_bytes(r["bytes"]), fmt_time(r["median_s"]), _spread(r),
                        f"{r['gbs']:.1f}", f"{r['fraction_of_peak']:.2f}"] for r in result["kernels"]],
                      "<<>>>>>"))
    if d == "cpu":
        out.append("(in-place and read-mostly kernels can pass 1: a CPU copy's writes also cost a read-for-ownership)")
    return out


def _format_matmul(result):
    mm = result["matmul"]
    return [f"\nmatmul (gpugrad's: its own cuBLAS calls on CUDA, NumPy on the CPU; float32); peak "
            f"{mm['peak']['gflops']:.1f} GFLOP/s at {mm['peak']['name']}:",
            _table(["matmul", "m x n x k", "time", "GFLOP/s", "of peak"],
                   [[r["name"], f"{r['m']}x{r['n']}x{r['k']}", fmt_time(r["median_s"]), f"{r['gflops']:.1f}",
                     f"{r['fraction_of_peak']:.2f}"] for r in mm["cases"]], "<>>>>")]


def _format_mlp(result):
    d, out = result["device"], []
    out.append(f"\nMLP {'-'.join(map(str, result['mlp'][0]['sizes']))} ReLU, cross-entropy, SGD step, float32 "
               f"(baseline: hand-written {'NumPy' if d == 'cpu' else 'CuPy'}):")
    rows = []
    for e in result["mlp"]:
        for impl, r in e["impls"].items():
            vs_torch = r.get("time_vs_torch")  # None without PyTorch (absent in results of older versions)
            rows.append([e["batch"], impl, f"{r['samples_per_s']:,.0f}", fmt_time(r["median_s"]), _spread(r),
                         f"{r['time_vs_baseline']:.2f}x", f"{vs_torch:.2f}x" if vs_torch else "-"])
        rows += [[e["batch"], impl, "-", "-", "", "n/a", "n/a"] for impl in e["unavailable"]]
    out.append(_table(["batch", "impl", "samples/s", "step", "IQR", "time vs baseline", "vs torch"], rows,
                      "><>>>>>"))
    if any("gpugrad_graph" in e["impls"] for e in result["mlp"]):
        out.append("gpugrad_graph: the gpugrad step captured once after a warm-up step, replayed as a CUDA graph")
    out += sorted({f"{impl}: {why}" for e in result["mlp"] for impl, why in e["unavailable"].items()})
    return out


def _format_engine(result):
    en = result["engine"]
    vs = lambda key: f"; gpugrad/torch {en[key]:.2f}x" if en.get(key) is not None else ""  # noqa: E731
    lines = [f"\nengine overhead (a chain of {en['n_ops']} tiny multiplies):",
             "  forward + backward: " + ", ".join(f"{i} {v:.2f} µs/op" for i, v in en["us_per_op"].items())
             + vs("gpugrad_vs_torch"),
             "  forward alone: " + ", ".join(f"{i} {v:.2f} µs/op" for i, v in en["forward_us_per_op"].items())
             + vs("forward_gpugrad_vs_torch")]
    chain = en.get("chain")
    if chain:
        rounds = f", the median of {chain['rounds']} interleaved runs" if chain.get("rounds", 1) > 1 else ""
        lines.append(f"  a chain of {chain['ops']:,} ops (x = x * 1.0001 + 0.0){rounds}: " + ", ".join(
            f"{i} forward {c['forward_s']:.2f} s, backward {c['backward_s']:.2f} s" for i, c in chain.items()
            if isinstance(c, dict)) + vs("chain_gpugrad_vs_torch"))
    lines += [f"  {impl}: {why}" for impl, why in en["unavailable"].items()]
    return lines


def write_json(results, path):
    """``results`` as JSON, written atomically (parent directories created, a symlink written through)."""
    from gpugrad.cli.checkpoint import atomic_write

    text = json.dumps(results, indent=1, default=_json_default) + "\n"
    return atomic_write(path, lambda f: f.write(text.encode()), "--json")


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


# ---- plot ------------------------------------------------------------------------------------------------------------
def _matmul_cases(result):
    return result["matmul"]["cases"] if "matmul" in result else []


def plot_fractions(results, path):
    """Horizontal bars: the fraction of measured peak per kernel (bandwidth) and matmul (GFLOP/s), one colour per
    device, written atomically like every output.  Raises gpugrad.cli.plot.PlotUnavailable when matplotlib is
    missing."""
    from gpugrad.cli.plot import require_matplotlib, save_figure

    plt = require_matplotlib()
    devices = list(results["devices"])
    names = []
    for d in devices:
        r = results["devices"][d]
        for name in [k["name"] for k in r.get("kernels", [])] + [m["name"] for m in _matmul_cases(r)]:
            if name not in names:
                names.append(name)
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(names) * max(1, len(devices)) + 1.5), constrained_layout=True)
    height = 0.8 / max(1, len(devices))
    for j, d in enumerate(devices):
        r = results["devices"][d]
        frac = {k["name"]: k["fraction_of_peak"] for k in r.get("kernels", [])}
        frac.update({m["name"]: m["fraction_of_peak"] for m in _matmul_cases(r)})
        ys = [i + j * height for i, n in enumerate(names) if n in frac]
        ax.barh(ys, [frac[n] for n in names if n in frac], height=height,
                label=f"{d} ({device_name(d, results['environment'])})")
    ax.set_yticks([i + height * (len(devices) - 1) / 2 for i in range(len(names))], names, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=0.8, ls="--")
    ax.set(xlabel="fraction of measured peak (copy bandwidth; large-GEMM GFLOP/s for matmul)",
           title="gpugrad bench")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
