"""DataLoader worker processes (``num_workers > 0``), as torch runs them.

Each worker is a ``multiprocessing`` process (the default context, fork on Linux, unless ``multiprocessing_context``
says otherwise; spawned workers need a picklable dataset and collate_fn) with its own index queue; batches of
indices go out round robin, at most ``prefetch_factor`` per worker ahead, and come back through one result queue,
yielded in the sampler's order. Seeding is torch's: the loader draws ``base_seed`` from its ``generator`` (or the
default one) each time workers start, and worker i seeds Python's ``random`` and gpugrad with ``base_seed + i`` and
NumPy's global generator from (base_seed, i) before ``worker_init_fn(i)``; ``get_worker_info()`` tells a worker
who it is (None in the main process). An ``IterableDataset`` is iterated by every worker (shard it with
``get_worker_info()``). Workers compute on the CPU; their Tensors travel as NumPy arrays and become Tensors again
in the main process. An exception in a worker is raised again in the main process, with the same type (a
RuntimeError when the type cannot travel) and the worker's traceback in its message; so is a batch that cannot be
pickled; a worker that dies, or a batch slower than ``timeout``, is a RuntimeError, raised within about a second
(or the timeout) with every worker stopped and reaped.

Workers never outlive the main process: each watches its parent and exits when it is gone (a SIGKILL, the OOM
killer), within about ``_WATCH_INTERVAL`` seconds. They ignore SIGINT: Ctrl-C reaches the whole process group, and
the main process's KeyboardInterrupt stops them, quietly, as torch's are.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import random
import signal
import threading
import time
import traceback

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend.device import set_default_device
from gpugrad.creation import as_tensor
from gpugrad.random import manual_seed
from gpugrad.utils.data.sampler import _rng


class WorkerInfo:
    """``id``, ``num_workers``, ``seed`` (base_seed + id) and ``dataset`` (this worker's copy)."""
    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return f"WorkerInfo({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


_INFO = None


class _End:
    """A worker's IterableDataset is exhausted (compared by type: it arrives as a new object)."""


def get_worker_info():
    """The current worker's :class:`WorkerInfo`, or None in the main process."""
    return _INFO


_WATCH_INTERVAL = 0.25  # seconds between a worker's checks that its parent still runs
_STOP_WAIT = 5.0  # seconds all workers together get to exit after a finished epoch, before SIGTERM


class _Raised:
    """An exception in a worker, carried to the main process as strings and, when it pickles by reference, its type
    (the exception object itself may not pickle: a lock in its args, a class defined in a function)."""

    def __init__(self, exc, wid, batch, note=""):
        self.name, self.where, self.batch = type(exc).__name__, f"in DataLoader worker process {wid}", batch
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + note
        try:
            self.type = pickle.loads(pickle.dumps(type(exc)))
        except Exception:  # noqa: BLE001 - any reason the class cannot travel: raised as a RuntimeError
            self.type = None

    def reraise(self):
        msg = f"Caught {self.name} {self.where}.\nOriginal {self.text}(while fetching batch {self.batch} of the epoch)"
        try:
            exc = (self.type or RuntimeError)(msg)
        except Exception:  # noqa: BLE001 - an exception type that takes other arguments
            raise RuntimeError(msg) from None
        raise exc


def _dumps(out, wid, batch):
    """``out`` pickled here, where a failure can still be reported (a multiprocessing queue would only print it in
    its feeder thread and drop the batch, leaving the main process waiting for it)."""
    try:
        return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - whatever pickle raises, raised again in the main process
        note = f"The result of batch {batch} (a {type(out).__qualname__}) cannot be pickled to go to the main " \
               "process: a worker's batches must be picklable (return Tensors, arrays, numbers, containers)\n"
        return pickle.dumps(_Raised(e, wid, batch, note), protocol=pickle.HIGHEST_PROTOCOL)


def _alive(pid):
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process (EPERM): it exists
        pass
    return True


def _watch_parent(main_pid):
    """Exit this worker as soon as its parent is gone (a SIGKILL or the OOM killer skips every cleanup)."""
    parent = os.getppid()  # the main process, or a forkserver that dies with it
    if parent != main_pid and not _alive(main_pid):  # NOTE: the main process died before this worker started
        os._exit(0)

    def watch():
        while os.getppid() == parent:
            time.sleep(_WATCH_INTERVAL)
        os._exit(0)  # NOTE: also from inside a stuck __getitem__: nobody is left to want its result

    threading.Thread(target=watch, name="DataLoader worker watchdog", daemon=True).start()


class _Array:
    """A Tensor on its way between processes: its data as a NumPy array."""
    def __init__(self, t):
        self.array, self.requires_grad = t.detach().cpu().numpy(), t.requires_grad


def _pack(tree, out=True):
    """Tensors to :class:`_Array` (``out``) or back, through dicts, lists and (named) tuples."""
    if out and isinstance(tree, Tensor) or not out and isinstance(tree, _Array):
        if out:
            return _Array(tree)

        return as_tensor(tree.array, device="cpu").requires_grad_(tree.requires_grad)
    if isinstance(tree, dict):
        return type(tree)({k: _pack(v, out) for k, v in tree.items()})
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_pack(v, out) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_pack(v, out) for v in tree)
    return tree


def _loop(wid, num_workers, base_seed, fetch, init_fn, tasks, results, main_pid):
    """One worker: seed, init, then fetch batches until told to stop (None)."""
    global _INFO
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # NOTE: Ctrl-C is the main process's to handle (see module doc)
    _watch_parent(main_pid)

    os.environ["GPUGRAD_DEVICE"] = "cpu"  # NOTE: never touch a CUDA context inherited from the parent
    set_default_device("cpu")
    seed = base_seed + wid
    random.seed(seed)
    manual_seed(seed)
    np.random.seed(np.random.SeedSequence((base_seed, wid)).generate_state(4))
    _INFO = WorkerInfo(id=wid, num_workers=num_workers, seed=seed, dataset=fetch.dataset)
    failed, stream, stream_of = None, None, None
    try:
        if init_fn is not None:
            init_fn(wid)
    except Exception as e:  # noqa: BLE001 - reported with the first batch asked for
        failed = e
    while (task := tasks.get()) is not None:
        gen, k, indices = task
        try:
            if failed is not None:
                out = _Raised(failed, wid, k)
            elif indices is None:  # an IterableDataset: this worker's own iterator, new for each epoch
                if stream_of != gen:
                    stream, stream_of = iter(fetch.dataset), gen
                out = _pack(fetch(None, stream))
            else:
                out = _pack(fetch(indices))
        except StopIteration:
            out = _End()
        except Exception as e:  # noqa: BLE001 - raised again in the main process
            out = _Raised(e, wid, k)
        results.put((gen, k, _dumps(out, wid, k)))
    results.cancel_join_thread()  # NOTE: exiting never waits for results nobody will read (an abandoned epoch's)


class _Pool:
    """The worker processes of one loader, their index queues and the result queue."""
    def __init__(self, loader, fetch):

        ctx = loader.multiprocessing_context
        ctx = multiprocessing.get_context(ctx) if ctx is None or isinstance(ctx, str) else ctx
        n, base_seed = loader.num_workers, int(_rng(loader.generator).integers(2**62))
        self.results, self.tasks, self.gen = ctx.Queue(), [ctx.Queue() for _ in range(n)], 0
        self.procs = [ctx.Process(target=_loop, args=(i, n, base_seed, fetch, loader.worker_init_fn, self.tasks[i],
                                                      self.results, os.getpid()), daemon=True) for i in range(n)]
        for p in self.procs:
            p.start()

    def get(self, timeout):
        """The next (gen, batch, result); RuntimeError when a worker died or ``timeout`` (seconds, 0: none) passed."""
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            try:
                gen, k, data = self.results.get(timeout=1.0 if deadline is None else max(0.0, min(1.0, deadline -
                                                                                                   time.monotonic())))
                break
            except queue.Empty:
                dead = [str(p.pid) for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(dead)}) exited unexpectedly") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
        try:
            return gen, k, pickle.loads(data)
        except Exception as e:  # noqa: BLE001 - e.g. a class the main process cannot import (spawned workers)
            raise RuntimeError(f"DataLoader: batch {k} from a worker process cannot be unpickled in the main process "
                               f"({type(e).__name__}: {e})") from None

    def shutdown(self, wait=_STOP_WAIT):
        """Stop every worker and reap it (no zombies): ask each to exit, give them ``wait`` seconds in all, then
        SIGTERM, then SIGKILL."""
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive() and wait:
                with contextlib.suppress(OSError, ValueError):
                    q.put(None)
        deadline = time.monotonic() + wait
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for stop in (multiprocessing.Process.terminate, multiprocessing.Process.kill):
            alive = [p for p in self.procs if p.is_alive()]
            for p in alive:
                with contextlib.suppress(OSError):
                    stop(p)
            for p in alive:
                p.join(timeout=2.0)
        for q in (*self.tasks, self.results):
            q.cancel_join_thread()
            q.close()
        self.procs = []


def run(loader, fetch, tasks):
    """The batches of ``tasks`` (index lists, or None per batch of an IterableDataset) from the loader's workers,
    in order. Results of an earlier, abandoned iteration (persistent workers) are told apart by ``gen``."""
    pool = loader._pool or _Pool(loader, fetch)
    if loader.persistent_workers:
        loader._pool = pool
    pool.gen += 1
    gen, n = pool.gen, loader.num_workers
    active, outstanding, done, sent, nxt = list(range(n)), {}, {}, 0, 0

    def dispatch():
        nonlocal sent
        while active and len(outstanding) < loader.prefetch_factor * n:
            indices = next(tasks, _End)
            if indices is _End:
                return
            w = active[sent % len(active)]
            pool.tasks[w].put((gen, sent, indices))
            outstanding[sent], sent = w, sent + 1

    finished = broken = False
    try:
        dispatch()
        while nxt < sent:
            while nxt not in done:
                try:
                    g, k, out = pool.get(loader.timeout)
                except RuntimeError:
                    broken = True  # a dead or stuck worker: this pool cannot serve another epoch
                    raise
                if g != gen:
                    continue
                w = outstanding.pop(k)
                if isinstance(out, _End) and w in active:
                    active.remove(w)
                done[k] = out
            out = done.pop(nxt)
            nxt += 1
            dispatch()
            if isinstance(out, _Raised):
                out.reraise()
            if not isinstance(out, _End):
                yield _pack(out, out=False)
        finished = True
    finally:
        if broken or not loader.persistent_workers:
            # NOTE: only idle workers are waited for; after an error, a break or Ctrl-C they may be stuck in a batch
            pool.shutdown(_STOP_WAIT if finished else 0)
            if loader._pool is pool:
                loader._pool = None
