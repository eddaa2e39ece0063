"""``gpugrad train`` as a process among others: two runs on one checkpoint, SIGTERM and a second signal while saving
or exiting, a full disk during a save, Ctrl-C while gpugrad is still importing.  Real processes and real signals:
each test starts ``python -m gpugrad`` (or the console script) and sends it the signal, or limits its file size
with ``RLIMIT_FSIZE``, which stands in for a full disk (writes past it fail with EFBIG; Python ignores SIGXFSZ)."""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpugrad.backend import threads
from gpugrad.cli import checkpoint, main
from gpugrad.cli.checkpoint_lock import CheckpointLock

REPO = Path(__file__).resolve().parents[2]
FAST = ["--hidden", "32", "--device", "cpu", "--seed", "3"]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals, flock and resource limits")


def _env():
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("GPUGRAD_DEVICE", None)
    return env


def _start(*argv, **kw):
    return subprocess.Popen([sys.executable, *map(str, argv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), **kw)


def _wait_for_line(stream, prefix, limit=50):
    """Read ``stream`` until a line starting with ``prefix``; the lines before it."""
    lines = []
    for _ in range(limit):
        line = stream.readline()
        assert line, f"the process ended before printing {prefix!r}: {lines}"
        if line.startswith(prefix):
            return lines
        lines.append(line)
    raise AssertionError(f"no line starting with {prefix!r} in {lines}")


def _lines(err):
    return [line for line in err.splitlines() if line.strip()]


# -- item 7: one run per checkpoint ------------------------------------------------------------------------------
def test_a_second_run_on_a_checkpoint_in_use_is_refused_naming_the_first(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    args = ["-m", "gpugrad", "train", *FAST, "--batch-size", "4", "--epochs", "100", "--checkpoint", ckpt]
    first = _start(*args)
    try:
        _wait_for_line(first.stdout, "model:")  # set up: it holds the lock and trains
        second = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=_env(),
                                timeout=300)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=300)
    assert second.returncode == 1 and _lines(second.stderr) == [
        f"gpugrad train: error: --checkpoint {ckpt} is in use by another gpugrad train (pid {first.pid}, which holds "
        f"{ckpt}.lock); wait for it to finish, or give this run another --checkpoint"], second.stderr
    assert first.returncode == 143  # the first run went on, then saved on SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]  # it removed its lock file on the way out


def test_the_lock_is_shared_by_every_name_of_a_checkpoint_and_a_dead_holders_file_is_no_lock(tmp_path, capsys):
    ckpt = tmp_path / "run.ckpt"
    (tmp_path / "link.ckpt").symlink_to(ckpt)
    held = CheckpointLock.acquire(ckpt)  # this process holds it: flock excludes a second open of the file too
    try:
        assert main(["train", *FAST, "--epochs", "1", "--checkpoint", str(tmp_path / "link.ckpt")]) == 1
        assert capsys.readouterr().err.strip() == (
            f"gpugrad train: error: --checkpoint {tmp_path / 'link.ckpt'} is in use by another gpugrad train (pid "
            f"{os.getpid()}, which holds {ckpt}.lock); wait for it to finish, or give this run another --checkpoint")
    finally:
        held.release()
    assert not ckpt.exists() and not Path(f"{ckpt}.lock").exists()
    Path(f"{ckpt}.lock").write_text("999999999\n")  # left by a killed run: the kernel dropped its lock
    assert main(["train", *FAST, "--epochs", "1", "--quiet", "--checkpoint", str(ckpt)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.ckpt", "run.ckpt"]


# -- item 8: SIGTERM, and a second signal while saving or exiting ------------------------------------------------
@pytest.fixture
def one_blas_thread():
    """In-process runs with the children's one BLAS thread (_env): a run resumed here from a child's checkpoint
    equals a straight one bit for bit only at one thread count, since OpenBLAS's float32 products can round
    differently with another (they do on an AMD EPYC)."""
    before = threads.POLICY.pinned
    threads.POLICY.pin(1)
    yield
    threads.POLICY.pinned = before


def test_sigterm_saves_at_a_batch_boundary_exits_143_and_resumes_bit_for_bit(tmp_path, one_blas_thread):
    ckpt = tmp_path / "run.ckpt"
    run = _start("-m", "gpugrad", "train", *FAST, "--batch-size", "4", "--epochs", "100", "--checkpoint", ckpt)
    _wait_for_line(run.stdout, "epoch ")  # the first epoch is done and saved; the second is under way
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 143, err
    lines = _lines(err)
    path = re.escape(str(ckpt))
    m = re.fullmatch(rf"terminated \(SIGTERM\) at epoch (\d+), batch (\d+): checkpoint saved to {path}; continue "
                     rf"with `gpugrad train --resume {path}`", lines[-1])
    assert m and len(lines) == 1, err
    epoch, batch = int(m[1]), int(m[2])
    progress = checkpoint.load(ckpt, device="cpu")["progress"]
    assert (progress["epoch"] + 1, progress["batch"]) == (epoch, batch) and epoch >= 2
    # resumed, the run ends where one that was never stopped ends
    assert main(["train", "--resume", str(ckpt), "--epochs", str(epoch), "--quiet",
                 "--metrics-json", str(tmp_path / "resumed.json")]) == 0
    assert main(["train", *FAST, "--batch-size", "4", "--epochs", str(epoch), "--quiet",
                 "--metrics-json", str(tmp_path / "straight.json")]) == 0
    resumed, straight = (json.loads((tmp_path / f"{n}.json").read_text())["epochs"] for n in ("resumed", "straight"))
    assert [(e["train_loss"], e["test_loss"]) for e in resumed] == [(e["train_loss"], e["test_loss"]) for e in straight]


# The console script, as pip writes it, with a first signal sent at the 30th step (of 90 in an epoch), a second one
# while the checkpoint is saved and a third after main() returned, while the interpreter exits.
_TWICE = """
    import os, signal, sys
    from gpugrad.cli import checkpoint, main
    from gpugrad.optim import Optimizer
    SIG, steps, step, save = signal.{sig}, [0], Optimizer.step, checkpoint.save

    def stepping(self, *a, **k):
        steps[0] += 1
        if steps[0] == 30:
            os.kill(os.getpid(), SIG)
        return step(self, *a, **k)

    def saving(*a, **k):
        if steps[0] >= 30:
            os.kill(os.getpid(), SIG)
        return save(*a, **k)

    Optimizer.step, checkpoint.save = stepping, saving
    code = main()
    os.kill(os.getpid(), SIG)
    sys.exit(code)
"""


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_second_signal_while_saving_or_exiting_keeps_the_save_and_the_exit_code(tmp_path, sig, code):
    script = tmp_path / "gpugrad"
    script.write_text(textwrap.dedent(_TWICE.format(sig=sig)))
    ckpt = tmp_path / "run.ckpt"
    run = _start(script, "train", *FAST, "--batch-size", "16", "--epochs", "3", "--checkpoint", ckpt)
    _, err = run.communicate(timeout=300)
    assert run.returncode == code and "Traceback" not in err, err
    what = "interrupted" if sig == "SIGINT" else "terminated (SIGTERM)"
    assert _lines(err)[-1] == (f"{what} at epoch 1, batch 30: checkpoint saved to {ckpt}; continue with "
                               f"`gpugrad train --resume {ckpt}`"), err
    assert len(_lines(err)) == (2 if sig == "SIGINT" else 1)  # Ctrl-C also says at once that it stops
    assert checkpoint.load(ckpt, device="cpu")["progress"]["batch"] == 30


# -- item 11: a full disk during a save ----------------------------------------------------------------------------
def test_a_full_disk_names_the_checkpoint_and_says_the_previous_one_is_intact(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    assert main(["train", *FAST, "--epochs", "1", "--quiet", "--checkpoint", str(ckpt)]) == 0
    before = ckpt.read_bytes()
    limit = len(before) // 2  # the next checkpoint is as large: its write fails half way

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = subprocess.run([sys.executable, "-m", "gpugrad", "train", "--resume", str(ckpt), "--epochs", "2",
                          "--quiet"], capture_output=True, text=True, env=_env(), timeout=300, preexec_fn=small_disk)
    assert run.returncode == 1 and _lines(run.stderr) == [
        f"gpugrad train: error: could not write {ckpt}: File too large; the previous checkpoint there is intact"], \
        run.stderr
    assert ckpt.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]  # no temporary file, no lock file


# -- item 20: Ctrl-C at any moment ---------------------------------------------------------------------------------
def _console_script():
    return shutil.which("gpugrad", path=str(Path(sys.executable).parent))


def _wait_until_mapped(pid, name, timeout=60):
    """Until the process has ``name`` (a shared library) mapped: it is importing gpugrad (NumPy comes first)."""
    maps, end = Path(f"/proc/{pid}/maps"), time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if name in maps.read_text():
                return
        except OSError:
            pass
        time.sleep(0.005)
    raise AssertionError(f"{name} never loaded in process {pid}")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
@pytest.mark.parametrize("entry", ["python -m gpugrad", "console script"])
def test_ctrl_c_while_gpugrad_imports_exits_130_with_one_line(entry):
    if entry == "console script" and _console_script() is None:
        pytest.skip("no gpugrad console script next to this Python")
    argv = ["-m", "gpugrad"] if entry == "python -m gpugrad" else [_console_script()]
    run = _start(*argv, "train", *FAST, "--epochs", "1")
    _wait_until_mapped(run.pid, "_multiarray_umath")
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130 and _lines(err) == ["gpugrad: interrupted while starting; nothing was done"], err


def test_ctrl_c_between_set_up_and_training_exits_130_with_one_line(monkeypatch, capsys):
    from gpugrad.cli.train import TrainingRun

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainingRun, "describe", interrupted)
    try:
        code = main(["train", *FAST, "--epochs", "1"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == 130
    assert _lines(capsys.readouterr().err) == ["gpugrad train: interrupted"]
