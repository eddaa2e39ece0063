"""CuPy, found and checked: ``is_available``, ``device_count``, the simulated device in its place under
``GPUGRAD_CUDA_SIM``, and libcublas for gpugrad's own GEMMs. The backend object is ``backend/cuda_backend.py``.

CuPy is imported here and nowhere else (kernel launchers get it from here), and only when a CUDA device is asked
for, so CPU-only installs never import it.
"""
from __future__ import annotations

import functools
import importlib
import os

import numpy as np

from gpugrad.backend.device import parse_device

INSTALL_HINT = "install the CUDA extra: pip install 'gpugrad[cuda]' (CuPy for CUDA 13)"
# The simulated device (tests without a GPU): GPUGRAD_CUDA_SIM=N (N devices) makes the backend import the module
# GPUGRAD_CUDA_SIM_MODULE names (default gpugrad.testing.cuda_sim) and use its module() in place of cupy and its
# cublas_library() in place of libcublas. The backend never imports test code otherwise.
SIM_ENV, SIM_MODULE_ENV, SIM_MODULE = "GPUGRAD_CUDA_SIM", "GPUGRAD_CUDA_SIM_MODULE", "gpugrad.testing.cuda_sim"


def simulator():
    """The simulated-device module when ``GPUGRAD_CUDA_SIM`` asks for one, else None."""
    if os.environ.get(SIM_ENV, "").strip() in ("", "0"):
        return None
    return importlib.import_module(os.environ.get(SIM_MODULE_ENV) or SIM_MODULE)


def _import_cupy():
    """CuPy, or the simulated device standing in for it."""
    sim = simulator()
    if sim is not None:
        return sim.module()
    import cupy  # NOTE: lazy, so that CPU-only installs never import CuPy

    return cupy


def cublas_library(load):
    """libcublas for gpugrad's own cuBLAS calls (backend/cublas.py): ``load()``'s on a GPU, where CuPy's cublas
    module has loaded the library first; the simulator's stand-in on the simulated device."""
    cupy_module()
    sim = simulator()
    if sim is not None:
        return sim.cublas_library()
    import cupy_backends.cuda.libs.cublas  # noqa: F401  NOTE: lazy, as CuPy: loading it loads CuPy's libcublas

    return load()


# A kernel written two ways CuPy compiles them: a RawModule (NVRTC on our source) and an ElementwiseKernel (NVRTC
# on CuPy's generated source, which includes CuPy's headers and through them the CUDA toolkit's).
_PROBE_SOURCE = r"""
extern "C" __global__ void gg_probe(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""


def _why_kernels_fail(e: Exception) -> str:
    text = f"{type(e).__name__}: {e}"
    low = text.lower()
    if "header" in low or "cuda_fp16" in low or "cannot open source file" in low:
        return (f"CuPy cannot compile kernels because the CUDA headers are missing ({text}); install "
                "pip install 'gpugrad[cuda]' (cupy-cuda13x[ctk] brings the headers) or set CUDA_PATH to a CUDA 13 "
                "toolkit")
    if "nvrtc" in low:
        return (f"CuPy cannot load NVRTC, the runtime compiler it builds kernels with ({text}); install "
                "pip install 'gpugrad[cuda]' (cupy-cuda13x[ctk] brings NVRTC)")
    if "driver" in low or "cuda_error" in low:
        return (f"the CUDA driver failed to load or run a kernel ({text}); install or update the NVIDIA driver "
                "(CUDA 13 needs a 580 or newer driver)")
    return f"a test kernel failed to compile or run ({text}); see the CuPy installation guide"


def _check_kernels(cupy) -> str:
    """'' when a trivial kernel compiles and runs correctly on device 0, else why not and the fix."""
    try:
        with cupy.cuda.Device(0):
            x = cupy.arange(4, dtype=np.float32)
            y = cupy.empty(4, dtype=np.float32)
            cupy.RawModule(code=_PROBE_SOURCE).get_function("gg_probe")((1,), (32,), (x, y, 4))
            z = cupy.ElementwiseKernel("T x", "T z", "z = x * 2 + 1", "gg_probe_ew")(x)
            got, got_ew = y.get(), z.get()
    except Exception as e:  # compile errors, missing libraries, driver errors: each is a reason, never a crash
        return _why_kernels_fail(e)
    want = np.arange(4, dtype=np.float32) * 2 + 1
    if not (np.array_equal(got, want) and np.array_equal(got_ew, want)):
        return f"a test kernel ran but computed {got.tolist()} / {got_ew.tolist()} instead of {want.tolist()}"
    return ""


@functools.cache
def _probe():
    """(cupy module or None, device count, reason when unusable). Never raises; CUDA counts as available only
    when a trivial kernel compiles and runs, so a CuPy without headers or NVRTC falls back to the CPU."""
    try:
        cupy = _import_cupy()
    except Exception as e:  # ImportError, or a broken CUDA library found at import
        return None, 0, f"CuPy is not importable ({type(e).__name__}: {e}); {INSTALL_HINT}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver / no device: CuPy raises CUDARuntimeError here
        return cupy, 0, (f"CuPy is installed but no CUDA device is usable ({type(e).__name__}: {e}); "
                         "check the NVIDIA driver (nvidia-smi) and that a GPU is visible (CUDA_VISIBLE_DEVICES)")
    if count == 0:
        return cupy, 0, "CuPy is installed but the CUDA driver reports no device"
    reason = _check_kernels(cupy)
    if reason:
        return cupy, 0, reason
    return cupy, count, ""


def is_available() -> bool:
    return _probe()[1] > 0


def device_count() -> int:
    return _probe()[1]


def unavailable_reason() -> str:
    return _probe()[2]


def _index(device) -> int:
    return parse_device("cuda" if device is None else device).index


def get_device_name(device=None) -> str:
    """The GPU's name, as torch.cuda.get_device_name (a simulated device says so)."""
    name = cupy_module().cuda.runtime.getDeviceProperties(_index(device))["name"]
    return name.decode() if isinstance(name, bytes) else name


def synchronize_device(device=None) -> int:
    """Wait for all work queued on the device; returns its index (gpugrad.cuda.synchronize then raises the
    device-side checks that failed)."""
    cupy = cupy_module()
    with cupy.cuda.Device(_index(device)) as d:
        d.synchronize()
    return d.id


def cupy_module():
    cupy, count, reason = _probe()
    if count == 0:
        raise RuntimeError(f"CUDA is not available: {reason}. Use device='cpu' (or GPUGRAD_DEVICE=cpu).")
    return cupy


def device_index_of(array) -> int:
    cupy, _, _ = _probe()
    if cupy is not None and isinstance(array, cupy.ndarray):
        return array.device.id
    raise TypeError(f"expected a NumPy or CuPy array, got {type(array).__name__}")
