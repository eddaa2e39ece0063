"""Matrix products on CUDA through cuBLAS called by gpugrad itself: the same path eager and inside a CUDA graph.

CuPy refuses every cuBLAS call on a capturing stream (cupy_backends/cuda/libs/cublas.pyx, ``setStream``), so
``cupy.matmul`` cannot be captured. gpugrad calls libcublas directly (ctypes, on the library CuPy loaded) with
CuPy's own handle (``cupy.cuda.device.get_cublas_handle()``), as PyTorch does for graphs: each call sets the
handle's stream to the current one (``cublasSetStream_v2``, which also resets the workspace), then a workspace
gpugrad owns (``cublasSetWorkspace_v2``: without it cuBLAS would use a pool of its own that a graph cannot keep),
then ``cublasGemmEx`` or ``cublasGemmStridedBatchedEx``. Eagerly the workspace is one buffer per device; while
capturing it is allocated inside the capture, from the graph's pool, and the graph keeps it alive. One path for
both, so a replay computes exactly what the eager step computed.

Row-major arrays are column-major transposes: C = A @ B is computed as Cᵀ = Bᵀ @ Aᵀ, and an operand that is a
transposed view (``w.T``) is passed with CUBLAS_OP_T instead of being copied. Operands with other strides are
copied to contiguous memory first; batch dims broadcast with a zero batch stride.

The dtype decides the data and compute types (one table, :data:`GEMM_TYPES`): float32 computes in
CUBLAS_COMPUTE_32F as CuPy does by default (cupy/_core/_routines_linalg.pyx, ``tensordot_core_v11``: no TF32
unless CUPY_TF32 is set), float16 and bfloat16 in float32, float64 in float64. ``allow_tf32`` switches float32 to
CUBLAS_COMPUTE_32F_FAST_TF32. Other dtypes (integers, complex) go to ``cupy.matmul``: integers run CuPy's own
kernel, which captures; complex uses cuBLAS through CuPy and is refused while capturing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math

import ml_dtypes
import numpy as np

from gpugrad.backend import cuda, graphs

# ---- cublas_api.h and library_types.h (tests/cuda/test_cublas.py checks each value against the headers) ------------
CUBLAS_STATUS_SUCCESS = 0
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_64F = 68, 77, 70
CUBLAS_GEMM_DEFAULT = -1
CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF = 0, 1, 2, 14

# The C signatures gpugrad calls: (name, [(parameter, ctypes type)]); every one returns cublasStatus_t (an int).
_P, _I, _LL, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t
SIGNATURES = {
    "cublasSetStream_v2": [("handle", _P), ("streamId", _P)],
    "cublasSetWorkspace_v2": [("handle", _P), ("workspace", _P), ("workspaceSizeInBytes", _SZ)],
    "cublasGemmEx": [("handle", _P), ("transa", _I), ("transb", _I), ("m", _I), ("n", _I), ("k", _I),
                     ("alpha", _P), ("A", _P), ("Atype", _I), ("lda", _I), ("B", _P), ("Btype", _I), ("ldb", _I),
                     ("beta", _P), ("C", _P), ("Ctype", _I), ("ldc", _I), ("computeType", _I), ("algo", _I)],
    "cublasGemmStridedBatchedEx": [
        ("handle", _P), ("transa", _I), ("transb", _I), ("m", _I), ("n", _I), ("k", _I), ("alpha", _P), ("A", _P),
        ("Atype", _I), ("lda", _I), ("strideA", _LL), ("B", _P), ("Btype", _I), ("ldb", _I), ("strideB", _LL),
        ("beta", _P), ("C", _P), ("Ctype", _I), ("ldc", _I), ("strideC", _LL), ("batchCount", _I),
        ("computeType", _I), ("algo", _I)],
}

# dtype -> (cudaDataType of A, B and C; cublasComputeType_t; the C type of alpha and beta, the compute type's).
# float16 and bfloat16 inputs accumulate in float32 (cuBLAS docs, cublasGemmEx's table of types), as torch's GEMMs.
GEMM_TYPES = {
    np.dtype(np.float16): (CUDA_R_16F, CUBLAS_COMPUTE_32F, ctypes.c_float),
    np.dtype(ml_dtypes.bfloat16): (CUDA_R_16BF, CUBLAS_COMPUTE_32F, ctypes.c_float),
    np.dtype(np.float32): (CUDA_R_32F, CUBLAS_COMPUTE_32F, ctypes.c_float),
    np.dtype(np.float64): (CUDA_R_64F, CUBLAS_COMPUTE_64F, ctypes.c_double),
}
allow_tf32 = False  # float32 products in CUBLAS_COMPUTE_32F_FAST_TF32 (torch.backends.cuda.matmul.allow_tf32)
# cuBLAS's recommendation for Hopper, and PyTorch's default there (4096 KiB x 8); 4 MiB matches cuBLAS's own pool
WORKSPACE_BYTES = {9: 32 * 2**20}
DEFAULT_WORKSPACE_BYTES = 4 * 2**20


class CublasError(RuntimeError):
    """A cuBLAS call returned an error status."""


def gemm_types(dtype):
    """(data type, compute type, scalar C type) for ``dtype``, or None when cuBLAS's GEMM is not used for it."""
    row = GEMM_TYPES.get(np.dtype(dtype))
    if row is not None and allow_tf32 and row[0] == CUDA_R_32F:
        row = (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, ctypes.c_float)
    return row


_library = []


def library():
    """libcublas with gpugrad's signatures set (the simulator's stand-in on the simulated device)."""
    if not _library:
        _library.append(declare(cuda.cublas_library(_load_libcublas)))
    return _library[0]


def declare(lib):
    """``lib`` with :data:`SIGNATURES` set on its ctypes functions (the stand-in takes Python ints as they are)."""
    for name, params in SIGNATURES.items():
        fn = getattr(lib, name)
        if hasattr(fn, "argtypes"):
            fn.argtypes, fn.restype = [t for _, t in params], ctypes.c_int
    return lib


def _load_libcublas():
    """The libcublas CuPy has loaded (its cublas module links it), else the one the system finds."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libcublas.so" in path:
                return ctypes.CDLL(path)
    name = ctypes.util.find_library("cublas")
    if name is None:
        raise OSError("libcublas is not loaded by CuPy and not found on the system: pip install nvidia-cublas "
                      "(gpugrad[cuda] brings it)")
    return ctypes.CDLL(name)


def _check(name, status):
    if status != CUBLAS_STATUS_SUCCESS:
        raise CublasError(f"{name} failed with cublasStatus_t {status}")


_workspaces: dict = {}  # device index -> gpugrad's eager workspace on it (CuPy array)


def _workspace(xp, device):
    """A workspace for the next call: the capture's own while capturing (allocated there, kept by the graph),
    else the device's, made once. Both from the current allocator, so both are CuPy memory."""
    nbytes = WORKSPACE_BYTES.get(int(xp.cuda.Device(device).compute_capability) // 10, DEFAULT_WORKSPACE_BYTES)
    if graphs.CAPTURING:
        return graphs.CAPTURING[-1].keep_alive(("cublas workspace", device), lambda: xp.empty(nbytes, np.uint8))
    ws = _workspaces.get(device)
    if ws is None:
        ws = _workspaces[device] = xp.empty(nbytes, np.uint8)
    return ws


def _layout(x):
    """(op, leading dimension) under which cuBLAS reads the row-major matrix x in place, or None: a row-major one
    passes as is (op N on the transposed problem), a column-major one (a transposed view) with op T."""
    rows, cols = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    if s0 % x.itemsize or s1 % x.itemsize:
        return None
    s0, s1 = s0 // x.itemsize, s1 // x.itemsize
    if (s1 == 1 or cols == 1) and (rows == 1 or s0 >= cols):
        return CUBLAS_OP_N, max(s0 if rows > 1 else cols, 1)
    if (s0 == 1 or rows == 1) and (cols == 1 or s1 >= rows):
        return CUBLAS_OP_T, max(s1 if cols > 1 else rows, 1)
    return None


def _batch_stride(x, batch):
    """x's batch dims, broadcast to ``batch``, as one stride in elements (0: the same matrix for every entry), or
    None when cuBLAS cannot step through them with one stride (partly broadcast, unevenly spaced, negative)."""
    lead = len(batch) - (x.ndim - 2)
    dims = [(b, n, st // x.itemsize) for b, n, st in zip(batch, (1,) * lead + x.shape[:-2],
                                                          (0,) * lead + x.strides[:-2]) if b != 1]
    if all(n == 1 for _, n, _ in dims):
        return 0
    if any(n == 1 or st < 0 for _, n, st in dims):
        return None
    for (_, _, outer), (_, n, inner) in zip(dims, dims[1:]):
        if outer != inner * n:
            return None
    return dims[-1][2]


def _operand(xp, x, batch):
    """(array, op, leading dimension, batch stride) for one operand; copied to C order only when cuBLAS cannot read
    it in place."""
    stride, layout = _batch_stride(x, batch), _layout(x)
    if stride is None or layout is None:
        x = xp.ascontiguousarray(x if stride is not None else xp.broadcast_to(x, batch + x.shape[-2:]))
        stride, layout = _batch_stride(x, batch), _layout(x)
    return (x, *layout, stride)


def matmul(a, b):
    """``a @ b`` of CuPy arrays with NumPy's rules (vectors promoted, batch dims broadcast), on cuBLAS."""
    xp = cuda.cupy_module()
    types = gemm_types(a.dtype) if a.dtype == b.dtype else None
    if types is None:
        return xp.matmul(a, b)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    n, k = a2.shape[-2:]
    m = b2.shape[-1]
    if b2.shape[-2] != k:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned ({k} != {b2.shape[-2]})")
    batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    shape = batch + ((n,) if a.ndim > 1 else ()) + ((m,) if b.ndim > 1 else ())
    if n == 0 or m == 0 or math.prod(batch) == 0:
        return xp.empty(shape, a.dtype)
    if k == 0:
        return xp.zeros(shape, a.dtype)
    out = xp.empty(batch + (n, m), a.dtype)
    _gemm(xp, types, a2, b2, out, batch, n, m, k)
    return out if out.shape == shape else out.reshape(shape)  # NOTE: a fresh array, not a view (the engine owns it)


def _gemm(xp, types, a, b, out, batch, n, m, k):
    """out (batch..., n, m), C-contiguous = a @ b: column-major outᵀ (m x n) = bᵀ @ aᵀ."""
    data, compute, scalar = types
    count = math.prod(batch)
    (bx, opb, ldb, sb), (ax, opa, lda, sa) = _operand(xp, b, batch), _operand(xp, a, batch)
    if max(n, m, k, lda, ldb, count) >= 2**31 or max(sa, sb, n * m) * count >= 2**63:
        raise ValueError(f"matmul: sizes (batch {batch}, {n}x{k} @ {k}x{m}) exceed cuBLAS's 32-bit arguments")
    if not graphs.CAPTURING and xp.cuda.get_current_stream().is_capturing():
        raise RuntimeError("matmul cannot be captured into a CUDA graph outside gpugrad.cuda.graph(): its cuBLAS "
                           "workspace must come from the graph's memory pool")
    lib, device = library(), out.device.id
    handle = xp.cuda.device.get_cublas_handle()
    alpha, beta = scalar(1), scalar(0)
    workspace = _workspace(xp, device)
    _check("cublasSetStream_v2", lib.cublasSetStream_v2(handle, xp.cuda.get_current_stream().ptr))
    _check("cublasSetWorkspace_v2", lib.cublasSetWorkspace_v2(handle, workspace.data.ptr, workspace.nbytes))
    common = (handle, opb, opa, m, n, k, ctypes.addressof(alpha))
    if count == 1:
        _check("cublasGemmEx", lib.cublasGemmEx(
            *common, bx.data.ptr, data, ldb, ax.data.ptr, data, lda, ctypes.addressof(beta), out.data.ptr, data,
            m, compute, CUBLAS_GEMM_DEFAULT))
    else:
        _check("cublasGemmStridedBatchedEx", lib.cublasGemmStridedBatchedEx(
            *common, bx.data.ptr, data, ldb, sb, ax.data.ptr, data, lda, sa, ctypes.addressof(beta), out.data.ptr,
            data, m, n * m, count, compute, CUBLAS_GEMM_DEFAULT))
