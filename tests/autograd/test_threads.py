"""Backward from several threads at once, as torch allows: a leaf (and a retained .grad) shared by graphs in
different threads gets every update exactly, independent graphs stay bit for bit the single-threaded result, a
graph freed by one thread is refused by another with torch's error, and record()/explain watch their own thread.
Every test runs a fixed number of iterations."""
from __future__ import annotations

import threading

import numpy as np

import gpugrad
from gpugrad.core import trace

THREADS, ITERATIONS = 4, 100


def _in_threads(fn, n=THREADS):
    errors, start = [], threading.Barrier(n)

    def run(i):
        start.wait()  # all at once: the races need overlap
        try:
            fn(i)
        except BaseException as e:  # noqa: BLE001 - collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_a_leaf_shared_by_threads_gets_every_update():
    """4 threads x 100 backward passes of (w * 2).sum() into one w of 1,000,000 elements: w.grad is exactly 800
    everywhere (the in-place add releases the GIL; without a lock updates were lost)."""
    w = gpugrad.ones(1_000_000, requires_grad=True)

    def work(_):
        for _ in range(ITERATIONS):
            (w * 2.0).sum().backward()

    assert not _in_threads(work)
    np.testing.assert_array_equal(w.grad.numpy(), np.full(1_000_000, 2.0 * THREADS * ITERATIONS, np.float32))


def test_a_retained_grad_shared_by_threads_gets_every_update():
    w = gpugrad.ones(100_000, requires_grad=True)
    h = w * 1.0
    h.retain_grad()

    def work(_):
        for _ in range(ITERATIONS // 4):
            (h * 3.0).sum().backward(retain_graph=True)

    assert not _in_threads(work)
    np.testing.assert_array_equal(h.grad.numpy(), np.full(100_000, 3.0 * THREADS * (ITERATIONS // 4), np.float32))
    np.testing.assert_array_equal(w.grad.numpy(), h.grad.numpy())


def test_independent_graphs_in_threads_match_the_single_threaded_run_bit_for_bit():
    def train(seed):
        rng = np.random.default_rng(seed)
        w = gpugrad.tensor(rng.standard_normal((64, 32)).astype(np.float32), requires_grad=True)
        x = gpugrad.tensor(rng.standard_normal((128, 64)).astype(np.float32))
        for _ in range(20):
            loss = (x @ w).tanh().square().mean()
            loss.backward()
            with gpugrad.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
        return w.detach().numpy().copy()

    alone = [train(s) for s in range(THREADS)]
    together = [None] * THREADS

    def work(i):
        together[i] = train(i)

    assert not _in_threads(work)
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


def test_a_graph_freed_by_one_thread_is_refused_by_another_with_torchs_error():
    """Threads backward through one graph without retain_graph: whoever comes after the first frees it gets torch's
    RuntimeError, never a crash of another kind, and the sum that did happen is right."""
    for _ in range(20):
        x = gpugrad.tensor(np.linspace(-1, 1, 1000), requires_grad=True)
        y = (x.exp() * x.sin()).sum()
        errors = _in_threads(lambda _: y.backward())
        assert all(isinstance(e, RuntimeError) and "backward through the graph a second time" in str(e)
                   for e in errors), errors
        runs = THREADS - len(errors)
        assert runs >= 1
        xs = np.linspace(-1, 1, 1000)
        np.testing.assert_allclose(x.grad.numpy(), runs * np.exp(xs) * (np.sin(xs) + np.cos(xs)), rtol=1e-12)


def test_record_watches_its_own_thread_only():
    """record() in one thread: another thread's ops are not recorded, and the hook ends with the block even when
    the blocks of two threads overlap."""
    inside, release = threading.Event(), threading.Event()
    kept = {}

    def recorder(_):
        with gpugrad.autograd.record():
            y = gpugrad.ones(3, requires_grad=True) * 2.0
            inside.set()
            release.wait(10)
        kept["recorder"] = getattr(y.grad_fn, "_rec", None) is not None

    def other(_):
        inside.wait(10)
        z = gpugrad.ones(3, requires_grad=True) * 3.0
        kept["other"] = getattr(z.grad_fn, "_rec", None) is not None
        release.set()

    errors = []
    threads = [threading.Thread(target=lambda f=f: (lambda: f(0))()) for f in (recorder, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors and kept == {"recorder": True, "other": False}
    assert trace.ACTIVE == 0 and trace.WATCH.recording is None
    w = gpugrad.ones(3, requires_grad=True) * 4.0
    assert getattr(w.grad_fn, "_rec", None) is None  # the process records nothing once the blocks have ended
