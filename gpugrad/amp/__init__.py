"""Mixed precision, as ``torch.amp``: :class:`autocast`, :class:`GradScaler` and ``is_autocast_available``; the
state functions (``is_autocast_enabled``, ``get_autocast_dtype``, ...) are top-level, as torch's."""
from gpugrad.amp.autocast_mode import autocast, is_autocast_available
from gpugrad.amp.grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "is_autocast_available"]
