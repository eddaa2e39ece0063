"""``gpugrad.cuda``: is CUDA usable here, how many devices, their names; waiting for queued work; CUDA graphs."""
from gpugrad.backend.cuda import device_count, get_device_name, is_available, unavailable_reason
from gpugrad.backend.deferred import synchronize
from gpugrad.backend.graphs import CUDAGraph, graph

__all__ = ["is_available", "device_count", "unavailable_reason", "get_device_name", "synchronize", "CUDAGraph",
           "graph"]
