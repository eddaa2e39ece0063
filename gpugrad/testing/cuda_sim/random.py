"""``cupy.random`` on the simulated device: NumPy's generators, one state per generator, bound to the device it
was made on (CuPy keeps a generator's state in that device's memory, so using it under another device fails)."""
from __future__ import annotations

import functools
import types

import numpy as np

from gpugrad.testing.cuda_sim import _state
from gpugrad.testing.cuda_sim.array import new, unwrap
from gpugrad.testing.cuda_sim.functions import check_kwargs
from gpugrad.testing.cuda_sim.namespace import load


class BitGenerator:
    """The bit generator behind a Generator: as CuPy's (cupy/random/_bit_generator.pyx:84), its state is an int8
    array in device memory, ``_state``, that every draw reads and advances (here PCG64's 40 bytes, not cuRAND's)."""

    def __init__(self, seed):
        self._rng = np.random.default_rng(seed)
        self._state = new(np.zeros(40, np.int8), "BitGenerator state")
        self._store()

    def _store(self):
        s = self._rng.bit_generator.state
        words = [s["state"]["state"], s["state"]["inc"]]
        raw = b"".join(w.to_bytes(16, "little") for w in words) + s["has_uint32"].to_bytes(4, "little") + \
            s["uinteger"].to_bytes(4, "little")
        self._state._a[...] = np.frombuffer(raw, np.int8)

    def _load(self):
        raw = self._state._a.tobytes()
        self._rng.bit_generator.state = {"bit_generator": "PCG64", "state": {
            "state": int.from_bytes(raw[:16], "little"), "inc": int.from_bytes(raw[16:32], "little")},
            "has_uint32": int.from_bytes(raw[32:36], "little"), "uinteger": int.from_bytes(raw[36:40], "little")}

    def draw(self, fn):
        """``fn(rng)`` with the state read from and written back to device memory, as a draw kernel does."""
        self._load()
        out = fn(self._rng)
        self._store()
        return out


class Generator:
    """cupy.random.Generator (the methods CuPy 14 has; values differ from CuPy's XORWOW, the contract does not)."""

    def __init__(self, seed=None):
        self.bit_generator = BitGenerator(seed)  # cupy/random/_generator_api.pyx:106
        self._dev = _state.current_device()

    def _draw(self, name, kwargs, draw, dtype, out=None):
        check_kwargs(f"Generator.{name}", load()["random_generator"][name], kwargs)
        if _state.current_device() != self._dev:
            raise ValueError(f"cupy.random.Generator made on device {self._dev} used while device "
                             f"{_state.current_device()} is current (its state lives on device {self._dev})")
        draw = functools.partial(self.bit_generator.draw, draw)
        if out is not None:
            dst = unwrap(out)
            _state.run(f"Generator.{name}", lambda: dst.__setitem__(Ellipsis, draw()))
            return out
        host = np.asarray(draw()).astype(dtype, copy=False)
        result = new(host, f"Generator.{name}")
        _state.launch(f"Generator.{name}", replay=lambda: host.__setitem__(Ellipsis, draw()), outputs=[host])
        return result

    def random(self, size=None, dtype=np.float64, out=None):
        return self._draw("random", {}, lambda rng: rng.random(size, dtype=dtype), dtype, out)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        return self._draw("standard_normal", {}, lambda rng: rng.standard_normal(size, dtype=dtype), dtype, out)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        return self._draw("uniform", {}, lambda rng: rng.uniform(low, high, size), dtype)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        return self._draw("integers", {}, lambda rng: rng.integers(low, high, size, dtype=dtype,
                                                                        endpoint=endpoint), dtype)


def default_rng(seed=None):
    return Generator(seed)


def build() -> types.ModuleType:
    mod = types.ModuleType("cupy.random", "cupy.random on gpugrad's simulated device")
    mod.Generator, mod.default_rng = Generator, default_rng
    return mod
