"""float16 and bfloat16 in every kernel function: computed in float32, stored in the low dtype (PyTorch's "opmath"),
the same on every device; the one refusal of low-precision optimizer parameters; NumPy's matmul for bfloat16."""
from __future__ import annotations

import functools
import inspect

import ml_dtypes
import numpy as np

# PyTorch's "opmath": float16 is a storage type. The kernels are float/double templates and NumPy's float16 math
# rounds every intermediate, so both implementations compute float16 inputs in float32 through the one wrapper
# below and return float16 results: the CPU and CUDA results of a float16 op are the float32 result, rounded.
_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
LOW = (_HALF, BF16)  # the storage-only dtypes: computed in float32 (bfloat16's NumPy kind is "V", not "f")
# Results an op only saves for its own backward stay float32, as PyTorch keeps layer norm's mean/rstd: a float16
# mean or rstd loses the digits that xhat = (x - mean) * rstd needs, and a float16 lse (|lse| ~ 10) shifts every
# probability exp(x - lse) of the cross-entropy gradient by up to ~4 float16 ulps.
_KEEP_FLOAT32 = {"layer_norm_fwd": (1, 2), "softmax_xent_fwd": (1, 2), "token_logprob_fwd": (1,)}
_IN_PLACE = {"accumulate_": 0, "copy_": 0}  # the argument a function updates in place (and returns)
_ALL_IN_PLACE = {"amp_unscale_multi_"}  # functions that update every low-precision array they are given
# Optimizer updates refuse float16 parameters instead of computing them in float32 in place: p and the state would
# still be stored in float16, where Adam's (1 - beta2) * g^2 rounds to 0 for |g| < ~5e-3 (float16 stops at 6e-8;
# then lr * m / eps explodes) and a step below half an ulp of p (p ~ 1: |lr * d| < 5e-4) is rounded away, so
# training stalls or diverges silently. float32 master parameters (.float()) are the standard fix.
_UPDATES = {"sgd_update_": "SGD", "adam_update_": "Adam/AdamW", "sgd_multi_update_": "SGD",
            "adam_multi_update_": "Adam/AdamW", "rmsprop_multi_update_": "RMSprop", "adagrad_multi_update_": "Adagrad"}


def float16_params_error(optimizer, shape, dtype) -> TypeError:
    """The one refusal of float16 parameters, raised by the optimizers and by both implementations of the updates."""
    return TypeError(f"{optimizer}: got a parameter of shape {tuple(shape)} and dtype {np.dtype(dtype)}; float16 "
                     "and bfloat16 parameters are not supported on any device (low-precision steps and optimizer "
                     "state round small updates and Adam's small g^2 to 0): keep float32 master parameters with "
                     "p.float() (or model.float()) before building the optimizer, and train in low precision "
                     "with gpugrad.autocast")


def _narrow(out, keep, seen, low):
    """float32 results back to the low dtype (one copy per distinct array: bias_act returns y twice)."""
    if isinstance(out, tuple):
        return tuple(o if i in keep else _narrow(o, (), seen, low) for i, o in enumerate(out))
    return seen.setdefault(id(out), out.astype(low)) if getattr(out, "dtype", None) == _FLOAT else out


def _is_low(a):
    return getattr(a, "dtype", None) in LOW


def opmath(fn, native_bf16=False):
    """Wrap a kernel function ``fn(xp, *arrays, **params)`` (a reference, or a launcher in backend/kernels/) so that
    float16 and bfloat16 array arguments are computed in float32; when the first array argument is low-precision,
    float32 results come back in its dtype (but for ``_KEEP_FLOAT32``). Otherwise ``fn`` runs as it is; so does a
    launcher with bfloat16 kernels of its own (``native_bf16``) given only bfloat16 arrays, all C-contiguous."""
    name = fn.__name__
    keep, in_place = _KEEP_FLOAT32.get(name, ()), _IN_PLACE.get(name)

    @functools.wraps(fn)
    def run(xp, *args, **params):
        if not any(getattr(a, "dtype", None) in LOW for a in args):
            return fn(xp, *args, **params)
        if native_bf16 and all(a.dtype == BF16 and a.flags.c_contiguous for a in args if hasattr(a, "dtype")):
            return fn(xp, *args, **params)
        if name in _UPDATES:
            half = next(a for a in args if _is_low(a))  # multi-tensor: not args[0]
            raise float16_params_error(f"{_UPDATES[name]} ({name})", half.shape, half.dtype)
        first = next(a for a in args if hasattr(a, "dtype"))
        wide = tuple(a.astype(_FLOAT) if _is_low(a) else a for a in args)
        out = fn(xp, *wide, **params)
        if name in _ALL_IN_PLACE:  # each low-precision gradient gets its unscaled float32 values back, rounded
            for a, w in zip(args, wide):
                if w is not a:
                    a[...] = w
            return out
        if in_place is not None:  # the caller's buffer keeps its identity: the float32 sum is written back into it
            args[in_place][...] = wide[in_place]
            return args[in_place]
        return _narrow(out, keep, {}, first.dtype) if first.dtype in LOW else out

    return run


def opmath_array(a):
    """``a`` in the dtype the kernels compute it in (float16, bfloat16 -> float32, as :func:`opmath`), for an op
    that keeps a result beyond one call in that precision (logsumexp's saved lse)."""
    return a.astype(_FLOAT) if a.dtype in LOW else a


def matmul(a, b):
    """``np.matmul``, but float16 and bfloat16 operands multiply in float32 and the product is rounded once, as torch's
    CPU GEMMs accumulate them in float32 (ml_dtypes' bfloat16 matmul returns float32; NumPy's float16 matmul rounds as
    it adds, in a loop without BLAS, hundreds of times slower)."""
    if a.dtype in LOW or b.dtype in LOW:
        return np.matmul(a.astype(_FLOAT), b.astype(_FLOAT)).astype(np.result_type(a, b))
    return np.matmul(a, b)


def opmath_all(namespace, native_bf16=()):
    """Wrap every kernel function of a module (public, first parameter ``xp``) with :func:`opmath`; called at the
    end of every reference and launcher module, so both take float16 the same way."""
    for name, f in list(namespace.items()):
        if inspect.isfunction(f) and not name.startswith("_") and f.__code__.co_varnames[:1] == ("xp",):
            namespace[name] = opmath(f, name in native_bf16)
