"""Autocast's state and its casts: which ops run in the low dtype, which in float32, which in the widest input type.

``Op.apply`` reads one flag (``STATE.enabled``: some device type has autocast on) and, when it is set, sends the call
to its general path, which calls :func:`cast_inputs` before promotion. The op lists are torch's, per device type
(torch's ``aten/src/ATen/autocast_mode.cpp``, read at pytorch/pytorch 008ec6b; its CUDA lists are the
``AT_FORALL_*`` macros of ``autocast_mode.h``): ``tests/amp/test_autocast.py`` checks the CPU list op by op against
torch 2.13 and the CUDA list as data. Eligible inputs are floating tensors on the autocast's device type other than
float64, as torch's ``is_eligible``. The casts are ``Tensor.to`` (differentiable: backward casts the gradient back,
so float32 leaves get float32 gradients), and the low-precision casts of float32 leaves that require grad (weights)
are cached until the outermost autocast block exits, as torch's ``cached_cast``.
"""
from __future__ import annotations

import functools

import numpy as np

from gpugrad.core.grad_mode import STATE as GRAD
from gpugrad.core.tensor import TensorBase
from gpugrad.dtypes import BF16

LOW, FP32, PROMOTE, BANNED = "lower_precision_fp", "fp32", "promote", "banned"
# torch's CPU einsum is not listed, but a product of two or more operands runs through bmm, which is: low precision
# then, one operand's sum or trace stays in its dtype (checked against torch 2.13)
PRODUCT = "lower_precision_fp when it multiplies operands"
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
# gpugrad's op and composite names -> torch's cast policy on each device type. gpugrad's `matmul` is torch's mm, bmm,
# mv and matmul; `cross_entropy` is torch's cross_entropy_loss (on CUDA, its log_softmax and nll_loss are fp32 there);
# fp32_set_opt_dtype ops (softmax, sum, ...) run their eligible inputs in float32, which is what setting dtype does.
# bias_act is gpugrad's fused bias + activation of a Linear layer (nn.MLP's linear + bias_act): its bias is the layer's,
# which torch's F.linear takes in the low dtype, so it runs there too (on its bfloat16 kernel) and the layer's output
# has torch's Linear + activation's dtype.
_COMMON_LOW = ("matmul", "linear", "bias_act", "addmm")
POLICIES = {
    "cpu": {**dict.fromkeys(_COMMON_LOW, LOW), "einsum": PRODUCT,
            **dict.fromkeys(("mse_loss", "nll_loss", "cross_entropy", "smooth_l1_loss", "huber_loss", "l1_loss",
                             "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "prod",
                             "margin_ranking_loss", "soft_margin_loss", "poisson_nll_loss", "hinge_embedding_loss",
                             "cosine_embedding_loss", "triplet_margin_loss", "multi_margin_loss", "cdist", "trace",
                             "multilabel_margin_loss"), FP32),
            **dict.fromkeys(("stack", "cat", "index_copy"), PROMOTE)},
    "cuda": {**dict.fromkeys((*_COMMON_LOW, "einsum", "prelu", "addmv", "addr", "bmm", "mm", "mv",
                              "baddbmm", "addbmm", "chain_matmul", "linalg_multi_dot"), LOW),
             **dict.fromkeys(("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
                              "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "group_norm",
                              "norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
                              "cross_entropy", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
                              "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
                              "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
                              "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
                              # fp32_set_opt_dtype
                              "prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum"), FP32),
             **dict.fromkeys(("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put",
                              "tensordot", "scatter_add"), PROMOTE),
             "binary_cross_entropy": BANNED},
}
SUPPORTED = {"cpu": (BF16, np.dtype(np.float16)), "cuda": (np.dtype(np.float16), BF16)}
DEFAULT_DTYPES = {"cpu": BF16, "cuda": np.dtype(np.float16)}


class _State:
    __slots__ = ("enabled", "devices", "dtypes", "cache_enabled", "nesting", "cache")

    def __init__(self):
        self.enabled = False  # some device type has autocast on: the one flag Op.apply reads
        self.devices = {"cpu": False, "cuda": False}
        self.dtypes = dict(DEFAULT_DTYPES)
        self.cache_enabled, self.nesting, self.cache = True, 0, {}

    def refresh(self):
        self.enabled = any(self.devices.values())


STATE = _State()


def check_device(device_type):
    if device_type not in STATE.devices:
        raise RuntimeError(f"autocast: unsupported device_type {device_type!r}: gpugrad has 'cpu' and 'cuda'")
    return device_type


def cast_inputs(name, args, kwargs=None):
    """``args`` (and the Tensors in ``kwargs``) cast as autocast's policy for op ``name`` on their device type says;
    unchanged when the op has no policy there or no input is eligible."""
    device = _device_of(args, kwargs)
    if device is None or not STATE.devices.get(device):
        return args if kwargs is None else (args, kwargs)
    policy = POLICIES[device].get(name)
    if policy is None:
        return args if kwargs is None else (args, kwargs)
    if policy == BANNED:
        raise RuntimeError(
            "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast. Many models use "
            "a sigmoid layer right before the binary cross entropy layer; combine the two with "
            "binary_cross_entropy_with_logits (BCEWithLogitsLoss), which is safe to autocast")
    low = STATE.dtypes[device]
    if policy == PRODUCT:
        if sum(isinstance(a, TensorBase) for a in args) < 2:
            return args if kwargs is None else (args, kwargs)
        policy = LOW
    if policy == PROMOTE:
        widest = low
        for a in (*args, *(kwargs or {}).values()):
            if _eligible(a, device) and a._data.dtype == _F32:
                widest = _F32
        to = widest
    else:
        to = low if policy == LOW else _F32
    cast = tuple(_cast(a, to, device) for a in args)
    if kwargs is None:
        return cast
    return cast, {k: _cast(v, to, device) for k, v in kwargs.items()}


def _device_of(args, kwargs):
    for a in (*args, *(kwargs or {}).values()):
        if isinstance(a, TensorBase):
            return a._backend.name
    return None


def _eligible(a, device):
    return isinstance(a, TensorBase) and a._backend.name == device and a._data.dtype.kind in "fV" \
        and a._data.dtype != _F64


def _cast(a, to, device):
    if not _eligible(a, device) or a._data.dtype == to:
        return a
    # torch caches the low-precision casts of float32 leaves that require grad (weights): each is cast once per block
    cacheable = STATE.cache_enabled and to != _F32 and a._grad_fn is None and a._requires_grad and a._base is None
    if not cacheable:
        return a.to(dtype=to)
    key = (id(a), to, GRAD.enabled)  # NOTE: keyed on grad mode too: a cast made under no_grad has no graph to reuse
    hit = STATE.cache.get(key)
    if hit is None or hit[0] is not a:
        hit = STATE.cache[key] = (a, a.to(dtype=to))
    return hit[1]


def casts(name):
    """Give a composite (a function of other ops, such as ``l1_loss``) autocast's policy for ``name``: its Tensor
    arguments are cast once, before the ops it is made of run."""
    def deco(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if STATE.enabled:
                args, kwargs = cast_inputs(name, args, kwargs)
            return fn(*args, **kwargs)
        return run
    return deco
