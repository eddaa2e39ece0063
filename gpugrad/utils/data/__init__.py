"""``gpugrad.utils.data``, as ``torch.utils.data``: datasets, samplers, ``DataLoader`` (with worker processes),
``default_collate``, ``random_split`` and ``get_worker_info``. ``gpugrad.data`` re-exports all of it, with the
embedded digits and an MNIST (IDX) reader."""
from gpugrad.utils.data._worker import WorkerInfo, get_worker_info
from gpugrad.utils.data.dataloader import DataLoader, default_collate, default_convert
from gpugrad.utils.data.dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                                        random_split)
from gpugrad.utils.data.sampler import (BatchSampler, DistributedSampler, RandomSampler, Sampler, SequentialSampler,
                                        SubsetRandomSampler, WeightedRandomSampler)

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo", "Dataset",
           "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "ChainDataset", "random_split", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler",
           "DistributedSampler"]
