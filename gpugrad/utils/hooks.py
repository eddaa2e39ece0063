"""``gpugrad.utils.hooks``: the handle every hook registration returns, as ``torch.utils.hooks``."""
from gpugrad.core.node import RemovableHandle

__all__ = ["RemovableHandle"]
