"""``gpugrad.accelerator``: torch.accelerator's device-agnostic queries, answered for gpugrad's one accelerator,
CUDA (NumPy on the CPU otherwise), so scripts written for any device run unchanged::

    device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
"""
from __future__ import annotations

import contextlib

from gpugrad import cuda as _cuda
from gpugrad.backend.device import Device

__all__ = [
    "current_accelerator",
    "current_device_idx",
    "current_device_index",
    "device_count",
    "device_index",
    "is_available",
    "set_device_idx",
    "set_device_index",
    "synchronize",
]


def is_available() -> bool:
    """Whether a CUDA device is usable (torch: whether the accelerator can be used)."""
    return _cuda.is_available()


def current_accelerator(check_available=False):
    """``device(type='cuda')`` where CUDA is usable, else None (gpugrad has no other accelerator)."""
    return Device("cuda") if _cuda.is_available() else None


def device_count() -> int:
    return _cuda.device_count()


def _require():
    if not _cuda.is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")


def current_device_index() -> int:
    """The index of the current CUDA device."""
    _require()
    return _cuda.current_device()


def set_device_index(device, /) -> None:
    """Make ``device`` (an index, ``"cuda:1"``, a device) the current CUDA device."""
    _require()
    if device is not None:
        _cuda.set_device(device)


current_device_idx = current_device_index  # torch's older names
set_device_idx = set_device_index


@contextlib.contextmanager
def device_index(device, /):
    """``with device_index(1):`` the current device is 1 inside (None: unchanged)."""
    before = current_device_index() if device is not None else None
    if device is not None:
        set_device_index(device)
    try:
        yield
    finally:
        if before is not None:
            set_device_index(before)


def synchronize(device=None, /) -> None:
    """Wait for the work queued on the (current) CUDA device; its failed device-side checks raise here."""
    _require()
    _cuda.synchronize(device)
