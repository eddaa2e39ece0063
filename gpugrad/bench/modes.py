"""``gpugrad bench --modes``: a full Jacobian of f: R^n -> R^m by forward mode and by reverse mode, over a grid of n
and m, to see the textbook crossover measured: forward mode needs n directions, reverse mode m, so forward wins
with few inputs and reverse with few outputs.

f is MLP-shaped, x -> W2 tanh(W1 x + b1) + b2 with a hidden width of 64, in float64. Three ways, each timed in the
same run and interleaved (``measure_many``), so their ratios hold on a noisy machine:

    forward             jacobian(f, x, vectorize=True, strategy="forward-mode"): one pass with n tangents
    reverse             jacobian(f, x): one backward pass per output element (m passes)
    reverse_vectorized  jacobian(f, x, vectorize=True): one backward pass carrying all m cotangents
"""
from __future__ import annotations

import functools
import sys

import numpy as np

GRID, QUICK_GRID, HIDDEN = (1, 4, 16, 64, 256), (1, 4, 16), 64
METHODS = {"forward": {"vectorize": True, "strategy": "forward-mode"}, "reverse": {},
           "reverse_vectorized": {"vectorize": True}}


def mlp(n, m, hidden=HIDDEN, device="cpu", seed=0):
    """(f, x): f(x) = W2 tanh(W1 x + b1) + b2 from R^n to R^m (weights scaled by 1/sqrt(fan-in)), x a point."""
    import gpugrad

    rng = np.random.default_rng(seed)
    w1, b1, w2, b2 = (gpugrad.tensor(rng.standard_normal(s) / np.sqrt(s[-1]), device=device)
                      for s in ((hidden, n), (hidden,), (m, hidden), (m,)))
    return (lambda x: w2 @ (w1 @ x + b1).tanh() + b2), gpugrad.tensor(rng.standard_normal(n), device=device)


def jacobians(f, x):
    """{method: the (m, n) Jacobian as a host array}."""
    from gpugrad.autograd.functional import jacobian

    return {name: np.asarray(jacobian(f, x, **kw)) for name, kw in METHODS.items()}


def measure(device="cpu", grid=GRID, hidden=HIDDEN, repeats=5, min_sample_s=None):
    """Every (n, m) cell of the grid: the time of each method, forward's time over each reverse one's (< 1: forward
    wins) and how far the methods' Jacobians are apart."""
    from gpugrad.autograd.functional import jacobian
    from gpugrad.backend import get_backend
    from gpugrad.bench.timing import timer_for

    timer, cells = timer_for(get_backend(device), repeats=repeats, min_sample_s=min_sample_s), []
    for n in grid:
        for m in grid:
            f, x = mlp(n, m, hidden, device)
            jacs = jacobians(f, x)
            t = timer.many({name: functools.partial(jacobian, f, x, **kw) for name, kw in METHODS.items()})
            med = {name: t[name].median for name in METHODS}
            cells.append({"n": n, "m": m, "times": {name: t[name].as_dict() for name in METHODS},
                          "forward_vs_reverse": med["forward"] / med["reverse"],
                          "forward_vs_reverse_vectorized": med["forward"] / med["reverse_vectorized"],
                          "fastest": min(med, key=med.get),
                          "max_abs_diff": max(float(np.abs(j - jacs["reverse"]).max()) for j in jacs.values())})
    return {"device": device, "hidden": hidden, "dtype": "float64", "grid": list(grid), "cells": cells,
            "crossover": crossover(cells)}


def crossover(cells):
    """For each m, the largest n at which forward mode beats both reverse ones (None: it never does)."""
    out = {}
    for c in cells:
        wins = c["forward_vs_reverse"] < 1 and c["forward_vs_reverse_vectorized"] < 1
        out.setdefault(str(c["m"]), None)
        if wins:
            out[str(c["m"])] = max(c["n"], out[str(c["m"])] or 0)
    return out


def format_result(result):
    from gpugrad.bench.report import _table, fmt_time

    head = (f"== {result['device']}: full Jacobian of R^n -> R^m, x -> W2 tanh(W1 x + b1) + b2 (hidden "
            f"{result['hidden']}, {result['dtype']}) ==")
    rows = [[c["n"], c["m"], *(fmt_time(c["times"][k]["median_s"]) for k in METHODS),
             f"{c['forward_vs_reverse']:.3g}", f"{c['forward_vs_reverse_vectorized']:.3g}", c["fastest"],
             f"{c['max_abs_diff']:.1e}"] for c in result["cells"]]
    table = _table(["n", "m", *METHODS, "fwd/rev", "fwd/rev_vec", "fastest", "max |ΔJ|"], rows, ">>>>>>><>")
    cross = ", ".join(f"m={m}: n<={n}" if n else f"m={m}: never" for m, n in result["crossover"].items())
    return f"{head}\n{table}\nforward mode beats both reverse modes up to: {cross}"


def plot(results, path):
    """One row per device of two heatmaps over (m, n): log10 of forward's time over reverse's (per output
    element, and vectorized), blue where forward mode wins, red where reverse mode does."""
    from gpugrad.cli.plot import require_matplotlib, save_figure

    plt = require_matplotlib()
    fig, axes = plt.subplots(len(results), 2, figsize=(11, 4.6 * len(results)), squeeze=False,
                             constrained_layout=True)
    for row, res in zip(axes, results):
        grid, cells = res["grid"], {(c["n"], c["m"]): c for c in res["cells"]}
        for ax, key, what in zip(row, ("forward_vs_reverse", "forward_vs_reverse_vectorized"),
                                 ("reverse (one backward per output)", "reverse (vectorized)")):
            r = np.array([[cells[n, m][key] for m in grid] for n in grid])
            lim = max(1.0, float(np.abs(np.log10(r)).max()))
            im = ax.imshow(np.log10(r), cmap="RdBu_r", vmin=-lim, vmax=lim, origin="lower")
            for (i, j), v in np.ndenumerate(r):
                ax.text(j, i, f"{v:.2g}" if v < 100 else f"{v:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if abs(np.log10(v)) > 0.6 * lim else "black")
            ax.set_xticks(range(len(grid)), grid)
            ax.set_yticks(range(len(grid)), grid)
            ax.set(xlabel="m (outputs)", ylabel="n (inputs)",
                   title=f"{res['device']}: time forward / {what}\n(< 1, blue: forward mode wins)")
            fig.colorbar(im, ax=ax, label="log10 time ratio", shrink=0.8)
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def run_cli(args, devices):
    """``gpugrad bench --modes``: measure on each device, print the tables, write --json and --plot."""
    from gpugrad.bench import report
    from gpugrad.cli.plot import PlotUnavailable

    grid = QUICK_GRID if args.quick else GRID
    results = [measure(d, grid, repeats=3 if args.quick else 7) for d in devices]
    for res in results:
        print(format_result(res), flush=True)
    code, out = 0, {"environment": report.environment(), "modes": {r["device"]: r for r in results}}
    for path, write in ((args.json, lambda p: report.write_json(out, p)), (args.plot, lambda p: plot(results, p))):
        try:
            if path:
                write(path)
                print(f"wrote {path}", file=sys.stderr)
        except (OSError, PlotUnavailable) as e:
            print(f"gpugrad bench: error: writing {path}: {e}", file=sys.stderr)
            code = 1
    return code
