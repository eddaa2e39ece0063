"""``gpugrad train``: output, metrics JSON, determinism, checkpoints (atomic, resumable), Ctrl-C, --plot, -m gpugrad."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import gpugrad
from gpugrad.cli import checkpoint, main
from gpugrad.cli.train import EXIT_INTERRUPTED
from gpugrad.data import load_digits, write_idx_dir
from tests import bad_files

REPO = Path(__file__).resolve().parents[2]
# small and fast: 1437 digits, 23 batches of 64 per epoch
FAST = ["--hidden", "32", "--device", "cpu", "--seed", "3"]


def _train(tmp_path, *args, name="m.json"):
    metrics = tmp_path / name
    code = main(["train", *FAST, "--metrics-json", str(metrics), *args])
    return code, (json.loads(metrics.read_text()) if metrics.exists() else None)


def _losses(doc):
    return [(e["train_loss"], e["test_loss"], e["test_acc"]) for e in doc["epochs"]]


def _patch_method(monkeypatch, owner, name, at, action):
    """Make the ``at``-th call of ``owner.name`` run ``action(call)`` instead, ``call()`` being the real one."""
    original, calls = getattr(owner, name), [0]

    def patched(self, *a, **k):
        calls[0] += 1
        if calls[0] == at:
            return action(lambda: original(self, *a, **k))
        return original(self, *a, **k)

    monkeypatch.setattr(owner, name, patched)
    return calls


def _patch_step(monkeypatch, at, action):
    """The optimizer's ``at``-th step runs ``action(step)``."""
    from gpugrad.optim import Optimizer

    return _patch_method(monkeypatch, Optimizer, "step", at, action)


def _patch_backward(monkeypatch, at, action):
    """The ``at``-th ``loss.backward()`` runs ``action(backward)``: a point where the last step is committed."""
    return _patch_method(monkeypatch, gpugrad.Tensor, "backward", at, action)


def _interrupt(call):
    raise KeyboardInterrupt  # a Ctrl-C landing before the call does anything


def test_short_run_prints_per_epoch_lines_and_writes_metrics(tmp_path, capsys):
    code, doc = _train(tmp_path, "--epochs", "2")
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("data: digits (embedded 8x8") and "1437 train / 360 test, 64 features" in out[0]
    assert out[1].startswith("model: MLP 64-32-10 (relu)") and "adamw lr=0.001" in out[1] and "device cpu" in out[1]
    epochs = [line for line in out if line.startswith("epoch ")]
    assert [line.split()[1] for line in epochs] == ["1/2", "2/2"]
    for line in epochs:
        assert "train_loss" in line and "test_acc" in line and "samples/s" in line
    assert out[-1].startswith("final: test_acc") and "after 2 epochs on cpu" in out[-1]

    assert doc["device"] == "cpu" and doc["interrupted"] is False and doc["gpugrad_version"] == gpugrad.__version__
    assert doc["config"] == {"data": None, "hidden": [32], "activation": "relu", "epochs": 2, "batch_size": 64,
                             "lr": 0.001, "optimizer": "adamw", "momentum": 0.9, "weight_decay": 0.1,
                             "standardize": True, "seed": 3}
    assert [e["epoch"] for e in doc["epochs"]] == [1, 2]
    for e in doc["epochs"]:
        assert e["samples_per_s"] > 0 and e["train_time_s"] > 0 and e["eval_time_s"] > 0
        assert 0 <= e["test_acc"] <= 1 and e["train_loss"] > 0
    assert doc["epochs"][1]["train_loss"] < doc["epochs"][0]["train_loss"]
    assert doc["final"] == {k: doc["epochs"][-1][k] for k in ("epoch", "train_loss", "test_loss", "test_acc")}
    assert f"{100 * doc['final']['test_acc']:.2f}%" in out[-1]
    assert doc["timings"]["total_s"] >= doc["timings"]["train_s"] > 0


def test_quiet_prints_only_the_result(tmp_path, capsys):
    assert _train(tmp_path, "--epochs", "1", "--quiet")[0] == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("final: test_acc")


@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize("act", ["gelu", "tanh", "sigmoid"])
def test_options_are_applied(tmp_path, opt, act):
    code, doc = _train(tmp_path, "--epochs", "2", "--optimizer", opt, "--activation", act, "--hidden", "16,8",
                       "--batch-size", "100", "--lr", "0.05", "--no-standardize", "--quiet")
    assert code == 0
    c = doc["config"]
    assert (c["optimizer"], c["activation"], c["hidden"], c["batch_size"], c["lr"]) == (opt, act, [16, 8], 100, 0.05)
    assert c["weight_decay"] == 0.0 and c["standardize"] is False
    assert doc["epochs"][1]["train_loss"] < doc["epochs"][0]["train_loss"]  # it learns


def test_weight_decay_defaults_follow_the_optimizer(tmp_path):
    import argparse

    from gpugrad.cli.train import resolve_config

    ns = argparse.Namespace(**{k: None for k in ("data", "hidden", "activation", "epochs", "batch_size", "lr",
                                                 "optimizer", "momentum", "weight_decay", "standardize", "seed")})
    assert resolve_config(ns)["weight_decay"] == 0.1  # adamw, the default optimizer
    ns.optimizer = "adam"
    assert resolve_config(ns)["weight_decay"] == 0.0
    ns.weight_decay = 0.5
    assert resolve_config(ns)["weight_decay"] == 0.5


def test_same_seed_gives_bitwise_identical_losses(tmp_path):
    _, a = _train(tmp_path, "--epochs", "2", "--quiet", name="a.json")
    _, b = _train(tmp_path, "--epochs", "2", "--quiet", name="b.json")
    _, c = _train(tmp_path, "--epochs", "2", "--quiet", "--seed", "4", name="c.json")
    assert _losses(a) == _losses(b)
    assert _losses(a) != _losses(c)


def test_resume_continues_bitwise_identically(tmp_path, capsys):
    _, straight = _train(tmp_path, "--epochs", "4", "--quiet", name="straight.json")
    ckpt = tmp_path / "run.ckpt"
    assert _train(tmp_path, "--epochs", "2", "--checkpoint", str(ckpt), "--quiet", name="first.json")[0] == 0
    saved = checkpoint.load(ckpt, device="cpu")
    assert saved["progress"]["epoch"] == 2 and saved["progress"]["batch"] == 0
    assert main(["train", "--resume", str(ckpt), "--epochs", "4", "--metrics-json", str(tmp_path / "r.json")]) == 0
    assert "resumed from" in capsys.readouterr().out
    resumed = json.loads((tmp_path / "r.json").read_text())
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2, 3, 4]
    assert _losses(resumed) == _losses(straight)
    # the resumed run kept saving to the checkpoint it came from
    assert checkpoint.load(ckpt, device="cpu")["progress"]["epoch"] == 4


def test_resume_rejects_a_conflicting_configuration(tmp_path, capsys):
    ckpt = tmp_path / "run.ckpt"
    _train(tmp_path, "--epochs", "1", "--checkpoint", str(ckpt), "--quiet")
    assert main(["train", "--resume", str(ckpt), "--hidden", "64"]) == 1
    assert "--hidden 64 differs from the checkpoint's --hidden 32" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "missing.ckpt")]) == 1
    assert "no such checkpoint" in capsys.readouterr().err


def test_ctrl_c_mid_epoch_saves_and_resume_matches_a_straight_run(tmp_path, monkeypatch, capsys):
    _, straight = _train(tmp_path, "--epochs", "3", "--quiet", name="straight.json")
    ckpt = tmp_path / "run.ckpt"

    calls = _patch_backward(monkeypatch, 30, _interrupt)  # epoch 2, batch 7 (23 batches per epoch)
    code, doc = _train(tmp_path, "--epochs", "3", "--checkpoint", str(ckpt), name="cut.json")
    err = capsys.readouterr().err
    assert code == EXIT_INTERRUPTED == 130 and calls[0] == 30
    assert "interrupted at epoch 2, batch 6: checkpoint saved to" in err and "--resume" in err
    assert doc["interrupted"] is True and len(doc["epochs"]) == 1
    saved = checkpoint.load(ckpt, device="cpu")
    assert (saved["progress"]["epoch"], saved["progress"]["batch"], saved["progress"]["samples"]) == (1, 6, 6 * 64)

    monkeypatch.undo()
    assert main(["train", "--resume", str(ckpt), "--metrics-json", str(tmp_path / "r.json"), "--quiet"]) == 0
    assert _losses(json.loads((tmp_path / "r.json").read_text())) == _losses(straight)


def test_sigint_stops_at_a_batch_boundary(tmp_path, monkeypatch, capsys):
    _, straight = _train(tmp_path, "--epochs", "2", "--quiet", name="straight.json")
    ckpt = tmp_path / "run.ckpt"

    def ctrl_c(step):
        signal.raise_signal(signal.SIGINT)  # a real Ctrl-C in the middle of a step: the step still completes
        return step()

    _patch_step(monkeypatch, 5, ctrl_c)
    code, _ = _train(tmp_path, "--epochs", "2", "--checkpoint", str(ckpt), "--quiet", name="cut.json")
    assert code == 130 and "stopping after this batch" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler was restored
    saved = checkpoint.load(ckpt, device="cpu")
    assert (saved["progress"]["epoch"], saved["progress"]["batch"]) == (0, 5)  # the interrupted step completed
    monkeypatch.undo()
    assert main(["train", "--resume", str(ckpt), "--metrics-json", str(tmp_path / "r.json"), "--quiet"]) == 0
    assert _losses(json.loads((tmp_path / "r.json").read_text())) == _losses(straight)


def test_ctrl_c_without_checkpoint_exits_130_and_saves_nothing(tmp_path, monkeypatch, capsys):
    _patch_backward(monkeypatch, 3, _interrupt)
    assert main(["train", *FAST, "--quiet"]) == 130
    assert "nothing saved (no --checkpoint given)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_second_ctrl_c_inside_a_step_is_held_until_the_step_is_committed(tmp_path, monkeypatch, capsys):
    _, straight = _train(tmp_path, "--epochs", "2", "--quiet", name="straight.json")
    ckpt = tmp_path / "run.ckpt"

    def update_then_two_ctrl_c(step):
        step()  # parameters and Adam moments are updated ...
        signal.raise_signal(signal.SIGINT)  # ... and two Ctrl-C land before the step is recorded as done
        signal.raise_signal(signal.SIGINT)

    calls = _patch_step(monkeypatch, 5, update_then_two_ctrl_c)
    code, _ = _train(tmp_path, "--epochs", "2", "--checkpoint", str(ckpt), "--quiet", name="cut.json")
    assert code == 130 and calls[0] == 5 and "checkpoint saved" in capsys.readouterr().err
    saved = checkpoint.load(ckpt, device="cpu")
    assert (saved["progress"]["epoch"], saved["progress"]["batch"]) == (0, 5)
    assert saved["optimizer"]["state"][0]["step"] == 5  # the progress record and the update agree
    monkeypatch.undo()
    assert main(["train", "--resume", str(ckpt), "--metrics-json", str(tmp_path / "r.json"), "--quiet"]) == 0
    assert _losses(json.loads((tmp_path / "r.json").read_text())) == _losses(straight)


def test_an_interrupt_escaping_a_half_done_step_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    ckpt = tmp_path / "run.ckpt"
    assert _train(tmp_path, "--epochs", "1", "--checkpoint", str(ckpt), "--quiet")[0] == 0
    before = ckpt.read_bytes()

    def update_then_interrupt(step):
        step()
        raise KeyboardInterrupt  # not through our handler (another library's): the step was never recorded

    _patch_step(monkeypatch, 5, update_then_interrupt)
    assert main(["train", "--resume", str(ckpt), "--epochs", "2", "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "inside the optimizer step" in err and f"{ckpt} keeps the last consistent checkpoint" in err
    assert ckpt.read_bytes() == before


def test_ctrl_c_while_loading_data_exits_130_cleanly(tmp_path, monkeypatch, capsys):
    from gpugrad.cli import train as train_cli

    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cli, "load_data", interrupted)
    assert main(["train", *FAST, "--checkpoint", str(tmp_path / "run.ckpt")]) == 130
    assert capsys.readouterr().err.strip() == "interrupted before training started; nothing saved"
    assert not (tmp_path / "run.ckpt").exists()


# -- checkpoint files ----------------------------------------------------------------------------------------------
def test_checkpoint_round_trips_nested_state(tmp_path):
    tree = {"model": {"0.weight": np.arange(6, dtype=np.float32).reshape(2, 3)},
            "optimizer": {"state": {0: {"step": 7, "exp_avg": np.ones(3)}, 1: {"step": np.float32(2.5)}},
                          "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1]}]},
            "t": gpugrad.tensor([1.5, 2.5]), "none": None, "nan": float("nan"), "s": "x/y", "flags": [True, False],
            "__odd": {"__array__": 1}}
    path = checkpoint.save(tmp_path / "a.ckpt", tree)
    back = checkpoint.load(path, device="cpu")
    assert back["model"]["0.weight"].dtype == np.float32
    np.testing.assert_array_equal(back["model"]["0.weight"], tree["model"]["0.weight"])
    assert list(back["optimizer"]["state"]) == [0, 1] and back["optimizer"]["state"][0]["step"] == 7
    assert back["optimizer"]["state"][1]["step"] == np.float32(2.5)
    assert isinstance(back["optimizer"]["state"][1]["step"], np.float32)
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert isinstance(back["t"], gpugrad.Tensor) and back["t"].tolist() == [1.5, 2.5]
    assert back["none"] is None and np.isnan(back["nan"]) and back["s"] == "x/y" and back["flags"] == [True, False]
    assert back["__odd"] == {"__array__": 1}
    with np.load(path, allow_pickle=False) as z:  # plain npz, no pickle anywhere
        assert "optimizer/state/0/exp_avg" in z.files and "__meta__" in z.files
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_checkpoint_rejects_what_it_cannot_store_and_files_it_did_not_write(tmp_path):
    with pytest.raises(TypeError, match="object array"):
        checkpoint.save(tmp_path / "a", {"x": np.array([{}], dtype=object)})
    with pytest.raises(TypeError, match="cannot store set"):
        checkpoint.save(tmp_path / "a", {"x": {1, 2}})
    with pytest.raises(TypeError, match="dict key"):
        checkpoint.save(tmp_path / "a", {(1, 2): 3})
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    with pytest.raises(checkpoint.CheckpointError, match="not a gpugrad checkpoint"):
        checkpoint.load(tmp_path / "plain.npz")
    (tmp_path / "junk").write_bytes(b"not a zip file")
    with pytest.raises(checkpoint.CheckpointError, match="not a gpugrad checkpoint: .*junk"):
        checkpoint.load(tmp_path / "junk")
    good = bytearray(checkpoint.save(tmp_path / "good", {"x": np.arange(1000.0)}).read_bytes())
    good[len(good) // 2] ^= 0xFF  # a zip still, but a member's data no longer matches its CRC
    (tmp_path / "flipped").write_bytes(good)
    with pytest.raises(checkpoint.CheckpointError, match="flipped: unreadable checkpoint"):
        checkpoint.load(tmp_path / "flipped")
    meta = json.dumps({"format": "gpugrad-checkpoint", "version": 99, "tree": {}}).encode()
    np.savez(tmp_path / "future.npz", __meta__=np.frombuffer(meta, np.uint8))
    with pytest.raises(checkpoint.CheckpointError, match="version 99"):
        checkpoint.load(tmp_path / "future.npz")


@pytest.mark.parametrize("crash", [OSError("disk full"), KeyboardInterrupt()])
def test_a_crash_mid_save_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch, crash):
    path = tmp_path / "run.ckpt"
    checkpoint.save(path, {"epoch": 1, "w": np.arange(4.0)})
    before = path.read_bytes()

    def partial_then_crash(f, **arrays):
        f.write(b"PK\x03\x04 half a zip")  # some bytes reached the (temporary) file
        raise crash

    monkeypatch.setattr(np, "savez", partial_then_crash)
    with pytest.raises(type(crash)):
        checkpoint.save(path, {"epoch": 2, "w": np.zeros(4)})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert checkpoint.load(path)["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]  # no temporary file left behind


def test_training_reports_a_failed_save_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    ckpt = tmp_path / "run.ckpt"
    assert _train(tmp_path, "--epochs", "1", "--checkpoint", str(ckpt), "--quiet")[0] == 0

    def full_disk(f, **arrays):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    assert main(["train", "--resume", str(ckpt), "--epochs", "2", "--quiet"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    monkeypatch.undo()
    assert checkpoint.load(ckpt, device="cpu")["progress"]["epoch"] == 1


def test_outputs_are_written_through_symlinks(tmp_path):
    real = tmp_path / "real"
    (tmp_path / "link.ckpt").symlink_to(real / "run.ckpt")  # dangling: real/ does not exist yet
    (tmp_path / "link.json").symlink_to(real / "m.json")
    outputs = ["--quiet", "--checkpoint", str(tmp_path / "link.ckpt"), "--metrics-json", str(tmp_path / "link.json")]
    assert main(["train", *FAST, "--epochs", "1", *outputs]) == 0
    assert main(["train", "--resume", str(tmp_path / "link.ckpt"), "--epochs", "2", *outputs]) == 0  # replace
    assert (tmp_path / "link.ckpt").is_symlink() and (tmp_path / "link.json").is_symlink()
    assert checkpoint.load(real / "run.ckpt", device="cpu")["progress"]["epoch"] == 2
    assert json.loads((real / "m.json").read_text())["final"]["epoch"] == 2
    assert sorted(p.name for p in real.iterdir()) == ["m.json", "run.ckpt"]  # no temporary files left


def test_output_paths_are_checked_before_training(tmp_path, monkeypatch, capsys):
    from gpugrad.cli import train as train_cli

    monkeypatch.setattr(train_cli, "train_epoch", lambda *a: pytest.fail("trained despite a bad output path"))
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    cases = [(["--checkpoint", str(tmp_path / "dir")], "--checkpoint .*dir is a directory"),
             (["--metrics-json", str(tmp_path / "fifo")], "--metrics-json .*fifo is not a regular file"),
             (["--metrics-json", str(tmp_path / "file" / "m.json")], "--metrics-json .*cannot create its directory")]
    try:
        import matplotlib  # noqa: F401

        cases += [(["--plot", str(tmp_path / "dir")], "--plot .*dir is a directory"),  # not dir.png
                  (["--plot", str(tmp_path / "file" / "sub" / "c.png")], "--plot .*cannot create its directory"),
                  (["--plot", str(tmp_path / "c.xyz")], "--plot .*c.xyz: unknown image format 'xyz'")]
    except ImportError:
        pass
    for args, pattern in cases:
        assert main(["train", *FAST, *args]) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and re.match("gpugrad train: error: " + pattern, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "file"]
    assert list((tmp_path / "dir").iterdir()) == []


def test_metrics_json_is_strict_json_with_null_for_nan(tmp_path, monkeypatch):
    from gpugrad.cli import train as train_cli

    def reject(constant):
        raise ValueError(f"not strict JSON: {constant}")

    monkeypatch.setattr(train_cli, "evaluate", lambda model, loader: (0.25, float("nan")))
    code, _ = _train(tmp_path, "--epochs", "1", "--quiet")
    doc = json.loads((tmp_path / "m.json").read_text(), parse_constant=reject)
    assert code == 0 and doc["epochs"][0]["test_acc"] is None and doc["final"]["test_acc"] is None
    assert doc["final"]["test_loss"] == 0.25 and doc["diverged"] is None
    # a NaN test loss is divergence (exit 3), recorded with null for the NaN
    monkeypatch.setattr(train_cli, "evaluate", lambda model, loader: (float("nan"), 0.5))
    code, _ = _train(tmp_path, "--epochs", "1", "--quiet")
    doc = json.loads((tmp_path / "m.json").read_text(), parse_constant=reject)
    assert code == train_cli.EXIT_DIVERGED and doc["epochs"] == [] and doc["final"] is None
    assert doc["diverged"]["epoch"] == 1 and doc["diverged"]["test_loss"] is None


# -- resuming: one-line errors ---------------------------------------------------------------------------------------
def _tiny_idx(path, y_train, y_test, side=4):
    """An IDX directory of random side x side images with the given labels."""
    rng = np.random.default_rng(0)
    return write_idx_dir(path, rng.integers(0, 256, (len(y_train), side, side), dtype=np.uint8), y_train,
                         rng.integers(0, 256, (len(y_test), side, side), dtype=np.uint8), y_test)


def test_resuming_a_finished_run_says_there_is_nothing_to_do(tmp_path, capsys):
    ckpt = tmp_path / "run.ckpt"
    assert _train(tmp_path, "--epochs", "2", "--checkpoint", str(ckpt), "--quiet")[0] == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    for more in ([], ["--epochs", "1"]):
        assert main(["train", "--resume", str(ckpt), *more]) == 0
        out, err = capsys.readouterr()
        assert "already finished 2 epochs; nothing to do (pass --epochs > 2 to continue)" in err
        assert "resumed from" not in out and "after 2 epochs" in out.splitlines()[-1]
    assert ckpt.read_bytes() == before


def test_resume_mismatch_names_flags_as_typed(tmp_path, capsys):
    ckpt = tmp_path / "run.ckpt"
    _train(tmp_path, "--epochs", "1", "--checkpoint", str(ckpt), "--quiet")
    assert main(["train", "--resume", str(ckpt), "--no-standardize"]) == 1
    assert "error: --no-standardize differs from the checkpoint's --standardize;" in capsys.readouterr().err
    assert main(["train", "--resume", str(ckpt), "--hidden", "32,16"]) == 1
    assert "error: --hidden 32,16 differs from the checkpoint's --hidden 32;" in capsys.readouterr().err


def test_resume_of_a_file_that_is_not_a_train_checkpoint(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["train", "--resume", str(tmp_path / "notes.txt")]) == 1
    err = capsys.readouterr().err
    assert f"error: not a gpugrad checkpoint: {tmp_path / 'notes.txt'}" in err and "pickle" not in err
    checkpoint.save(tmp_path / "bare.ckpt", {"model": {}, "config": {"seed": 0}})
    assert main(["train", "--resume", str(tmp_path / "bare.ckpt")]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "bare.ckpt: not a checkpoint of `gpugrad train` (no optimizer, progress, " \
        "config/data," in err


def test_resume_after_the_data_changed_is_a_one_line_error(tmp_path, capsys):
    y = (np.arange(40) % 4).astype(np.uint8)
    data, ckpt = _tiny_idx(tmp_path / "idx", y, y[:10]), tmp_path / "run.ckpt"
    assert main(["train", *FAST, "--data", str(data), "--epochs", "1", "--checkpoint", str(ckpt), "--quiet"]) == 0
    _tiny_idx(data, y, y[:10], side=5)  # 25 inputs instead of 16
    assert main(["train", "--resume", str(ckpt), "--epochs", "2"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error: the data no longer matches the checkpoint" in err
    assert "size mismatch for 0.weight" in err
    _tiny_idx(data, y, y[:10])  # the same shapes again, but the checkpoint says it stopped at batch 5 of 1
    saved = checkpoint.load(ckpt, device="cpu")
    saved["progress"].update(epoch=0, batch=5)
    checkpoint.save(ckpt, saved)
    assert main(["train", "--resume", str(ckpt), "--epochs", "2"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error: the data no longer matches the checkpoint" in err


def test_labels_must_be_class_indices_and_sparse_ones_are_warned_about(tmp_path, capsys):
    y = np.arange(40) % 4
    _tiny_idx(tmp_path / "huge", np.where(y == 3, 70000, y).astype(np.int32), y[:10].astype(np.int32))
    assert main(["train", *FAST, "--data", str(tmp_path / "huge")]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "train-labels-idx1-ubyte: label 70000 is not a class index in [0, 65536)" in err
    y = np.where(y == 3, 255, y).astype(np.uint8)
    _tiny_idx(tmp_path / "sparse", y, y[:10])
    assert main(["train", *FAST, "--data", str(tmp_path / "sparse"), "--epochs", "1", "--quiet"]) == 0
    assert "labels go up to 255, so the model gets 256 outputs, but only 4 distinct labels occur" in \
        capsys.readouterr().err


# -- data, plots, errors -------------------------------------------------------------------------------------------
def test_trains_on_an_idx_directory(tmp_path, capsys):
    x, y = load_digits()
    images = (x.reshape(-1, 8, 8) * 15).astype(np.uint8)
    write_idx_dir(tmp_path / "idx", images[:1500], y[:1500].astype(np.uint8), images[1500:],
                  y[1500:].astype(np.uint8), gz=True)
    code, doc = _train(tmp_path, "--data", str(tmp_path / "idx"), "--epochs", "3")
    assert code == 0 and doc["epochs"][-1]["test_acc"] > 0.6  # well above chance after 3 short epochs
    assert doc["config"]["data"] == str((tmp_path / "idx").resolve())
    assert "IDX directory" in capsys.readouterr().out


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path / "nowhere"), *FAST]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpugrad train: error:") and "nowhere: not a directory" in err and len(err.splitlines()) == 1
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "train-images-idx3-ubyte").write_bytes(b"\x01\x02\x03\x04")
    assert main(["train", "--data", str(tmp_path / "idx"), *FAST]) == 1
    err = capsys.readouterr().err
    assert "gpugrad train: error:" in err and "missing IDX file train-labels-idx1-ubyte" in err
    assert main(["train", "--device", "tpu"]) == 1
    assert "unknown device" in capsys.readouterr().err
    for bad in (["--hidden", "0"], ["--hidden", "a,b"], ["--epochs", "0"], ["--lr", "-1"], ["--activation", "x"]):
        with pytest.raises(SystemExit) as e:
            main(["train", *bad])
        assert e.value.code == 2


@pytest.mark.skipif(gpugrad.cuda.is_available(), reason="checks the message given when CUDA is missing")
def test_asking_for_cuda_without_it_is_a_clear_error(capsys):
    assert main(["train", "--device", "cuda", "--epochs", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpugrad train: error: --device cuda: CUDA is not available") and "device='cpu'" in err


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curves.png"
    code, _ = _train(tmp_path, "--epochs", "2", "--plot", str(png), "--quiet")
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_plot_creates_missing_directories(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "missing" / "dir" / "c.png"
    code, _ = _train(tmp_path, "--epochs", "1", "--plot", str(png), "--quiet")
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert main(["train", *FAST, "--plot", str(tmp_path / "p.png")]) == 1
    assert "pip install 'gpugrad[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.slow
def test_default_train_reaches_97_percent_on_digits(tmp_path, capsys):
    code = main(["train", "--metrics-json", str(tmp_path / "m.json")])
    doc = json.loads((tmp_path / "m.json").read_text())
    assert code == 0 and doc["config"]["epochs"] == 30
    assert doc["final"]["test_acc"] >= 0.97, capsys.readouterr().out


# -- the command line itself ---------------------------------------------------------------------------------------
def test_main_without_a_subcommand_prints_help(capsys):
    assert main([]) == 2
    assert "train" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and gpugrad.__version__ in capsys.readouterr().out


def test_subcommands_are_imported_lazily_and_bench_only_when_present(monkeypatch):
    from gpugrad import cli

    monkeypatch.setitem(cli.SUBCOMMANDS, "nothing", ("gpugrad.cli.no_such_module", "absent"))
    names = set(cli._available())
    assert "train" in names and "nothing" not in names
    import importlib.util

    assert ("bench" in names) == (importlib.util.find_spec("gpugrad.cli.bench") is not None)


def test_python_dash_m_gpugrad_help_in_a_subprocess():
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    top = subprocess.run([sys.executable, "-m", "gpugrad", "--help"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert top.returncode == 0 and "usage: gpugrad" in top.stdout and "train" in top.stdout
    sub = subprocess.run([sys.executable, "-m", "gpugrad", "train", "--help"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert sub.returncode == 0
    for option in ("--data", "--hidden", "--activation", "--epochs", "--batch-size", "--lr", "--optimizer",
                   "--momentum", "--weight-decay", "--device", "--seed", "--checkpoint", "--resume",
                   "--metrics-json", "--plot", "--quiet"):
        assert option in sub.stdout


# -- bad input: crafted checkpoints, configs, divergence, paths, the environment ----------------------------------
def _one_line_error(capsys, code, *fragments):
    """The command failed with ``code`` and one line on stderr that holds every fragment (no traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("gpugrad train: error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)
    return lines[0]


@pytest.mark.parametrize("name, tree, members, fragment", [
    ("deep", "[" * 100_000 + "]" * 100_000, {}, "__meta__ is nested too deeply"),          # json: RecursionError
    ("nested", "[" * 500 + "]" * 500, {}, "nesting deeper than 64 levels"),                # deep enough for walk
    ("missing", '{"w": {"__array__": "w", "as": "numpy"}}', {}, "array member 'w' is missing at /w"),  # KeyError
    ("huge", '{"w": {"__array__": "w", "as": "numpy"}}', {"w.npy": bad_files.npy_header((2**40,))},   # MemoryError
     "member 'w.npy' declares shape (1099511627776,) of float64 (8,796,093,022,208 bytes) but holds 0 bytes"),
])
def test_crafted_checkpoints_are_one_line_errors(tmp_path, capsys, name, tree, members, fragment):
    path = bad_files.crafted_checkpoint(tmp_path / f"{name}.ckpt", tree, members)
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(fragment)):
        checkpoint.load(path)
    assert main(["train", "--resume", str(path)]) == 1
    _one_line_error(capsys, 1, f"{path}: corrupt checkpoint: {fragment}")


def test_checkpoint_loading_has_bounded_memory(tmp_path, monkeypatch):
    import tracemalloc

    big = 32 << 20  # a 32 MiB member that deflates to ~32 KiB
    path = bad_files.write_zip(tmp_path / "bomb.ckpt", {
        "__meta__.npy": bad_files.npy_bytes(np.frombuffer(bad_files.meta_text('{"w": {"__array__": "w", "as": '
                                                                               '"numpy"}}'), np.uint8)),
        "w.npy": bad_files.zeros_writer(bad_files.npy_header((big,), "|u1"), big)}, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < big // 100
    tracemalloc.start()
    try:
        with pytest.raises(checkpoint.CheckpointError, match=r"bomb.ckpt: its arrays declare 33,554,\d+ bytes "
                           r"\(uncompressed\), more than the limit of 16,777,216; .*GPUGRAD_MAX_CHECKPOINT_BYTES"):
            checkpoint.load(path, max_bytes=16 << 20)
        monkeypatch.setenv("GPUGRAD_MAX_CHECKPOINT_BYTES", str(16 << 20))
        with pytest.raises(checkpoint.CheckpointError, match="more than the limit of 16,777,216"):
            checkpoint.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # refused before decompressing anything
    assert checkpoint.MAX_BYTES == 2 << 30  # the documented default
    # raised by the argument (over the environment), the same file loads: the cap, not the format, refused it
    tree = checkpoint.load(path, max_bytes=64 << 20)
    assert tree["w"].shape == (big,) and not tree["w"].any()
    monkeypatch.setenv("GPUGRAD_MAX_CHECKPOINT_BYTES", "lots")
    with pytest.raises(checkpoint.CheckpointError, match="GPUGRAD_MAX_CHECKPOINT_BYTES='lots': expected a whole"):
        checkpoint.load(path)


def _good_checkpoint(tmp_path):
    ckpt = tmp_path / "good.ckpt"
    assert main(["train", *FAST, "--epochs", "1", "--quiet", "--checkpoint", str(ckpt)]) == 0
    return ckpt


@pytest.mark.parametrize("field, value, fragment", [
    ("hidden", ["a"], "config/hidden is ['a'], but --hidden must be comma-separated positive layer sizes"),
    ("hidden", [], "config/hidden is [], but --hidden"),
    ("hidden", [32, 0], "config/hidden is [32, 0]"),
    ("lr", "fast", "config/lr is 'fast', but --lr must be a positive finite number"),
    ("lr", float("nan"), "config/lr is nan, but --lr must be a positive finite number"),
    ("lr", float("inf"), "config/lr is inf"),
    ("lr", -0.1, "config/lr is -0.1"),
    ("epochs", -3, "config/epochs is -3, but --epochs must be a positive integer"),
    ("epochs", 2.0, "config/epochs is 2.0"),
    ("batch_size", "64", "config/batch_size is '64', but --batch-size must be a positive integer"),
    ("momentum", -1.0, "config/momentum is -1.0, but --momentum must be a finite number >= 0"),
    ("weight_decay", None, "config/weight_decay is None"),
    ("seed", True, "config/seed is True, but --seed must be an integer >= 0"),
    ("seed", -1, "config/seed is -1"),
    ("activation", "swish", "config/activation is 'swish', but --activation must be one of relu, gelu"),
    ("optimizer", 3, "config/optimizer is 3, but --optimizer must be one of sgd, adam, adamw"),
    ("standardize", "yes", "config/standardize is 'yes', but --standardize must be true or false"),
    ("data", 5, "config/data is 5, but --data must be a directory path"),
    ("data", "", "config/data is ''"),
    ("colour", "red", "config has unknown field(s) colour"),
])
def test_a_checkpoints_config_passes_the_command_lines_rules(tmp_path, capsys, field, value, fragment):
    bad = bad_files.edited_checkpoint(_good_checkpoint(tmp_path), tmp_path / "bad.ckpt",
                                      lambda t: t["config"].__setitem__(field, value))
    assert main(["train", "--resume", str(bad), "--epochs", "2"]) == 1
    _one_line_error(capsys, 1, f"{bad}: {fragment}")


def test_command_line_and_checkpoint_share_one_rule_per_field():
    from gpugrad.cli.train import DEFAULTS, RULES, _arg

    assert set(RULES) == set(DEFAULTS)
    for text in ("nan", "inf", "-1", "0", "fast"):
        with pytest.raises(Exception, match="expected a positive finite number"):
            _arg("lr")(text)
    assert _arg("lr")("1e-3") == 1e-3 and _arg("hidden")("8, 4") == [8, 4] and _arg("seed")("0") == 0


def test_an_int_stands_in_for_a_float_in_a_checkpoints_config(tmp_path):
    bad = bad_files.edited_checkpoint(_good_checkpoint(tmp_path), tmp_path / "int.ckpt",
                                      lambda t: t["config"].__setitem__("momentum", 1))  # JSON may write 1.0 as 1
    assert main(["train", "--resume", str(bad), "--epochs", "1", "--quiet"]) == 0


def test_training_that_diverges_stops_with_exit_3_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    from gpugrad.cli import train as train_cli
    from gpugrad.optim import Optimizer

    # --lr 1e30: the loss is NaN after the first steps
    code, doc = _train(tmp_path, "--lr", "1e30", "--epochs", "3", "--quiet")
    assert code == train_cli.EXIT_DIVERGED == 3
    _one_line_error(capsys, 3, "training diverged in epoch 1: train_loss nan", "NaN or infinite",
                    "smaller --lr (this run's is 1e+30)")
    assert doc["diverged"]["epoch"] == 1 and doc["diverged"]["train_loss"] is None and doc["epochs"] == []

    # divergence in epoch 2 of a resumed run: the checkpoint after epoch 1 is not replaced
    ckpt = _good_checkpoint(tmp_path)
    before = ckpt.read_bytes()

    original = Optimizer.step
    calls = [0]

    def step(self):  # the 5th step of the resumed run (epoch 2) leaves NaN in a weight, as an overflow would
        calls[0] += 1
        original(self)
        if calls[0] == 5:
            self.param_groups[0]["params"][0].data[...] = np.nan

    monkeypatch.setattr(Optimizer, "step", step)
    assert main(["train", "--resume", str(ckpt), "--epochs", "3", "--quiet"]) == 3
    _one_line_error(capsys, 3, "training diverged in epoch 2", f"{ckpt} keeps the last good checkpoint")
    assert ckpt.read_bytes() == before

    # Ctrl-C after the loss went NaN mid-epoch: nothing saved over the good checkpoint either
    calls[0] = 0
    _patch_backward(monkeypatch, 10, _interrupt)
    assert main(["train", "--resume", str(ckpt), "--epochs", "3", "--quiet"]) == 3
    assert "the loss had become NaN or infinite (training diverged): nothing saved" in capsys.readouterr().err
    assert ckpt.read_bytes() == before


def test_a_nan_learning_rate_in_a_checkpoint_is_refused_and_would_be_caught_as_divergence(tmp_path, monkeypatch,
                                                                                         capsys):
    from gpugrad.cli import train as train_cli

    good = _good_checkpoint(tmp_path)
    bad = bad_files.edited_checkpoint(good, tmp_path / "nan-lr.ckpt",
                                      lambda t: t["optimizer"]["param_groups"][0].__setitem__("lr", float("nan")))
    assert main(["train", "--resume", str(bad), "--epochs", "2"]) == 1
    _one_line_error(capsys, 1, "optimizer/param_groups/0/lr is nan, but the run's config gives 0.001")
    monkeypatch.setattr(train_cli, "check_optimizer_state", lambda *a: None)  # without the up-front check ...
    before = bad.read_bytes()
    assert main(["train", "--resume", str(bad), "--epochs", "2", "--quiet"]) == 3  # ... the loss check stops it
    _one_line_error(capsys, 3, "training diverged in epoch 2: train_loss nan")
    assert bad.read_bytes() == before


def test_the_loss_is_read_once_per_epoch(tmp_path, monkeypatch):
    reads = [0]
    item = gpugrad.Tensor.item

    def counted(self):
        reads[0] += 1
        return item(self)

    monkeypatch.setattr(gpugrad.Tensor, "item", counted)
    assert _train(tmp_path, "--epochs", "2", "--quiet")[0] == 0
    assert reads[0] == 2 * 3  # per epoch: the training loss sum, and evaluate's loss and accuracy sums


def test_an_existing_checkpoint_is_replaced_only_with_resume_or_overwrite(tmp_path, monkeypatch, capsys):
    from gpugrad.cli import train as train_cli

    ckpt = _good_checkpoint(tmp_path)
    before = ckpt.read_bytes()
    monkeypatch.setattr(train_cli, "load_data", lambda config: pytest.fail("read data despite the refusal"))
    assert main(["train", *FAST, "--epochs", "1", "--checkpoint", str(ckpt)]) == 1
    _one_line_error(capsys, 1, f"--checkpoint {ckpt} already exists; pass --resume {ckpt} to continue that run, "
                    "or --overwrite to replace it")
    assert ckpt.read_bytes() == before
    monkeypatch.undo()
    assert main(["train", *FAST, "--epochs", "2", "--checkpoint", str(ckpt), "--overwrite", "--quiet"]) == 0
    assert checkpoint.load(ckpt, device="cpu")["progress"]["epoch"] == 2
    assert main(["train", "--resume", str(ckpt), "--epochs", "3", "--quiet"]) == 0


def test_errors_from_gpugrad_device_name_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("GPUGRAD_DEVICE", "tpu")
    assert main(["train", "--epochs", "1"]) == 1
    line = _one_line_error(capsys, 1, "GPUGRAD_DEVICE='tpu' (from the environment): unknown device 'tpu'")
    assert "--device" not in line
    monkeypatch.setenv("GPUGRAD_DEVICE", "cuda:99")  # no such device, with or without CUDA
    assert main(["train", "--epochs", "1"]) == 1
    _one_line_error(capsys, 1, "GPUGRAD_DEVICE='cuda:99' (from the environment): ")
    monkeypatch.setenv("GPUGRAD_DEVICE", "tpu")  # --device wins over the environment
    assert main(["train", *FAST, "--epochs", "1", "--quiet"]) == 0


def _read_only(monkeypatch, directory):
    """``directory`` as a read-only one looks to os.access (real permissions do not stop root)."""
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == directory and mode & os.W_OK
                        else access(p, mode, **k))


def test_resume_from_a_read_only_directory_fails_before_training(tmp_path, monkeypatch, capsys):
    from gpugrad.cli import train as train_cli

    ckpt = _good_checkpoint(tmp_path)
    _read_only(monkeypatch, tmp_path)
    load_data = train_cli.load_data
    monkeypatch.setattr(train_cli, "load_data", lambda config: pytest.fail("read data despite a read-only path"))
    assert main(["train", "--resume", str(ckpt), "--epochs", "2"]) == 1
    _one_line_error(capsys, 1, f"--resume {ckpt}: directory {tmp_path} is not writable", "pass --checkpoint PATH")
    monkeypatch.setattr(train_cli, "load_data", load_data)
    assert main(["train", "--resume", str(ckpt), "--epochs", "1"]) == 0  # finished: nothing to write, so fine
    out = tmp_path / "elsewhere" / "run.ckpt"  # a writable --checkpoint lets the read-only one be resumed
    assert main(["train", "--resume", str(ckpt), "--epochs", "2", "--checkpoint", str(out), "--quiet"]) == 0
    assert checkpoint.load(out, device="cpu")["progress"]["epoch"] == 2


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions that bind (not root)")
def test_resume_from_a_really_read_only_directory_fails_before_training(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ckpt = _good_checkpoint(ro)
    ro.chmod(0o555)
    try:
        assert main(["train", "--resume", str(ckpt), "--epochs", "2"]) == 1
        _one_line_error(capsys, 1, "is not writable")
    finally:
        ro.chmod(0o755)


def test_a_killed_save_leaves_a_temp_file_that_the_next_save_removes(tmp_path):
    path = tmp_path / "run.ckpt"
    checkpoint.save(path, {"epoch": 1})
    script = ("import os, signal, numpy as np; from gpugrad.cli import checkpoint\n"
              "def die(f, **arrays):\n    f.write(b'PK partial'); os.kill(os.getpid(), signal.SIGKILL)\n"
              f"np.savez = die\ncheckpoint.save({str(path)!r}, {{'epoch': 2}})\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    killed = subprocess.run([sys.executable, "-c", script], env=env, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    left = [p.name for p in tmp_path.iterdir() if p.name != "run.ckpt"]
    assert len(left) == 1 and re.fullmatch(r"\.run\.ckpt\.\d+\.[a-z0-9_]{8}\.tmp", left[0]), left
    # files that only look similar, or whose writer is still running, are not ours to remove
    keep = [f".run.ckpt.{os.getpid()}.abcdefgh.tmp", f".run.ckpt.{os.getppid()}.abcdefgh.tmp", ".run.ckpt.tmp",
            ".run.ckpt.abcdefgh.tmp", ".other.ckpt.999999999.abcdefgh.tmp", "run.ckpt.999999999.abcdefgh.tmp",
            ".run.ckpt.999999999.abcdefgh.tmp.bak"]
    for name in keep:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "dir.ckpt").mkdir()
    (tmp_path / ".run.ckpt.999999998.abcdefgh.tmp").mkdir()  # not a regular file
    checkpoint.save(path, {"epoch": 3})
    assert checkpoint.load(path)["epoch"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["run.ckpt", "dir.ckpt", ".run.ckpt.999999998.abcdefgh.tmp", *keep])
