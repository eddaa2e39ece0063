"""gpugrad's own cuBLAS path (gpugrad/backend/cublas.py) on the simulated device: products against NumPy, with the
stand-in checking the handle, stream, workspace and pointers of every call (gpugrad/testing/cuda_sim/cublas.py).
The signatures and enum values are checked against the headers in tests/kernels/test_cublas_abi.py."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpugrad
from gpugrad.backend import cublas
from gpugrad.testing import cuda_sim

pytestmark = pytest.mark.gpu
needs_sim = pytest.mark.skipif(not cuda_sim.enabled(), reason="the cuBLAS stand-in is the simulated device's "
                                                              "(GPUGRAD_CUDA_SIM=1)")


# ---- on the simulated device: the stand-in checks every call, NumPy is the oracle ------------------------------------
def _operand(rng, shape, dtype, layout):
    """A device array of ``shape`` laid out as ``layout``: C order, a transposed view, or every other column."""
    be = gpugrad.backend.get_backend("cuda")
    if layout == "T":
        host = rng.standard_normal(shape[:-2] + shape[:-3:-1]).astype(dtype)
        return be.asarray(host).swapaxes(-1, -2), np.swapaxes(host, -1, -2)
    if layout == "strided":
        host = rng.standard_normal(shape[:-1] + (2 * shape[-1],)).astype(dtype)
        return be.asarray(host)[..., ::2], host[..., ::2]
    host = rng.standard_normal(shape).astype(dtype)
    return be.asarray(host), host


TOL = {np.float16: dict(rtol=2e-3, atol=2e-3), np.float32: dict(rtol=1e-5, atol=1e-5),
       np.float64: dict(rtol=1e-12, atol=1e-12)}


@needs_sim
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((4, 5, 7), (4, 7, 3)), ((2, 3, 5, 7), (3, 7, 2)),
                                    ((5, 7), (2, 7, 3)), ((7,), (7, 3)), ((4, 5, 7), (7,)), ((7,), (7,))],
                         ids=["mm", "bmm", "broadcast", "broadcast_a", "vec_mat", "bmat_vec", "dot"])
@pytest.mark.parametrize("layouts", [("C", "C"), ("T", "C"), ("C", "T"), ("strided", "T")])
def test_products_equal_numpys_and_every_call_is_checked(dtype, shapes, layouts):
    rng = np.random.default_rng(0)
    stand_in = cuda_sim.cublas_library()
    layouts = tuple(lay if len(s) >= 2 else "C" for lay, s in zip(layouts, shapes))
    (a, ha), (b, hb) = (_operand(rng, s, dtype, lay) for s, lay in zip(shapes, layouts))
    stand_in.calls.clear()
    got = cublas.matmul(a, b)
    want = np.matmul(ha.astype(np.float64), hb.astype(np.float64))
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got.get().astype(np.float64), want, **TOL[dtype])
    (name, call), = stand_in.calls  # one cuBLAS call, checked by the stand-in (handle, stream, workspace, pointers)
    batched = len(np.broadcast_shapes(ha.shape[:-2], hb.shape[:-2])) > 0 and max(ha.ndim, hb.ndim) > 2
    assert name == ("cublasGemmStridedBatchedEx" if batched else "cublasGemmEx")
    assert call["compute"] == (stand_in.COMPUTE_64F if dtype == np.float64 else stand_in.COMPUTE_32F)
    if layouts[1] == "T" and len(shapes[1]) >= 2 and hb.shape[:-2] in ((), want.shape[:-2]):
        assert call["transa"] == stand_in.OP_T  # b passed transposed (cuBLAS's A), not copied


@needs_sim
@pytest.mark.gpu
def test_the_stand_in_refuses_what_a_gpu_would_get_wrong():
    xp = gpugrad.backend.get_backend("cuda").xp
    lib = cuda_sim.cublas_library()
    a = xp.ones((4, 4), np.float32)
    handle = xp.cuda.device.get_cublas_handle()
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    ws = xp.empty(1 << 20, np.uint8)

    def gemm(ptr_c=a.data.ptr, n=4):
        return lib.cublasGemmEx(handle, 0, 0, n, n, n, ctypes.addressof(one), a.data.ptr, 0, n, a.data.ptr, 0, n,
                                ctypes.addressof(zero), ptr_c, 0, n, lib.COMPUTE_32F, lib.GEMM_DEFAULT)

    with pytest.raises(lib.CublasError, match="not the current stream"):
        lib.cublasSetStream_v2(handle, 12345)
        gemm()
    lib.cublasSetStream_v2(handle, xp.cuda.get_current_stream().ptr)
    with pytest.raises(lib.CublasError, match="no workspace"):  # cublasSetStream_v2 reset it
        gemm()
    lib.cublasSetWorkspace_v2(handle, ws.data.ptr, ws.nbytes)
    with pytest.raises(lib.CublasError, match="not inside a live allocation"):
        gemm(n=8)  # 8x8 matrices do not fit in a's 4x4 allocation
    with pytest.raises(lib.CublasError, match="not the current device's"):
        lib.cublasSetStream_v2(handle + 1, 0)
    assert gemm() == lib.SUCCESS
    np.testing.assert_array_equal(a.get(), np.full((4, 4), 4, np.float32))


@needs_sim
@pytest.mark.gpu
def test_under_capture_the_workspace_comes_from_the_capture_and_the_gemm_replays():
    stand_in = cuda_sim.cublas_library()
    x = gpugrad.randn(6, 5, device="cuda")
    w = gpugrad.randn(4, 5, device="cuda")
    eager = (x @ w.T).cpu().numpy()
    g = gpugrad.cuda.CUDAGraph()
    stand_in.calls.clear()
    with gpugrad.cuda.graph(g):
        y = x @ w.T
    (name, call), = stand_in.calls
    assert g._keep and g._keep[0].data.ptr == call["workspace"][0]  # the graph keeps the capture's workspace
    x.copy_(x * 2)
    cuda_sim.reset_counters()
    g.replay()
    assert cuda_sim.counters()["launches"] == 1  # the GEMM is one launch
    np.testing.assert_array_equal(y.cpu().numpy(), 2 * eager)
