"""Timers: median and interquartile range over repeated samples, on the host clock or on CUDA events.

A *sample* is ``number`` back-to-back calls of ``fn``; its time divided by ``number`` is one per-call figure.
``number`` is calibrated (unless given) so that a sample lasts at least ``min_sample_s``, which keeps clock
resolution and launch jitter out of short kernels. The summary is the median and the IQR (q3 - q1), robust on
a shared, noisy machine where a mean and standard deviation are pulled around by a few slow outliers.
:func:`measure_many` interleaves the samples of several functions (a, b, c, a, b, c, ...), so that load which
comes and goes during a run hits all of them alike and their ratios hold even when absolute times do not.

>>> t = measure(lambda: sum(range(100)), repeats=5)
>>> t.median > 0 and t.q1 <= t.median <= t.q3
True
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call: ``samples`` (one per repeat), their median and quartiles; ``number`` calls per sample."""

    samples: tuple
    number: int = 1

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def q1(self) -> float:
        return float(np.percentile(self.samples, 25))

    @property
    def q3(self) -> float:
        return float(np.percentile(self.samples, 75))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def spread(self) -> float:
        """IQR relative to the median: 0.05 means the middle half of the samples spans 5% of it."""
        return self.iqr / self.median if self.median > 0 else 0.0

    def as_dict(self) -> dict:
        return {"median_s": self.median, "q1_s": self.q1, "q3_s": self.q3, "iqr_s": self.iqr,
                "repeats": len(self.samples), "number": self.number}


class HostClock:
    """Wall-clock seconds of n calls; ``clock`` is injectable so the statistics can be tested on a fake clock."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock

    def run(self, fn, n):
        t0 = self.clock()
        for _ in range(n):
            fn()
        return self.clock() - t0


class CudaClock:
    """GPU seconds of n calls between two CUDA events on the current stream (``xp``: the CUDA backend's CuPy).

    NOTE: events time the stream, so host overhead counts only where it starves the GPU: what a throughput figure
    should include and a kernel figure should not.
    """

    def __init__(self, xp):
        self.xp = xp
        self.start, self.end = xp.cuda.Event(), xp.cuda.Event()

    def run(self, fn, n):
        self.start.record()
        for _ in range(n):
            fn()
        self.end.record()
        self.end.synchronize()
        return self.xp.cuda.get_elapsed_time(self.start, self.end) / 1e3  # ms -> s


def _calibrate(clock, fn, min_sample_s, first, max_number=1 << 20):
    """Smallest power of two ``number`` whose sample lasts >= min_sample_s; ``first`` is a timed single call."""
    number, elapsed = 1, first
    while elapsed < min_sample_s and number < max_number:
        # straight to the estimate when the last sample says how far off we are (at least doubling)
        guess = min_sample_s / max(elapsed, 1e-9) * number
        number = min(max_number, max(2 * number, 1 << math.ceil(math.log2(guess))))
        elapsed = clock.run(fn, number)
    return number


def measure_many(fns, *, repeats=7, warmup=1, number=None, min_sample_s=0.005, clock=None, settle_s=0.0) -> dict:
    """{name: Timing} for a dict of functions, their samples interleaved round-robin after each one's warm-up
    (the last warm-up call is timed and seeds the calibration of ``number``). ``settle_s``: before each sample the
    function also runs untimed for that long. NOTE: for CPU peers with thread pools of their own (NumPy's OpenBLAS,
    torch's OpenMP): a pool's idle workers spin for a while after its last product, and a peer sampled in that
    window shares the cores with them (the MLP step at batch 64: torch 19.6 ms right after gpugrad's step, 4.8 ms
    after 0.2 s of its own steps)."""
    clock = clock or HostClock()
    numbers = {}
    for name, fn in fns.items():
        for _ in range(max(warmup, 1) - 1):
            fn()
        first = clock.run(fn, 1)
        numbers[name] = number or _calibrate(clock, fn, min_sample_s, first)
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _settle(fn, settle_s)
            samples[name].append(clock.run(fn, numbers[name]) / numbers[name])
    return {name: Timing(tuple(s), numbers[name]) for name, s in samples.items()}


def _settle(fn, seconds):
    if seconds > 0:
        end = time.perf_counter() + seconds
        fn()
        while time.perf_counter() < end:
            fn()


def measure(fn, **kw) -> Timing:
    """:func:`measure_many` for one function."""
    return measure_many({"fn": fn}, **kw)["fn"]


class Timer:
    """The timer for one backend: CUDA events on cuda (after >= 2 warm-up calls, which also compile and cache the
    kernels), the host clock on cpu; ``timer(fn)`` -> Timing, ``timer.many({name: fn})`` -> {name: Timing}."""

    def __init__(self, backend, *, repeats, warmup=1, min_sample_s=None):
        cuda = backend.name == "cuda"
        self.clock = CudaClock(backend.xp) if cuda else HostClock()
        self.kw = {"repeats": repeats, "warmup": max(warmup, 2) if cuda else warmup,
                   "min_sample_s": min_sample_s or (0.001 if cuda else 0.005)}
        self.sync = backend.xp.cuda.get_current_stream().synchronize if cuda else (lambda: None)

    def many(self, fns, **kw) -> dict:
        out = measure_many(fns, clock=self.clock, **{**self.kw, **kw})
        self.sync()
        return out

    def __call__(self, fn, **kw) -> Timing:
        return self.many({"fn": fn}, **kw)["fn"]


def timer_for(backend, **kw) -> Timer:
    return Timer(backend, **kw)


def synced(fn, backend):
    """fn, finishing its GPU work (CuPy's and PyTorch's, on any stream) before returning: for host-clock timers
    such as pytest-benchmark's. The identity on the CPU."""
    if backend.name != "cuda":
        return fn
    device = backend.xp.cuda.Device(backend.device.index)

    def run():
        out = fn()
        device.synchronize()
        return out

    return run
