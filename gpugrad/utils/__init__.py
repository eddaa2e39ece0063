"""``gpugrad.utils``: ``gpugrad.utils.data`` (datasets, samplers, DataLoader) and ``gpugrad.utils.hooks``
(``RemovableHandle``), as ``torch.utils``."""
from gpugrad.utils import data, hooks  # noqa: F401
