"""The CUDA backend: CuPy arrays on one device, gpugrad's kernels (``backend/kernels``) and cuBLAS calls."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import capture, kernels
from gpugrad.backend.base import Backend
from gpugrad.backend.cuda import cupy_module, device_count
from gpugrad.backend.device import Device
from gpugrad.backend.status import raise_pending


class CudaBackend(Backend):
    def __init__(self, device: Device):
        cupy = cupy_module()
        if device.index >= device_count():
            raise RuntimeError(f"{device} does not exist: {device_count()} CUDA device(s) visible")
        super().__init__("cuda", cupy, device, kernels)
        self._cupy = cupy
        self.simulated = getattr(cupy, "simulated", False)  # real CuPy has no such attribute
        self.on_host = False
        # Entered around every op, backward node and optimizer step on this device: CuPy launches on the
        # current device, so cuda:1 work must make device 1 current (CuPy's Device contexts nest). With one device
        # visible it is always current (every thread's CUDA device starts at 0): no scope, no per-op device calls.
        self.device_scope = cupy.cuda.Device(device.index) if device_count() > 1 else None

    def to_host(self, array, what="backend.to_host") -> np.ndarray:
        capture.refuse_sync(what)
        raise_pending(self, None)  # every host read raises the device's failed range checks first
        return self._cupy.asnumpy(array)

    def asarray(self, data, dtype=None):
        if capture.CAPTURING and not isinstance(data, self.array_type):
            raise capture.refusal("copying host data to the device (backend.asarray)",
                                  "a host-to-device copy would be replayed from memory the host reuses")
        with self._cupy.cuda.Device(self.device.index):
            return self._cupy.asarray(data, dtype=dtype)

    def accumulate_(self, acc, g):
        return self.kernels.accumulate_(self.xp, acc, g)
