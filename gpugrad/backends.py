"""``torch.backends``' switches and availability queries, answered for gpugrad: tutorials pick their device with them
(``torch.backends.mps.is_available()``), and ``backends.cuda.matmul.allow_tf32`` lets float32 GEMMs use TF32.
gpugrad runs on NumPy (CPU) and CuPy (CUDA) only; on the CPU the switches are accepted and change nothing, as in torch."""
from __future__ import annotations

from types import SimpleNamespace

from gpugrad.backend import cublas as _cublas, cuda as _cuda_backend

mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)  # Apple's Metal backend: not supported
_PRECISIONS = ("highest", "high", "medium")
_precision = ["highest"]  # torch's default: float32 GEMMs in full float32


def set_float32_matmul_precision(precision):
    """torch's: "highest" computes float32 GEMMs in float32; "high" and "medium" allow TF32 (cuBLAS's
    CUBLAS_COMPUTE_32F_FAST_TF32, 10 mantissa bits), as torch's CUDA GEMMs take both. The CPU ignores it."""
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Invalid precision {precision!r}: expected one of {', '.join(map(repr, _PRECISIONS))}")
    _precision[0] = precision
    _cublas.allow_tf32 = precision != "highest"


def get_float32_matmul_precision():
    return _precision[0]


class _Matmul:
    """``backends.cuda.matmul``: ``allow_tf32`` is the float32 matmul precision seen as a switch ("high" when set,
    "highest" when cleared), as torch ties the two."""

    @property
    def allow_tf32(self):
        return _precision[0] != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value):
        set_float32_matmul_precision("high" if value else "highest")


cuda = SimpleNamespace(is_built=_cuda_backend.is_available, matmul=_Matmul())
cudnn = SimpleNamespace(allow_tf32=True, is_available=lambda: False)  # gpugrad has no cuDNN path: accepted, unused
