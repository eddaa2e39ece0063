"""Random number generators, one per array module, all reseeded by :func:`manual_seed`."""
from __future__ import annotations

_SEED = None
_generators: dict = {}


def manual_seed(seed: int):
    """Seed every device's generator (NumPy's PCG64 on the CPU, CuPy's on CUDA) for reproducible runs."""
    global _SEED
    _SEED = int(seed)
    _generators.clear()


def generator(xp):
    g = _generators.get(xp.__name__)
    if g is None:
        g = _generators[xp.__name__] = xp.random.default_rng(_SEED)
    return g
