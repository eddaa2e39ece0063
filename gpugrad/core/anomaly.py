"""Anomaly detection, as ``torch.autograd.detect_anomaly``: name the graph node whose backward made a NaN or inf.

    with gpugrad.autograd.detect_anomaly():       # or @detect_anomaly(), or set_detect_anomaly(True)
        y = x.sqrt()                              # each node remembers where the forward made it
        y.sum().backward()                        # x = -1: RuntimeError: Function 'SqrtBackward0' returned nan
                                                  # values in its 0th output. + the forward traceback of y
While it is on, every recorded op keeps the innermost ``DEPTH`` frames of the forward call that made it (code
objects and bytecode offsets, formatted only for an error), and every node's VJP outputs are checked after it runs:
- CPU: ``isfinite(g).all()`` per output, raising at the node, before its gradients go anywhere (as torch).
- CUDA: no sync per node. Each node's check is one ``check_finite`` launch over all its outputs (kernels/check.cu)
  into row k (the k-th node run) of an int64 (nodes, 2) flags array per device, written only where a NaN or inf is
  seen, tagged with the backward's epoch (so the array is reused without a zeroing launch); after the last node the
  host reads the rows once (the backward's one sync; one per device it ran on) and raises for the first flagged
  node in execution order, after any failed range check of that device (bad class ids explain NaNs; a second read,
  on that failure path only). NOTE: the backward has then finished, so ``.grad`` already holds the bad values.
Errors a VJP raises (an in-place modification, a shape mismatch) get the same forward traceback as a note.
Unlike torch, +-inf is an anomaly too (torch looks for NaN only); ``check_nan=False`` keeps the tracebacks and
skips the checks, as in torch. Forward values are never checked. A backward captured into a CUDA graph is not
checked (reading the flags would sync inside the capture).

Cost (benchmarks/bench_anomaly.py: the MLP 784-1024-1024-10 SGD training step, float32, anomaly mode on and off
in interleaved pairs, median ratio of 151 pairs; three runs on this project's shared 2-core CPU VM):
- CPU: 1.10x at batch 64 (runs: 1.08, 1.10, 1.14) and 1.03x at batch 512 (1.01, 1.03, 1.05). The checks read each
  gradient once (~0.2 ms per million floats here): the 1.8M floats of the weight gradients are ~9% of a 4.6 ms step
  at batch 64 and ~3% of a 19 ms one at 512. Recording a node's stack costs ~2-4 us per op (at most DEPTH frames).
- Simulated CUDA device, per step at batch 64 and 512: +6 launches (one check per node: cross-entropy, 3 addmm,
  2 bias + relu), +1 sync (the read), +0 allocations (the flags array is made by the first checked backward).
  float16 gradients are checked in float32 (reference.opmath): one more launch each.
"""
from __future__ import annotations

import functools
import sys
import traceback
import warnings

import numpy as np

from gpugrad.backend import deferred, graphs, on

DEPTH = 32  # forward frames kept per node, innermost first: at most ~1 KB a node
_CLEAR = 2**31 - 1  # a flag is epoch * 2**32 + _CLEAR - (index of the first bad output)
_EPOCH = 0  # backwards checked so far
_FREE: dict = {}  # backend -> flags arrays no backward holds now


class _State:
    enabled = False  # process-wide, like torch's AnomalyMode (backward may run on another thread)
    check_nan = True


STATE = _State()


def is_anomaly_enabled() -> bool:
    return STATE.enabled


def is_anomaly_check_nan_enabled() -> bool:
    return STATE.enabled and STATE.check_nan


class detect_anomaly:
    """Anomaly detection inside a ``with`` block or a decorated function; what was set before is restored after."""

    mode = True

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan

    def _again(self):
        return detect_anomaly(self.check_nan)

    def __enter__(self):
        self._prev = STATE.enabled, STATE.check_nan
        STATE.enabled, STATE.check_nan = self.mode, self.check_nan
        return self

    def __exit__(self, *exc):
        STATE.enabled, STATE.check_nan = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self._again():
                return fn(*args, **kwargs)

        return wrapper


class set_detect_anomaly(detect_anomaly):
    """Turn anomaly detection on or off now (``set_detect_anomaly(True)``), or for a ``with`` block."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.mode, self.check_nan = bool(mode), check_nan
        self._prev = STATE.enabled, STATE.check_nan
        STATE.enabled, STATE.check_nan = self.mode, check_nan

    def _again(self):
        return set_detect_anomaly(self.mode, self.check_nan)

    def __enter__(self):
        return self  # in effect since __init__; __exit__ restores what was there before

    def __call__(self, fn):
        STATE.enabled, STATE.check_nan = self._prev  # used as a decorator: undo the immediate effect
        return super().__call__(fn)


def record(node):
    """Remember where ``node`` is being made: the frames above the op's ``apply`` as (code, bytecode offset) pairs,
    not the frames themselves, which would keep their locals (tensors included) alive. NOTE: the offset, not
    ``f_lineno``, which looks up the line table: the walk takes half the time; lines are found on an error."""
    f, stack = sys._getframe(2), []
    push = stack.append
    for _ in range(DEPTH):
        if f is None:
            break
        push(f.f_code)
        push(f.f_lasti)
        f = f.f_back
    node._anomaly_stack = stack


def _line(code, offset):
    return next((line for start, end, line in code.co_lines() if start <= offset < end), code.co_firstlineno)


def forward_trace(node) -> str:
    stack = getattr(node, "_anomaly_stack", None)
    if stack is None:
        return ("No forward pass information available. Enable detect anomaly during forward pass for more "
                "information.")
    frames = [(c.co_filename, _line(c, i), c.co_name, None) for c, i in zip(stack[-2::-2], stack[::-2])]
    return "Traceback of forward call that caused the error:\n" + "".join(
        traceback.StackSummary.from_list(frames).format()).rstrip("\n")


def annotate(node, error):
    """Under anomaly mode, add the forward traceback of ``node`` to an ``error`` its backward raised."""
    if STATE.enabled:
        note = f"Error detected in {node.name()}. {forward_trace(node)}"
        error.add_note(note) if hasattr(error, "add_note") else warnings.warn(note)  # add_note: Python 3.11+


def checker(nodes: int):
    """The check for a backward over ``nodes`` nodes, or None when anomaly mode (with check_nan) is off."""
    if not (STATE.enabled and STATE.check_nan):
        return None
    if graphs.CAPTURING:
        warnings.warn("anomaly mode does not check a backward captured into a CUDA graph (it would sync)")
        return None
    return _Checker(nodes)


class _Checker:
    """One backward's checks. Each device's flags array is held by one backward at a time (taken from ``_FREE``,
    given back by ``finish``) and never zeroed: a row counts only if it carries this backward's epoch."""

    def __init__(self, nodes):
        global _EPOCH
        _EPOCH += 1  # NOTE: under the GIL two threads cannot get the same epoch and use the same array at once
        self.size, self.epoch, self.nodes, self.flags = nodes, _EPOCH, [], {}

    def __call__(self, node, gxs):
        be, k = node._be, len(self.nodes)
        self.nodes.append(node)
        flags = self.flags.get(be)
        if flags is None:  # the engine has made this node's device current
            free = _FREE.setdefault(be, [])
            flags = free.pop() if free else None
            if flags is None or len(flags) < self.size:
                flags = be.xp.zeros((max(self.size, 64), 2), np.int64)  # a bigger graph: a bigger array, once
            self.flags[be] = flags
        be.kernels.check_finite(be.xp, flags, k, self.epoch, *(getattr(g, "_data", g) for g in gxs))  # create_graph
        if be.name == "cpu" and flags[k].max() >> 32 == self.epoch:
            self._raise(k, flags[k])

    def finish(self):
        """Give the arrays back; on CUDA first read each device's rows once and raise for the first flagged node."""
        first = None
        for be, flags in self.flags.items():
            if be.name != "cpu":
                with on(be):
                    host = be.xp.asnumpy(flags[:len(self.nodes)])  # the one sync (to_host would also read the
                bad = np.flatnonzero((host >> 32 == self.epoch).any(axis=1))  # range-check words)
                if bad.size and (first is None or bad[0] < first[0]):
                    deferred.raise_pending(be)  # a failed range check (bad class ids) explains NaNs: it goes first
                    first = bad[0], host[bad[0]]
            _FREE[be].append(flags)
        if first is not None:
            self._raise(*first)

    def _raise(self, k, row):
        node, nan = self.nodes[k], row[0] >> 32 == self.epoch
        out = _CLEAR - int(row[0 if nan else 1] & 0xFFFFFFFF)
        raise RuntimeError(f"Function '{node.name()}' returned {'nan' if nan else 'inf'} values in its {out}th "
                           f"output.\n{forward_trace(node)}")
