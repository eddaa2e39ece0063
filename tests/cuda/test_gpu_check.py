"""scripts/gpu-check.sh end to end: without a GPU it says why and runs nothing (exit 3); on the simulated device
(GPUGRAD_CUDA_SIM=1, narrowed by the script's environment variables) its three stages leave at most 8 result files,
a summary that names what finished, and the kernel cache as a tarball; a kill in the middle of the tests keeps the
results of the finished stages; a kernel-cache tarball given to it is restored before the first stage."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
RESULT_FILES = {"summary.json", "smoke.json", "tests.log", "tests.tar.gz", "bench.json", "bench.txt",
                "kernel-cache.tar.gz", "gpu-check.log"}
HAVE_BENCHMARK_PLUGIN = importlib.util.find_spec("pytest_benchmark") is not None

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="scripts/gpu-check.sh needs bash and coreutils' timeout")


def _env(**env):
    """This interpreter, and ``env`` on top of ours (None removes a variable)."""
    full = {**os.environ, "PYTHON": sys.executable, **env}
    return {k: v for k, v in full.items() if v is not None}


def _run(out, *args, timeout=180, **env):
    return subprocess.run(["bash", str(SCRIPT), str(out), *map(str, args)], env=_env(**env), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# NOTE: CUDA_VISIBLE_DEVICES="" hides a real GPU too, so these run the no-GPU path on every machine.
NO_GPU = {"GPUGRAD_CUDA_SIM": None, "CUDA_VISIBLE_DEVICES": ""}


def test_without_a_gpu_it_says_why_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text("{}")  # from an earlier run: must not pass for this one's
    r = _run(out, **NO_GPU)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "gpu-check: no usable CUDA GPU on this machine: " in r.stdout and "nothing was run" in r.stdout
    assert "gpu-check: smoke" not in r.stdout and "gpu-check: tests" not in r.stdout  # no stage started
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


# ---- on the simulated device ---------------------------------------------------------------------------------------
@pytest.fixture
def sim(tmp_path):
    """The environment of a narrowed run on the simulated device, with a CuPy cache holding one (fake) kernel, and
    the emulator's cache shared with the rest of the test run (its kernels are compiled once)."""
    emu = pytest.importorskip("gpugrad.testing.cuda_emu", reason="the simulated device runs kernels on the emulator")
    if not emu.compiler_available():
        pytest.skip("the simulated device's emulator needs a C++ compiler")
    cache = tmp_path / "cupy-cache"
    cache.mkdir()
    (cache / "compiled-before.cubin").write_bytes(b"\x7fELF not really")
    return {"GPUGRAD_CUDA_SIM": "1", "CUDA_VISIBLE_DEVICES": None, "CUPY_CACHE_DIR": str(cache),
            "GPUGRAD_EMU_CACHE": os.environ.get("GPUGRAD_EMU_CACHE") or str(Path.home() / ".cache/gpugrad/emu"),
            "GPU_CHECK_WARM": "step", "GPU_CHECK_SMOKE_PARTS": "kernels", "GPU_CHECK_PARALLEL": "",
            "GPU_CHECK_GROUPS": "graphs=tests/cuda/test_cuda_graphs.py::test_capture_errors_name_the_op",
            "GPU_CHECK_BENCH_ARGS": "--quick --sizes 16x32 --sections engine"}


def _junit(out):
    """{group: (tests, failures, errors, skipped)} from tests.tar.gz."""
    counts = {}
    with tarfile.open(out / "tests.tar.gz") as tar:
        for m in tar.getmembers():
            if m.name.endswith(".xml"):
                root = ET.parse(tar.extractfile(m)).getroot()
                suite = root if root.tag == "testsuite" else root[0]
                counts[Path(m.name).stem] = tuple(int(suite.get(k, 0))
                                                  for k in ("tests", "failures", "errors", "skipped"))
    return counts


def test_a_narrowed_run_keeps_every_result_in_eight_files_and_the_cache_round_trip(tmp_path, sim):
    earlier = tmp_path / "earlier.tar.gz"  # an earlier run's kernel cache, given as the second argument
    (tmp_path / "restored.cubin").write_bytes(b"from an earlier run")
    with tarfile.open(earlier, "w:gz") as tar:
        tar.add(tmp_path / "restored.cubin", arcname="restored.cubin")
    out, t0 = tmp_path / "out", time.monotonic()
    r = _run(out, earlier, **sim, GPU_CHECK_SMOKE_S="100", GPU_CHECK_TESTS_S="100", GPU_CHECK_BENCH_S="60")
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert elapsed < 160  # the stage limits (SIGINT at each, KILL 30 s later) bound it
    assert {p.name for p in out.iterdir()} == RESULT_FILES

    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == 0 and summary["stopped"] is None and summary["not_run"] == []
    assert summary["finished"] == ["smoke", "tests:graphs", "bench"]
    assert all(s["exit"] == 0 and not s["timed_out"] for s in summary["steps"].values()), summary["steps"]
    assert summary["tests"]["groups"] == {"graphs": {"tests": 1, "failures": 0, "errors": 0, "skipped": 0}}
    assert summary["bench"]["complete"] is True and summary["files"] == sorted(RESULT_FILES)

    smoke = json.loads((out / "smoke.json").read_text())
    assert smoke["finished"] == ["device", "warm_up", "kernels"] and smoke["failed"] == []
    assert smoke["device"]["simulated"] is True and smoke["warm_up"]["built"] > 0
    assert {f for f, v in smoke["kernels"].items() if isinstance(v, dict) and v["ok"]} == \
        {"elementwise", "reduce", "loss", "norm", "optim", "check"}
    assert _junit(out) == {"graphs": (1, 0, 0, 0)}
    assert "test_capture_errors_name_the_op PASSED" in (out / "tests.log").read_text()
    assert "-m gpu and not slow" in r.stdout and "KILL 30 s later" in r.stdout
    assert "engine overhead" in (out / "bench.txt").read_text()
    assert "gpu-check: done, exit 0" in (out / "gpu-check.log").read_text()

    with tarfile.open(out / "kernel-cache.tar.gz") as tar:  # the cache it had, with what it was given
        assert sorted(tar.getnames()) == ["compiled-before.cubin", "restored.cubin"]
    assert (Path(sim["CUPY_CACHE_DIR"]) / "restored.cubin").read_bytes() == b"from an earlier run"
    assert summary["kernel_cache"]["cache_in"] == {"path": str(earlier), "files": 1}
    assert summary["kernel_cache"]["cache_out"]["files"] == 2


def _wait_for(what, predicate, proc, limit):
    end = time.monotonic() + limit
    while not predicate():
        assert proc.poll() is None, f"the script ended ({proc.returncode}) before {what}"
        assert time.monotonic() < end, f"no {what} within {limit} s"
        time.sleep(0.5)


def test_a_kill_during_the_tests_keeps_the_finished_stages(tmp_path, sim):
    """The caller's time limit (SIGTERM to the script) in the middle of stage 2: the running pytest gets SIGINT and
    writes its JUnit file, no later stage starts, and smoke.json, summary.json and the tarballs stay readable."""
    out = tmp_path / "out"
    env = _env(**{**sim, "GPU_CHECK_GROUPS": "parity=tests/cuda/test_parity.py later=tests/cuda/test_cuda_graphs.py"})
    proc = subprocess.Popen(["bash", str(SCRIPT), str(out)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log = out / "tests.log"
        _wait_for("a passed parity test", lambda: log.exists() and log.read_text().count(" PASSED") >= 3, proc, 150)
        killed = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - killed < 45, "the script must stop within the caller's grace"
    assert proc.returncode == 1, stdout[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM" and summary["status"] == 1
    assert summary["finished"] == ["smoke"] and summary["not_run"] == ["later"]
    assert summary["steps"]["tests:parity"]["stopped"] is True and "bench" not in summary["steps"]
    assert json.loads((out / "smoke.json").read_text())["finished"] == ["device", "warm_up", "kernels"]
    tests, failures, errors, _ = _junit(out)["parity"]  # pytest stopped cleanly and wrote what ran
    assert tests >= 3 and failures == errors == 0
    assert {p.name for p in out.iterdir()} <= RESULT_FILES and not (out / "bench.json").exists()
    with tarfile.open(out / "kernel-cache.tar.gz") as tar:
        assert tar.getnames() == ["compiled-before.cubin"]


@pytest.mark.slow
@pytest.mark.parametrize("plugins", ["autoload", "none"])
def test_a_run_with_every_stage_part(tmp_path, sim, plugins):
    """All of stage 1, a group on xdist workers, and the kernel and engine benchmarks, with the pytest plugins and
    without them (then no --timeout, -n or --benchmark-disable, and benchmarks/conftest.py's one-call stand-in)."""
    out = tmp_path / "out"
    groups = ("graphs=tests/cuda/test_cuda_graphs.py parity=tests/cuda/test_parity.py "
              "bench=benchmarks/bench_elementwise.py")
    r = _run(out, timeout=600, **{**sim, "GPU_CHECK_SMOKE_PARTS": "kernels,step,bench", "GPU_CHECK_WORKERS": "2",
                                  "GPU_CHECK_PARALLEL": "parity", "GPU_CHECK_GROUPS": groups,
                                  "GPU_CHECK_PYTEST_ARGS": "-k 'relu or capture_errors'",
                                  "GPU_CHECK_BENCH_ARGS": "--quick --sizes 64x128 --sections kernels,engine",
                                  "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1" if plugins == "none" else None})
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    smoke = json.loads((out / "smoke.json").read_text())
    assert smoke["finished"] == ["device", "warm_up", "kernels", "step", "bench"] and smoke["failed"] == []
    step = smoke["step"]
    assert step["gpugrad"]["syncs"] == 0 and step["gpugrad"]["launches"] > 0 and step["gpugrad_graph"]["syncs"] == 0
    assert step["gpugrad"]["first_loss"] == pytest.approx(step["gpugrad_graph"]["first_loss"], rel=1e-6)
    assert set(smoke["bench"]) >= {"kernels", "matmul", "ops", "optim", "engine"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == ["smoke", "tests:graphs", "tests:parity", "tests:bench", "bench"]
    groups = _junit(out)
    assert all(g[0] > g[3] and g[1] == g[2] == 0 for g in groups.values()), groups
    tests_lines = [s for s in r.stdout.splitlines() if s.startswith("gpu-check: tests:") and " -m pytest " in s]
    with_plugins = plugins == "autoload"
    assert all(("--timeout=90" in s) == with_plugins for s in tests_lines)
    assert any(" -n 2 " in s for s in tests_lines) == with_plugins
    assert all(("--benchmark-disable" in s) == (with_plugins and HAVE_BENCHMARK_PLUGIN) for s in tests_lines)
    bench = json.loads((out / "bench.json").read_text())
    assert bench["complete"] is True and list(bench["devices"]) == ["cuda"]
    assert all(k["gbs"] > 0 and k["fraction_of_peak"] > 0 for k in bench["devices"]["cuda"]["kernels"])


def test_launches_and_syncs_are_counted_from_profiler_events():
    """What the smoke counts on a GPU (torch.profiler's CUPTI events, (name, on the GPU)): kernels that ran, host
    launch calls (a graph replay is one) and host waits (synchronize calls and blocking copies, not async ones)."""
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "scripts" / "gpu_smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    events = [("cudaLaunchKernel", False), ("cuLaunchKernel", False), ("gg_relu_fwd", True),
              ("softmax_fwd<float>", True), ("Memcpy DtoH (Device -> Pageable)", True), ("Memset (Device)", True),
              ("cudaStreamSynchronize", False), ("cudaMemcpyAsync", False), ("cudaMemcpy", False),
              ("cudaGraphLaunch", False), ("aten::mm", False)]
    assert smoke.profiler_counts(events) == (2, 3, 2)
