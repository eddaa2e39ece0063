"""Range checks that never make the host wait: on CUDA a kernel records the failure, the next read raises it.

An op that indexes with ids (cross-entropy targets, embedding ids, gather indices) must reject an id outside
[0, n), but checking it on the host would cost a sync per call (``int(t.max())`` waits for the device). Instead, on
CUDA, a kernel checks the ids as it goes (the cross-entropy forward) or a tiny check kernel does (embedding,
gather) and records the first failure in the device's *status words* (kernels/common.cuh: site, min id, max id).
The op carries on (NaN loss rows; CuPy wraps bad indices around, never reading out of bounds), and the host
raises the op's own error the next time it reads from that device anyway: ``Tensor.item()``, ``float()``,
``.numpy()``, ``.tolist()``, ``.cpu()``, printing, ``gpugrad.cuda.synchronize()``. That read costs one more small
copy, only when a check ran on the device since the host last looked. On the CPU the checks raise at once::

    status, site = deferred.fused_check(t, C, IndexError, "cross_entropy: ... got min {lo} and max {hi}")
    loss, lse, aux = kernels.softmax_xent_fwd(xp, x, t, "mean", status, site)  # on CUDA the kernel checks t
    loss.item()                                                           # raises the IndexError here

Messages are ``str.format`` templates over ``lo`` and ``hi`` (the ids' min and max) and ``bad`` (lo if negative,
else hi), so the CPU and CUDA errors read the same.
NOTE: a CUDA graph replays the check kernels without running this module's Python: the next read after a replay on
a device looks at its status words (graphs.py counts replays per device in ``capture.REPLAYS``).
Inside a capture the status words must already exist (a warm-up step made them), and a host read is refused.
"""
from __future__ import annotations

import numpy as np

from gpugrad.backend import backend_of, capture, cuda, get_backend, kernels, on
from gpugrad.backend.device import Device

_status: dict = {}  # CUDA device index -> its status words (int64, kernels.STATUS_WORDS), all 0 unless a check failed
_armed: set = set()  # device indices where a check was queued since the host last read the words
_sites: dict = {}  # (error type, message) -> site id, the kernels' name for a check (0 means "no failure")
_errors: list = [None]  # site id -> (error type, message)
_replays_seen: dict = {}  # CUDA device index -> capture.REPLAYS there when the host last looked


def fused_check(ids, n, error, message):
    """For a kernel that checks ``ids`` in [0, n) itself: (status words, site id) to pass it on CUDA; on the CPU
    raise ``error(message)`` now if an id is out of range, else return (None, 0)."""
    be = backend_of(ids)
    if be.name == "cpu":
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= n:
                raise _error(error, message, lo, hi)
        return None, 0
    return arm(be), _site(error, message)


def check_range(ids, n, error, message):
    """Every id in [0, n), else ``error(message)``: now on the CPU; on CUDA a check kernel records it (no sync)."""
    status, site = fused_check(ids, n, error, message)
    if status is not None:
        kernels.check_index(backend_of(ids).xp, ids, n, status, site)


def arm(be):
    """The status words of ``be``'s (CUDA) device, made on first use; the next read there will look at them."""
    index = be.device.index
    status = _status.get(index)
    if status is None:  # NOTE: made once and kept, so the kernels can count blocks in it across launches
        capture.refuse_missing("a device-side range check", f"the status words of {be.device}")
        with on(be):
            status = _status[index] = be.xp.zeros(kernels.STATUS_WORDS, np.int64)
    _armed.add(index)
    return status


def raise_pending(be, what="reading a CUDA tensor on the host"):
    """Raise the first range check that failed on ``be``'s device since the last look (and clear it). Called by
    every host read (``what``, refused inside a capture; None: not a read of values): without a check queued or a graph replayed since the last
    look it costs nothing (no sync)."""
    if be.name == "cpu":
        return
    if what is not None:
        capture.refuse_sync(what)
    index = be.device.index
    replays = capture.REPLAYS.get(index, 0)
    if index in _status and replays != _replays_seen.get(index, 0):  # its check kernels ran again
        _replays_seen[index] = replays
        _armed.add(index)
    if index not in _armed:
        return
    _armed.discard(be.device.index)
    status = _status[be.device.index]
    with on(be):
        words = be.to_host(status)  # the one sync, and the host was about to wait for the device anyway
        if not words[0]:
            return
        status.fill(0)
    error, message = _errors[int(words[0])]
    raise _error(error, message, int(words[1]), int(words[2]))


def _site(error, message):
    # NOTE: interned for the life of the process; messages name shapes, so there are as many as distinct shapes
    site = _sites.get((error, message))
    if site is None:
        site = _sites[error, message] = len(_errors)
        _errors.append((error, message))
    return site


def _error(error, message, lo, hi):
    return error(message.format(lo=lo, hi=hi, bad=lo if lo < 0 else hi))


def synchronize(device=None) -> None:
    """Wait for all work queued on the device, as torch.cuda.synchronize; its failed range checks raise here at
    the latest."""
    capture.refuse_sync("gpugrad.cuda.synchronize()")
    raise_pending(get_backend(Device("cuda", cuda.synchronize_device(device))))


cuda.CudaBackend.before_host_read = staticmethod(raise_pending)  # the backend sits below this module
