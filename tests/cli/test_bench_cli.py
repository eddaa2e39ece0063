"""``gpugrad bench``: the quick CPU run end to end (table, JSON, plot), the byte accounting, the timer's statistics
on a fake clock, and that every baseline and PyTorch peer computes what the kernel it is compared with computes."""
from __future__ import annotations

import itertools
import json
import os
import re
import time

import numpy as np
import pytest

import gpugrad
from gpugrad.backend import get_backend
from gpugrad.bench import suites
from gpugrad.bench.timing import HostClock, Timing, measure, measure_many
from gpugrad.bench.workloads.inputs import Inputs, _flatten, bytes_moved
from gpugrad.bench.workloads.kernels import KERNEL_BY_ID, KERNELS, kernel_workload, peak_copy, run_kernels
from gpugrad.bench.workloads.matmul import mlp_matmuls
from gpugrad.bench.workloads.mlp import mlp_steps
from gpugrad.bench.workloads.ops import OPS
from gpugrad.bench.workloads.torch_peer import torch_unavailable_reason
from gpugrad.cli import main as cli_main

try:
    import matplotlib  # noqa: F401

    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False

CPU = get_backend("cpu")


# ---- the quick CPU run, once for the module ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    argv = ["bench", "--quick", "--device", "cpu", "--no-progress", "--json", str(out / "out.json")]
    if HAVE_MPL:
        argv += ["--plot", str(out / "out.png")]
    code = cli_main(argv)
    return code, out


@pytest.mark.slow
def test_quick_cpu_run_writes_every_figure(quick_run, capsys):
    code, out = quick_run
    assert code == 0
    res = json.loads((out / "out.json").read_text())
    cpu = res["devices"]["cpu"]
    assert cpu["peak_bandwidth"]["gbs"] > 0
    assert [k["name"] for k in cpu["kernels"]] == [c.id for c in KERNELS]
    for k in cpu["kernels"]:
        assert k["bytes"] > 0 and k["gbs"] > 0 and k["median_s"] > 0, k
        # NOTE: on a CPU the copy's destination costs a read-for-ownership its byte count leaves out, so in-place
        # and read-mostly kernels (accumulate_, sum_rows) reach ~1.5x the copy; the rest of the margin is noise.
        # The peak is one thread's copy, and the optimizers' updates run on the BLAS pool's threads (SGD's
        # momentum update as axpy / scal reached 2.67x on 2 cores).
        threads = gpugrad.get_num_threads() if k["family"] == "optim" else 1
        assert 0 < k["fraction_of_peak"] <= 2.5 * threads, k
    for m in cpu["matmul"]["cases"]:
        assert m["gflops"] > 0 and 0 < m["fraction_of_peak"] <= 2.5, m
    (mlp,) = cpu["mlp"]
    assert mlp["batch"] == 512 and mlp["sizes"] == [784, 1024, 1024, 10]
    assert mlp["impls"]["baseline"]["time_vs_baseline"] == 1.0
    assert mlp["impls"]["gpugrad"]["samples_per_s"] > 0 and mlp["impls"]["gpugrad"]["time_vs_baseline"] > 0
    assert "CUDA graphs need a CUDA device" in mlp["unavailable"]["gpugrad_graph"]  # an n/a row, with the reason
    eng = cpu["engine"]
    assert eng["us_per_op"]["gpugrad"] > 0
    if torch_unavailable_reason("cpu") is None:
        assert mlp["impls"]["torch"]["time_vs_baseline"] > 0 and eng["gpugrad_vs_torch"] > 0
        assert mlp["impls"]["gpugrad"]["time_vs_torch"] > 0 and mlp["impls"]["torch"]["time_vs_torch"] == 1.0
    env = res["environment"]
    for key in ("python", "numpy", "cupy", "torch", "date", "gpugrad", "cuda"):
        assert key in env
    assert env["cpu"]["model"] and env["cpu"]["usable_cores"] >= 1
    assert env["numpy"] == np.__version__
    assert env["cpu"]["host_malloc"] == vars(gpugrad.backend.HOST_MALLOC)  # what the figures ran with
    json.dumps(env["cpu"]["host_malloc"])
    if not gpugrad.cuda.is_available():
        assert res["skipped"] == {}  # --device cpu asked for no cuda: nothing was skipped


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is an optional extra: pip install 'gpugrad[plot]'")
def test_quick_cpu_run_plots_a_png(quick_run):
    code, out = quick_run
    assert code == 0
    assert (out / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.gpu
@pytest.mark.slow
def test_quick_cuda_run_writes_every_section(tmp_path, capsys):
    """`gpugrad bench --device cuda --quick` end to end; on the simulated device (CI) with CPU sizes, in < 60 s, and
    marked simulated in the JSON and the table."""
    from gpugrad.testing import cuda_sim

    path = tmp_path / "b.json"
    assert cli_main(["bench", "--quick", "--device", "cuda", "--no-progress", "--json", str(path)]) == 0
    res = json.loads(path.read_text())
    assert res["complete"] is True and "stopped" not in res and list(res["devices"]) == ["cuda"]
    cuda = res["devices"]["cuda"]
    assert cuda["simulated"] is cuda_sim.enabled() and ("not GPU figures" in cuda.get("note", "")) is cuda_sim.enabled()
    assert [k["name"] for k in cuda["kernels"]] == [c.id for c in KERNELS]
    assert cuda["peak_bandwidth"]["gbs"] > 0 and all(k["gbs"] > 0 for k in cuda["kernels"])
    assert cuda["matmul"]["cases"] and all(m["gflops"] > 0 for m in cuda["matmul"]["cases"])
    assert [e["batch"] for e in cuda["mlp"]] == cuda["config"]["batches"]
    if not cuda_sim.enabled():  # a real GPU: the step benchmark's batches (the simulated device keeps the CPU's)
        assert cuda["config"]["batches"] == [64, 512, 4096]
    torch_ok = torch_unavailable_reason("cuda") is None
    for e in cuda["mlp"]:
        assert e["impls"]["baseline"]["time_vs_baseline"] == 1.0 and e["impls"]["gpugrad"]["samples_per_s"] > 0
        graph = e["impls"]["gpugrad_graph"]  # the gpugrad step replayed as a CUDA graph, next to eager and torch
        assert graph["samples_per_s"] > 0 and graph["time_vs_baseline"] > 0
        assert (graph["time_vs_torch"] is not None) is torch_ok and ("torch" in e["unavailable"]) is not torch_ok
    assert cuda["engine"]["us_per_op"]["gpugrad"] > 0
    out = capsys.readouterr().out
    assert "== cuda: " in out and ("not GPU figures" in out) is cuda_sim.enabled()
    assert re.search(r"^ *\d+ +gpugrad_graph +[\d,]+ ", out, re.M)  # its row in the MLP table


def test_plot_without_matplotlib_fails_before_measuring(monkeypatch, tmp_path, capsys):
    from gpugrad.cli import plot

    def missing():
        raise plot.PlotUnavailable(f"--plot needs matplotlib, which is not installed: {plot.INSTALL_HINT}")

    monkeypatch.setattr(plot, "require_matplotlib", missing)
    _no_measuring(monkeypatch, "the missing plot")
    assert cli_main(["bench", "--device", "cpu", "--plot", str(tmp_path / "x.png")]) != 0
    assert "matplotlib" in capsys.readouterr().err


def _fake_measurements(monkeypatch, fail=None):
    """Make `gpugrad bench --device cpu` instant: one kernel and one matmul row, a fixed environment.  ``fail`` =
    (section, exception): that section (suites.run_kernels, run_matmuls, run_mlp or run_engine) raises it."""
    from gpugrad.bench import report

    sections = {"run_kernels": lambda *a, **k: ([{"name": "relu_fwd", "fraction_of_peak": 0.5}], {"gbs": 1.0}),
                "run_matmuls": lambda *a, **k: {"cases": [{"name": "mlp_fwd", "fraction_of_peak": 0.9}]},
                "run_mlp": lambda *a, **k: [{"batch": 512}],
                "run_engine": lambda *a, **k: {"n_ops": 200}}
    if fail:
        def raise_(*a, **k):
            raise fail[1]

        sections[fail[0]] = raise_
    for name, fn in {**sections, "Inputs": lambda *a, **k: None, "peak_copy": lambda *a: None}.items():
        monkeypatch.setattr(suites, name, fn)
    monkeypatch.setattr(report, "environment", lambda: {"cpu": {"model": "test CPU", "usable_cores": 2}})
    monkeypatch.setattr(report, "format_device", lambda r, e: "(table)")


def _no_measuring(monkeypatch, why):
    monkeypatch.setattr(suites, "run_device", lambda *a, **k: pytest.fail(f"measured despite {why}"))


def test_outputs_go_into_created_directories_and_through_symlinks(monkeypatch, tmp_path, capsys):
    _fake_measurements(monkeypatch)
    (tmp_path / "b.json").symlink_to(tmp_path / "real" / "b.json")
    argv = ["bench", "--device", "cpu", "--no-progress", "--json"]
    assert cli_main([*argv, str(tmp_path / "nodir" / "x" / "b.json")]) == 0
    res = json.loads((tmp_path / "nodir" / "x" / "b.json").read_text())
    assert res["devices"]["cpu"]["device"] == "cpu" and res["complete"] is True and "stopped" not in res
    assert cli_main([*argv, str(tmp_path / "b.json")]) == 0
    assert (tmp_path / "b.json").is_symlink()
    assert json.loads((tmp_path / "real" / "b.json").read_text())["quick"] is False
    if HAVE_MPL:
        png = tmp_path / "nd" / "p.png"
        assert cli_main(["bench", "--device", "cpu", "--no-progress", "--plot", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("section, exc, kept", [
    ("run_kernels", KeyboardInterrupt(), []),
    ("run_mlp", KeyboardInterrupt(), ["kernels", "matmul"]),  # what `timeout -s INT` (scripts/gpu-check.sh) sends
    ("run_engine", RuntimeError("cudaErrorLaunchFailure"), ["kernels", "matmul", "mlp"]),
])
def test_finished_sections_stay_on_disk_when_a_later_one_is_cut_short(monkeypatch, tmp_path, capsys, section, exc,
                                                                     kept):
    _fake_measurements(monkeypatch, fail=(section, exc))
    path = tmp_path / "b.json"
    argv = ["bench", "--device", "cpu", "--no-progress", "--json", str(path)]
    if isinstance(exc, KeyboardInterrupt):  # exit 130, one line
        assert cli_main(argv) == 130 and capsys.readouterr().err == "\ngpugrad bench: interrupted\n"
    else:
        with pytest.raises(type(exc)):
            cli_main(argv)
    res = json.loads(path.read_text())
    assert res["complete"] is False and res["environment"]["cpu"]["model"] == "test CPU"
    assert res["stopped"] == (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    cpu = res["devices"]["cpu"]
    assert cpu["device"] == "cpu" and [s for s in ("kernels", "matmul", "mlp", "engine") if s in cpu] == kept
    if kept:
        assert cpu["kernels"] == [{"name": "relu_fwd", "fraction_of_peak": 0.5}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]  # no temporary file left behind


def test_sections_choose_what_is_measured_shown_and_written(tmp_path, capsys):
    path = tmp_path / "b.json"
    argv = ["--quick", "--device", "cpu", "--no-progress", "--sizes", "64x128", "--sections", "engine, kernels"]
    assert cli_main(["bench", *argv, "--json", str(path)]) == 0
    res = json.loads(path.read_text())
    assert res["sections"] == ["kernels", "engine"] and res["complete"] is True
    cpu = res["devices"]["cpu"]
    assert {"kernels", "peak_bandwidth", "engine"} <= set(cpu) and not {"matmul", "mlp"} & set(cpu)
    out = capsys.readouterr().out
    assert "peak bandwidth" in out and "engine overhead" in out and "matmul" not in out and "MLP" not in out


@pytest.mark.parametrize("bad", ["", "kernels,gemm", ","])
def test_unknown_sections_are_rejected(bad, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["bench", "--sections", bad])
    assert e.value.code == 2 and "expected a comma-separated subset of kernels,matmul,mlp,engine" in \
        capsys.readouterr().err


def test_bad_output_paths_fail_before_measuring(monkeypatch, tmp_path, capsys):
    _no_measuring(monkeypatch, "a bad output path")
    (tmp_path / "file").write_text("x")
    cases = [(["--json", str(tmp_path)], "--json .* is a directory"),
             (["--json", str(tmp_path / "file" / "b.json")], "--json .*: cannot create its directory")]
    if HAVE_MPL:
        cases += [(["--plot", str(tmp_path)], "--plot .* is a directory"),
                  (["--plot", str(tmp_path / "file" / "nd" / "p.png")], "--plot .*: cannot create its directory")]
    for args, pattern in cases:
        assert cli_main(["bench", "--device", "cpu", *args]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and re.match("gpugrad bench: " + pattern, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_failed_write_after_measuring_is_one_line_and_non_zero(monkeypatch, tmp_path, capsys):
    from gpugrad.bench import report

    _fake_measurements(monkeypatch)

    def full_disk(results, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "write_json", full_disk)
    assert cli_main(["bench", "--device", "cpu", "--no-progress", "--json", str(tmp_path / "b.json")]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error: writing" in err and "No space left on device" in err


@pytest.mark.parametrize("bad", ["-1", "0", "two"])
def test_torch_threads_must_be_a_positive_integer(bad, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["bench", "--torch-threads", bad])
    assert e.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


@pytest.mark.skipif(gpugrad.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_request_without_gpu_fails_clearly(capsys):
    assert cli_main(["bench", "--device", "cuda", "--quick"]) != 0
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and gpugrad.cuda.unavailable_reason() in err


@pytest.mark.skipif(gpugrad.cuda.is_available(), reason="needs a machine without CUDA")
def test_all_devices_without_gpu_says_why_cuda_was_skipped():
    from gpugrad.cli import bench

    devices, skipped = bench._devices("all")
    assert devices == ["cpu"] and skipped == {"cuda": gpugrad.cuda.unavailable_reason()}


def test_bad_sizes_are_rejected(capsys):
    with pytest.raises(SystemExit):
        cli_main(["bench", "--sizes", "12by4"])
    assert "ROWSxCOLS" in capsys.readouterr().err


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sizes_that_cannot_fit_are_refused_before_anything_is_allocated(capsys, device):
    import tracemalloc

    tracemalloc.start()
    try:  # 4 TB an array: more than any host or GPU has (it was an allocation failure, with a traceback)
        code = cli_main(["bench", "--device", device, "--sizes", "1000000x1000000", "--no-progress"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2 and peak < 64 << 20, (code, peak)
    assert re.fullmatch(rf"gpugrad bench: --sizes 1000000x1000000: the kernels section needs about 64.0 TB on "
                        rf"{device} \(16 float32 arrays of 1,000,000 x 1,000,000\), more than the [\d.]+ [KMGT]?B of "
                        r"the (host's available memory|GPU's free memory|simulated device's \(host\) memory); give "
                        r"smaller --sizes\n", err), err


def test_the_size_check_compares_the_kernels_arrays_with_the_memory_available(monkeypatch):
    from gpugrad.bench import memory

    monkeypatch.setattr(memory, "host_available", lambda: 16 * 4 * 1024 * 1024)  # 16 float32 arrays of 1024 x 1024
    memory.check_fits(CPU, (1024, 1024))
    with pytest.raises(memory.TooLarge, match=r"needs about 67.2 MB on cpu .* more than the 67.1 MB of the host's"):
        memory.check_fits(CPU, (1024, 1025))
    monkeypatch.setattr(memory, "host_available", lambda: None)  # nothing says: nothing refused
    memory.check_fits(CPU, (10**9, 10**9))
    monkeypatch.undo()
    assert 0 < memory.host_available() <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# ---- bytes moved --------------------------------------------------------------------------------------------------
def _bytes(name, rows=4, cols=8):
    case = KERNEL_BY_ID[name]
    fn, args = kernel_workload(case, "kernel", Inputs(CPU, rows, cols))
    return bytes_moved(args, fn(), case.inplace)


def test_bytes_moved_counts_minimal_reads_and_writes():
    n, rows, cols = 32, 4, 8
    assert _bytes("relu_fwd") == 2 * n * 4  # read x, write y
    assert _bytes("relu_bwd") == 3 * n * 4  # read y, gy; write gx
    assert _bytes("bias_act_fwd[relu]") == 2 * n * 4 + cols * 4  # x, b; y returned twice but written once
    assert _bytes("dropout_fwd") == 3 * n * 4 + n  # x, u; y and a 1-byte bool mask
    assert _bytes("accumulate_") == 3 * n * 4  # read acc, g; write acc in place
    assert _bytes("softmax_xent_fwd") == n * 4 + rows * 8 + 2 * rows * 4 + 2 * 4  # x, int64 t; loss, lse, aux
    assert _bytes("sum_rows") == n * 4 + cols * 4
    assert _bytes("adam_update_") == 7 * n * 4  # p, m, v read and written, g read
    assert _bytes("sgd_update_[momentum]") == 5 * n * 4  # p, buf read and written, g read


def test_matmul_flops():
    fwd, gx, gw = mlp_matmuls(512)
    assert fwd.flops == gx.flops == gw.flops == 2 * 512 * 1024 * 1024
    a, b = fwd.operands(Inputs(CPU, 1, 1))
    assert a.shape == (512, 1024) and b.shape == (1024, 1024) and not b.flags.c_contiguous  # Wᵀ as a view


# ---- timing --------------------------------------------------------------------------------------------------------
class FakeClock:
    """Returns preset readings in order: each timed run reads it twice (start, end)."""

    def __init__(self, durations):
        self.readings, t = [], 0.0
        for d in durations:
            self.readings += [t, t + d]
            t += d + 1.0

    def __call__(self):
        return self.readings.pop(0)


def test_median_and_iqr_on_a_fake_clock():
    # the timed warm-up reads 0.5; then five samples of one call each
    clock = FakeClock([0.5, 3.0, 1.0, 2.0, 5.0, 4.0])
    t = measure(lambda: None, repeats=5, warmup=1, number=1, clock=HostClock(clock))
    assert t.samples == (3.0, 1.0, 2.0, 5.0, 4.0)
    assert (t.median, t.q1, t.q3, t.iqr) == (3.0, 2.0, 4.0, 2.0)
    assert t.spread == pytest.approx(2 / 3)
    assert t.as_dict()["repeats"] == 5 and not clock.readings


def test_calibration_reaches_the_minimum_sample_time():
    class Ticking:
        now = 0.0

        def clock(self):
            return self.now

        def call(self):
            self.now += 0.001  # each call "takes" 1 ms

    tk = Ticking()
    t = measure(tk.call, repeats=4, min_sample_s=0.01, clock=HostClock(tk.clock))
    assert t.number == 16  # the smallest power of two with 16 ms >= 10 ms
    assert t.median == pytest.approx(0.001) and t.iqr == pytest.approx(0, abs=1e-12)


def test_samples_are_interleaved():
    calls = []
    measure_many({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1, number=1)
    assert calls == ["a", "b"] + ["a", "b"] * 3  # timed warm-ups, then a, b round-robin


def test_settling_runs_each_function_alone_before_its_samples():
    """settle_s: before each sample the function runs untimed, for at least that long, with no other in between."""
    calls = []

    def fn(name):
        return lambda: (calls.append(name), time.sleep(0.005))

    measure_many({"a": fn("a"), "b": fn("b")}, repeats=2, warmup=1, number=1, settle_s=0.02)
    assert calls[:2] == ["a", "b"]  # the timed warm-ups
    runs = [(name, len(list(group))) for name, group in itertools.groupby(calls[2:])]
    assert [name for name, _ in runs] == ["a", "b", "a", "b"]
    assert all(n >= 5 for _, n in runs)  # >= 4 untimed calls of 5 ms fill 20 ms, then the timed one


def test_timing_of_a_constant_is_that_constant():
    t = Timing((2.0, 2.0, 2.0))
    assert t.median == 2.0 and t.iqr == 0.0 and t.spread == 0.0


# ---- like with like -------------------------------------------------------------------------------------------------
def _results(case, impl, inputs):
    fn, args = kernel_workload(case, impl, inputs)
    out = fn()
    got = [args[i] for i in case.inplace] if case.inplace else _flatten(out)
    return [np.asarray(a.detach().numpy() if hasattr(a, "detach") else a).ravel() for a in got if a is not None]


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.id)
def test_baseline_computes_what_the_kernel_computes(case):
    inputs = Inputs(CPU, 8, 16)
    kernel, baseline = _results(case, "kernel", inputs), _results(case, "baseline", inputs)
    assert len(baseline) >= 1
    for k, b in zip(kernel, baseline):
        np.testing.assert_allclose(b, k, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.id)
def test_torch_peer_computes_what_the_kernel_computes(case, torch):
    inputs = Inputs(CPU, 8, 16)
    kernel, peer = _results(case, "kernel", inputs), _results(case, "torch", inputs)
    assert len(peer) >= 1
    for k, p in zip(kernel, peer):
        np.testing.assert_allclose(p, k, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", OPS, ids=lambda c: c.name)
def test_op_baseline_computes_what_the_op_computes(case):
    """Forward and every input gradient of the hand-written op match gpugrad's (ones upstream gradient)."""
    inputs = Inputs(CPU, 6, 10)
    args = case.make(np, inputs)
    ts = [gpugrad.tensor(a, requires_grad=i in case.grad) if hasattr(a, "shape") else a for i, a in enumerate(args)]
    y = case.gg(*ts)
    y.backward(gpugrad.ones(*y.shape) if y.ndim else None)
    y_ref, grads = case.baseline(np, *args, np.ones(y.shape, np.float32) if y.ndim else 1.0)
    np.testing.assert_allclose(y.detach().numpy(), y_ref, rtol=1e-5, atol=1e-6)
    for i, g in zip(case.grad, grads):
        np.testing.assert_allclose(ts[i].grad.numpy(), g, rtol=1e-5, atol=1e-6, err_msg=f"input {i}")


def test_mlp_steps_agree():
    """Baseline, gpugrad and torch run the same step from the same parameters: the same losses."""
    steps = mlp_steps(CPU, 16, sizes=(20, 32, 32, 10))
    losses = {}
    for impl, step in steps.items():
        if isinstance(step, str):
            continue
        losses[impl] = [float(np.asarray(_host(step()))) for _ in range(3)]
    for impl, got in losses.items():
        np.testing.assert_allclose(got, losses["baseline"], rtol=1e-5, err_msg=impl)
    assert losses["baseline"][2] < losses["baseline"][0]  # it trains


def test_mlp_table_shows_the_graph_row_against_baseline_and_torch():
    from gpugrad.bench import report

    times = {"baseline": 2e-4, "gpugrad": 3e-4, "gpugrad_graph": 7e-5, "torch": 1.4e-4}
    impls = {k: {"median_s": t, "iqr_s": t / 10, "samples_per_s": 64 / t, "time_vs_baseline": t / times["baseline"],
                 "time_vs_torch": t / times["torch"]} for k, t in times.items()}
    lines = report._format_mlp({"device": "cuda", "mlp": [{"batch": 64, "sizes": [784, 10], "impls": impls,
                                                           "unavailable": {}}]})
    text = "\n".join(lines)
    assert "vs torch" in text and "replayed as a CUDA graph" in text
    assert re.search(r"^ +64 +gpugrad_graph +914,286 +70 µs +10% +0\.35x +0\.50x$", text, re.M), text


def _host(v):
    return v.detach().numpy() if hasattr(v, "detach") else v


# ---- the CUDA path, without a GPU ------------------------------------------------------------------------------------
def _fake_cuda_backend():
    """A "cuda" Backend whose xp is NumPy plus the slice of ``cupy.cuda`` the timers use (events on the host clock)."""
    import time
    import types

    from gpugrad.backend import Backend, kernels
    from gpugrad.backend.device import Device

    class Event:
        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    class Syncable:
        def __init__(self, *_):
            pass

        def synchronize(self):
            pass

    xp = types.ModuleType("fake_cupy")
    xp.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    xp.cuda = types.SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
                                    get_current_stream=Syncable, Device=Syncable)
    return Backend("cuda", xp, Device("cuda", 0), kernels)  # a CUDA backend carries the CUDA launchers


def test_cuda_kernel_suite_runs_the_real_launchers_on_the_emulator():
    """Every kernel case's arguments pass the CUDA launchers' checks and run (kernels on the CPU emulator), timed
    through the CUDA-event timer: the GPU half of `gpugrad bench` that CI cannot otherwise reach."""
    emu = pytest.importorskip("gpugrad.testing.cuda_emu", reason="the CPU emulator is optional")
    if not emu.compiler_available():
        pytest.skip("CPU emulator: no C++ compiler found")
    from gpugrad.backend import kernels
    from gpugrad.bench.timing import CudaClock, Timer

    be = _fake_cuda_backend()
    timer = Timer(be, repeats=2, min_sample_s=1e-5)
    assert isinstance(timer.clock, CudaClock)
    before = kernels.CALLS.copy()
    with kernels.use_runtime(emu.EmuRuntime(source_for_family=kernels.source, include_dirs=[kernels.kernel_dir()])):
        rows, peak = run_kernels(Inputs(be, 6, 40), timer, peak_copy(be, 6 * 40 * 4))
    launched = kernels.CALLS - before
    assert {c.name for c in KERNELS} <= set(launched)  # the CUDA launchers ran, not the references
    assert peak["gbs"] > 0 and all(r["gbs"] > 0 for r in rows)
    assert [r["bytes"] for r in rows] == [_bytes(c.id, 6, 40) for c in KERNELS]  # same traffic as the CPU


def test_the_long_chain_runs_interleaved_and_reports_each_implementations_median_run(monkeypatch):
    pytest.importorskip("torch")
    from gpugrad.bench.timing import timer_for
    from gpugrad.bench.workloads import engine

    calls = []
    runs = iter([(1.0, 2.0), (5.0, 5.0), (0.5, 0.5), (3.0, 1.0), (2.0, 2.0), (9.0, 0.0)])  # gpugrad, torch, ...
    monkeypatch.setattr(engine, "long_chain", lambda impl, backend, n: calls.append((impl, n)) or next(runs))
    be = get_backend("cpu")
    out = engine.run_engine(be, timer_for(be, repeats=2), 5, chain=10, chain_rounds=3)
    assert calls == [("gpugrad", 10), ("torch", 10)] * 3
    assert out["chain"]["gpugrad"] == {"forward_s": 1.0, "backward_s": 2.0, "total_s": 3.0, "totals_s": [3.0, 1.0, 4.0]}
    assert out["chain"]["torch"] == {"forward_s": 9.0, "backward_s": 0.0, "total_s": 9.0, "totals_s": [10.0, 4.0, 9.0]}
    assert out["chain_gpugrad_vs_torch"] == pytest.approx(3.0 / 9.0)
    assert out["chain"]["rounds"] == 3
