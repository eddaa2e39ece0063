"""``nn.functional.one_hot``: class indices as rows of zeros with a one at the index."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import deferred, on
from gpugrad.core.tensor import make


def one_hot(tensor, num_classes=-1):
    """``tensor``'s int64 class indices (any shape) as one-hot int64 vectors along a new last dim of
    ``num_classes`` (-1: one more than the largest index, read on the host).

    >>> F.one_hot(gpugrad.tensor([0, 2]), 3)
    tensor([[1, 0, 0],
            [0, 0, 1]])
    """
    if tensor.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    be = tensor._backend
    ids = tensor._data
    with on(be):
        if num_classes == -1:
            if not ids.size:
                raise RuntimeError("Can not infer total number of classes from empty tensor.")
            num_classes = int(be.to_host(ids.max())) + 1
        if be.name == "cpu" and ids.size:  # torch's two messages; on CUDA one device-side check (no sync)
            if ids.min() < 0:
                raise RuntimeError("Class values must be non-negative.")
            if ids.max() >= num_classes:
                raise RuntimeError("Class values must be smaller than num_classes.")
        elif ids.size:
            deferred.check_range(ids, max(num_classes, 0), RuntimeError,
                                 f"one_hot: Class values must be non-negative and smaller than num_classes "
                                 f"({num_classes}), got min {{lo}} and max {{hi}}.")
        elif num_classes < 0:
            raise RuntimeError("Class values must be smaller than num_classes.")
        out = (ids[..., None] == be.xp.arange(num_classes)).astype(np.int64)
    return make(be.as_array(out), be)
