"""gpugrad: a define-by-run autograd engine on NumPy (CPU) and CuPy (CUDA) with hand-written CUDA kernels."""
from __future__ import annotations

from gpugrad import autograd, cuda, return_types
from gpugrad._tensor import Tensor
from gpugrad.backend import default_device
from gpugrad.backend.device import Device as device, set_default_device
from gpugrad.core.grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                                    set_grad_enabled)
from gpugrad.core.promotion import result_type
from gpugrad.creation import (arange, as_tensor, empty, empty_like, eye, from_dlpack, from_numpy, full, full_like,
                              linspace, logspace, normal, ones, ones_like, rand, rand_like, randint, randint_like,
                              randn, randn_like, randperm, tensor, zeros, zeros_like)
from gpugrad.dtypes import (DTYPES as _DTYPES, Size, can_cast, dtype, finfo, get_default_dtype, iinfo, promote_types,
                            set_default_dtype)
from gpugrad.random import Generator, default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from gpugrad.toplevel import FUNCTIONS as _FUNCTIONS

globals().update(_DTYPES)  # gpugrad.float32, gpugrad.int64, gpugrad.bool, and torch's aliases (float, long, ...)
bool_ = bool  # noqa: F821 - the name NumPy users reach for


def get_default_device():
    """Where creation functions put tensors given no ``device``."""
    return default_device()


def is_tensor(obj):
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return input.is_floating_point()


def is_complex(input):
    return input.is_complex()


# torch's top-level functions: gpugrad.sum, gpugrad.sort, gpugrad.einsum, the declared pointwise ops (gpugrad.exp), ...
globals().update(_FUNCTIONS)

__version__ = "0.1.0"

from gpugrad import backends, data, nn, optim, utils  # noqa: E402,I001  (the packages users reach as attributes)
from gpugrad.serialization import load, save  # noqa: E402
