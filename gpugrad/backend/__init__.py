"""Backends: where a tensor's data lives and which array module (``xp``) computes on it.

The choice is made once, by data, here: :func:`backend_of` is the package's only type check on arrays.
Ops are written against ``xp``; the CUDA backend imports CuPy lazily, so ``import gpugrad`` never needs it.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from gpugrad.backend import device as _device
from gpugrad.backend.device import Device, parse_device


class Backend:
    """One device's array module plus the helpers the engine needs.

    ``name`` selects an op's optional fast path: ``forward_<name>`` / ``backward_<name>``.
    """

    name: str
    xp: object
    device_scope = None  # a context manager making this device current (CUDA), or None (CPU)
    simulated = False  # True on the CUDA simulator (gpugrad/testing/cuda_sim): its timings are no GPU's

    def __init__(self, name, xp, device):
        self.name = name
        self.xp = xp
        self.array_type = xp.ndarray
        self.device = device
        self.forward_name = f"forward_{name}"
        self.backward_name = f"backward_{name}"

    @property
    def kernels(self):
        """This device's implementation of the kernel functions: the NumPy references on the CPU
        (``backend/reference/``), the CUDA kernels on CUDA (``backend/kernels/``); same names and signatures."""
        from gpugrad.backend import kernels, reference

        return reference if self.name == "cpu" else kernels

    def asarray(self, data, dtype=None):
        return self.xp.asarray(data, dtype=dtype)

    def as_array(self, value):
        """NumPy turns 0-d results into immutable scalars (np.float32): make them 0-d arrays again, so every
        tensor holds an array that in-place accumulation can write into."""
        return value if isinstance(value, self.array_type) else self.xp.asarray(value)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def accumulate_(self, acc, g):
        """acc += g in place (acc owns its buffer)."""
        self.xp.add(acc, g, out=acc)
        return acc

    def __repr__(self):
        return f"Backend({self.device})"


CPU = Backend("cpu", np, Device("cpu"))
_cuda_backends: dict[int, Backend] = {}


_NO_SCOPE = contextlib.nullcontext()


def on(backend: Backend):
    """``with on(be):`` runs CuPy work on ``be``'s device (nothing to do on the CPU)."""
    return backend.device_scope or _NO_SCOPE


def get_backend(device) -> Backend:
    """Backend for a device spec ("cpu", "cuda", "cuda:1", Device or None for the default device)."""
    dev = default_device() if device is None else parse_device(device)
    if dev.type == "cpu":
        return CPU
    be = _cuda_backends.get(dev.index)
    if be is None:
        from gpugrad.backend import cuda  # lazy: only a CUDA request imports CuPy

        be = _cuda_backends[dev.index] = cuda.CudaBackend(dev)
    return be


def backend_of(array) -> Backend:
    """The backend that owns ``array``: NumPy arrays are CPU; anything else must be a CuPy array."""
    if isinstance(array, np.ndarray):
        return CPU
    from gpugrad.backend import cuda

    index = cuda.device_index_of(array)  # raises TypeError for foreign objects
    return get_backend(Device("cuda", index))


def is_array(obj) -> bool:
    """A NumPy or CuPy array, told without importing CuPy (``backend_of`` then checks the type for real)."""
    if isinstance(obj, np.ndarray):
        return True
    t = type(obj)
    return t.__name__ == "ndarray" and t.__module__.partition(".")[0] == "cupy"


def default_device() -> Device:
    """``set_default_device``'s (or an enclosing ``with gpugrad.device(...)``'s) choice, else CUDA when available,
    else CPU; ``GPUGRAD_DEVICE`` overrides the last two (e.g. ``GPUGRAD_DEVICE=cpu``)."""
    if _device._STACK[-1] is not None:
        return parse_device(_device._STACK[-1])
    env = os.environ.get("GPUGRAD_DEVICE")
    if env:
        return parse_device(env)
    from gpugrad.backend import cuda

    return Device("cuda", 0) if cuda.is_available() else Device("cpu")
