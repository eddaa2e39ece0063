"""libcublas on the simulated device: the few entry points gpugrad's own GEMM path calls (gpugrad/backend/cublas.py),
taking the same arguments as the C functions (handles, streams and device pointers as integers, host pointers to
alpha and beta) and returning a ``cublasStatus_t``.

Each call is checked as a GPU would need it to be right, and where a GPU would fail silently it fails loudly:
the handle must be the current device's (``cupy.cuda.device.get_cublas_handle()``), the handle's stream must be
the current stream, a workspace must be set after the stream (cublasSetStream resets it, cuBLAS docs, "cublasSetStream"),
and while capturing it must be memory allocated inside that capture (the graph's pool keeps it alive); every matrix
must lie inside one live allocation on the current device, large enough for its leading dimension and batch
stride. Then NumPy computes the product (float16 inputs in float32, as CUBLAS_COMPUTE_32F), in column-major
terms, into C's memory: now, or recorded for replay under capture, one launch either way.
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

from gpugrad.testing.cuda_sim import _state

# cublas_api.h / library_types.h values (tests/cuda/test_cublas.py checks gpugrad's copies against the headers)
SUCCESS, NOT_INITIALIZED, INVALID_VALUE, EXECUTION_FAILED, NOT_SUPPORTED = 0, 1, 7, 13, 15
OP_N, OP_T = 0, 1
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70
GEMM_DEFAULT = -1
DTYPES = {2: np.float16, 0: np.float32, 1: np.float64, 14: ml_dtypes.bfloat16}  # CUDA_R_16F/32F/64F/16BF
# (A/B type, C type) -> compute types cuBLAS takes for them (cuBLAS docs, cublasGemmEx, the table of types: 16BF
# inputs with a 16BF or 32F output compute in CUBLAS_COMPUTE_32F, as 16F ones do)
ALLOWED = {(2, 2): {COMPUTE_32F, 64}, (0, 0): {COMPUTE_32F, COMPUTE_32F_FAST_TF32}, (1, 1): {COMPUTE_64F},
           (2, 0): {COMPUTE_32F}, (14, 14): {COMPUTE_32F}, (14, 0): {COMPUTE_32F}}


def tf32(x):
    """float32 values rounded to TF32's 10 mantissa bits (to nearest, ties to even), as CUBLAS_COMPUTE_32F_FAST_TF32
    rounds the inputs of a float32 product for the tensor cores (cuBLAS docs, cublasComputeType_t; the exact
    rounding is the hardware's: to confirm on a GPU)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)
_HANDLE_BASE = 0x7C0B0000  # one handle per device: this plus the device index


class _Handle:
    def __init__(self):
        self.stream = None  # set by cublasSetStream_v2
        self.workspace = None  # (pointer, bytes) set by cublasSetWorkspace_v2 after the stream, else None


_handles: dict[int, _Handle] = {}
calls: list = []  # (function name, its checked arguments) for tests; cleared by them


def handle_of_current_device() -> int:
    """cupy.cuda.device.get_cublas_handle(): the current device's handle (made on first use, as CuPy's)."""
    h = _HANDLE_BASE + _state.current_device()
    _handles.setdefault(h, _Handle())
    return h


class CublasError(RuntimeError):
    """A call a GPU would reject or get wrong: the simulator says why (the status is returned as well)."""


def _handle(h):
    handle = _handles.get(h)
    if handle is None or h != _HANDLE_BASE + _state.current_device():
        raise CublasError(f"cublas handle {h:#x} is not the current device's (device {_state.current_device()}: "
                          "use cupy.cuda.device.get_cublas_handle() under that device)")
    return handle


def cublasSetStream_v2(handle, stream):  # noqa: N802 - the C names
    _handle(handle).stream, _handle(handle).workspace = stream, None  # cuBLAS resets the workspace here
    return SUCCESS


def cublasSetWorkspace_v2(handle, workspace, size):  # noqa: N802
    h = _handle(handle)
    alloc = _state.allocation_at(workspace, size)
    if alloc is None:
        raise CublasError(f"cublasSetWorkspace_v2: [{workspace:#x}, +{size}) is not inside a live allocation")
    if (workspace - alloc.start) % 256:  # CuPy's pool hands out 512-byte aligned blocks (memory.pyx)
        raise CublasError(f"cublasSetWorkspace_v2: the workspace {workspace:#x} is not 256-byte aligned")
    h.workspace = (workspace, size)
    return SUCCESS


def _check_call(name, handle):
    h = _handle(handle)
    current = _state.current_stream_ptr()
    if h.stream != current:
        raise CublasError(f"{name}: the handle's stream is {h.stream}, not the current stream {current}: set it with "
                          "cublasSetStream_v2 first (the kernel would run on another stream)")
    if h.workspace is None:
        raise CublasError(f"{name}: no workspace set since cublasSetStream_v2: cuBLAS would use its own pool, "
                          "which a CUDA graph cannot capture")
    if _state.capture is not None:
        alloc = _state.allocation_at(*h.workspace)
        if alloc is None or alloc.capture is not _state.capture:
            raise CublasError(f"{name}: while capturing, the workspace must be allocated inside this capture "
                              "(from the graph's pool, kept alive by the graph)")


def _matrix(name, what, ptr, dtype, rows, cols, ld, batch=1, stride=0):
    """Column-major (rows, cols) matrices with leading dimension ld, ``batch`` of them ``stride`` elements apart,
    as an array view (batch, rows, cols) of the live allocation at ``ptr``."""
    item = np.dtype(dtype).itemsize
    if ld < max(1, rows):
        raise CublasError(f"{name}: {what} has leading dimension {ld} < {rows} rows")
    extent = ((cols - 1) * ld + rows + (batch - 1) * stride) * item if rows and cols and batch else 0
    alloc = _state.allocation_at(ptr, extent)
    if alloc is None or alloc.device != _state.current_device():
        raise CublasError(f"{name}: {what} ({rows}x{cols}, ld {ld}, {batch} x stride {stride}, {extent} bytes at "
                          f"{ptr:#x}) is not inside a live allocation on device {_state.current_device()}")
    raw = np.frombuffer((ctypes.c_char * alloc.nbytes).from_address(alloc.start), np.uint8)
    offset = ptr - alloc.start
    return np.lib.stride_tricks.as_strided(raw[offset:offset + extent].view(dtype) if extent else np.empty(0, dtype),
                                           (batch, rows, cols), (stride * item, item, ld * item))


def _scalar(ptr, compute):
    return (ctypes.c_double if compute == COMPUTE_64F else ctypes.c_float).from_address(ptr).value


def _gemm(name, handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb, stride_b, beta, c,
          ctype, ldc, stride_c, batch, compute, algo):
    _check_call(name, handle)
    if atype != btype or (atype, ctype) not in ALLOWED or compute not in ALLOWED[atype, ctype]:
        return NOT_SUPPORTED
    if transa not in (OP_N, OP_T) or transb not in (OP_N, OP_T) or min(m, n, k, batch) < 0 or algo != GEMM_DEFAULT:
        return INVALID_VALUE
    A = _matrix(name, "A", a, DTYPES[atype], *((m, k) if transa == OP_N else (k, m)), lda, batch, stride_a)
    B = _matrix(name, "B", b, DTYPES[btype], *((k, n) if transb == OP_N else (n, k)), ldb, batch, stride_b)
    C = _matrix(name, "C", c, DTYPES[ctype], m, n, ldc, batch, stride_c)
    al, be = _scalar(alpha, compute), _scalar(beta, compute)
    work = np.float64 if compute == COMPUTE_64F else np.float32
    calls.append((name, dict(m=m, n=n, k=k, transa=transa, transb=transb, batch=batch, compute=compute,
                             workspace=_handles[handle].workspace, stream=_handles[handle].stream)))

    def run():
        opa = A if transa == OP_N else np.swapaxes(A, 1, 2)
        opb = B if transb == OP_N else np.swapaxes(B, 1, 2)
        if compute == COMPUTE_32F_FAST_TF32:
            opa, opb = tf32(opa), tf32(opb)
        out = al * np.matmul(opa.astype(work), opb.astype(work))
        if be != 0:  # as BLAS: beta == 0 never reads C (it may hold NaN)
            out += be * C.astype(work)
        C[...] = out

    _state.run(name, run)
    return SUCCESS


def cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,  # noqa
                 computeType, algo):
    return _gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta,
                 C, Ctype, ldc, 0, 1, computeType, algo)


def cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,  # noqa
                               strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo):
    return _gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
                 Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo)
