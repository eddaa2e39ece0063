"""``gpugrad.data``: everything of ``gpugrad.utils.data`` (datasets, samplers, DataLoader; the canonical home, as
``torch.utils.data``), plus the embedded 8x8 digits and an MNIST (IDX) reader."""
from gpugrad.data.digits import digits_split, load_digits
from gpugrad.data.idx import IdxError, load_idx_dir, read_idx, write_idx, write_idx_dir
from gpugrad.utils.data import *  # noqa: F401,F403
from gpugrad.utils.data import __all__ as _data_all

__all__ = [*_data_all, "load_digits", "digits_split", "IdxError", "load_idx_dir", "read_idx", "write_idx",
           "write_idx_dir"]
