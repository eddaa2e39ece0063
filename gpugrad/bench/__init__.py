"""``gpugrad.bench``: the workloads behind ``gpugrad bench`` and ``benchmarks/*.py``.

``timing`` (median and IQR timers: host clock on the CPU, CUDA events on the GPU), ``workloads`` (what is measured,
with byte and flop counts and hand-written baselines, one module per family), ``suites`` (a ``gpugrad bench`` run of
one device) and ``report`` (tables, JSON, plot). Importing this package imports neither CuPy nor PyTorch; both are
loaded only when a workload needs them.
"""
from gpugrad.bench.timing import Timer, Timing, measure, measure_many, timer_for

__all__ = ["Timer", "Timing", "measure", "measure_many", "timer_for"]
