"""``gpugrad.nn.parallel``: data parallelism across processes (see ``gpugrad.distributed``)."""
from gpugrad.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
