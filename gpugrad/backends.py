"""``torch.backends``' availability queries, answered for gpugrad: tutorials pick their device with them
(``torch.backends.mps.is_available()``). gpugrad runs on NumPy (CPU) and CuPy (CUDA) only."""
from __future__ import annotations

from types import SimpleNamespace

from gpugrad.backend import cuda as _cuda_backend

mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)  # Apple's Metal backend: not supported


cuda = SimpleNamespace(is_built=_cuda_backend.is_available)
