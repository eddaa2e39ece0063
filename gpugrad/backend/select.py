"""Which backend a device spec or an array belongs to: the package's only type check on arrays (``backend_of``)."""
from __future__ import annotations

import os

import numpy as np

from gpugrad.backend import cuda, device as _device
from gpugrad.backend.base import CPU, Backend
from gpugrad.backend.cuda_backend import CudaBackend
from gpugrad.backend.device import Device, parse_device

_cuda_backends: dict[int, Backend] = {}


def get_backend(device) -> Backend:
    """Backend for a device spec ("cpu", "cuda", "cuda:1", Device or None for the default device)."""
    dev = default_device() if device is None else parse_device(device)
    if dev.type == "cpu":
        return CPU
    be = _cuda_backends.get(dev.index)
    if be is None:  # only a CUDA request imports CuPy
        be = _cuda_backends[dev.index] = CudaBackend(dev)
    return be


def backend_of(array) -> Backend:
    """The backend that owns ``array``: NumPy arrays are CPU; anything else must be a CuPy array."""
    if isinstance(array, np.ndarray):
        return CPU
    index = cuda.device_index_of(array)  # raises TypeError for foreign objects
    return get_backend(Device("cuda", index))


def default_device() -> Device:
    """``set_default_device``'s (or an enclosing ``with gpugrad.device(...)``'s) choice, else CUDA when available,
    else CPU; ``GPUGRAD_DEVICE`` overrides the last two (e.g. ``GPUGRAD_DEVICE=cpu``)."""
    if _device._STACK[-1] is not None:
        return parse_device(_device._STACK[-1])
    env = os.environ.get("GPUGRAD_DEVICE")
    if env:
        return parse_device(env)
    return Device("cuda", 0) if cuda.is_available() else Device("cpu")
