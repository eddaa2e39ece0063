"""gpugrad: a define-by-run autograd engine on NumPy (CPU) and CuPy (CUDA) with hand-written CUDA kernels."""
from __future__ import annotations

# NOTE: first, so that a Ctrl-C while the rest imports ends the `gpugrad` command with one line (only when this
# process is the command: see _command.py)
from gpugrad import _command  # noqa: F401
from gpugrad import autograd, cuda, return_types
from gpugrad._tensor import Tensor
from gpugrad.backend import default_device
from gpugrad.backend.device import Device as device, set_default_device
from gpugrad.backend.threads import get_num_threads, set_num_threads
from gpugrad.core.grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                                    set_grad_enabled)
from gpugrad.core.promotion import result_type
from gpugrad.creation import (arange, as_tensor, empty, empty_like, eye, from_dlpack, from_numpy, full, full_like,
                              linspace, logspace, normal, ones, ones_like, rand, rand_like, randint, randint_like,
                              randn, randn_like, randperm, tensor, zeros, zeros_like)
from gpugrad.dtypes import (DTYPES as _DTYPES, Size, can_cast, dtype, finfo, get_default_dtype, iinfo, promote_types,
                            set_default_dtype)
from gpugrad.legacy import CPU_TYPES as _LEGACY_TYPES
from gpugrad.methods.printing import set_printoptions
from gpugrad.random import Generator, default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from gpugrad.toplevel import FUNCTIONS as _FUNCTIONS

globals().update(_DTYPES)  # gpugrad.float32, gpugrad.int64, gpugrad.bool, and torch's aliases (float, long, ...)
globals().update(_LEGACY_TYPES)  # gpugrad.FloatTensor, gpugrad.LongTensor, ...: torch's legacy constructors
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


def is_inference(input):
    return input.is_inference()


# torch's top-level functions: gpugrad.sum, gpugrad.sort, gpugrad.einsum, the declared pointwise ops (gpugrad.exp), ...
globals().update(_FUNCTIONS)

__version__ = "0.1.0"

from gpugrad import func  # noqa: E402  (torch.func)
from gpugrad import (accelerator, amp, backends, cpu, data,  # noqa: E402,I001  (the packages users reach as attributes)
                     linalg, nn, optim, utils)
from gpugrad.amp.autocast_mode import (autocast, clear_autocast_cache, get_autocast_dtype,  # noqa: E402
                                       is_autocast_cache_enabled, is_autocast_enabled, set_autocast_cache_enabled,
                                       set_autocast_dtype, set_autocast_enabled)
from gpugrad.backends import get_float32_matmul_precision, set_float32_matmul_precision  # noqa: E402
from gpugrad.compiling import compile  # noqa: E402,A004  (torch.compile: accepted, eager)
from gpugrad.func import vmap  # noqa: E402  (torch.vmap)
from gpugrad.serialization import load, save  # noqa: E402
