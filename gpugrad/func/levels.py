"""vmap's levels (the vmaps running now, outermost first, with their batch sizes and randomness=), the signal that
sends a vmap to its per-sample fallback, and the once-only warnings that the fallback is slow."""
from __future__ import annotations

import itertools
import os
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

from gpugrad.core.registry import FRONTENDS


class Level(NamedTuple):
    id: int
    size: int
    randomness: str


ACTIVE: list = []  # the vmaps running now, outermost first
SIZES: dict = {}  # level id -> batch size, for the active levels
_IDS = itertools.count(1)


def push_level(size, randomness):
    level = Level(next(_IDS), size, randomness)
    ACTIVE.append(level)
    SIZES[level.id] = size
    return level


def pop_level(level):
    ACTIVE.remove(level)
    del SIZES[level.id]


def active_ids():
    return tuple(lv.id for lv in ACTIVE)


class NeedsPerSample(Exception):
    """A batched value was needed as plain data (an array read, a draw under randomness='different'): the vmap of
    the innermost of ``levels`` catches it and runs its function once per sample."""

    def __init__(self, levels, reason):
        super().__init__(f"vmap: {reason} (levels {levels}); the enclosing vmap runs its function once per sample")
        self.levels, self.reason = levels, reason


_PKG = str(Path(__file__).resolve().parents[1]) + os.sep
_FUNC = str(Path(__file__).resolve().parent) + os.sep
_GENERIC = ("method", "wrapped", "apply", "f", "g", "<lambda>")  # bindings and factories: named by what they wrap
_FRONTEND_NAMES: dict = {}


def entry_point():
    """The name of the gpugrad function the user's code called that got here (``sort``, ``max``)."""
    if not _FRONTEND_NAMES:  # frontends by their code, where one code is one frontend (not a factory's)
        codes = [getattr(fr.fn, "__code__", None) for fr in FRONTENDS.values()]
        _FRONTEND_NAMES.update({c: n for c, n in zip(codes, FRONTENDS) if codes.count(c) == 1})
    f, name = sys._getframe(2), None
    while f is not None:
        path = f.f_code.co_filename
        if path.startswith(_PKG) and not path.startswith(_FUNC):
            found = _FRONTEND_NAMES.get(f.f_code) or f.f_code.co_name
            name = name if found in _GENERIC else found
        elif name is not None:
            break
        f = f.f_back
    return name or "an operation"


def check_alive(levels):
    if any(lv not in SIZES for lv in levels):
        raise RuntimeError("vmap: a batched tensor was used after the vmap that made it returned (it escaped through "
                           "a closure, a global or an attribute); return it from the vmapped function instead")


_WARNED = set()


def warn_once(key, message):
    """A UserWarning the first time ``key`` comes up, pointing at the user's line that led here."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    f, level = sys._getframe(1), 2
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f, level = f.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)
