"""The CUDA backend: CuPy arrays, cuBLAS matmuls through CuPy, our kernels from ``kernels/``.

CuPy is imported here and nowhere else (kernel launchers go through ``backend/kernels.py``), and only when
a CUDA device is asked for, so CPU-only installs never import it.
"""
from __future__ import annotations

import functools

import numpy as np

from gpugrad.backend import Backend
from gpugrad.backend.device import Device

INSTALL_HINT = "install the CUDA extra: pip install 'gpugrad[cuda]' (CuPy for CUDA 13)"


@functools.cache
def _probe():
    """(cupy module or None, device count, reason when unusable). Never raises."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA library found at import
        return None, 0, f"CuPy is not importable ({type(e).__name__}: {e}); {INSTALL_HINT}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver / no device: CuPy raises CUDARuntimeError here
        return cupy, 0, f"CuPy is installed but no CUDA device is usable ({type(e).__name__}: {e})"
    if count == 0:
        return cupy, 0, "CuPy is installed but the CUDA driver reports no device"
    return cupy, count, ""


def is_available() -> bool:
    return _probe()[1] > 0


def device_count() -> int:
    return _probe()[1]


def unavailable_reason() -> str:
    return _probe()[2]


def cupy_module():
    cupy, count, reason = _probe()
    if count == 0:
        raise RuntimeError(f"CUDA is not available: {reason}. Use device='cpu' (or GPUGRAD_DEVICE=cpu).")
    return cupy


def device_index_of(array) -> int:
    cupy, _, _ = _probe()
    if cupy is not None and isinstance(array, cupy.ndarray):
        return array.device.id
    raise TypeError(f"expected a NumPy or CuPy array, got {type(array).__name__}")


class CudaBackend(Backend):
    def __init__(self, device: Device):
        cupy = cupy_module()
        if device.index >= device_count():
            raise RuntimeError(f"{device} does not exist: {device_count()} CUDA device(s) visible")
        super().__init__("cuda", cupy, device)
        self._cupy = cupy

    def asarray(self, data, dtype=None):
        with self._cupy.cuda.Device(self.device.index):
            return self._cupy.asarray(data, dtype=dtype)

    def to_host(self, array) -> np.ndarray:
        return self._cupy.asnumpy(array)

    def accumulate_(self, acc, g):
        from gpugrad.backend import kernels

        return kernels.accumulate_(self.xp, acc, g)
