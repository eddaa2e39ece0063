"""How many threads NumPy's BLAS (OpenBLAS) may use for a CPU matrix product: as many as there are free cores.

OpenBLAS starts one worker per core and its idle workers spin while they wait for the next product.  Next to a
busy process that is ruinous: a product waits for a worker that has no core, and the spinning workers take time
from the process that owns the core (`gpugrad train` beside one busy process on 2 cores ran 7.8x slower than with
``OPENBLAS_NUM_THREADS=1``; benchmarks/bench_threads.py).  So the CPU matrix products (ops/matmul.py) call
:func:`fit` with their size, and the pool gets:

- the count the user pinned: ``gpugrad.set_num_threads(n)``, else ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``
  or ``OMP_NUM_THREADS`` from the environment (the first that is a positive integer);
- otherwise one thread per core that other processes leave free (at least 1, at most
  :func:`get_num_threads`), measured from ``/proc/stat`` over the last :data:`RECHECK_S` seconds at most once
  per that period, never per product.

A product of at most :data:`SMALL_GEMM` multiply-adds changes nothing (OpenBLAS runs those on the calling thread
anyway), and the pool's limit is only changed when the wanted count differs from the one last set: a change
costs ~5 µs (threadpoolctl), the check a clock read.
"""
from __future__ import annotations

import math
import numbers
import os
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from threadpoolctl import ThreadpoolController

# OpenBLAS interface/gemm.c: m*n*k <= SMP_THRESHOLD_MIN (65536) * GEMM_MULTITHREAD_THRESHOLD (4) runs on 1 thread
SMALL_GEMM = 65536 * 4
RECHECK_S = 0.5  # how often the free cores are measured again (a /proc/stat read costs ~40 µs)
MIN_WINDOW_S = 0.05  # a shorter measurement is too coarse for /proc/stat's 10 ms ticks: keep the last decision
# In the order they win. OpenBLAS reads OPENBLAS_NUM_THREADS before OMP_NUM_THREADS; torch reads MKL_NUM_THREADS
# before OMP_NUM_THREADS (its MKL does), and gpugrad keeps both orders.
ENV_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def usable_cpus():
    """The CPUs this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores(cpus, topology="/sys/devices/system/cpu"):
    """How many physical cores ``cpus`` span (hyperthreads of one core count once): torch's default thread count.
    Without Linux's topology files, every CPU counts as a core."""
    cores = set()
    for cpu in cpus:
        try:
            with open(f"{topology}/cpu{cpu}/topology/core_cpus_list") as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def env_threads(environ=os.environ):
    """The thread count the environment pins (the first of ENV_VARS that is a positive integer, at most the
    machine's CPU count, as torch and OpenBLAS cap it), or None. A value that is not one is ignored, with a
    warning, as torch ignores it."""
    for name in ENV_VARS:
        text = environ.get(name)
        if text is None:
            continue
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n > 0:
            return min(n, os.cpu_count() or n)
        warnings.warn(f"{name}={text!r} is not a positive integer; gpugrad ignores it", stacklevel=2)
    return None


class ProcStatLoad:
    """Cores that other processes kept busy: the busy time of this process's CPUs in ``/proc/stat`` minus this
    process's own CPU time (all its threads, the BLAS workers' spinning included), over the wall time since the
    previous call (the first window starts when this is made, at import). None: no usable measurement (too short
    a window, or no ``/proc/stat``; then os.getloadavg() stands in, where there is one)."""

    def __init__(self, cpus, path="/proc/stat", clock=time.monotonic, times=os.times):
        self.names, self.path, self.clock, self.times = {f"cpu{c}".encode() for c in cpus}, path, clock, times
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last = self._sample()

    def _sample(self):
        try:
            with open(self.path, "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        busy = 0
        for line in lines[1:]:  # the first line sums all CPUs
            if not line.startswith(b"cpu"):
                break
            name, *ticks = line.split()
            if name in self.names:  # user nice system idle iowait irq softirq steal: idle and iowait are free
                busy += sum(map(int, ticks[:8])) - int(ticks[3]) - int(ticks[4])
        own = self.times()
        return self.clock(), busy / self.tick, own.user + own.system

    def __call__(self):
        now = self._sample()
        if now is None or self.last is None:
            return _loadavg_others()
        (t0, busy0, own0), (t1, busy1, own1) = self.last, now
        if t1 - t0 < MIN_WINDOW_S:
            return None
        self.last = now
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)


def _loadavg_others():
    """Other processes' runnable threads over the last minute, less this one (a coarse stand-in)."""
    if not hasattr(os, "getloadavg"):
        return None
    return max(0.0, os.getloadavg()[0] - 1)


def blas_libraries():
    """The BLAS libraries loaded in this process, as threadpoolctl's controllers (a scan that takes ~2 ms)."""
    return ThreadpoolController().select(user_api="blas").lib_controllers


class BlasPool:
    """NumPy's BLAS thread pools, through threadpoolctl; found at the first change (scanning the loaded
    libraries takes ~2 ms, which ``import gpugrad`` need not pay)."""

    def __init__(self):
        self.libs = None

    def set(self, n):
        if self.libs is None:
            self.libs = blas_libraries()
        for lib in self.libs:
            lib.set_num_threads(n)


class BlasThreads:
    """The policy: ``fit()`` before a large product sets the pool to ``wanted()`` when that changed.
    ``load()`` -> cores other processes keep busy (or None: unknown, keep the last decision); ``cpus``: how many
    CPUs this process may use; ``cap``: the most threads the automatic policy gives (torch's default count)."""

    def __init__(self, pool, load, cpus, cap, pinned=None, clock=time.monotonic):
        self.pool, self.load, self.cpus, self.cap, self.clock = pool, load, cpus, cap, clock
        self.pinned = pinned  # set_num_threads or the environment; None: automatic
        self.current = None  # what the pool was last set to (None: never, it runs OpenBLAS's own count)
        self.next_check = -math.inf
        self.lock = threading.Lock()

    def wanted(self):
        """The thread count for a large product now (None: leave the pool as it is)."""
        if self.pinned is not None:
            return self.pinned
        others = self.load()
        if others is None:
            return None
        taken = int(others + 0.5)  # NOTE: a core another process keeps at least half busy is not free
        return max(1, min(self.cap, self.cpus - taken))

    def fit(self):
        now = self.clock()
        if now < self.next_check:
            return
        with self.lock:
            self.next_check = now + RECHECK_S
            n = self.wanted()
            if n is not None and n != self.current:
                self.pool.set(n)
                self.current = n

    def pin(self, n):
        with self.lock:
            self.pinned = n
            self.pool.set(n)
            self.current = n


def _policy():
    cpus = usable_cpus()
    return BlasThreads(BlasPool(), ProcStatLoad(cpus), len(cpus), physical_cores(cpus), pinned=env_threads())


POLICY = _policy()


def fit(xp, work):
    """Size NumPy's BLAS pool for a product of ``work`` multiply-adds (m*k*n) about to run on ``xp``."""
    if work > SMALL_GEMM and xp is np:
        POLICY.fit()


# Below this many elements an elementwise update stays on the calling thread: handing half of it to a helper costs
# ~30 µs, the time one core takes to update ~100k float32 elements from memory.
SPLIT_ELEMENTS = 1 << 18
_HELPERS = {}  # thread count -> its ThreadPoolExecutor (made at first use: import gpugrad starts no thread)
_HELPERS_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: its pools would never run
    os.register_at_fork(after_in_child=_HELPERS.clear)


def split_count(elements):
    """How many threads an elementwise CPU update of ``elements`` elements should use: the BLAS pool's count (what
    the user pinned, or the free cores last measured; 1 before any large product measured them), 1 when small."""
    if elements < SPLIT_ELEMENTS:
        return 1
    return POLICY.pinned if POLICY.pinned is not None else (POLICY.current or 1)


def run_split(run, count, threads):
    """``run(start, stop)`` over ``range(count)`` cut into ``threads`` contiguous parts: the calling thread takes
    the first part and helper threads the rest (NumPy releases the GIL inside its loops, so the parts overlap).
    The caller's parts must touch disjoint memory. Every part ends before anything is raised here (the caller's
    error first, else the first failing helper's), so no helper still writes into memory the caller gave up."""
    threads = max(1, min(threads, count))
    if threads == 1:
        run(0, count)
        return
    with _HELPERS_LOCK:
        pool = _HELPERS.get(threads)
        if pool is None:
            pool = _HELPERS[threads] = ThreadPoolExecutor(threads - 1, thread_name_prefix="gpugrad-update")
    cuts = [count * i // threads for i in range(threads + 1)]
    futures = [pool.submit(run, cuts[i], cuts[i + 1]) for i in range(1, threads)]
    try:
        run(cuts[0], cuts[1])
    finally:
        wait(futures)
    for f in futures:
        f.result()


def set_num_threads(n):
    """Use ``n`` BLAS threads for CPU matrix products from now on (no automatic sizing), as torch.set_num_threads."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise RuntimeError(f"set_num_threads expects an int, but got {type(n).__name__}")
    if not -2**63 <= n < 2**31:  # torch reads a C long, then an int
        raise ValueError("Overflow when unpacking long")
    if n <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    POLICY.pin(int(n))


def get_num_threads():
    """The BLAS thread count for CPU matrix products, as torch.get_num_threads: what set_num_threads or the
    environment pinned, else one per physical core this process may use. Unpinned, a busy machine gets fewer."""
    return POLICY.pinned if POLICY.pinned is not None else POLICY.cap
