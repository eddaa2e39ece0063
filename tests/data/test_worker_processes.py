"""DataLoader worker processes a user can trust (issue #21): they exit when the main process is killed, a timeout
raises within about itself and leaves no zombies, a batch or exception that cannot be pickled is raised in the main
process instead of hanging it, Ctrl-C to the process group is silent in the workers, and an endless RandomSampler
(makemore's) draws lazily. Processes are watched through /proc and os.waitpid, not psutil."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gpugrad
from gpugrad.utils.data import DataLoader, Dataset, RandomSampler, TensorDataset

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="watches processes through /proc (Linux)")


def _script(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def _env():
    return {**os.environ, "GPUGRAD_DEVICE": "cpu"}


def _state(pid):
    """A process's state letter from /proc ("Z": a zombie), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _children(pid=None):
    """pid -> state of the processes whose parent is ``pid`` (this one by default), zombies included."""
    pid, found = pid or os.getpid(), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found[int(entry)] = fields[0]
    return found


_CHILDREN = """
import os
def children():
    me, found = os.getpid(), []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                fields = open(f"/proc/{e}/stat").read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(e)
    return found
"""


# ---- item 13: workers do not outlive a killed main process ----------------------------------------------------------

@pytest.mark.parametrize("where", ["idle", "stuck-in-getitem"])
def test_workers_exit_soon_after_the_main_process_is_sigkilled(where):
    main = subprocess.Popen(_script(_CHILDREN + f"""
import sys, time
from gpugrad.utils.data import DataLoader, Dataset
class Items(Dataset):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        if {where == "stuck-in-getitem"} and i >= 2:
            time.sleep(1000)
        return i
it = iter(DataLoader(Items(), num_workers=2, prefetch_factor=1))
next(it)
print(" ".join(children()), flush=True)
time.sleep(1000)
"""), stdout=subprocess.PIPE, text=True, env=_env())
    workers = []
    try:
        workers = [int(p) for p in main.stdout.readline().split()]
        assert len(workers) == 2, workers
        time.sleep(0.5)  # the idle workers wait for work, the stuck ones are inside __getitem__
        main.kill()
        main.wait()
        start = time.monotonic()
        while time.monotonic() - start < 10 and any(_state(p) not in (None, "Z") for p in workers):
            time.sleep(0.05)
        took = time.monotonic() - start
        assert all(_state(p) in (None, "Z") for p in workers), f"workers still running {took:.1f} s after"
        assert took < 5, f"workers took {took:.1f} s to exit (torch's: about 5 s)"
    finally:
        for p in workers:  # the code before the fix leaves them running: never leak them past the test
            if _state(p) not in (None, "Z"):
                os.kill(p, signal.SIGKILL)
        main.kill()
        main.wait()


# ---- item 14: a timeout raises within about itself and reaps every worker -----------------------------------------

class Stuck(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        time.sleep(1000)
        return i


def test_a_timeout_raises_within_about_the_timeout_and_leaves_no_zombies():
    before = set(_children())
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="DataLoader timed out after 1 seconds"):
        list(DataLoader(Stuck(), num_workers=2, timeout=1))
    took = time.monotonic() - start
    left = {pid: state for pid, state in _children().items() if pid not in before}
    assert took < 2.5, f"raised after {took:.1f} s (torch: about 1.1 s)"
    assert not left, f"worker processes left behind (state Z: zombies): {left}"


def test_a_worker_killed_mid_epoch_is_reported_at_once_and_the_rest_reaped():
    before = set(_children())

    def kill_one():
        deadline = time.monotonic() + 10
        while len(workers := set(_children()) - before) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # both inside Stuck.__getitem__ by now
        os.kill(min(workers), signal.SIGKILL)
        killed.append(time.monotonic())

    killed = []
    threading.Thread(target=kill_one, daemon=True).start()
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly"):
        next(iter(DataLoader(Stuck(), num_workers=2, timeout=60)))  # the timeout: only if the kill never came
    took = time.monotonic() - killed[0]
    assert took < 3, f"reported {took:.1f} s after the kill"
    assert not {pid for pid in _children() if pid not in before}


# ---- item 15: what cannot be pickled is raised in the main process ------------------------------------------------

def test_a_batch_that_cannot_be_pickled_is_raised_in_the_main_process():
    loader = DataLoader(list(range(4)), batch_size=2, num_workers=1, collate_fn=lambda b: (x for x in b),
                        timeout=20)  # the timeout only bounds the hang the code before the fix had
    with pytest.raises(TypeError, match=r"(?s)^Caught TypeError in DataLoader worker process 0\.\nOriginal Traceback"
                                        r".*cannot pickle 'generator' object.*The result of batch 0 \(a generator\) "
                                        r"cannot be pickled.*while fetching batch 0"):
        list(loader)


def test_an_exception_whose_class_cannot_be_pickled_is_a_runtime_error_naming_it():
    class LocalError(Exception):  # defined in a function: pickle cannot find it by name
        pass

    class Fails(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                raise LocalError(f"sample {i} is broken")
            return i

    with pytest.raises(RuntimeError, match=r"(?s)^Caught LocalError in DataLoader worker process \d\.\nOriginal "
                                           r"Traceback.*LocalError: sample 2 is broken.*while fetching batch 2"):
        list(DataLoader(Fails(), num_workers=2, timeout=20))


def test_an_exception_with_unpicklable_arguments_keeps_its_type():
    class Fails(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise ValueError("bad sample", lambda: i)

    with pytest.raises(ValueError, match=r"(?s)^Caught ValueError in DataLoader worker process 0\..*bad sample"):
        list(DataLoader(Fails(), num_workers=1, timeout=20))


def _refuse_to_load():
    raise ValueError("this batch refuses to be unpickled")


class LoadsBadly:
    def __reduce__(self):
        return _refuse_to_load, ()


def test_a_batch_that_cannot_be_unpickled_in_the_main_process_is_named():
    loader = DataLoader(list(range(4)), batch_size=2, num_workers=1, collate_fn=lambda b: LoadsBadly(), timeout=20)
    with pytest.raises(RuntimeError, match=r"DataLoader: batch 0 from a worker process cannot be unpickled in the "
                                           r"main process \(ValueError: this batch refuses to be unpickled\)"):
        list(loader)


# ---- item 16: Ctrl-C to the process group -------------------------------------------------------------------------

def test_ctrl_c_to_the_process_group_is_silent_in_the_workers():
    main = subprocess.Popen(_script("""
import time
from gpugrad.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self):
        return 1000
    def __getitem__(self, i):
        time.sleep(0.05)
        return i
try:
    for i, _ in enumerate(DataLoader(Slow(), num_workers=2)):
        if i == 0:
            print("ready", flush=True)
except KeyboardInterrupt:
    print("the main process stopped", flush=True)
"""), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    try:
        assert main.stdout.readline() == "ready\n"
        time.sleep(0.3)
        os.killpg(main.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        out, err = main.communicate(timeout=30)  # EOF on the pipes: the workers, which hold them too, have exited
    finally:
        if main.poll() is None:
            os.killpg(main.pid, signal.SIGKILL)
            main.wait()
    assert "the main process stopped" in out and main.returncode == 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


# ---- guards that already worked stay: worker seeding and persistent workers are in test_data.py --------------------

def test_an_endless_random_sampler_draws_lazily():
    """makemore's loader: RandomSampler(replacement=True, num_samples=10**10). Run in a 3 GiB address space, so that
    drawing all 10**10 indices at once fails at once instead of filling a large machine's memory."""
    run = subprocess.run(_script("""
import resource, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import numpy as np, gpugrad
from gpugrad.utils.data import DataLoader, Dataset, RandomSampler, TensorDataset
class Items(Dataset):
    def __len__(self):
        return 7
    def __getitem__(self, i):
        return i
for endless in (RandomSampler(range(7), replacement=True, num_samples=10**10),
                RandomSampler(range(7), num_samples=10**10)):
    assert len(endless) == 10**10
    it = iter(endless)
    print(sorted({next(it) for _ in range(700)}), sorted(next(it) for _ in range(7)))
    for ds in (TensorDataset(np.arange(7.0)), Items()):
        for workers in (0, 2):
            loader = DataLoader(ds, batch_size=5, sampler=endless, num_workers=workers)
            batch = next(iter(loader))
            batch = batch[0] if isinstance(batch, list) else batch
            print(len(loader), batch.shape[0], set(batch.tolist()) <= set(range(7)))
"""), capture_output=True, text=True, timeout=120, env=_env())
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("[0, 1, 2, 3, 4, 5, 6] ")  # with replacement: 700 draws cover 0..6
    assert lines[5] == "[0, 1, 2, 3, 4, 5, 6] [0, 1, 2, 3, 4, 5, 6]"  # without: chained permutations
    assert set(lines[1:5]) == set(lines[6:10]) == {"2000000000 5 True"}


def test_random_sampler_with_replacement_keeps_torchs_contract(torch):
    """len() is num_samples, exactly that many indices come (across draw chunks), all in range, uniform, and a
    seeded generator replays them."""
    k = 50_005  # several of the sampler's draw chunks, and a partial one
    theirs = torch.utils.data.RandomSampler(range(4), replacement=True, num_samples=k)
    ours = RandomSampler(range(4), replacement=True, num_samples=k, generator=gpugrad.Generator().manual_seed(0))
    a, b = list(ours), list(RandomSampler(range(4), replacement=True, num_samples=k,
                                          generator=gpugrad.Generator().manual_seed(0)))
    assert len(ours) == len(theirs) == len(a) == len(list(theirs)) == k and a == b
    counts = np.bincount(a, minlength=4)
    assert len(counts) == 4 and np.all(np.abs(counts - k / 4) < 5 * np.sqrt(k * 3 / 16))  # 5 sigma, binomial
    assert list(ours) != a  # the next epoch draws anew, as torch's does
    small = RandomSampler(range(10), replacement=True, num_samples=3)
    assert len(list(small)) == len(list(torch.utils.data.RandomSampler(range(10), True, 3))) == 3


def test_lazy_draws_are_the_draws_made_at_once():
    """Drawing in chunks changes nothing for the epoch-seeded order (epoch e: default_rng((seed, e)))."""
    s = RandomSampler(range(9), replacement=True, num_samples=50, generator=gpugrad.Generator().manual_seed(3))
    first = list(s)
    assert first == np.random.default_rng((s.seed, 0)).integers(0, 9, 50).tolist()
    chained = RandomSampler(range(4), num_samples=10)
    got = list(chained)
    rng = np.random.default_rng((chained.seed, 0))
    assert got == np.concatenate([rng.permutation(4) for _ in range(3)])[:10].tolist()


def test_a_tensor_dataset_loader_streams_its_sampler_in_pieces(monkeypatch):
    """The main-process fast path reads ORDER_CHUNK indices at a time: the same batches as one piece gives."""
    from gpugrad.utils.data import dataloader

    ds = TensorDataset(np.arange(23.0), np.arange(23))
    want = [[b[1].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True, seed=1, drop_last=d)] for d in (0, 1)]
    monkeypatch.setattr(dataloader, "ORDER_CHUNK", 8)
    got = [[b[1].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True, seed=1, drop_last=d)] for d in (0, 1)]
    assert got == want and len(want[0]) == 6 and len(want[1]) == 5 and len(want[0][-1]) == 3
    loader = DataLoader(ds, batch_sampler=[[0, 1], [2], [3, 4, 5]] * 500)
    assert [b[1].tolist() for b in loader][-3:] == [[0, 1], [2], [3, 4, 5]] and len(list(loader)) == 1500
    loader.set_epoch(0, start_batch=1499)
    assert [b[1].tolist() for b in loader] == [[3, 4, 5]]
