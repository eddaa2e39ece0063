"""``gpugrad train --amp bf16|fp16 --tf32`` and ``gpugrad bench --amp``: the switches reach the step, mixed precision
trains as float32 does (within low-precision tolerance), TF32 changes nothing on the CPU, and on CUDA a scaled step
captured by --cuda-graph trains as the eager one."""
from __future__ import annotations

import json

import numpy as np
import pytest

import gpugrad
from gpugrad.backend import get_backend
from gpugrad.bench import report, suites
from gpugrad.bench.workloads.mlp import mlp_steps
from gpugrad.cli import checkpoint, main

FAST = ["train", "--hidden", "32", "--seed", "3", "--epochs", "2", "--quiet"]


def _losses(tmp_path, *args, name="m.json"):
    path = tmp_path / name
    assert main([*FAST, "--metrics-json", str(path), *args]) == 0
    return np.array([(e["train_loss"], e["test_loss"]) for e in json.loads(path.read_text())["epochs"]])


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_train_with_amp_follows_float32_training(tmp_path, amp):
    full = _losses(tmp_path, "--device", "cpu", name="f.json")
    mixed = _losses(tmp_path, "--device", "cpu", "--amp", amp, name="a.json")
    assert not np.array_equal(mixed, full)  # the products did run in low precision
    np.testing.assert_allclose(mixed, full, rtol=3e-2)


def test_a_scaled_fp16_run_on_the_cpu_uses_the_grad_scaler(tmp_path, capsys):
    assert main([*FAST[:-1], "--device", "cpu", "--amp", "fp16", "--epochs", "1"]) == 0
    assert "precision: amp gpugrad.float16 + GradScaler" in capsys.readouterr().out


def test_tf32_changes_nothing_on_the_cpu(tmp_path):
    try:
        np.testing.assert_array_equal(_losses(tmp_path, "--device", "cpu", "--tf32", name="t.json"),
                                      _losses(tmp_path, "--device", "cpu", name="f.json"))
    finally:
        gpugrad.set_float32_matmul_precision("highest")


def test_bench_amp_times_the_autocast_step_beside_float32(monkeypatch, tmp_path):
    steps = mlp_steps(get_backend("cpu"), 16, sizes=(8, 16, 4), amp="bf16", impls=("gpugrad",))
    full, mixed = float(steps["gpugrad"]()), float(steps["gpugrad_bf16"]())
    assert mixed != full and abs(mixed - full) < 2e-2 * abs(full)  # the same model, its products in bfloat16
    seen = []
    monkeypatch.setattr(suites, "run_device", lambda device, config, *a, **k: (seen.append(config.amp),
                                                                              k["on_update"]({})))
    monkeypatch.setattr(report, "format_device", lambda result, env: "(table)")
    main(["bench", "--device", "cpu", "--quick", "--no-progress", "--amp", "fp16", "--json", str(tmp_path / "b.json")])
    assert seen == ["fp16"] and json.loads((tmp_path / "b.json").read_text())["amp"] == "fp16"


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
def test_train_amp_fp16_with_a_cuda_graph_equals_eager(tmp_path):
    eager = _losses(tmp_path, "--device", "cuda", "--amp", "fp16", name="e.json")
    graphed = _losses(tmp_path, "--device", "cuda", "--amp", "fp16", "--cuda-graph", name="g.json")
    np.testing.assert_allclose(graphed, eager, rtol=1e-6)


def test_a_resumed_fp16_run_continues_with_the_saved_grad_scaler(tmp_path, capsys):
    """The checkpoint holds the GradScaler's state (torch's keys), and a resumed --amp fp16 run goes on from it: its
    losses and final scaler state equal a straight run's (a fresh scaler would restart at 2^16 and its growth count at
    0, and skip steps the straight run takes)."""
    args = [*FAST[:-3], "--device", "cpu", "--amp", "fp16", "--quiet"]
    straight_ckpt, ckpt = tmp_path / "straight.ckpt", tmp_path / "run.ckpt"
    assert main([*args, "--epochs", "2", "--checkpoint", str(straight_ckpt), "--metrics-json",
                 str(tmp_path / "s.json")]) == 0
    assert main([*args, "--epochs", "1", "--checkpoint", str(ckpt)]) == 0
    first = checkpoint.load(ckpt, device="cpu")["scaler"]
    assert set(first) == {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
    assert first["_growth_tracker"] > 0  # steps were taken since the last skip: what a fresh scaler would lose
    assert main(["train", "--resume", str(ckpt), "--epochs", "2", "--metrics-json", str(tmp_path / "r.json"),
                 "--amp", "fp16", "--quiet"]) == 0
    def epochs(name):
        return [(e["train_loss"], e["test_loss"]) for e in json.loads((tmp_path / name).read_text())["epochs"]]

    assert epochs("r.json") == epochs("s.json")
    assert checkpoint.load(ckpt, device="cpu")["scaler"] == checkpoint.load(straight_ckpt, device="cpu")["scaler"]


@pytest.mark.parametrize("key, value, what", [("scale", 0.0, "a finite number > 0"),
                                              ("scale", float("inf"), "a finite number > 0"),
                                              ("backoff_factor", 1.5, "a number in (0, 1)"),
                                              ("_growth_tracker", -1, "an integer >= 0")])
def test_resume_refuses_a_scaler_state_it_cannot_train_with(tmp_path, capsys, key, value, what):
    ckpt = tmp_path / "run.ckpt"
    assert main([*FAST[:-3], "--device", "cpu", "--amp", "fp16", "--quiet", "--epochs", "1",
                 "--checkpoint", str(ckpt)]) == 0
    saved = checkpoint.load(ckpt, device="cpu")
    saved["scaler"][key] = value
    checkpoint.save(ckpt, saved)
    assert main(["train", "--resume", str(ckpt), "--epochs", "2", "--amp", "fp16", "--quiet"]) == 1
    assert f"scaler/{key} is {value}; it must be {what}" in capsys.readouterr().err
