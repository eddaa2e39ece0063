"""Inputs of the workloads: seeded random arrays of one shape on one device, shared between cases, and the
bytes one launch moves (what GB/s figures divide by)."""
from __future__ import annotations

import functools
import zlib

import numpy as np

from gpugrad.backend import get_backend


class Inputs:
    """Seeded random arrays of one (rows, cols) shape and dtype on one device, generated on the host once and
    reused by every case; cases derive the rest (forward outputs a backward needs) on the device with ``xp``.

    Arrays handed out are shared between cases: a case that writes in place must copy (``.copy()``).
    """

    def __init__(self, backend, rows, cols, dtype=np.float32, seed=0):
        self.backend, self.xp = backend, backend.xp
        self.rows, self.cols, self.dtype, self.seed = int(rows), int(cols), np.dtype(dtype), seed
        self._cache = {}

    @property
    def shape(self):
        return (self.rows, self.cols)

    def _get(self, key, make):
        if key not in self._cache:
            rng = np.random.default_rng([self.seed, zlib.crc32(repr(key).encode())])  # order-independent
            self._cache[key] = self.backend.asarray(make(rng))
        return self._cache[key]

    def normal(self, i=0, shape=None):
        shape = self.shape if shape is None else tuple(shape)
        return self._get(("normal", i, shape), lambda rng: rng.standard_normal(shape, dtype=self.dtype))

    def uniform(self):
        return self._get("uniform", lambda rng: rng.random(self.shape, dtype=self.dtype))

    def vector(self, i=0):
        """(cols,): a bias, a LayerNorm weight."""
        return self.normal(i, (self.cols,))

    def row_vector(self, i=0):
        """(rows,): per-row upstream gradients."""
        return self.normal(i, (self.rows,))

    def targets(self):
        """(rows,) int64 class ids in [0, cols)."""
        return self._get("targets", lambda rng: rng.integers(0, self.cols, self.rows, dtype=np.int64))


def _arrays(values):
    return [v for v in values if hasattr(v, "nbytes") and hasattr(v, "shape")]


def _unique(arrays):
    seen, out = set(), []
    for a in arrays:
        if id(a) not in seen:
            seen.add(id(a))
            out.append(a)
    return out


def _flatten(out):
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flatten(o)]
    return [out]


def bytes_moved(args, out, inplace=()):
    """The minimal traffic of one launch: every array argument read once, every in-place argument written once
    more, every distinct new output written once (a kernel that returns one buffer twice wrote it once)."""
    inputs = _unique(_arrays(args))
    fresh = [a for a in _unique(_arrays(_flatten(out))) if all(a is not b for b in inputs)]  # acc_ returns acc
    return sum(a.nbytes for a in inputs) + sum(args[i].nbytes for i in inplace) + sum(a.nbytes for a in fresh)


def bench_shape(device_name, enabled):
    """(rows, cols) of kernel and op inputs in benchmarks/: modest under --benchmark-disable (CI runs each once)."""
    if not enabled:
        return (64, 256)
    return (8192, 8192) if device_name == "cuda" else (2048, 4096)


@functools.lru_cache(maxsize=1)
def shared_inputs(device_name, rows, cols):
    """One Inputs per (device, shape), reused by consecutive benchmarks (cases copy what they write)."""
    return Inputs(get_backend(device_name), rows, cols)
