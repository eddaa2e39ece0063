"""``gpugrad.cpu.amp``: torch.cpu.amp's deprecated ``autocast`` (bfloat16 by default), kept for scripts that use it."""
from types import SimpleNamespace

from gpugrad.amp.autocast_mode import _legacy
from gpugrad.amp.grad_scaler import GradScaler

amp = SimpleNamespace(autocast=_legacy("cpu", "bfloat16"), GradScaler=GradScaler)
