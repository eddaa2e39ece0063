"""Every op family, imported so that each op registers itself (``core/registry.py``); ``gpugrad/_tensor.py`` binds
their frontends as Tensor methods."""
from gpugrad.ops import (activation, arith, convert, linalg, loss, matmul, movement, norm, reduce, rounding,  # noqa
                         scan, scatter, softmax)
