"""``gpugrad.cuda``: is CUDA usable here, how many devices, their names, the current one; waiting for queued work;
CUDA graphs; the CUDA devices' random generators (seeds and states, as torch.cuda's); the legacy CUDA tensor types.

Seeding works without a GPU (the seed is kept for when a generator first draws, as torch queues it); reading a
seed or a state needs a usable device."""
from types import SimpleNamespace as _Namespace  # noqa: E402,I001

from gpugrad import random as _random
from gpugrad.amp.autocast_mode import _legacy  # noqa: E402
from gpugrad.amp.grad_scaler import GradScaler as _GradScaler  # noqa: E402
from gpugrad.backend import cuda as _backend_cuda
from gpugrad.backend.cuda import device_count, get_device_name, is_available, unavailable_reason
from gpugrad.backend.deferred import synchronize
from gpugrad.backend.device import CURRENT_CUDA as _CURRENT, Device as _Device, parse_device as _parse_device
from gpugrad.backend.graphs import CUDAGraph, graph
from gpugrad.legacy import CUDA_TYPES as _LEGACY_TYPES

# torch.cuda.amp: the deprecated spellings of torch.amp's autocast("cuda") and GradScaler("cuda")
amp = _Namespace(autocast=_legacy("cuda", "float16"), GradScaler=_GradScaler)

__all__ = ["is_available", "device_count", "unavailable_reason", "get_device_name", "synchronize", "CUDAGraph",
           "graph", "current_device", "set_device", "manual_seed", "manual_seed_all", "seed", "seed_all",
           "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "amp"]
__all__ += list(_LEGACY_TYPES)
globals().update(_LEGACY_TYPES)  # gpugrad.cuda.FloatTensor, ...


def current_device() -> int:
    """The index of the device ``"cuda"`` means (``set_device`` chooses it)."""
    return _CURRENT[0]


def set_device(device) -> None:
    """Make ``device`` (an index, ``"cuda:1"``, a device) the one ``"cuda"`` means, as torch.cuda.set_device."""
    d = _parse_device(_Device("cuda", device) if isinstance(device, int) else device)
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    index, n = d.index, device_count()
    if not 0 <= index < n:
        raise RuntimeError(f"CUDA error: invalid device ordinal: device {index} of {n} "
                           f"({unavailable_reason() or 'indices run from 0'})")
    _CURRENT[0] = index


def _generator(device=None):  # a CUDA device's default generator
    return _random.default_generator_of(_parse_device("cuda" if device is None else device))


def _needs_a_device():
    _backend_cuda.cupy_module()  # RuntimeError with the reason when CUDA is not usable


def manual_seed(seed) -> None:
    """Seed the current CUDA device's default generator."""
    _generator().manual_seed(seed)


def manual_seed_all(seed) -> None:
    """Seed every CUDA device's default generator."""
    for i in range(max(device_count(), 1)):
        _generator(i).manual_seed(seed)


def seed() -> None:
    """Seed the current CUDA device's default generator from the OS's entropy."""
    _generator().seed()


def seed_all() -> None:
    """Seed every CUDA device's default generator with one seed from the OS's entropy."""
    manual_seed_all(_random.Generator().seed())


def initial_seed() -> int:
    """The seed of the current CUDA device's default generator."""
    _needs_a_device()
    return _generator().initial_seed()


def get_rng_state(device="cuda"):
    """The state of a CUDA device's default generator, as a uint8 CPU tensor (copied from the device)."""
    _needs_a_device()
    return _generator(device).get_state()


def set_rng_state(new_state, device="cuda") -> None:
    """Restore a CUDA device's default generator from ``get_rng_state``'s result."""
    _needs_a_device()
    _generator(device).set_state(new_state)


def get_rng_state_all():
    """The states of every CUDA device's default generator, one uint8 tensor each."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
