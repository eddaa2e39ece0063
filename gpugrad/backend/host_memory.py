"""Freed host memory kept for the next step: glibc's malloc thresholds set once, as CuPy's pool keeps device memory.

A CPU training step frees its activations and gradients and allocates the same sizes again in the next step.
glibc's malloc gives each allocation above ``M_MMAP_THRESHOLD`` its own mmap, and on free hands the top of the heap
above ``M_TRIM_THRESHOLD`` back to the kernel, so every step faults the same pages in again, zeroed. glibc raises
both thresholds by itself, but only as far as the largest mmapped block freed so far (the trim threshold to twice
that), which a step's transient heap outgrows: the 784-1024-1024-10 MLP step took 2,000 minor page faults at batch
64 and 3,400 at batch 512, every step.

So at import gpugrad fixes the thresholds at the ceiling glibc's own adjustment can reach on a 64-bit machine
(``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB, and twice that for trimming; glibc's malloc/malloc.c): blocks under
32 MiB come from the heap, and up to 64 MiB freed at its top stays in the process for reuse. The step then takes
no page fault. Left alone:
- a process whose environment already tunes malloc (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
  ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``, or ``glibc.malloc.*`` in ``GLIBC_TUNABLES``): the user's settings win;
- ``GPUGRAD_HOST_MALLOC=system``: glibc's defaults;
- a C library without ``mallopt`` (musl, macOS, Windows).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

# glibc's malloc.h
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: 4 * 1024 * 1024 * sizeof(long)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc sets with each raise of the mmap threshold
CHOICES = ("keep", "system")
USER_TUNING = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


@dataclass(frozen=True)
class HostMalloc:
    """What was done to the process's malloc: ``policy`` is "keep" (the thresholds above are set), "user" (the
    environment tunes malloc), "system" (asked for) or "unavailable" (no glibc mallopt, or it refused)."""
    policy: str
    mmap_threshold: int | None = None
    trim_threshold: int | None = None


def _libc():
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):  # the M_* above are glibc's
        return None
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def configure(environ=os.environ, mallopt=_libc):
    """Set the thresholds unless the environment says otherwise; ``mallopt``: a callable giving glibc's mallopt or
    None. Returns the :class:`HostMalloc` that says what was done."""
    choice = environ.get("GPUGRAD_HOST_MALLOC", "keep").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"GPUGRAD_HOST_MALLOC must be one of {', '.join(CHOICES)}, got "
                         f"{environ['GPUGRAD_HOST_MALLOC']!r}: 'keep' keeps freed host memory for reuse, "
                         f"'system' leaves glibc's malloc as it is")
    if choice == "system":
        return HostMalloc("system")
    if any(name in environ for name in USER_TUNING) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return HostMalloc("user")
    call = mallopt()
    # NOTE: mmap first: setting either threshold turns glibc's own adjustment off, and a trim threshold alone
    # would leave every block over 128 KiB on its own mmap (more page faults than before)
    if call is None or not call(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        return HostMalloc("unavailable")
    if not call(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return HostMalloc("keep", MMAP_THRESHOLD)
    return HostMalloc("keep", MMAP_THRESHOLD, TRIM_THRESHOLD)


STATE = configure()
