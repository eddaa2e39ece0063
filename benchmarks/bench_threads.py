"""BLAS threads next to a busy process: default `gpugrad train` vs the same run with OPENBLAS_NUM_THREADS=1.

OpenBLAS's worker threads spin while they wait for work; on a machine whose cores are taken by another process
they fight it for a core, and a matrix product waits for a worker that is not running.  gpugrad sizes the BLAS
thread pool to the cores that are free (gpugrad/backend/threads.py).  This runs `gpugrad train --quiet` (the
defaults: digits, 64-512-256-10; --epochs as given) as subprocesses, interleaved, several times, on

    a quiet machine | a busy one (one `while True: pass` process pinned to core 0)

with the thread count gpugrad picks ("default"), OPENBLAS_NUM_THREADS=1 ("1") and OPENBLAS_NUM_THREADS=<CPUs>
("all": what OpenBLAS does by itself, gpugrad's behaviour before it sized the pool), and reports the median
training time of each (what `final:` prints as "s training in all") with the ratios.  Targets: busy, default
within 1.5x of 1 thread; quiet, default no slower than "all" by more than noise.  The machine's other load adds
noise: compare the ratios, which come from the same session.

    python benchmarks/bench_threads.py --repeats 5 --epochs 10
    python -m pytest -m slow benchmarks/bench_threads.py      # asserts the busy-machine target
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS")
BUSY_TARGET = 1.5
FINAL = re.compile(r"\(([0-9.]+) s training in all, ([0-9.]+) s wall")


def train_seconds(threads, args=()):
    """(training seconds, wall seconds in the run) of one `gpugrad train --quiet` subprocess; ``threads`` is
    "default" (gpugrad's choice), "1" or "all" (OPENBLAS_NUM_THREADS=1 or the CPU count)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if threads != "default":
        env["OPENBLAS_NUM_THREADS"] = str(os.cpu_count() if threads == "all" else threads)
    # NOTE: cwd too: `python -m` puts the working directory first on sys.path, before PYTHONPATH
    done = subprocess.run([sys.executable, "-m", "gpugrad", "train", "--quiet", "--device", "cpu", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=True)
    found = FINAL.search(done.stdout)
    if found is None:
        raise RuntimeError(f"no final line in the output of gpugrad train: {done.stdout!r} {done.stderr!r}")
    return float(found[1]), float(found[2])


@contextlib.contextmanager
def busy_core(core=0):
    """Another process spinning on one core for the duration (pinned, so it takes exactly that core)."""
    spin = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


def measure(repeats, args=(), configs=("default", "1", "all")):
    """{(machine, threads): [training seconds, ...]} with machine in quiet/busy and threads in ``configs``."""
    times = {(m, t): [] for m in ("quiet", "busy") for t in configs}
    for _ in range(repeats):
        for machine in ("quiet", "busy"):
            with busy_core() if machine == "busy" else contextlib.nullcontext():
                for threads in configs:
                    times[machine, threads].append(train_seconds(threads, args)[0])
    return times


def report(times):
    """Lines of medians and ratios to the default; returns (lines, busy default / 1 thread)."""
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [f"{machine:5} machine, {threads:>7} threads: median {med[machine, threads]:.2f} s training "
             f"(runs: {', '.join(f'{s:.2f}' for s in times[machine, threads])})"
             for machine, threads in times]
    for (machine, threads), m in med.items():
        if threads != "default":
            lines.append(f"{machine}: default / OPENBLAS_NUM_THREADS={'<CPUs>' if threads == 'all' else threads} = "
                         f"{med[machine, 'default'] / m:.2f}x")
    busy = med["busy", "default"] / med["busy", "1"]
    verdict = "met" if busy <= BUSY_TARGET else "MISSED"
    lines.append(f"busy target: default within {BUSY_TARGET}x of 1 thread: {verdict}")
    return lines, busy


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs two cores and os.sched_setaffinity to pin the busy process")
def test_default_threads_next_to_a_busy_process():
    lines, busy = report(measure(repeats=3, args=("--epochs", "10"), configs=("default", "1")))
    print("\n".join(lines))
    assert busy <= BUSY_TARGET, "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=10)
    args = p.parse_args()
    print("\n".join(report(measure(args.repeats, ("--epochs", str(args.epochs))))[0]))


if __name__ == "__main__":
    main()
