"""What the launchers compile and launch: the raw kernels of each family and their template instantiations
(CuPy's ``name_expressions``, the NVRTC check's), the ``cupy.ElementwiseKernel`` specs, and which kernels each
launcher uses (``USES``; tests check it in both directions)."""
from __future__ import annotations

from gpugrad.ops.declarations import ACTIVATIONS, KERNEL_OPS, POINTWISE

CTYPES = {"float32": "float", "float64": "double"}
# Low-precision storage (common.cuh gg::bf16, gg::f16), computed in float: the kernels autocast feeds. Every other
# kernel takes them through reference.opmath (cast to float32, the result rounded back).
LOW_CTYPES = {"bfloat16": "gg::bf16", "float16": "gg::f16"}
STORAGE_CTYPES = {**CTYPES, **LOW_CTYPES}

# Raw kernels per family; each is a template instantiated for float and double (bias_act_bwd also per activation).
RAW_KERNELS = {
    "elementwise": ("bias_act_bwd", "pointwise"),
    "reduce": ("softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd", "logsumexp_fwd", "logsumexp_bwd",
               "sum_rows"),
    "loss": ("softmax_xent_fwd", "softmax_xent_bwd"),
    "norm": ("layer_norm_fwd", "layer_norm_bwd", "layer_norm_bwd_wb"),
    "optim": ("sgd_update_", "adam_update_", "sgd_multi_update_", "adam_multi_update_", "rmsprop_multi_update_",
              "adagrad_multi_update_", "amp_unscale_multi_", "amp_update_scale_"),
    "check": ("check_index", "check_finite"),  # check_index per index type (INDEX_CTYPES), not per float type
}
INDEX_CTYPES = {"int32": "int", "int64": "long long"}
SCALE_KERNELS = ("amp_update_scale_",)  # instantiated for float only: GradScaler's scale is float32
# The multi-tensor updates also instantiated for LOW_CTYPES: float32 master weights of float16 and bfloat16
# parameters (optim.cu, the launchers' low_params=), not computed in the low dtype.
MASTER_WEIGHT_KERNELS = ("sgd_multi_update_", "adam_multi_update_", "rmsprop_multi_update_", "adagrad_multi_update_")
# The raw kernels also instantiated for LOW_CTYPES (their launchers: NATIVE_LOW in their modules).
LOW_KERNELS = frozenset({
    "softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd", "logsumexp_fwd", "logsumexp_bwd", "sum_rows",
    "layer_norm_fwd", "layer_norm_bwd", "layer_norm_bwd_wb",
    "softmax_xent_fwd", "softmax_xent_bwd",
    "amp_unscale_multi_",
})


def _expr(kernel: str, ctype: str) -> str:
    return f"{kernel}<{ctype}>"


def _saves_x(act):
    return act in POINTWISE and POINTWISE[act].saves == "x"


# The Op functors pointwise<Op> is instantiated for (elementwise.cu), all from ops/declarations.py: every pointwise
# op's forward (the identity is copy_) and g * f', bias + activation, dropout (randoms u in either float type) and
# accumulate_.
POINTWISE_OPS = tuple(op for c in CTYPES.values() for op in (
    *(f"ActFwd<{c}, pw::{a}>" for a in ACTIVATIONS),
    *(f"ActBwd<{c}, pw::{d.name}>" for d in KERNEL_OPS),
    *(f"BiasActFwd<{c}, pw::{a}, {str(_saves_x(a)).lower()}>" for a in ACTIVATIONS),
    *(f"DropoutFwd<{c}, {u}>" for u in CTYPES.values()),
    f"DropoutBwd<{c}>", f"Accumulate<{c}>"))
# float16 and bfloat16 for the activations, their backward and bias + activation, the pointwise kernels autocast feeds
# low-precision activations.
LOW_OPS = tuple(op for c in LOW_CTYPES.values() for op in (
    *(f"ActFwd<{c}, pw::{a}>" for a in ACTIVATIONS),
    *(f"ActBwd<{c}, pw::{d.name}>" for d in KERNEL_OPS),
    *(f"BiasActFwd<{c}, pw::{a}, {str(_saves_x(a)).lower()}>" for a in ACTIVATIONS), f"Accumulate<{c}>"))
POINTWISE_OPS = POINTWISE_OPS + LOW_OPS


def _instantiations(kernel):
    if kernel == "pointwise":
        return [f"pointwise<{op}>" for op in POINTWISE_OPS]
    if kernel == "bias_act_bwd":
        return [f"{kernel}<{c}, pw::{a}>" for c in STORAGE_CTYPES.values() for a in ACTIVATIONS]
    if kernel in SCALE_KERNELS:  # the scaler's own float32 arrays, whatever the gradients' dtype
        return [f"{kernel}<float>"]
    if kernel in MASTER_WEIGHT_KERNELS:
        return [f"{kernel}<{c}>" for c in STORAGE_CTYPES.values()]
    ctypes = INDEX_CTYPES if kernel == "check_index" else STORAGE_CTYPES if kernel in LOW_KERNELS else CTYPES
    return [f"{kernel}<{c}>" for c in ctypes.values()]


# Every template instantiation the launchers use: CuPy's RawModule name_expressions and the NVRTC check.
NAME_EXPRESSIONS = {fam: [e for k in ks for e in _instantiations(k)] for fam, ks in RAW_KERNELS.items()}


def _bias_spec(a):
    y = f"pw::{a}::fwd(z, p0, p1)"
    if _saves_x(a):  # the backward reads z
        return "T x, T b, T p0, T p1", "T y, T z", f"z = x + b; y = {y}"
    return "T x, T b, T p0, T p1", "T y", f"T z = x + b; y = {y}"


# cupy.ElementwiseKernel specs (in_params, out_params, operation) over the pw:: structs of elementwise.cu.
# The NVRTC check compiles a wrapper kernel per entry from these same strings.
ELEMENTWISE = {
    **{k: v for d in KERNEL_OPS for k, v in (
        (f"{d.name}_fwd", ("T x, T p0, T p1", "T y", f"y = pw::{d.name}::fwd(x, p0, p1)")),
        (f"{d.name}_bwd", ("T s, T g, T p0, T p1", "T gx", f"gx = pw::{d.name}::bwd(s, g, p0, p1)")))},
    **{f"bias_{a}_fwd": _bias_spec(a) for a in ACTIVATIONS},
    "dropout_fwd": ("T x, U u, U p, T scale", "T y, bool mask", "mask = u >= p; y = mask ? x * scale : T(0)"),
    "dropout_bwd": ("T gy, bool mask, T scale", "T gx", "gx = mask ? gy * scale : T(0)"),
    "accumulate_": ("T g", "T acc", "acc += g"),
    "copy_": ("T src", "T dst", "dst = src"),
}

# launcher -> the kernels it launches ("family:kernel" raw, "ew:key" ELEMENTWISE); tests check both directions.
USES = {
    # pointwise launchers: the vectorized raw kernel for contiguous arrays, the ElementwiseKernel for the rest
    **{f"{d.name}_{e}": ("elementwise:pointwise", f"ew:{d.name}_{e}") for d in KERNEL_OPS for e in ("fwd", "bwd")},
    "bias_act_fwd": ("elementwise:pointwise", *(f"ew:bias_{a}_fwd" for a in ACTIVATIONS)),
    "bias_act_bwd": ("elementwise:bias_act_bwd", "reduce:sum_rows"),
    "dropout_fwd": ("elementwise:pointwise", "ew:dropout_fwd"),
    "dropout_bwd": ("elementwise:pointwise", "ew:dropout_bwd"),
    "accumulate_": ("elementwise:pointwise", "ew:accumulate_"),
    "copy_": ("elementwise:pointwise", "ew:copy_"),
    **{k: (f"reduce:{k}",) for k in RAW_KERNELS["reduce"]},
    "softmax_xent_fwd": ("loss:softmax_xent_fwd",),
    "softmax_xent_bwd": ("loss:softmax_xent_bwd",),
    "token_logprob_fwd": ("loss:softmax_xent_fwd",),
    "token_logprob_bwd": ("loss:softmax_xent_bwd",),
    "check_index": ("check:check_index",),
    "check_finite": ("check:check_finite",),
    "layer_norm_fwd": ("norm:layer_norm_fwd",),
    "layer_norm_bwd": ("norm:layer_norm_bwd", "norm:layer_norm_bwd_wb", "reduce:sum_rows"),
    "sgd_update_": ("optim:sgd_update_",),
    "adam_update_": ("optim:adam_update_",),
    "sgd_multi_update_": ("optim:sgd_multi_update_",),
    "adam_multi_update_": ("optim:adam_multi_update_",),
    "rmsprop_multi_update_": ("optim:rmsprop_multi_update_",),
    "adagrad_multi_update_": ("optim:adagrad_multi_update_",),
    "amp_unscale_multi_": ("optim:amp_unscale_multi_",),
    "amp_update_scale_": ("optim:amp_update_scale_",),
}


# The pointwise<Op> functors each pointwise launcher instantiates ({c}: its C type; a prefix where it takes several).
_FUNCTORS = {
    **{f"{d.name}_{e}": f"Act{e.title()}<{{c}}, pw::{d.name}>>" for d in KERNEL_OPS for e in ("fwd", "bwd")},
    "bias_act_fwd": "BiasActFwd<{c},", "dropout_fwd": "DropoutFwd<{c},", "dropout_bwd": "DropoutBwd<{c}>>",
    "accumulate_": "Accumulate<{c}>>", "copy_": "ActFwd<{c}, pw::identity>>",
}
# float16 and bfloat16 natively where a kernel has their instantiation (LOW_OPS, LOW_KERNELS), else in float32
_DTYPE_CTYPES = {**{k: ("float", v) for k, v in LOW_CTYPES.items()}, **{k: (v,) for k, v in CTYPES.items()}}


def instantiations(launchers=None, dtypes=("float32",)) -> list:
    """Sorted (family, name expression) of every raw kernel that ``launchers`` (every launcher of ``USES`` when None)
    can launch on float arrays of ``dtypes``: what to compile before a first step (``kernels.warm_up``).
    check_index's are per index type and always included; the ElementwiseKernels of strided layouts are not (CuPy
    compiles those per dtype at their first call)."""
    unknown = [d for d in dtypes if d not in _DTYPE_CTYPES]
    if unknown:
        raise ValueError(f"instantiations: dtypes must be among {tuple(_DTYPE_CTYPES)}, got {unknown}")
    ctypes = {c for d in dtypes for c in _DTYPE_CTYPES[d]}
    found = set()
    for launcher in USES if launchers is None else launchers:
        if launcher not in USES:
            raise ValueError(f"instantiations: {launcher!r} is not a kernel launcher (kernels.USES)")
        for family, _, kernel in (u.partition(":") for u in USES[launcher]):
            if family == "ew":
                continue
            heads = {f"{kernel}<" if kernel == "check_index" or kernel in SCALE_KERNELS else
                     f"pointwise<{_FUNCTORS[launcher].format(c=c)}" if kernel == "pointwise" else f"{kernel}<{c}"
                     for c in ctypes}
            found |= {(family, e) for e in NAME_EXPRESSIONS[family] if any(e.startswith(h) for h in heads)}
    return sorted(found)
