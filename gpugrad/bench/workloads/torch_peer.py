"""PyTorch as the peer of every workload, when it is installed (and, for the cuda device, built with CUDA; never
on the simulated device): loaded lazily, arrays handed over without a copy."""
from __future__ import annotations

import functools
import importlib.util

from gpugrad.backend import get_backend


@functools.cache
def torch_module():
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def torch_unavailable_reason(device_name):
    """None when PyTorch can run on this device, else why not."""
    th = torch_module()
    if th is None:
        return "PyTorch is not installed (pip install 'gpugrad[oracle]')"
    if device_name == "cuda" and not th.cuda.is_available():
        return f"PyTorch {th.__version__} has no usable CUDA device"
    if device_name == "cuda" and get_backend("cuda").simulated:
        return "the CUDA device is simulated (GPUGRAD_CUDA_SIM): PyTorch cannot run on it"
    return None


def torch_for(backend):
    """(torch module, torch device) for a gpugrad backend, or (None, reason)."""
    reason = torch_unavailable_reason(backend.name)
    if reason:
        return None, reason
    th = torch_module()
    return th, th.device("cuda", backend.device.index) if backend.name == "cuda" else th.device("cpu")


def _to_torch(th, dev, a):
    if not (hasattr(a, "shape") and hasattr(a, "nbytes")):
        return a
    if dev.type == "cpu":
        return th.from_numpy(a)  # shares memory (and strides): in-place peers update this array
    return th.from_dlpack(a)  # CuPy -> torch without a copy
