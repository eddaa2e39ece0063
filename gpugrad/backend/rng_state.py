"""A generator's state as bytes and back, for ``Generator.get_state`` / ``set_state`` on any device.

NumPy's generators (the CPU) give their bit generator's state dict, as JSON.  CuPy's (CUDA) keep it in device memory:
``Generator.bit_generator`` (cupy/random/_generator_api.pyx:106) holds an int8 array ``_state``
(cupy/random/_bit_generator.pyx:84, cuRAND's per-thread states, advanced by every draw's kernel), which is copied to
the host and back.  It is a private attribute of CuPy's: the one place gpugrad reads it is here.
"""
from __future__ import annotations

import json

import numpy as np


def save(backend, rng) -> np.ndarray:
    """The state of ``rng`` (a NumPy or CuPy generator on ``backend``) as uint8 host data."""
    if backend.name == "cpu":
        return np.frombuffer(json.dumps(rng.bit_generator.state).encode(), np.uint8).copy()
    return backend.to_host(rng.bit_generator._state, "Generator.get_state()").view(np.uint8).copy()


def restore(backend, rng, data: np.ndarray) -> None:
    """Set ``rng``'s state from what :func:`save` returned (ValueError if it cannot be that generator's)."""
    if backend.name == "cpu":
        rng.bit_generator.state = json.loads(bytes(data).decode())
        return
    state = rng.bit_generator._state
    if data.size != state.nbytes:
        raise ValueError(f"a state of {data.size} bytes for a generator whose state has {state.nbytes} (the state of "
                         "another device or generator type)")
    state[...] = backend.asarray(np.ascontiguousarray(data).view(np.int8))
