"""Shared fixtures: backends to run on, GPU skipping with a reason, the optional PyTorch oracle."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad


def _gpu_skip_reason():
    if gpugrad.cuda.is_available():
        return None
    return (f"no CUDA device: {gpugrad.cuda.unavailable_reason()} (without a GPU, run them on the simulated device: "
            "GPUGRAD_CUDA_SIM=1 python -m pytest -m gpu)")


def marked_gpu(item):
    """Whether a test carries the gpu (or its alias cuda) marker. NOTE: markers, not ``item.keywords``, which also
    holds the names of the test's folders (tests/cuda/)."""
    return item.get_closest_marker("gpu") is not None or item.get_closest_marker("cuda") is not None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    for item in items:
        if item.get_closest_marker("cuda") is not None and item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.gpu)
        if reason and marked_gpu(item):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _cpu_unless_gpu(request, monkeypatch):
    """CPU suites stay on the CPU on a GPU machine too (the default device would otherwise be CUDA)."""
    if not marked_gpu(request.node):
        monkeypatch.setenv("GPUGRAD_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seed():
    gpugrad.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is an optional oracle: pip install 'gpugrad[oracle]'")
