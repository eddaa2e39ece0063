"""``gpugrad.utils``: ``gpugrad.utils.data`` (datasets, samplers, DataLoader), as ``torch.utils``."""
from gpugrad.utils import data  # noqa: F401
