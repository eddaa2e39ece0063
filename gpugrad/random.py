"""Random number generators, one per device, all reseeded by :func:`manual_seed`."""
from __future__ import annotations

_SEED = None
_generators: dict = {}


def manual_seed(seed: int):
    """Seed every device's generator (NumPy's PCG64 on the CPU, CuPy's on each CUDA device) for reproducible runs."""
    global _SEED
    _SEED = int(seed)
    _generators.clear()


def generator(backend):
    """The generator of ``backend``'s device. CuPy keeps a generator's state on the device that made it, so each
    GPU gets its own, made and used on that device."""
    from gpugrad.backend import on

    key = str(backend.device)
    g = _generators.get(key)
    if g is None:
        with on(backend):
            g = _generators[key] = backend.xp.random.default_rng(_SEED)
    return g
