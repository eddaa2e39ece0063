"""``gpugrad.data``: datasets, a batching ``DataLoader``, the embedded 8x8 digits and an MNIST (IDX) reader."""
from gpugrad.data.dataset import Dataset, TensorDataset
from gpugrad.data.digits import digits_split, load_digits
from gpugrad.data.idx import IdxError, load_idx_dir, read_idx, write_idx, write_idx_dir
from gpugrad.data.loader import DataLoader
from gpugrad.data.sampler import DistributedSampler

__all__ = ["Dataset", "TensorDataset", "DataLoader", "DistributedSampler", "load_digits", "digits_split", "IdxError", "load_idx_dir",
           "read_idx", "write_idx", "write_idx_dir"]
