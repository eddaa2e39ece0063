"""Backends: where a tensor's data lives and which array module (``xp``) computes on it.

The choice is made once, by data, here: :func:`backend_of` is the package's only type check on arrays.
Ops are written against ``xp``; the CUDA backend imports CuPy lazily, so ``import gpugrad`` never needs it.
"""
from __future__ import annotations

from gpugrad.backend import cuda  # noqa: F401  (gpugrad.backend.cuda: is_available and the other probes)
from gpugrad.backend.base import CPU  # noqa: F401  (the package's API)
from gpugrad.backend.base import Backend, is_array, on
from gpugrad.backend.device import Device, parse_device  # noqa: F401
from gpugrad.backend.host_memory import STATE as HOST_MALLOC  # noqa: F401  (malloc's thresholds, set at import)
from gpugrad.backend.select import backend_of, default_device, get_backend  # noqa: F401
