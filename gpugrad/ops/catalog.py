"""Every op family, imported so that each op registers itself (``core/registry.py``); ``gpugrad/_tensor.py`` binds
their frontends as Tensor methods."""
from gpugrad.ops import (activation, arith, blas,  # noqa; noqa: F401  (addmm; addcmul, lerp, atan2; inv, solve, det)
                         combine, convert, linalg, linalg_solve, loss, matmul, movement, norm, reduce, rounding, scan,
                         scatter, softmax)
