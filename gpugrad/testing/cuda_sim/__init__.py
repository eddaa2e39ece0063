"""A strict simulated CUDA device: CuPy's API on the CPU, so the whole CUDA path runs in CI without a GPU.

``GPUGRAD_CUDA_SIM=1`` (or ``=2`` for two devices) makes gpugrad's CUDA backend use :func:`module` in place of
``cupy``. The simulated module offers only what CuPy 14 offers (checked against ``cupy_namespace.json``, which
a test compares with the installed CuPy); arrays are not NumPy arrays and refuse implicit host conversion; custom
kernels (``RawModule``, ``ElementwiseKernel``) run their exact CUDA source on the emulator; every launch, host
sync, allocation and transfer is counted::

    from gpugrad.testing import cuda_sim
    cuda_sim.reset_counters()
    loss = step(); cuda_sim.counters()   # {'launches': 31, 'syncs': 0, 'allocs': 40, 'h2d': 0, 'd2h': 0, ...}
"""
from __future__ import annotations

import os
import types

from gpugrad.testing.cuda_sim._state import SyncForbidden, counters, forbid_syncs, reset_counters, trace

__all__ = ["module", "cublas_library", "enabled", "requested_devices", "counters", "reset_counters", "trace", "forbid_syncs",
           "SyncForbidden"]

ENV = "GPUGRAD_CUDA_SIM"
_module: types.ModuleType | None = None


def requested_devices() -> int:
    """How many simulated devices ``GPUGRAD_CUDA_SIM`` asks for (0: the simulator is off)."""
    value = os.environ.get(ENV, "").strip()
    if not value or value == "0":
        return 0
    if not value.isdigit():
        raise ValueError(f"{ENV} must be a number of simulated devices (1 or 2), got {value!r}")
    return int(value)


def enabled() -> bool:
    return requested_devices() > 0


class PerformanceWarning(RuntimeWarning):
    """cupy._util.PerformanceWarning: a RuntimeWarning, so pytest's error::RuntimeWarning makes it an error."""


class _Module(types.ModuleType):
    def __getattr__(self, name):
        from gpugrad.testing.cuda_sim.namespace import load

        ns = load()
        if name in ns["functions"] or name in ns["ufuncs"] or name in ns["classes"]:
            raise AttributeError(f"cupy.{name} exists in CuPy {ns['cupy_version']} but gpugrad's simulated device "
                                 "does not implement it (add it to gpugrad/testing/cuda_sim)")
        raise AttributeError(f"module 'cupy' has no attribute {name!r} (not in CuPy {ns['cupy_version']})")


def cublas_library():
    """The stand-in for libcublas that gpugrad's backend calls on the simulated device (cuda_sim/cublas.py)."""
    from gpugrad.testing.cuda_sim import cublas

    return cublas


def module(devices: int | None = None) -> types.ModuleType:
    """The simulated ``cupy`` module, with ``devices`` simulated GPUs (default: ``GPUGRAD_CUDA_SIM`` or 1)."""
    global _module
    import numpy as np

    from gpugrad.testing.cuda_sim import _state, array, cuda, functions, kernels, random
    from gpugrad.testing.cuda_sim.namespace import load

    _state.device_count = devices or requested_devices() or _state.device_count
    if _module is None:
        ns = load()
        m = _Module("cupy", __doc__)
        array._install_methods()
        for name, fn in functions.build().items():
            setattr(m, name, fn)
        for name in ns["classes"]:
            if name not in ("ndarray", "ufunc") and hasattr(np, name):
                setattr(m, name, getattr(np, name))
        for name in ns["constants"]:
            if hasattr(np, name):
                setattr(m, name, getattr(np, name))
        m.ndarray, m.ufunc = array.ndarray, functions.ufunc
        m.RawModule, m.RawKernel, m.ElementwiseKernel = kernels.RawModule, kernels.RawKernel, kernels.ElementwiseKernel
        m.cuda, m.random = cuda.build(), random.build()
        m.__version__ = ns["cupy_version"]
        m._util = types.SimpleNamespace(PerformanceWarning=PerformanceWarning)
        m.simulated = True
        _module = m
    return _module
