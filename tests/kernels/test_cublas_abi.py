"""gpugrad's own cuBLAS calls (gpugrad/backend/cublas.py) against the headers the nvidia-cublas wheel ships: every C
signature it declares for ctypes, every enum value it passes, and the simulator's copies of them (no GPU needed)."""
from __future__ import annotations

import ctypes
import importlib.util
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpugrad.backend import cublas
from gpugrad.testing import cuda_sim


def _include_dir():
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for d in sorted(Path(root).glob("*/include")):
            if (d / "cublas_api.h").exists() and (d / "library_types.h").exists():
                return d
    pytest.skip("the nvidia-cublas wheel's headers are not installed: pip install nvidia-cublas (the test extra)")


# C types in the prototypes -> the ctypes type gpugrad must declare for them
_C_TYPES = {"cublasHandle_t": ctypes.c_void_p, "cudaStream_t": ctypes.c_void_p, "void*": ctypes.c_void_p,
            "const void*": ctypes.c_void_p, "size_t": ctypes.c_size_t, "int": ctypes.c_int,
            "long long int": ctypes.c_longlong, "cublasOperation_t": ctypes.c_int, "cudaDataType": ctypes.c_int,
            "cublasComputeType_t": ctypes.c_int, "cublasGemmAlgo_t": ctypes.c_int}


def _prototype(header, name):
    m = re.search(rf"cublasStatus_t CUBLASWINAPI {name}\((.*?)\);", header, re.S)
    assert m, f"{name} is not declared in cublas_api.h"
    params = []
    for p in m.group(1).split(","):
        p = " ".join(p.split())
        ctype, pname = p.rsplit(" ", 1)
        if pname.startswith("*"):
            ctype, pname = ctype + "*", pname[1:]
        params.append((pname, ctype.replace(" *", "*")))
    return params


def test_signatures_match_cublas_api_h():
    header = (_include_dir() / "cublas_api.h").read_text()
    for name, params in cublas.SIGNATURES.items():
        declared = _prototype(header, name)
        assert [n for n, _ in declared] == [n for n, _ in params], name
        for (pname, ctype), (_, mine) in zip(declared, params):
            assert _C_TYPES[ctype] is mine, f"{name}({pname}): {ctype} is not {mine.__name__}"


def _enum(text, name):
    m = re.search(rf"\b{name}\s*=\s*(-?\d+)", text)
    assert m, f"{name} not found"
    return int(m.group(1))


def test_enum_values_match_the_headers():
    include = _include_dir()
    api, types = (include / "cublas_api.h").read_text(), (include / "library_types.h").read_text()
    for name in ("CUBLAS_STATUS_SUCCESS", "CUBLAS_OP_N", "CUBLAS_OP_T", "CUBLAS_COMPUTE_32F",
                 "CUBLAS_COMPUTE_32F_FAST_TF32", "CUBLAS_COMPUTE_64F", "CUBLAS_GEMM_DEFAULT"):
        assert getattr(cublas, name) == _enum(api, name), name
    for name in ("CUDA_R_16F", "CUDA_R_32F", "CUDA_R_64F", "CUDA_R_16BF"):
        assert getattr(cublas, name) == _enum(types, name), name
    stand_in = cuda_sim.cublas_library()  # the simulator's copies too
    assert (stand_in.OP_N, stand_in.OP_T, stand_in.COMPUTE_32F, stand_in.COMPUTE_64F, stand_in.GEMM_DEFAULT) == (
        _enum(api, "CUBLAS_OP_N"), _enum(api, "CUBLAS_OP_T"), _enum(api, "CUBLAS_COMPUTE_32F"),
        _enum(api, "CUBLAS_COMPUTE_64F"), _enum(api, "CUBLAS_GEMM_DEFAULT"))
    assert {v: k for k, v in stand_in.DTYPES.items()} == {np.float16: _enum(types, "CUDA_R_16F"), np.float32:
                                                          _enum(types, "CUDA_R_32F"), np.float64: _enum(types,
                                                                                                     "CUDA_R_64F"),
                                                          ml_dtypes.bfloat16: _enum(types, "CUDA_R_16BF")}


def test_the_dtype_table_follows_cupys_default_compute_types(monkeypatch):
    assert cublas.gemm_types(np.float32)[:2] == (cublas.CUDA_R_32F, cublas.CUBLAS_COMPUTE_32F)  # no TF32 unless asked
    assert cublas.gemm_types(np.float16)[:2] == (cublas.CUDA_R_16F, cublas.CUBLAS_COMPUTE_32F)
    assert cublas.gemm_types(np.float64)[:2] == (cublas.CUDA_R_64F, cublas.CUBLAS_COMPUTE_64F)
    assert cublas.gemm_types(np.int64) is None and cublas.gemm_types(np.complex64) is None
    monkeypatch.setattr(cublas, "allow_tf32", True)
    assert cublas.gemm_types(np.float32)[1] == cublas.CUBLAS_COMPUTE_32F_FAST_TF32
    assert cublas.gemm_types(np.float64)[1] == cublas.CUBLAS_COMPUTE_64F


def test_the_wheels_libcublas_exports_every_function_gpugrad_calls():
    lib_dir = _include_dir().parent / "lib"
    found = sorted(lib_dir.glob("libcublas.so.*"))
    if not found:
        pytest.skip(f"no libcublas.so in {lib_dir}")
    lib = ctypes.CDLL(str(found[0]))  # loading needs no GPU; calling would
    missing = [name for name in cublas.SIGNATURES if not hasattr(lib, name)]
    assert not missing, f"{found[0].name} lacks {missing}"
    cublas.declare(lib)  # what the backend does with the library CuPy loaded
    for name, params in cublas.SIGNATURES.items():
        assert getattr(lib, name).argtypes == [t for _, t in params] and getattr(lib, name).restype is ctypes.c_int
