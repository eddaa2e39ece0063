"""float16 and bfloat16 in every kernel function: computed in float32, stored in the low dtype (PyTorch's "opmath"),
the same on every device; optimizer updates of low-precision parameters only through float32 master weights; NumPy's
matmul for bfloat16, and the CPU's x @ wᵀ."""
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
# The storage-only dtypes: computed in float32 (bfloat16's NumPy kind is "V", not "f"). A set: every kernel call tests
# its arguments' dtypes against it, 25 ns a test against 90-115 for a tuple's == (gpugrad's dtypes hash as NumPy's).
LOW = frozenset((_HALF, BF16))
# Results an op only saves for its own backward stay float32, as PyTorch keeps layer norm's mean/rstd: a float16
# mean or rstd loses the digits that xhat = (x - mean) * rstd needs, and a float16 lse (|lse| ~ 10) shifts every
# probability exp(x - lse) of the cross-entropy gradient by up to ~4 float16 ulps.
_KEEP_FLOAT32 = {"layer_norm_fwd": (1, 2), "softmax_xent_fwd": (1, 2), "token_logprob_fwd": (1,)}
_IN_PLACE = {"accumulate_": 0, "copy_": 0}  # the argument a function updates in place (and returns)
_ALL_IN_PLACE = {"amp_unscale_multi_"}  # functions that update every low-precision array they are given
# Optimizer updates never compute a float16 or bfloat16 parameter in its own dtype: p and the state stored in float16
# lose Adam's (1 - beta2) * g^2 to 0 for |g| < ~5e-3 (float16 stops at 6e-8; then lr * m / eps explodes) and round a
# step below half an ulp of p (p ~ 1: |lr * d| < 5e-4) away, so training stalls or diverges silently. The multi-tensor
# updates take them in their master-weight form instead (``low_params=``: float32 masters and state, low-precision
# gradients widened by the update itself, each new master rounded into its parameter), which opmath hands to them as
# it is; any other low-precision argument list is refused by name (float16_params_error).
_UPDATES = {"sgd_update_": "SGD", "adam_update_": "Adam/AdamW", "sgd_multi_update_": "SGD",
            "adam_multi_update_": "Adam/AdamW", "rmsprop_multi_update_": "RMSprop", "adagrad_multi_update_": "Adagrad"}
_MASTER_FORM = {"sgd_multi_update_", "adam_multi_update_", "rmsprop_multi_update_", "adagrad_multi_update_"}


def float16_params_error(optimizer, shape, dtype) -> TypeError:
    """The refusal of float16 and bfloat16 arrays by an update outside its master-weight form, raised by both
    implementations of the updates."""
    return TypeError(f"{optimizer}: got an array of shape {tuple(shape)} and dtype {np.dtype(dtype)}; float16 and "
                     "bfloat16 parameters are updated only through float32 master weights (a low-precision step and "
                     "optimizer state round small updates and Adam's small g^2 to 0): use a multi-tensor update with "
                     "float32 masters and state, the low-precision gradients and low_params= (gpugrad.optim's "
                     "optimizers do this for float16 and bfloat16 parameters), or update float32 parameters")


def _narrow(out, keep, seen, low):
    """float32 results back to the low dtype (one copy per distinct array: bias_act returns y twice)."""
    if isinstance(out, tuple):
        return tuple(o if i in keep else _narrow(o, (), seen, low) for i, o in enumerate(out))
    return seen.setdefault(id(out), out.astype(low)) if getattr(out, "dtype", None) == _FLOAT else out


def _is_low(a):
    return getattr(a, "dtype", None) in LOW


def _native(args, mode):
    """Whether a launcher with low-precision kernels of its own takes ``args`` as they are: every low-precision array
    C-contiguous and of one dtype, and with ``mode`` "same" every other array too, or with "mixed" beside float32
    (saved statistics, master weights) or integer (class ids) arrays, which the launcher checks itself."""
    low = [a for a in args if _is_low(a)]
    if not all(a.dtype == low[0].dtype and a.flags.c_contiguous for a in low):
        return False
    if mode == "same":
        return all(a.dtype == low[0].dtype for a in args if hasattr(a, "dtype"))
    return True


def opmath(fn, native=None):
    """Wrap a kernel function ``fn(xp, *arrays, **params)`` (a reference, or a launcher in backend/kernels/) so that
    float16 and bfloat16 array arguments are computed in float32; when the first array argument is low-precision,
    float32 results come back in its dtype (but for ``_KEEP_FLOAT32``). Otherwise ``fn`` runs as it is; so does a
    launcher with float16 and bfloat16 kernels of its own (``native``: "same" or "mixed", see :func:`_native`)."""
    name = fn.__name__
    keep, in_place = _KEEP_FLOAT32.get(name, ()), _IN_PLACE.get(name)

    @functools.wraps(fn)
    def run(xp, *args, **params):
        for a in args:  # (a loop, not any() over a generator: this runs on every kernel call)
            if getattr(a, "dtype", None) in LOW:
                break
        else:
            return fn(xp, *args, **params)
        if native is not None and _native(args, native):
            return fn(xp, *args, **params)
        if name in _UPDATES:
            if name in _MASTER_FORM and params.get("low_params") is not None:  # widened by the update itself
                return fn(xp, *args, **params)
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


# NumPy's OpenBLAS multiplies a short batch by a wide weight faster the other way round: a @ bᵀ as (b @ aᵀ)ᵀ, copied
# to rows, took 0.5-0.87x the time of the direct product on a 2-core EPYC, on one thread or two, with the same bits
# (float32, a (m, k) against b (n, k) for 8 <= m <= 64 with k and n from 512 to 4096; not float64, and not once m
# exceeds k / 8 or n / 8: at m = 128 or against a 10-wide layer it costs up to 2x). benchmarks/bench_matmul.py
# re-measures it (test_short_batch_linear).
SHORT_BATCH = 64


def matmul_nt(a, b):
    """a @ bᵀ (Linear's x @ wᵀ) as :func:`matmul`, a short float32 batch in its faster order, C-contiguous rows."""
    m = a.shape[0] if a.ndim == 2 else 0
    if 2 <= m <= min(SHORT_BATCH, a.shape[1] // 8, b.shape[0] // 8) and a.dtype == b.dtype == _FLOAT:
        return np.ascontiguousarray(np.matmul(b, a.T).T)
    return matmul(a, b.T)


def opmath_all(namespace, native=None):
    """Wrap every kernel function of a module (public, first parameter ``xp``) with :func:`opmath`; called at the
    end of every reference and launcher module, so both take float16 the same way. ``native`` maps the launchers
    with float16 and bfloat16 kernels of their own to "same" or "mixed" (:func:`_native`)."""
    native = native or {}
    for name, f in list(namespace.items()):
        if inspect.isfunction(f) and not name.startswith("_") and f.__code__.co_varnames[:1] == ("xp",):
            namespace[name] = opmath(f, native.get(name))
