"""BLAS threads (gpugrad/backend/threads.py): the policy's decisions on a fake load source, and set_num_threads /
get_num_threads against torch itself."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.backend import threads

ROOT = Path(__file__).resolve().parents[2]
LARGE, SMALL = threads.SMALL_GEMM + 1, threads.SMALL_GEMM


class FakePool:
    def __init__(self):
        self.sets = []

    def set(self, n):
        self.sets.append(n)


class FakeLoad:
    """Cores other processes keep busy, as the test says; counts how often it was asked."""

    def __init__(self, others):
        self.others, self.reads = others, 0

    def __call__(self):
        self.reads += 1
        return self.others


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def policy(others, cpus=2, cap=2, pinned=None):
    clock = FakeClock()
    return threads.BlasThreads(FakePool(), FakeLoad(others), cpus, cap, pinned=pinned, clock=clock), clock


@pytest.fixture
def fake_policy(monkeypatch):
    """Installs a policy with a fake pool, load and clock as gpugrad's (the real BLAS pool is not touched)."""
    def install(others, **kw):
        p, clock = policy(others, **kw)
        monkeypatch.setattr(threads, "POLICY", p)
        return p, clock

    return install


# -- the policy's decisions ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("others,cpus,cap,want", [
    (0.0, 2, 2, 2),  # a quiet machine: every core
    (1.0, 2, 2, 1),  # one busy process on 2 cores: 1 thread
    (0.6, 2, 2, 1),  # squeezed by our own threads, it still takes a core
    (0.4, 2, 2, 2),  # a mostly idle neighbour leaves the core free
    (5.0, 2, 2, 1),  # overloaded: never fewer than 1
    (0.0, 8, 4, 4),  # at most the cap (physical cores), even when more CPUs are idle
    (2.2, 8, 8, 6),
])
def test_threads_are_the_free_cores(others, cpus, cap, want):
    p, _ = policy(others, cpus, cap)
    p.fit()
    assert p.pool.sets == [want] and p.current == want


def test_the_limit_changes_only_when_the_wanted_count_does_and_load_is_read_only_every_recheck():
    p, clock = policy(0.0)
    for _ in range(100):
        p.fit()
    assert p.load.reads == 1 and p.pool.sets == [2]  # one measurement per RECHECK_S, not per product
    clock.now += threads.RECHECK_S
    p.fit()
    assert p.load.reads == 2 and p.pool.sets == [2]  # measured again, same count: no change paid
    p.load.others = 1.0
    p.fit()  # busy now, but not re-measured yet
    assert p.pool.sets == [2]
    clock.now += threads.RECHECK_S
    p.fit()
    assert p.pool.sets == [2, 1]
    p.load.others = None  # no usable measurement: keep the last decision
    clock.now += threads.RECHECK_S
    p.fit()
    assert p.pool.sets == [2, 1] and p.current == 1


def test_small_products_and_other_devices_change_nothing(fake_policy):
    p, _ = fake_policy(1.0)
    threads.fit(np, SMALL)
    threads.fit(object(), LARGE)  # CuPy (or the simulator): not NumPy's BLAS
    assert p.load.reads == 0 and p.pool.sets == []
    threads.fit(np, LARGE)
    assert p.pool.sets == [1]


def test_cpu_matmul_and_linear_size_the_pool(fake_policy):
    p, clock = fake_policy(1.0)
    a, b = np.random.default_rng(0).standard_normal((2, 8, 8), dtype=np.float32)
    y = gpugrad.tensor(a) @ gpugrad.tensor(b)  # 512 multiply-adds: leaves the pool alone
    F.linear(gpugrad.tensor(a), gpugrad.tensor(b))
    assert p.pool.sets == [] and p.load.reads == 0
    np.testing.assert_allclose(y.numpy(), a @ b, rtol=1e-6)
    big = np.random.default_rng(1).standard_normal((2, 100, 100), dtype=np.float32)  # 10^6 multiply-adds
    y = gpugrad.tensor(big[0]) @ gpugrad.tensor(big[1])
    assert p.pool.sets == [1]
    np.testing.assert_allclose(y.numpy(), big[0] @ big[1], rtol=1e-5)
    p.load.others = 0.0
    clock.now += threads.RECHECK_S
    w = gpugrad.tensor(big[1], requires_grad=True)
    F.linear(gpugrad.tensor(big[0]), w).sum().backward()
    assert p.pool.sets == [1, 2]
    # the column sums of float32 values in another order than NumPy's (a GEMM with ones): to float32's bound on a
    # sum's rounding, relative to the sum of magnitudes (columns that nearly cancel lose relative digits)
    want = big[0].astype(np.float64).sum(0)
    bound = 1e-6 * np.abs(big[0]).astype(np.float64).sum(0)
    np.testing.assert_array_less(np.abs(w.grad.numpy() - want), np.broadcast_to(bound, (100, 100)))


def test_an_explicit_count_wins_over_the_load(fake_policy):
    p, clock = fake_policy(1.0)
    gpugrad.set_num_threads(3)
    assert p.pool.sets == [3] and gpugrad.get_num_threads() == 3
    for others in (0.0, 5.0):
        p.load.others = others
        clock.now += threads.RECHECK_S
        threads.fit(np, LARGE)
    assert p.pool.sets == [3] and p.load.reads == 0


def test_a_count_pinned_by_the_environment_wins_over_the_load():
    p, _ = policy(1.0, pinned=threads.env_threads({"OPENBLAS_NUM_THREADS": "2"}))
    p.fit()
    assert p.pool.sets == [2] and p.load.reads == 0


@pytest.mark.parametrize("environ,want", [
    ({}, None), ({"OMP_NUM_THREADS": "1"}, 1), ({"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"}, 1),
    ({"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "2"}, 1), ({"OMP_NUM_THREADS": str(10 ** 6)}, os.cpu_count()),
])
def test_environment_counts(environ, want):
    assert threads.env_threads(environ) == want


def test_a_bad_environment_count_is_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="OMP_NUM_THREADS='x' is not a positive integer; gpugrad ignores it"):
        assert threads.env_threads({"OMP_NUM_THREADS": "x"}) is None
    with pytest.warns(UserWarning, match="OPENBLAS_NUM_THREADS='0'"):
        assert threads.env_threads({"OPENBLAS_NUM_THREADS": "0", "OMP_NUM_THREADS": "1"}) == 1


def _proc_stat(path, per_cpu):
    """A /proc/stat with the given (busy, idle) ticks per CPU."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"] + [f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0" for i, (busy, idle) in
                                             enumerate(per_cpu)]
    path.write_text("\n".join(lines + ["intr 1 2 3"]) + "\n")


def test_proc_stat_load_is_other_processes_busy_time_over_the_window(tmp_path):
    stat, clock = tmp_path / "stat", FakeClock()
    own = [0.0]
    times = lambda: os.times_result((own[0], 0.0, 0.0, 0.0, 0.0))  # noqa: E731
    tick = os.sysconf("SC_CLK_TCK")
    _proc_stat(stat, [(0, 0), (0, 0), (0, 0)])
    load = threads.ProcStatLoad([0, 1], stat, clock, times)  # CPU 2 is not this process's: not counted
    # 1 s later: CPU 0 was busy all along, CPU 1 half the time, CPU 2 all along; this process used 0.5 s of CPU
    clock.now += 1.0
    own[0] = 0.5
    _proc_stat(stat, [(tick, 0), (tick // 2, tick // 2), (tick, 0)])
    assert load() == pytest.approx(1.0)  # 1.5 core-seconds busy, 0.5 our own
    clock.now += threads.MIN_WINDOW_S / 2
    assert load() is None  # too short a window to tell


def test_physical_cores_count_hyperthreads_once(tmp_path):
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "core_cpus_list").write_text(siblings + "\n")
    assert threads.physical_cores([0, 1, 2, 3], tmp_path) == 2
    assert threads.physical_cores([0, 2], tmp_path) == 1
    assert threads.physical_cores([0, 1, 7], tmp_path) == 3  # no topology for cpu7: it counts as a core


def test_set_num_threads_changes_numpys_blas_pool(monkeypatch):
    blas = ThreadpoolController().select(user_api="blas")
    if not blas.lib_controllers:
        pytest.skip("NumPy's BLAS has no thread pool threadpoolctl can see")
    before = [lib.num_threads for lib in blas.lib_controllers]
    cpus = threads.usable_cpus()
    monkeypatch.setattr(threads, "POLICY", threads.BlasThreads(threads.BlasPool(), lambda: 0.0, len(cpus), 2))
    try:
        gpugrad.set_num_threads(1)
        assert [lib.get_num_threads() for lib in blas.lib_controllers] == [1] * len(before)
    finally:
        for lib, n in zip(blas.lib_controllers, before):
            lib.set_num_threads(n)


# -- set_num_threads / get_num_threads against torch -----------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2", None, 2 ** 31])
def test_set_num_threads_refuses_what_torch_refuses(torch, fake_policy, value):
    p, _ = fake_policy(0.0)
    with pytest.raises(Exception) as theirs:
        torch.set_num_threads(value)
    with pytest.raises(type(theirs.value), match=f"^{re.escape(str(theirs.value))}$"):
        gpugrad.set_num_threads(value)
    assert p.pool.sets == [] and p.pinned is None


def test_set_num_threads_then_get_num_threads_as_torch(torch, fake_policy):
    fake_policy(0.0)
    before = torch.get_num_threads()
    try:
        for value in (3, np.int64(1), 1000):
            torch.set_num_threads(value)
            gpugrad.set_num_threads(value)
            assert gpugrad.get_num_threads() == torch.get_num_threads() == value
            assert type(gpugrad.get_num_threads()) is int
    finally:
        torch.set_num_threads(before)


BOTH = ("import os, sys, json; cpus = json.loads(sys.argv[1])\n"
        "if cpus: os.sched_setaffinity(0, cpus)\n"
        "import torch, gpugrad; print(json.dumps([torch.get_num_threads(), gpugrad.get_num_threads()]))")


def _counts(environ, cpus=None):
    env = {k: v for k, v in os.environ.items() if k not in threads.ENV_VARS}
    env.update(environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-c", BOTH, json.dumps(cpus)], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("environ", [{}, {"OMP_NUM_THREADS": "1"}, {"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"},
                                     {"OMP_NUM_THREADS": "64"}, {"OMP_NUM_THREADS": "0"}], ids=json.dumps)
def test_get_num_threads_by_default_and_from_the_environment_as_torch(torch, environ):
    theirs, ours = _counts(environ)
    assert ours == theirs


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(threads.usable_cpus()) < 2,
                    reason="needs two CPUs and os.sched_setaffinity")
def test_get_num_threads_counts_only_the_cpus_this_process_may_use_as_torch(torch):
    theirs, ours = _counts({}, cpus=threads.usable_cpus()[:1])
    assert ours == theirs == 1
