"""Several ranks on this machine: ``mpiexec -n N`` runs tests/distributed/worker.py (or ``gpugrad train``), and the
test checks what each rank wrote against NumPy or one process on the concatenated batch; failing ranks must end
the job with an error naming them, within the timeout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.distributed import worker

WORKER = Path(worker.__file__)
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
pytestmark = pytest.mark.skipif(
    MPIEXEC is None or not __import__("gpugrad.distributed").distributed.is_available(),
    reason="needs mpi4py and mpiexec: pip install 'gpugrad[distributed]'")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", GPUGRAD_DEVICE="cpu")
    env.pop("GPUGRAD_CUDA_SIM", None)
    return env


def mpirun(n, *args, timeout=120, launcher=(), check=True):
    """``mpiexec -n n <python> args``; returns (CompletedProcess, seconds)."""
    start = time.monotonic()
    # -launcher fork: every rank on this host, started directly (no ssh, which containers may lack)
    proc = subprocess.run([MPIEXEC, "-launcher", "fork", *launcher, "-n", str(n), sys.executable, *map(str, args)],
                          env=_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"mpiexec -n {n} {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n"
                             f"{proc.stderr}")
    return proc, time.monotonic() - start


# -- collectives vs NumPy ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3])
def test_collectives_match_numpy(n, tmp_path):
    mpirun(n, WORKER, "collectives", tmp_path)
    ranks = [dict(np.load(tmp_path / f"{r}.npz")) for r in range(n)]
    xs = np.stack([g["x"] for g in ranks])
    want = {"SUM": xs.sum(0), "AVG": xs.mean(0), "PRODUCT": xs.prod(0), "MIN": xs.min(0), "MAX": xs.max(0)}
    pieces = np.stack([g["pieces"] for g in ranks])  # (rank giving, piece for rank, 2, 3)
    for r, got in enumerate(ranks):
        for op, value in want.items():
            np.testing.assert_allclose(got[op], value, rtol=1e-15, atol=1e-15, err_msg=op)
        np.testing.assert_allclose(got["SUM_strided"], xs.sum(0).T, rtol=1e-15)
        assert got["async_done"]
        np.testing.assert_array_equal(got["int_SUM"], sum(g["ints"] for g in ranks))
        np.testing.assert_array_equal(got["f32_MAX"], xs.astype(np.float32).max(0))
        np.testing.assert_array_equal(got["broadcast"], xs[n - 1])
        np.testing.assert_array_equal(got["all_gather"], xs)
        np.testing.assert_allclose(got["reduce_scatter_SUM"], pieces[:, r].sum(0), rtol=1e-15)
        np.testing.assert_allclose(got["reduce_scatter_AVG"], pieces[:, r].mean(0), rtol=1e-15)
        assert got["objects"].tolist() == list(range(n)) and int(got["local_rank"]) == r  # all on one host


# -- DistributedDataParallel vs one process ----------------------------------------------------------------------------
@pytest.fixture(scope="module", params=[2, 3], ids=["n2", "n3"])
def ddp_run(request, tmp_path_factory):
    n, out = request.param, tmp_path_factory.mktemp(f"ddp{request.param}")
    mpirun(n, WORKER, "ddp", out)
    return n, [json.loads((out / f"{r}.json").read_text()) for r in range(n)]


def _one_process(opt_name, no_sync=False, world=2):
    """The oracle: rank 0's initial weights, every step on the whole concatenated batch, in one process."""
    model = worker.make_model(seed=0)
    x, y = worker.data(world)
    worker.train(model, worker.OPTIMIZERS[opt_name](model.parameters()), x, y, slice(None))
    return [p.detach().numpy() for p in model.parameters()]


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_ddp_steps_match_one_process_on_the_whole_batch(ddp_run, opt):
    n, ranks = ddp_run
    want = _one_process(opt, world=n)
    assert ranks[0]["buckets"] == 3  # several buckets: each layer's parameters on their own
    for r, got in enumerate(ranks):
        for w, g in zip(want, got[opt]):
            np.testing.assert_allclose(np.array(g), w, rtol=0, atol=1e-6, err_msg=f"rank {r}, {opt}")
        assert got[opt] == ranks[0][opt]  # bitwise the same on every rank


def test_ddp_no_sync_accumulates_then_averages(ddp_run):
    n, ranks = ddp_run
    model = worker.make_model(seed=0)
    x, y = worker.data(n)
    # the oracle: half of each rank's rows, then the other half, as the worker does; summed and averaged over ranks
    # is the mean over the whole batch when each half is weighted 1/2 (every rank has B rows, B even)
    rows = np.concatenate([np.arange(r * worker.B, (r + 1) * worker.B) for r in range(n)])
    worker.train(model, worker.OPTIMIZERS["sgd"](model.parameters()), x, y, rows)
    for w, g in zip([p.detach().numpy() for p in model.parameters()], ranks[0]["no_sync"]):
        np.testing.assert_allclose(np.array(g), w, rtol=0, atol=1e-6)


def test_ddp_bucket_all_reduce_overlaps_backward(ddp_run):
    _, ranks = ddp_run
    for got in ranks:
        events = got["events"]
        # the last layers' bucket starts, and is still in flight, before the first layer's backward runs
        assert events[0].startswith("all_reduce") and events[0].endswith("done=False")
        assert events.index("first layer backward") < len(events) - 1, events
        assert len(events) == 3, events


def test_ddp_unused_parameter_and_mismatched_models_are_named(ddp_run):
    n, ranks = ddp_run
    for r, got in enumerate(ranks):
        assert "find_unused_parameters=True" in got["unused_error"]
        assert got["unused_error"].endswith(f"did not receive grad for rank {r}: spare.weight, spare.bias")
        assert got["unused_ok"] == [True] * 4
        shapes = "; ".join(f"rank {k}: 0.weight ({16 + k}, 5) gpugrad.float64" for k in range(n))
        assert f"ranks disagree on parameter 0 (0.weight): {shapes}" in got["mismatch_error"]


# -- failures: a rank that dies ends the job, naming it ------------------------------------------------------------
def test_a_rank_that_raises_aborts_all(tmp_path):
    proc, took = mpirun(2, WORKER, "fail", tmp_path, "raise", 60, check=False)
    assert proc.returncode != 0 and took < 30
    assert "rank 1 broke on purpose" in proc.stderr
    assert "gpugrad.distributed: rank 1 of 2 failed (ValueError); aborting all ranks" in proc.stderr
    assert not list(tmp_path.iterdir())  # rank 0 did not finish


def test_a_dead_rank_times_out_naming_it(tmp_path):
    # -disable-auto-cleanup: the launcher leaves rank 0 running, so our timeout (2 s) is what ends the job
    proc, took = mpirun(2, WORKER, "fail", tmp_path, "exit", 2, launcher=["-disable-auto-cleanup"], check=False)
    assert proc.returncode != 0 and took < 30, proc.stderr
    assert "DistBackendError: all_reduce timed out after 2 s on rank 0 of 2: rank 1 (pid" in proc.stderr
    assert "has exited" in proc.stderr and "aborting all ranks" in proc.stderr


def test_a_killed_rank_ends_the_job(tmp_path):
    proc, took = mpirun(2, WORKER, "fail", tmp_path, "kill", 60, check=False)
    assert proc.returncode != 0 and took < 30
    assert not list(tmp_path.iterdir())


# -- gpugrad train --distributed -------------------------------------------------------------------------------------
def _digits_run(tmp_path, name, *args, n=None, check=True):
    cmd = [*(["-m", "gpugrad", "train", "--distributed"]), "--epochs", "3", "--hidden", "64", "--device", "cpu",
           "--metrics-json", tmp_path / f"{name}.json", "--checkpoint", tmp_path / f"{name}.ckpt", *args]
    if n is None:
        cmd.remove("--distributed")
        proc = subprocess.run([sys.executable, *map(str, cmd)], env=_env(), capture_output=True, text=True,
                              timeout=120)
    else:
        proc, _ = mpirun(n, *cmd, check=check)
    return proc


def _same_run(tmp_path, a, b, tol=1e-5):
    from gpugrad.cli import checkpoint

    ja, jb = (json.loads((tmp_path / f"{x}.json").read_text()) for x in (a, b))
    for ea, eb in zip(ja["epochs"], jb["epochs"]):
        for key in ("train_loss", "test_loss", "test_acc"):
            assert ea[key] == pytest.approx(eb[key], rel=tol, abs=tol), (key, ea, eb)
    ca, cb = (checkpoint.load(tmp_path / f"{x}.ckpt", device="cpu") for x in (a, b))
    assert ca["config"] == cb["config"] and ca["progress"]["epoch"] == cb["progress"]["epoch"]
    for k in cb["model"]:
        np.testing.assert_allclose(ca["model"][k], cb["model"][k], rtol=0, atol=tol, err_msg=k)


def test_train_on_two_ranks_matches_one_process_with_twice_the_batch(tmp_path):
    proc = _digits_run(tmp_path, "ranks", "--batch-size", "50", n=2)  # 1437 = 14 x 100 + 37: a short last batch
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("epoch ") for line in lines) == 3  # rank 0 alone prints
    assert "batch 100 (~50 per rank x 2 ranks)" in proc.stdout
    _digits_run(tmp_path, "one", "--batch-size", "100")
    _same_run(tmp_path, "ranks", "one")


@pytest.mark.slow
def test_train_resumes_with_any_number_of_ranks(tmp_path):
    _digits_run(tmp_path, "one", "--batch-size", "96")
    _digits_run(tmp_path, "moved", "--batch-size", "48", "--epochs", "1", n=2)
    _digits_run(tmp_path, "moved", "--resume", tmp_path / "moved.ckpt", "--epochs", "2", n=3)  # 32 per rank
    _digits_run(tmp_path, "moved", "--resume", tmp_path / "moved.ckpt")  # one process: the global batch 96
    _same_run(tmp_path, "moved", "one")
    proc = _digits_run(tmp_path, "moved", "--resume", tmp_path / "moved.ckpt", "--epochs", "4", "--batch-size", "40",
                       n=2, check=False)
    assert proc.returncode == 1
    assert proc.stderr.count("--batch-size 80 (--batch-size 40 per rank x 2 ranks) differs from the checkpoint's "
                             "--batch-size 96") == 1  # said once, by rank 0


def _ranks_apart(tmp_path, *per_rank):
    """``mpiexec`` with one rank per argument list (MPMD: ``-n 1 CMD : -n 1 CMD ...``), each of them
    ``gpugrad train --distributed`` with its own extra options."""
    base = [sys.executable, "-m", "gpugrad", "train", "--distributed", "--epochs", "1", "--hidden", "16", "--device",
            "cpu", "--quiet"]
    cmd = [MPIEXEC, "-launcher", "fork"]
    for r, extra in enumerate(per_rank):
        cmd += [*([":"] if r else []), "-n", "1", *base, *map(str, extra)]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("per_rank, said", [
    ([[], ["--lr", "0.01"], []], "--lr 0.001 on ranks 0, 2; --lr 0.01 on rank 1"),
    ([["--optimizer", "sgd"], []], "--optimizer sgd on rank 0; --optimizer adamw on rank 1"),
    ([[], ["--batch-size", "32"]], "--batch-size 64 on rank 0; --batch-size 32 on rank 1"),
    ([[], ["--no-standardize"]], "--standardize on rank 0; --no-standardize on rank 1"),
])
def test_ranks_started_with_different_options_refuse_naming_the_option_and_the_ranks(tmp_path, per_rank, said):
    proc = _ranks_apart(tmp_path, *per_rank)
    assert proc.returncode != 0, proc.stdout + proc.stderr  # they trained apart and exited 0
    line = (f"gpugrad train: error: --distributed: the ranks were started with different options: {said}; start every "
            "rank with the same options")
    assert proc.stderr.count(line) == 1 and "Traceback" not in proc.stderr, proc.stderr  # said once, by rank 0


def test_a_rank_resuming_another_checkpoint_is_refused(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    assert subprocess.run([sys.executable, "-m", "gpugrad", "train", "--epochs", "1", "--hidden", "16", "--device",
                           "cpu", "--quiet", "--checkpoint", str(ckpt)], env=_env(), timeout=120).returncode == 0
    # the same options as the checkpoint's (its global batch 64 is 32 per rank), but rank 1 starts afresh
    proc = _ranks_apart(tmp_path, ["--resume", ckpt, "--epochs", "2", "--checkpoint", tmp_path / "next.ckpt"],
                        ["--epochs", "2", "--batch-size", "32"])
    assert proc.returncode != 0 and proc.stderr.count(
        "the ranks were started with different options: resuming at epoch 2, batch 0 on rank 0; a fresh start on "
        "rank 1; start every rank with the same options") == 1, proc.stderr


# -- the "nccl" backend on this rank's GPU (the simulated device in CI: one rank) -------------------------------------
@pytest.mark.gpu
def test_nccl_group_and_ddp_buckets_on_the_gpu(tmp_path):
    import gpugrad.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("no NCCL library: pip install 'nvidia-nccl-cu13>=2.27.7,<3'")
    env = dict(os.environ)
    env.pop("GPUGRAD_DEVICE", None)
    subprocess.run([sys.executable, WORKER, "nccl", tmp_path], env=env, check=True, timeout=300)
    got = json.loads((tmp_path / "0.json").read_text())
    x = np.arange(8.0).reshape(2, 4)
    assert got["SUM"] == got["AVG"] == got["MAX"] == x.tolist() and got["all_gather"] == [x.tolist()]
    assert got["buckets"] == 2
    for g, want in zip(got["grads"], got["ref_grads"]):  # world size 1: the average is the rank's own gradient
        np.testing.assert_allclose(np.array(g), np.array(want), rtol=1e-12, atol=1e-12)
    if os.environ.get("GPUGRAD_CUDA_SIM"):
        assert got["nccl_launches"] == 2  # one ncclAllReduce per bucket
        assert got["syncs"] == 0  # the buckets are waited for on the device: backward never blocks the host


def test_nccl_with_more_ranks_than_gpus_refuses_before_any_communicator(tmp_path):
    """Two ranks on one (simulated) GPU: NCCL 2.12+ would refuse a shared GPU ("Duplicate GPU detected"), so gpugrad
    refuses first, pointing to the "mpi" backend; no communicator is made."""
    env = dict(_env(), GPUGRAD_CUDA_SIM="1")
    env.pop("GPUGRAD_DEVICE")
    proc = subprocess.run([MPIEXEC, "-launcher", "fork", "-n", "2", sys.executable, str(WORKER), "nccl", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "init_process_group('nccl'): 2 ranks on" in proc.stderr and "but 1 CUDA device(s)" in proc.stderr
    assert "use the 'mpi' backend" in proc.stderr and "NcclError" not in proc.stderr
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.gpu
def test_train_distributed_on_the_gpu_matches_one_process(tmp_path):
    import gpugrad.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("no NCCL library: pip install 'nvidia-nccl-cu13>=2.27.7,<3'")
    env = dict(os.environ)
    env.pop("GPUGRAD_DEVICE", None)
    for name, extra in (("ranks", ["--distributed"]), ("one", [])):  # one rank: the "nccl" group of one GPU
        subprocess.run([sys.executable, "-m", "gpugrad", "train", *extra, "--epochs", "2", "--hidden", "32",
                        "--device", "cuda", "--quiet", "--metrics-json", str(tmp_path / f"{name}.json"),
                        "--checkpoint", str(tmp_path / f"{name}.ckpt")], env=env, check=True, timeout=300)
    _same_run(tmp_path, "ranks", "one", tol=1e-6)


# -- gpugrad bench --distributed ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_bench_distributed_reports_bandwidth_and_throughput(tmp_path, capsys):
    from gpugrad.cli import main

    assert main(["bench", "--distributed", "--quick", "--device", "cpu", "--json", str(tmp_path / "b.json")]) == 0
    doc = json.loads((tmp_path / "b.json").read_text())["distributed"]
    assert {(r["ranks"], r["ddp"]) for r in doc["train"]} == {(1, False), (1, True), (2, False), (2, True)}
    for r in doc["train"]:
        assert r["samples_per_s"] == pytest.approx(r["ranks"] * r["batch_per_rank"] / r["step_s"])
    sizes = [r["bytes"] for r in doc["allreduce"]]
    assert sizes == sorted(sizes) and len(sizes) >= 5
    for r in doc["allreduce"]:  # nccl-tests' definitions; 2 ranks: busbw = algbw x 2 (2 - 1) / 2
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"])
    out = capsys.readouterr().out
    assert "busbw GB/s" in out and "scaling eff." in out
