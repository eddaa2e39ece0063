"""``gpugrad.cuda``: is CUDA usable here, how many devices, their names; waiting for queued work; CUDA graphs."""
from gpugrad.backend.cuda import device_count, get_device_name, is_available, unavailable_reason
from gpugrad.backend.deferred import synchronize
from gpugrad.backend.graphs import CUDAGraph, graph

from types import SimpleNamespace as _Namespace  # noqa: E402,I001

from gpugrad.amp.autocast_mode import _legacy  # noqa: E402
from gpugrad.amp.grad_scaler import GradScaler as _GradScaler  # noqa: E402

# torch.cuda.amp: the deprecated spellings of torch.amp's autocast("cuda") and GradScaler("cuda")
amp = _Namespace(autocast=_legacy("cuda", "float16"), GradScaler=_GradScaler)

__all__ = ["is_available", "device_count", "unavailable_reason", "get_device_name", "synchronize", "CUDAGraph",
           "graph", "amp"]
