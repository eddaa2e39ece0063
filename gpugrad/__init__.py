"""gpugrad: a define-by-run autograd engine on NumPy (CPU) and CuPy (CUDA) with hand-written CUDA kernels."""
from __future__ import annotations

import numpy as _np

from gpugrad import autograd, cuda
from gpugrad.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled,
                                        no_grad, set_grad_enabled)
from gpugrad.backend import default_device
from gpugrad.backend.device import Device as device
from gpugrad.creation import (arange, as_tensor, empty, from_numpy, full, full_like, ones, ones_like, rand, randint, randn,
                              tensor, zeros, zeros_like)
from gpugrad.functional import POINTWISE as _POINTWISE, cat, logsumexp, matmul, maximum, minimum, stack, where
from gpugrad.random import manual_seed
from gpugrad._tensor import Tensor

float16, float32, float64 = _np.float16, _np.float32, _np.float64
int32, int64, bool_ = _np.int32, _np.int64, _np.bool_
float, double, long = float32, float64, int64

globals().update(_POINTWISE)  # the declared pointwise ops: gpugrad.exp, gpugrad.sin, gpugrad.relu, ...

__version__ = "0.1.0"

from gpugrad import data, nn, optim  # noqa: E402  (they need Tensor)
