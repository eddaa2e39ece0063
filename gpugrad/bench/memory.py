"""Whether ``gpugrad bench --sizes ROWSxCOLS`` fits: the kernels section's arrays against the memory the device has
free (CUDA: the driver's free bytes; the CPU: the host's available memory, within a cgroup or address-space limit),
checked before anything is allocated, so a size that cannot fit is one line instead of an allocation failure
minutes in (or a machine swapping)."""
from __future__ import annotations

import os
from pathlib import Path

try:
    import resource
except ImportError:  # Windows
    resource = None

# The kernels section's peak, in float32 arrays of --sizes: 12.2 measured on the CPU (tracemalloc, 1024x2048:
# inputs cached across cases, a case's outputs, the peak copy's two buffers); a GPU adds the vector copy's two.
KERNEL_ARRAYS = 16


class TooLarge(RuntimeError):
    """--sizes whose arrays cannot fit in the memory the device has."""


def _read_int(path):
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 says "max" for no limit


def _mem_available():
    """MemAvailable of /proc/meminfo (Linux), else the free physical pages (sysconf), else None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    names = getattr(os, "sysconf_names", {})
    if "SC_AVPHYS_PAGES" in names and "SC_PAGE_SIZE" in names:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def host_available():
    """Bytes this process may still allocate on the host, or None where nothing says: the least of the available
    memory, the cgroup's limit less its usage, and RLIMIT_AS less the address space in use."""
    limits = [_mem_available()]
    cap, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if cap is not None and used is not None:
        limits.append(max(cap - used, 0))
    if resource is not None:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        vm = _read_int("/proc/self/statm")  # pages
        if soft != resource.RLIM_INFINITY and vm is not None:
            limits.append(max(soft - vm * os.sysconf("SC_PAGE_SIZE"), 0))
    return min((n for n in limits if n is not None), default=None)


def available(backend):
    """(bytes free for ``backend``'s arrays or None, where they live, in words)."""
    if backend.name != "cuda":
        return host_available(), "the host's available memory"
    free, _ = backend.xp.cuda.runtime.memGetInfo()  # NOTE: all CuPy access goes through the backend's xp
    if backend.simulated:  # its arrays are host arrays
        host = host_available()
        return (free if host is None else min(free, host)), "the simulated device's (host) memory"
    return free, "the GPU's free memory"


def _size(n):
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1000


def check_fits(backend, shape):
    """Raise TooLarge (one line) when the kernels section's arrays of ``shape`` cannot fit in ``backend``'s memory."""
    rows, cols = shape
    need = KERNEL_ARRAYS * rows * cols * 4
    free, where = available(backend)
    if free is not None and need > free:
        raise TooLarge(f"--sizes {rows}x{cols}: the kernels section needs about {_size(need)} on {backend.name} "
                       f"({KERNEL_ARRAYS} float32 arrays of {rows:,} x {cols:,}), more than the {_size(free)} of "
                       f"{where}; give smaller --sizes")
