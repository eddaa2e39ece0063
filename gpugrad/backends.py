"""``torch.backends``' availability queries, answered for gpugrad: tutorials pick their device with them
(``torch.backends.mps.is_available()``). gpugrad runs on NumPy (CPU) and CuPy (CUDA) only."""
from __future__ import annotations

from types import SimpleNamespace

mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)  # Apple's Metal backend: not supported


def _cuda_available():
    from gpugrad import cuda

    return cuda.is_available()


cuda = SimpleNamespace(is_built=_cuda_available)
