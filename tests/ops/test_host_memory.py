"""Host memory kept for reuse (backend/host_memory.py): which thresholds are set when, and, in a fresh process,
that a CPU training step then takes no page fault while freed memory above the trim threshold still goes back."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from gpugrad.backend import host_memory
from gpugrad.backend.host_memory import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, HostMalloc, configure

ROOT = pathlib.Path(__file__).resolve().parents[2]
MiB = 1 << 20


class FakeMallopt:
    def __init__(self, answers=()):
        self.calls, self.answers = [], list(answers)

    def __call__(self, param, value):
        self.calls.append((param, value))
        return self.answers.pop(0) if self.answers else 1


def _configure(environ, fake):
    return configure(environ, lambda: fake)


def test_by_default_the_thresholds_are_glibcs_own_ceiling_mmap_first():
    fake = FakeMallopt()
    assert _configure({}, fake) == HostMalloc("keep", 32 * MiB, 64 * MiB)
    assert fake.calls == [(M_MMAP_THRESHOLD, 32 * MiB), (M_TRIM_THRESHOLD, 64 * MiB)]
    assert (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) == (-3, -1)  # glibc's malloc.h


@pytest.mark.parametrize("environ", [{"MALLOC_MMAP_THRESHOLD_": "131072"}, {"MALLOC_TRIM_THRESHOLD_": "0"},
                                     {"MALLOC_TOP_PAD_": "0"}, {"MALLOC_MMAP_MAX_": "0"},
                                     {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2:glibc.malloc.trim_threshold=1"}],
                         ids=json.dumps)
def test_a_malloc_the_environment_tunes_is_left_alone(environ):
    fake = FakeMallopt()
    assert _configure(environ, fake) == HostMalloc("user")
    assert fake.calls == []


def test_tunables_of_something_else_do_not_count_as_malloc_tuning():
    fake = FakeMallopt()
    assert _configure({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}, fake).policy == "keep"
    assert len(fake.calls) == 2


@pytest.mark.parametrize("value", ["system", " System "])
def test_system_keeps_glibcs_defaults(value):
    fake = FakeMallopt()
    assert _configure({"GPUGRAD_HOST_MALLOC": value}, fake) == HostMalloc("system")
    assert fake.calls == []


def test_keep_asked_for_by_name_wins_over_nothing_but_not_over_the_users_tuning():
    assert _configure({"GPUGRAD_HOST_MALLOC": "keep"}, FakeMallopt()).policy == "keep"
    assert _configure({"GPUGRAD_HOST_MALLOC": "keep", "MALLOC_TOP_PAD_": "0"}, FakeMallopt()).policy == "user"


def test_an_unknown_choice_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"GPUGRAD_HOST_MALLOC must be one of keep, system, got 'pool'"):
        _configure({"GPUGRAD_HOST_MALLOC": "pool"}, FakeMallopt())


def test_without_glibcs_mallopt_nothing_is_set():
    assert configure({}, lambda: None) == HostMalloc("unavailable")


def test_a_refused_mmap_threshold_sets_no_trim_threshold():
    """A trim threshold alone would turn glibc's adjustment off and leave every block over 128 KiB on an mmap."""
    fake = FakeMallopt([0])
    assert _configure({}, fake) == HostMalloc("unavailable")
    assert fake.calls == [(M_MMAP_THRESHOLD, 32 * MiB)]


def test_this_process_was_configured_at_import():
    environ = os.environ
    if environ.get("GPUGRAD_HOST_MALLOC", "").strip().lower() == "system":
        expected = "system"
    elif any(k in environ for k in host_memory.USER_TUNING) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        expected = "user"
    else:
        expected = "unavailable" if host_memory._libc() is None else "keep"
    assert host_memory.STATE.policy == expected


STEPS = """
import json, resource, sys
import numpy as np
import gpugrad
from gpugrad import nn
from gpugrad.nn import functional as F
model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = gpugrad.optim.SGD(model.parameters(), lr=0.01)
rng = np.random.default_rng(0)
x = gpugrad.tensor(rng.standard_normal((64, 784), dtype=np.float32))
t = gpugrad.tensor(rng.integers(0, 10, 64))
def step():
    opt.zero_grad()
    F.cross_entropy(model(x), t).backward()
    opt.step()
for _ in range(5):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
page = resource.getpagesize()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
del model, opt, x, t
start = rss()
blocks = [np.ones(1 << 18, np.float32) for _ in range(200)]  # 200 MiB in 1 MiB heap blocks, touched
del blocks
print(json.dumps([gpugrad.backend.HOST_MALLOC.policy, faults, rss() - start]))
"""


def _run(environ):
    env = {k: v for k, v in os.environ.items()
           if k not in host_memory.USER_TUNING and k not in ("GLIBC_TUNABLES", "GPUGRAD_HOST_MALLOC")}
    env.update(environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", STEPS], env=env, cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=300)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(host_memory._libc() is None or not pathlib.Path("/proc/self/statm").exists(),
                    reason="needs glibc's mallopt and /proc")
def test_a_cpu_training_step_takes_no_page_fault_and_freed_memory_over_the_trim_threshold_goes_back():
    policy, faults, kept = _run({})
    assert policy == "keep"
    assert faults <= 5, f"{faults} minor page faults per MLP step at batch 64"
    assert kept <= 64 * MiB + 8 * MiB, f"{kept / MiB:.1f} MiB of 200 MiB freed stayed in the process"
    # what gpugrad avoids: glibc's defaults fault the step's pages in again every step (2,000 here, 784-1024-1024-10)
    policy, faults_system, _ = _run({"GPUGRAD_HOST_MALLOC": "system"})
    assert policy == "system"
    assert faults_system >= 100 * max(faults, 1)
