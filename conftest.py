"""Repository-wide pytest rule: on the simulated CUDA device (GPUGRAD_CUDA_SIM) no GPU test may skip.

CI relies on the simulated device to run the whole CUDA path, so a gpu-marked test that skips there is a hole in
that proof, not a pass: it is reported as a failure with its skip reason.
"""
from __future__ import annotations

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    gpu = item.get_closest_marker("gpu") is not None or item.get_closest_marker("cuda") is not None
    if report.skipped and gpu and not hasattr(report, "wasxfail"):
        from gpugrad.testing import cuda_sim

        if cuda_sim.enabled():
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            report.outcome = "failed"
            report.longrepr = f"a gpu test skipped on the simulated CUDA device, where every one must run: {reason}"
