"""The backend protocol: one device's array module (``xp``) plus the helpers the engine needs."""
from __future__ import annotations

import contextlib

import numpy as np

from gpugrad.backend import reference
from gpugrad.backend.device import Device


class Backend:
    """One device's array module plus the helpers the engine needs.

    ``name`` selects an op's optional fast path: ``forward_<name>`` / ``backward_<name>``.
    """

    name: str
    xp: object
    device_scope = None  # a context manager making this device current (CUDA with several devices), or None
    on_host = True  # the CPU: no device scope, no capture
    simulated = False  # True on the CUDA simulator (gpugrad/testing/cuda_sim): its timings are no GPU's

    def __init__(self, name, xp, device, kernels=reference):
        self.name = name
        # This device's implementation of the kernel functions: the NumPy references on the CPU
        # (backend/reference/), the CUDA launchers on CUDA (backend/kernels/); same names and signatures.
        self.kernels = kernels
        self.xp = xp
        self.array_type = xp.ndarray
        self.device = device
        self.forward_name = f"forward_{name}"
        self.backward_name = f"backward_{name}"

    def asarray(self, data, dtype=None):
        return self.xp.asarray(data, dtype=dtype)

    def as_array(self, value):
        """NumPy turns 0-d results into immutable scalars (np.float32): make them 0-d arrays again, so every
        tensor holds an array that in-place accumulation can write into."""
        return value if isinstance(value, self.array_type) else self.xp.asarray(value)

    def to_host(self, array, what=None) -> np.ndarray:
        return np.asarray(array)

    def accumulate_(self, acc, g):
        """acc += g in place (acc owns its buffer)."""
        self.xp.add(acc, g, out=acc)
        return acc

    def __repr__(self):
        return f"Backend({self.device})"


CPU = Backend("cpu", np, Device("cpu"), reference)
_NO_SCOPE = contextlib.nullcontext()


def on(backend: Backend):
    """``with on(be):`` runs CuPy work on ``be``'s device (nothing to do on the CPU)."""
    return backend.device_scope or _NO_SCOPE


def is_array(obj) -> bool:
    """A NumPy or CuPy array, told without importing CuPy (``backend_of`` then checks the type for real)."""
    if isinstance(obj, np.ndarray):
        return True
    t = type(obj)
    return t.__name__ == "ndarray" and t.__module__.partition(".")[0] == "cupy"
