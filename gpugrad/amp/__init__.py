"""Mixed precision, as ``torch.amp``: :class:`autocast` and :class:`GradScaler`."""
from gpugrad.amp.autocast_mode import (
    autocast,
    clear_autocast_cache,
    get_autocast_dtype,
    is_autocast_available,
    is_autocast_cache_enabled,
    is_autocast_enabled,
    set_autocast_cache_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from gpugrad.amp.grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype",
           "set_autocast_dtype", "is_autocast_cache_enabled", "set_autocast_cache_enabled", "clear_autocast_cache",
           "is_autocast_available"]
