"""Watching autograd from the side, for ``explain`` and ``draw``: an observer of the engine's backward, and a recorder
of the values the forward makes (and which ``nn.Module`` made them).

Both cost nothing unless in use: the engine reads ``OBSERVER`` once per backward, ``Module.__call__`` reads
``MODULES`` once per call, and ``Op.apply`` leaves its fast path for ``RECORDING`` only inside ``record()``.
"""
from __future__ import annotations

import contextlib

OBSERVER = None  # callable(node, gy, gxs), called by the engine right after each VJP, before saved values are freed
MODULES = None  # inside record(): the stack of nn.Modules being called (Module.__call__ pushes and pops)
RECORDING = None  # inside record(): called with each op's output tensor (Op.apply), to keep its value


@contextlib.contextmanager
def observing(fn):
    """Call ``fn(node, gy, gxs)`` after every VJP the engine runs inside the block (``gxs`` as the VJP returned them:
    not yet summed over broadcast axes; the engine may add into them in place later, so copy what you keep)."""
    global OBSERVER
    prev, OBSERVER = OBSERVER, fn
    try:
        yield
    finally:
        OBSERVER = prev


@contextlib.contextmanager
def record():
    """Keep every op's output value made inside the block, and the module stack that made it, on its graph node.

    ``explain`` and ``draw`` show them; without it they know only the root's and the leaves' values and recompute the
    rest (which fails where an op took a Python constant or a cut input).  The values live as long as the graph:
    a debugging aid, not for training loops.

    >>> with gpugrad.autograd.record():
    ...     loss = model(x).sum()
    >>> print(gpugrad.autograd.explain(loss))
    """
    global RECORDING, MODULES
    prev = RECORDING, MODULES
    RECORDING, MODULES = _keep, list(MODULES or ())
    try:
        yield
    finally:
        RECORDING, MODULES = prev


def _keep(t):
    """Called by ``Op.apply`` with each output once its node is recorded."""
    node = t._grad_fn
    if node is not None and getattr(node, "_rec", None) is None:  # the first tensor a node made is its output
        # The version tells later whether an in-place op overwrote this buffer (then the value is gone).
        node._rec = (t._data, t._version_counter, t._version_counter[0], tuple(MODULES))
