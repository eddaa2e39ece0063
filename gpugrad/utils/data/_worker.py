"""DataLoader worker processes (``num_workers > 0``), as torch runs them.

Each worker is a ``multiprocessing`` process (the default context, fork on Linux, unless ``multiprocessing_context``
says otherwise; spawned workers need a picklable dataset and collate_fn) with its own index queue; batches of
indices go out round robin, at most ``prefetch_factor`` per worker ahead, and come back through one result queue,
yielded in the sampler's order. Seeding is torch's: the loader draws ``base_seed`` from its ``generator`` (or the
default one) each time workers start, and worker i seeds Python's ``random`` and gpugrad with ``base_seed + i`` and
NumPy's global generator from (base_seed, i) before ``worker_init_fn(i)``; ``get_worker_info()`` tells a worker
who it is (None in the main process). An ``IterableDataset`` is iterated by every worker (shard it with
``get_worker_info()``). Workers compute on the CPU; their Tensors travel as NumPy arrays and become Tensors again
in the main process. An exception in a worker is raised again in the main process, with the same type and the
worker's traceback in its message; a worker that dies, or a batch slower than ``timeout``, is a RuntimeError.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import random
import time
import traceback

import numpy as np


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


class _Raised:
    """An exception in a worker, carried to the main process as its type and formatted traceback."""

    def __init__(self, exc, wid):
        self.type, self.where = type(exc), f"in DataLoader worker process {wid}"
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self):
        msg = f"Caught {self.type.__name__} {self.where}.\nOriginal {self.text}"
        try:
            exc = self.type(msg)
        except Exception:  # noqa: BLE001 - an exception type that takes other arguments
            raise RuntimeError(msg) from None
        raise exc


class _Array:
    """A Tensor on its way between processes: its data as a NumPy array."""

    def __init__(self, t):
        self.array, self.requires_grad = t.detach().cpu().numpy(), t.requires_grad


def _pack(tree, out=True):
    """Tensors to :class:`_Array` (``out``) or back, through dicts, lists and (named) tuples."""
    from gpugrad._tensor import Tensor

    if out and isinstance(tree, Tensor) or not out and isinstance(tree, _Array):
        if out:
            return _Array(tree)
        from gpugrad.creation import as_tensor

        return as_tensor(tree.array, device="cpu").requires_grad_(tree.requires_grad)
    if isinstance(tree, dict):
        return type(tree)({k: _pack(v, out) for k, v in tree.items()})
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_pack(v, out) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_pack(v, out) for v in tree)
    return tree


def _loop(wid, num_workers, base_seed, fetch, init_fn, tasks, results):
    """One worker: seed, init, then fetch batches until told to stop (None)."""
    global _INFO
    import gpugrad

    os.environ["GPUGRAD_DEVICE"] = "cpu"  # NOTE: never touch a CUDA context inherited from the parent
    if hasattr(gpugrad, "set_default_device"):
        gpugrad.set_default_device("cpu")
    seed = base_seed + wid
    random.seed(seed)
    gpugrad.manual_seed(seed)
    np.random.seed(np.random.SeedSequence((base_seed, wid)).generate_state(4))
    _INFO = WorkerInfo(id=wid, num_workers=num_workers, seed=seed, dataset=fetch.dataset)
    failed, stream, stream_of = None, None, None
    try:
        if init_fn is not None:
            init_fn(wid)
    except Exception as e:  # noqa: BLE001 - reported with the first batch asked for
        failed = _Raised(e, wid)
    while (task := tasks.get()) is not None:
        gen, k, indices = task
        try:
            if failed is not None:
                out = failed
            elif indices is None:  # an IterableDataset: this worker's own iterator, new for each epoch
                if stream_of != gen:
                    stream, stream_of = iter(fetch.dataset), gen
                out = _pack(fetch(None, stream))
            else:
                out = _pack(fetch(indices))
        except StopIteration:
            out = _End()
        except Exception as e:  # noqa: BLE001 - raised again in the main process
            out = _Raised(e, wid)
        results.put((gen, k, out))


class _Pool:
    """The worker processes of one loader, their index queues and the result queue."""

    def __init__(self, loader, fetch):
        from gpugrad.utils.data.sampler import _rng

        ctx = loader.multiprocessing_context
        ctx = multiprocessing.get_context(ctx) if ctx is None or isinstance(ctx, str) else ctx
        n, base_seed = loader.num_workers, int(_rng(loader.generator).integers(2**62))
        self.results, self.tasks, self.gen = ctx.Queue(), [ctx.Queue() for _ in range(n)], 0
        self.procs = [ctx.Process(target=_loop, args=(i, n, base_seed, fetch, loader.worker_init_fn, self.tasks[i],
                                                      self.results), daemon=True) for i in range(n)]
        for p in self.procs:
            p.start()

    def get(self, timeout):
        """The next result; RuntimeError when a worker died or ``timeout`` (seconds, 0: none) passed."""
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            try:
                return self.results.get(timeout=1.0 if deadline is None else max(0.0, min(1.0, deadline -
                                                                                           time.monotonic())))
            except queue.Empty:
                dead = [str(p.pid) for p in self.procs if not p.is_alive()]
                if dead:
                    self.shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(dead)}) exited unexpectedly") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None

    def shutdown(self):
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive():
                q.put(None)
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
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

    try:
        dispatch()
        while nxt < sent:
            while nxt not in done:
                g, k, out = pool.get(loader.timeout)
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
    finally:
        if not loader.persistent_workers:
            pool.shutdown()
