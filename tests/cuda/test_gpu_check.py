"""scripts/gpu-check.sh: without a GPU it says why and runs nothing (exit 3); on a GPU, or on the simulated device
(GPUGRAD_CUDA_SIM=1), a narrowed run writes JUnit XML, bench.json and summary.json, with pytest-benchmark loaded
and without it (then benchmarks/conftest.py's one-call ``benchmark`` stands in)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
HAVE_BENCHMARK_PLUGIN = importlib.util.find_spec("pytest_benchmark") is not None

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="scripts/gpu-check.sh needs bash and coreutils' timeout")


def _run(out, **env):
    """The script on OUTDIR ``out`` with this interpreter; ``env`` entries set to None are removed."""
    full = {**os.environ, "PYTHON": sys.executable, **env}
    full = {k: v for k, v in full.items() if v is not None}
    return subprocess.run(["bash", str(SCRIPT), str(out)], env=full, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


# NOTE: CUDA_VISIBLE_DEVICES="" hides a real GPU too, so these run the no-GPU path on every machine.
NO_GPU = {"GPUGRAD_CUDA_SIM": None, "CUDA_VISIBLE_DEVICES": ""}


def test_without_a_gpu_it_says_why_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text("{}")  # from an earlier run: must not pass for this one's
    r = _run(out, **NO_GPU)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "gpu-check: no usable CUDA GPU on this machine: " in r.stdout and "nothing was run" in r.stdout
    assert "gpu-check: tests" not in r.stdout and "gpu-check: bench" not in r.stdout  # no step started
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == 3 and summary["no_gpu"]


def test_kernel_caches_default_to_the_checkout_and_respect_the_environment(tmp_path):
    r = _run(tmp_path / "a", CUPY_CACHE_DIR=None, GPUGRAD_EMU_CACHE=None, **NO_GPU)
    assert f"CUPY_CACHE_DIR={ROOT / '.cache' / 'cupy'} GPUGRAD_EMU_CACHE={ROOT / '.cache' / 'emu'}" in r.stdout
    if (ROOT / ".git").exists() and shutil.which("git"):  # (an image holds no .git)
        ignored = subprocess.run(["git", "check-ignore", ".cache/cupy", ".cache/emu"], cwd=ROOT, capture_output=True)
        assert ignored.returncode == 0, "git must ignore the kernel caches in .cache/"
    r = _run(tmp_path / "b", CUPY_CACHE_DIR=str(tmp_path / "c"), GPUGRAD_EMU_CACHE=str(tmp_path / "e"), **NO_GPU)
    assert f"CUPY_CACHE_DIR={tmp_path / 'c'} GPUGRAD_EMU_CACHE={tmp_path / 'e'}" in r.stdout
    assert (tmp_path / "c").is_dir() and (tmp_path / "e").is_dir()


@pytest.mark.gpu
@pytest.mark.parametrize("plugins", ["autoload", "none"])
def test_a_narrowed_run_writes_every_result(tmp_path, plugins):
    out = tmp_path / "out"
    r = _run(out, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1" if plugins == "none" else None,
             GPU_CHECK_PYTEST_ARGS="tests/cuda/test_parity.py benchmarks/bench_elementwise.py -k relu",
             GPU_CHECK_BENCH_ARGS="--quick --sizes 64x128 --sections kernels,engine")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]

    # the tests: some ran, from the benchmark files too (as one-call smoke tests), and none failed
    (tests_line,) = [s for s in r.stdout.splitlines() if s.startswith("gpu-check: tests: ") and " -m pytest " in s]
    assert "-m gpu" in tests_line
    assert ("--benchmark-disable" in tests_line) == (plugins == "autoload" and HAVE_BENCHMARK_PLUGIN)
    suite = ET.parse(out / "gpu-tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > counts["skipped"] and counts["failures"] == counts["errors"] == 0, counts
    ran = [c.get("classname", "") for c in suite.iter("testcase") if c.find("skipped") is None]
    assert any("test_parity" in c for c in ran) and any("bench_elementwise" in c for c in ran), ran

    # the benchmarks: the GPU only, the chosen sections, complete
    bench = json.loads((out / "bench.json").read_text())
    assert bench["complete"] is True and "stopped" not in bench and bench["quick"] is True
    assert list(bench["devices"]) == ["cuda"] and bench["sections"] == ["kernels", "engine"]
    cuda = bench["devices"]["cuda"]
    assert cuda["kernels"] and all(k["gbs"] > 0 for k in cuda["kernels"]) and cuda["peak_bandwidth"]["gbs"] > 0
    assert cuda["engine"]["us_per_op"]["gpugrad"] > 0 and "matmul" not in cuda and "mlp" not in cuda
    assert "== cuda: " in (out / "bench.txt").read_text()

    device = json.loads((out / "device.json").read_text())
    assert device["name"] and device["compute_capability"] and device["count"] >= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == 0 and summary["tests"] == counts and summary["bench"]["complete"] is True
    assert list(summary["steps"]) == ["device", "tests", "bench"]
    for name, s in summary["steps"].items():
        assert s["exit"] == 0 and not s["timed_out"] and s["seconds"] >= 0, (name, s)
