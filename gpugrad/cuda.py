"""``gpugrad.cuda``: is CUDA usable here, how many devices, their names; waiting for queued work."""
from gpugrad.backend.cuda import device_count, get_device_name, is_available, synchronize, unavailable_reason

__all__ = ["is_available", "device_count", "unavailable_reason", "get_device_name", "synchronize"]
