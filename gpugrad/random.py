"""Random number generators as torch has them: ``Generator`` objects (``generator=`` of ``rand``, ``randn``,
``randint``, ``randperm``, ...), one default generator per device, all reseeded by :func:`manual_seed`.

A CPU generator draws from NumPy's PCG64, a CUDA one from CuPy's generator on its device: the streams are not
torch's (the same seed gives other numbers), but a seed always gives the same numbers in gpugrad."""
from __future__ import annotations

import secrets

import numpy as np

from gpugrad.backend import get_backend, on, rng_state
from gpugrad.backend.device import parse_device
from gpugrad.core.batching import STATE as _BATCHING
from gpugrad.core.tensor import new

DEFAULT_SEED = 67280421310721  # torch's seed at start-up: a fresh process draws the same numbers every run
_SEED = DEFAULT_SEED
_defaults: dict = {}


class Generator:
    """A random stream on one device: ``gpugrad.Generator().manual_seed(0)``; pass it as ``generator=``."""

    def __init__(self, device="cpu"):
        self.device = parse_device(device)
        self._seed, self._rng = DEFAULT_SEED, None

    def manual_seed(self, seed):
        if isinstance(seed, bool) or not isinstance(seed, int) and not hasattr(seed, "__index__"):
            raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
        self._seed, self._rng = int(seed) % 2**64, None  # negative seeds wrap around, as torch's
        return self

    def seed(self):
        """Reseed from the OS's entropy; returns the new seed."""
        self.manual_seed(secrets.randbits(63))
        return self._seed

    def initial_seed(self):
        return self._seed

    def rng(self):
        """The NumPy (CPU) or CuPy (CUDA) generator behind it, made on its device."""
        if self._rng is None:
            be = get_backend(self.device)
            with on(be):
                self._rng = be.xp.random.default_rng(self._seed)
        return self._rng

    def get_state(self):
        """The state as a uint8 CPU tensor (for ``set_state``): the seed, then the generator's own state (on CUDA,
        copied from the device)."""
        be = get_backend(self.device)
        with on(be):
            body = rng_state.save(be, self.rng())
        return new(np.concatenate([np.frombuffer(self._seed.to_bytes(8, "little"), np.uint8), body]), device="cpu")

    def set_state(self, new_state):
        be = get_backend(self.device)
        try:
            data = np.asarray(new_state.tolist(), dtype=np.uint8)
            seed = int.from_bytes(bytes(data[:8]), "little")
            with on(be):
                rng = Generator(self.device).manual_seed(seed).rng()
                rng_state.restore(be, rng, data[8:])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise RuntimeError(f"set_state: expected a state from Generator.get_state() of a generator on "
                               f"{self.device}, got {new_state!r} ({e})") from e
        self._seed, self._rng = seed, rng
        return self

    def __repr__(self):
        return f"<gpugrad.Generator object on {self.device}>"


def default_generator_of(device):
    g = _defaults.get(device)
    if g is None:
        g = _defaults[device] = Generator(device).manual_seed(_SEED)
    return g


default_generator = default_generator_of(Generator("cpu").device)


def manual_seed(seed):
    """Seed every device's default generator (NumPy's PCG64 on the CPU, CuPy's on each CUDA device) for
    reproducible runs; returns the CPU's default generator, as torch."""
    global _SEED
    default_generator.manual_seed(seed)
    _SEED = default_generator.initial_seed()
    for g in _defaults.values():
        g.manual_seed(_SEED)
    return default_generator


def seed():
    """Seed every default generator from the OS's entropy; returns the seed."""
    return manual_seed(secrets.randbits(63)).initial_seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


def generator(backend, gen=None):
    """The array-module generator to draw from on ``backend``: ``gen``'s (a Generator on that device type), else
    the device's default. CuPy keeps a generator's state on the device that made it, so each GPU has its own."""
    if _BATCHING.on_random is not None:  # inside gpugrad.func.vmap: its randomness= decides first
        _BATCHING.on_random()
    if gen is None:
        return default_generator_of(backend.device).rng()
    if not isinstance(gen, Generator):
        raise TypeError(f"generator must be a gpugrad.Generator, got {type(gen).__name__}")
    if gen.device.type != backend.device.type:
        raise RuntimeError(f"Expected a '{backend.device.type}' device type for generator but found "
                           f"'{gen.device.type}': make it with gpugrad.Generator(device='{backend.device}')")
    return gen.rng()
