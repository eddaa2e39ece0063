"""``gpugrad.cuda``: is CUDA usable here, and how many devices."""
from gpugrad.backend.cuda import device_count, is_available, unavailable_reason

__all__ = ["is_available", "device_count", "unavailable_reason"]
