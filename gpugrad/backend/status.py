"""The status words of each CUDA device: where device-side range checks record a failure, and the host read that
raises it (``raise_pending``, called by every host read of a device). ``deferred.py`` describes the whole scheme."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import capture
from gpugrad.backend.base import on
from gpugrad.backend.kernels.check import STATUS_WORDS

_status: dict = {}  # CUDA device index -> its status words (int64, STATUS_WORDS), all 0 unless a check failed
_armed: set = set()  # device indices where a check was queued since the host last read the words
_sites: dict = {}  # (error type, message) -> site id, the kernels' name for a check (0 means "no failure")
_errors: list = [None]  # site id -> (error type, message)
_replays_seen: dict = {}  # CUDA device index -> capture.REPLAYS there when the host last looked



def arm(be):
    """The status words of ``be``'s (CUDA) device, made on first use; the next read there will look at them."""
    index = be.device.index
    status = _status.get(index)
    if status is None:  # NOTE: made once and kept, so the kernels can count blocks in it across launches
        capture.refuse_missing("a device-side range check", f"the status words of {be.device}")
        with on(be):
            status = _status[index] = be.xp.zeros(STATUS_WORDS, np.int64)
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
