"""Watching autograd from the side, for ``explain`` and ``draw``: an observer of the engine's backward, and a recorder
of the values the forward makes (and which ``nn.Module`` made them).

Both are per thread (another thread's backward or forward is not watched), and cost nothing unless in use: the
engine reads the observer once per backward, ``Module.__call__`` reads the module stack once per call, and
``Op.apply`` leaves its fast path only while some thread is inside ``record()`` (``ACTIVE``).
"""
from __future__ import annotations

import contextlib
import threading


class _Watch(threading.local):
    observer = None  # callable(node, gy, gxs), called by the engine right after each VJP, before saved values go
    modules = None  # inside record(): the stack of nn.Modules being called (Module.__call__ pushes and pops)
    recording = None  # inside record(): called with each op's output tensor (Op.apply), to keep its value


WATCH = _Watch()
ACTIVE = 0  # threads inside record() now: Op.apply's one global check
_LOCK = threading.Lock()


@contextlib.contextmanager
def observing(fn):
    """Call ``fn(node, gy, gxs)`` after every VJP the engine runs in this thread inside the block (``gxs`` as the VJP
    returned them: not yet summed over broadcast axes; the engine may add into them in place later, so copy what
    you keep)."""
    prev, WATCH.observer = WATCH.observer, fn
    try:
        yield
    finally:
        WATCH.observer = prev


@contextlib.contextmanager
def record():
    """Keep every op's output value made inside the block (in this thread), and the module stack that made it, on
    its graph node.

    ``explain`` and ``draw`` show them; without it they know only the root's and the leaves' values and recompute the
    rest (which fails where an op took a Python constant or a cut input).  The values live as long as the graph:
    a debugging aid, not for training loops.

    >>> with gpugrad.autograd.record():
    ...     loss = model(x).sum()
    >>> print(gpugrad.autograd.explain(loss))
    """
    global ACTIVE
    prev = WATCH.recording, WATCH.modules
    WATCH.recording, WATCH.modules = _keep, list(WATCH.modules or ())
    with _LOCK:
        ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            ACTIVE -= 1
        WATCH.recording, WATCH.modules = prev


def _keep(t):
    """Called by ``Op.apply`` with each output once its node is recorded."""
    node = t._grad_fn
    if node is not None and getattr(node, "_rec", None) is None:  # the first tensor a node made is its output
        # The version tells later whether an in-place op overwrote this buffer (then the value is gone).
        node._rec = (t._data, t._version_counter, t._version_counter[0], tuple(WATCH.modules))
