"""``gpugrad.nn.functional``: the functions layers are made of.  Compositions get no op class of their own."""
from __future__ import annotations

import warnings
from math import prod as _prod

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import deferred, on
from gpugrad.core.args import index_array as _index_array, with_dtype
from gpugrad.core.grad_mode import no_grad
from gpugrad.core.op import named
from gpugrad.core.tensor import as_operand
from gpugrad.functional import where as _where
from gpugrad.nn.encoding import one_hot  # noqa: F401  (F.one_hot)
from gpugrad.ops.activation import POINTWISE_OPS, BiasAct, Dropout
from gpugrad.ops.declarations import ACTIVATIONS
from gpugrad.ops.loss import (BinaryCrossEntropy, BinaryCrossEntropyWithLogits, CrossEntropy, HuberLoss, MseLoss,
                              NllLoss, SmoothL1Loss, TokenLogProb)
from gpugrad.ops.matmul import Linear
from gpugrad.ops.norm import Embedding as _Embedding, LayerNorm as _LayerNorm
from gpugrad.random import generator


def _activation(name):
    """F.<name>(input, *params, inplace=False), generated from the op's declaration (ops/declarations.py)."""
    method, in_place = getattr(Tensor, name), getattr(Tensor, name + "_")

    def f(input, *args, inplace=False, **kwargs):
        return (in_place if inplace else method)(input, *args, **kwargs)

    f.__name__, f.__doc__ = name, method.__doc__
    return f


globals().update({n: _activation(n) for n, op in POINTWISE_OPS.items() if op.decl.functional})


def gelu(input, approximate="none"):
    """GELU: x Φ(x) (approximate='none', the exact erf form, torch's default) or its tanh approximation ('tanh')."""
    return input.gelu(approximate=approximate)


def _softmax_dim(input, dim, op):
    if dim is None:  # torch's legacy implicit dim, with its warning
        warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the call to include dim=X "
                      "as an argument.", stacklevel=3)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return dim


def softmax(input, dim=None, _stacklevel=3, dtype=None, *, axis=None):
    """e^(x - max) / Σ e^(x - max) along ``dim`` (``axis`` an alias); ``dtype`` casts the input first."""
    return with_dtype(input, dtype).softmax(_softmax_dim(input, dim if axis is None else axis, "softmax"))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None, *, axis=None):
    return with_dtype(input, dtype).log_softmax(_softmax_dim(input, dim if axis is None else axis, "log_softmax"))


def logsumexp(x, axis=-1, keepdims=False):
    return x.logsumexp(axis, keepdims)


def linear(input, weight, bias=None):
    """y = x @ weightᵀ + bias, weight (out, in). As torch, the three must share a dtype (no promotion)."""
    return Linear.apply(input, weight, bias) if bias is not None else Linear.apply(input, weight)


def _type_name(t):
    """torch's short scalar-type name ("Float", "Double", "Int"), from the legacy type name."""
    return t.type().rsplit(".", 1)[1][:-len("Tensor")]



def bias_act(x, bias, activation="relu", *params):
    """act(x + bias) in one fused pass, bias broadcast along the last axis; ``params`` are the activation's
    (leaky_relu's slope, ...), its defaults if not given."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"bias_act: activation must be one of {ACTIVATIONS}, got {activation!r}")
    if bias.shape != x.shape[-1:]:
        raise ValueError(f"bias_act: bias of shape {bias.shape} does not match the last axis of x {x.shape}")
    decl = POINTWISE_OPS[activation].decl if activation != "identity" else None
    params = tuple(params) or (decl.defaults if decl else ())
    return BiasAct.apply(x, bias, act=activation, params=params)


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training.
    ``inplace=True`` writes the result into ``input`` (and returns it), as torch."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        y = input * 0.0
    else:  # NOTE: generators draw float32/float64 only; float16 inputs draw float32 (Dropout compares u in its dtype)
        with on(input._backend):
            u = generator(input._backend).random(input.shape, dtype=input.dtype if input.dtype.itemsize >= 4
                                                 else np.float32)
        y = Dropout.apply(input, p=p, u=u)
    return input.copy_(y) if inplace else y


# ---- losses -----------------------------------------------------------------------------------------------------
def _reduction(reduction, size_average=None, reduce=None, extra=()):
    """torch's reduction argument, or its legacy size_average / reduce pair (with torch's warning)."""
    if size_average is not None or reduce is not None:
        warnings.warn("size_average and reduce args will be deprecated, please use reduction='"
                      f"{'none' if reduce is False else 'sum' if size_average is False else 'mean'}' instead.",
                      stacklevel=3)
        reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
    if reduction not in ("none", "mean", "sum") + extra:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction):
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _same_shape(input, target, op, error=None):
    """torch's check (``error``: ValueError for bce) or warning (mse, l1, ...) for a target that only broadcasts."""
    if tuple(input.shape) != tuple(getattr(target, "shape", input.shape)):
        msg = f"Using a target size ({target.shape}) that is different to the input size ({input.shape})"
        if error is not None:
            raise error(f"{op}: {msg} is deprecated. Please ensure they have the same size.")
        warnings.warn(f"{msg}. This will likely lead to incorrect results due to broadcasting. Please ensure they "
                      "have the same size.", stacklevel=3)


def _pointwise_loss(op, input, target, reduction, weight=None, **params):
    """One loss op over input and target (a number or array target becomes a Tensor); weights as constants."""
    w = None if weight is None else (weight if isinstance(weight, Tensor) else as_operand(weight, input)).detach()._data
    return op.apply(input, as_operand(target, input), reduction=reduction, weight=w, **params)


def _class_weight(weight, input, classes, op):
    """The (C,) class weights as an array of the input's dtype on its device, or None; torch's checks."""
    if weight is None:
        return None
    if tuple(weight.shape) != (classes,):
        raise RuntimeError(f"{op}: weight tensor should be defined either for all {classes} classes or no classes but "
                           f"got weight tensor of shape: {list(weight.shape)}")
    if weight.dtype != input.dtype:
        raise RuntimeError(f"{op}: expected scalar type {input.dtype} but found {weight.dtype} (weight): give the "
                           "class weights the input's dtype")
    if weight.requires_grad:
        raise RuntimeError(f"{op}: the loss is not differentiable with respect to argument 'weight'; this input "
                           "cannot have requires_grad True")
    return _index_array(weight, input, op) if isinstance(weight, Tensor) else input._backend.asarray(weight)


def _class_targets(input, target, op):
    """(rows of the input as (N, C) with the class axis last, class ids (N,), the per-element loss shape): input
    (N, C), (C,) with a 0-d target, or (N, C, d1, ...) with target (N, d1, ...), as torch."""
    t = _index_array(target, input, op)
    if t.dtype not in (np.int64, np.uint8):  # as torch: int32 class ids are refused, not converted
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_type_name(Tensor._wrap(t))} ({op}: class-index targets are "
                           "int64, e.g. target.long(); probability targets have the input's shape)")
    if input.ndim == 0:
        raise ValueError(f"{op}: input must have a class axis (C,), (N, C) or (N, C, d1, ...), got a 0-d input")
    if input.ndim == 1:
        want = ()
    elif t.ndim == 0 or t.shape[0] != input.shape[0]:
        raise ValueError(f"{op}: Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({t.shape[0] if t.ndim else 0}).")
    else:
        want = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(t.shape) != want:
        raise RuntimeError(f"{op}: Expected target size {list(want)}, got {list(t.shape)}")
    C = input.shape[min(1, input.ndim - 1)]
    rows = input.reshape(1, C) if input.ndim == 1 else input if input.ndim == 2 else \
        input.permute(0, *range(2, input.ndim), 1).reshape(-1, C)
    return rows, t.reshape(-1), want


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """Softmax cross-entropy, torch's: input (N, C) logits (or (C,), or (N, C, d1, ...)); target class ids (N,)
    (or (), (N, d1, ...)) or class probabilities of the input's shape. ``weight`` (C,) scales each class,
    ``ignore_index`` drops rows (the mean divides by the summed weights of the rest), ``label_smoothing`` mixes the
    uniform distribution into the target. Class ids run the fused kernel (one launch forward, one backward)."""
    reduction = _reduction(reduction, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    C = input.shape[min(1, input.ndim - 1)] if input.ndim else 1
    w = _class_weight(weight, input, C, "cross_entropy")
    if isinstance(target, Tensor) and target.dtype.kind in "fV" and tuple(target.shape) == tuple(input.shape):
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return _probability_xent(input, target, weight, reduction, label_smoothing)
    rows, t, shape = _class_targets(input, target, "cross_entropy")
    loss = CrossEntropy.apply(rows, target=t, reduction=reduction, weight=w, ignore_index=int(ignore_index),
                              smoothing=float(label_smoothing))
    return loss.reshape(shape) if reduction == "none" and tuple(shape) != tuple(loss.shape) else loss


def _probability_xent(input, target, weight, reduction, smoothing):
    """-Σ_c w_c target_c log_softmax(input)_c over the class axis (1, or 0 for a (C,) input); the mean is over the
    other elements (torch's), whatever the weights."""
    dim = min(1, input.ndim - 1)
    C = input.shape[dim]
    if smoothing:
        target = target * (1 - smoothing) + smoothing / C
    terms = input.log_softmax(dim) * target
    if weight is not None:
        terms = terms * weight.reshape((C,) + (1,) * (input.ndim - dim - 1))
    return _reduce(-terms.sum(dim), reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-w[t_i] input[i, t_i] for log-probabilities ``input`` (N, C) (or (C,), (N, C, d1, ...)); rows whose target is
    ``ignore_index`` count 0, and the mean divides by the summed weights of the others, as torch."""
    reduction = _reduction(reduction, size_average, reduce)
    rows, t, shape = _class_targets(input, target, "nll_loss")
    w = _class_weight(weight, input, rows.shape[1], "nll_loss")
    xp = input._backend.xp
    with on(input._backend):
        ignored = t == ignore_index
        ids = xp.where(ignored, 0, t)
        deferred.check_range(ids, rows.shape[1], IndexError, "nll_loss: Target {bad} is out of bounds (for "
                             f"{rows.shape[1]} classes).")
        rw = xp.where(ignored, 0, 1 if w is None else w[ids]).astype(input.dtype)
    loss = NllLoss.apply(rows, ids=ids, rw=rw, reduction=reduction, ignored=ignored)
    return loss.reshape(shape) if reduction == "none" and tuple(shape) != tuple(loss.shape) else loss


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-w (t log x + (1 - t) log(1 - x)), each log clamped at -100 (torch's); x probabilities in [0, 1]."""
    reduction = _reduction(reduction, size_average, reduce)
    _same_shape(input, target, "binary_cross_entropy", ValueError)
    return _pointwise_loss(BinaryCrossEntropy, input, target, reduction, weight)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """(1 - t) x + (1 + (p - 1) t) softplus(-x) per element (p = pos_weight, broadcast over the last axis), times
    weight: BCE of sigmoid(x), computed stably from the logits in one op (torch's grad_fn and gradients)."""
    reduction = _reduction(reduction, size_average, reduce)
    if tuple(getattr(target, "shape", ())) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as input size ({input.shape})")
    pos_weight = None if pos_weight is None else as_operand(pos_weight, input).detach()._data
    return _pointwise_loss(BinaryCrossEntropyWithLogits, input, target, reduction, weight, pos_weight=pos_weight)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """(input - target)^2, reduced by mean (default), sum or none."""
    reduction = _reduction(reduction, size_average, reduce)
    _same_shape(input, target, "mse_loss")
    return _pointwise_loss(MseLoss, input, target, reduction, weight)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """|input - target|, reduced by mean (default), sum or none."""
    reduction = _reduction(reduction, size_average, reduce)
    _same_shape(input, target, "l1_loss")
    d = (input - target).abs()
    return _reduce(d if weight is None else d * weight, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d² / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta = 0 is the L1 loss."""
    reduction = _reduction(reduction, size_average, reduce)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _same_shape(input, target, "smooth_l1_loss")
    if beta == 0:
        return l1_loss(input, target, reduction=reduction)
    return _pointwise_loss(SmoothL1Loss, input, target, reduction, beta=float(beta))


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """0.5 d² where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target)."""
    reduction = _reduction(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _same_shape(input, target, "huber_loss")
    return _pointwise_loss(HuberLoss, input, target, reduction, weight, delta=float(delta))


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target (log target - input) for log-probabilities ``input`` (0 where target is 0); reduction 'batchmean'
    divides the sum by the batch size (the KL divergence), 'mean' by the element count (with torch's warning)."""
    reduction = _reduction(reduction, size_average, reduce, extra=("batchmean",))
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    if log_target:
        loss = target.exp() * (target - input)
    else:  # torch's xlogy(t, t) - t input: t log t, 0 at t = 0 (no 0 * -inf), NaN for t < 0
        t = target if isinstance(target, Tensor) else as_operand(target, input)
        # NOTE: the NaN is a constant: t * NaN would send NaN * 0 back to every target (where's zero gradient for the
        # branch it did not take, times NaN), which made every target's gradient NaN
        xlogy = _where(t._data < 0, float("nan"), t * _where(t._data > 0, t, 1.0).log())
        loss = xlogy - t * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


def token_logprob(logits, ids):
    """log_softmax(logits)[i, ids[i]] for each row, fused (the per-token score of a sequence)."""
    return TokenLogProb.apply(logits, target=_index_array(ids, logits, "token_logprob"))


# ---- normalization and embeddings -------------------------------------------------------------------------------
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing ``normalized_shape`` axes (biased var)."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    x = input
    if not ns or len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ValueError(f"layer_norm: normalized_shape {ns} does not match the trailing axes of input {x.shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != ns:
            raise ValueError(f"layer_norm: {name} has shape {t.shape}, expected normalized_shape {ns}")
    return _LayerNorm.apply(x, weight, bias, n=_prod(ns), eps=float(eps))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias per channel (axis 1), over the batch and any trailing axes.

    Training: the batch's mean and biased variance, and the running statistics (if given) move towards them in
    place, running = (1 - momentum) running + momentum batch, with the unbiased variance (as torch). Otherwise
    the running statistics normalize."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got {tuple(input.shape)}")
    axes, shape = (0,) + tuple(range(2, input.ndim)), (1, input.shape[1]) + (1,) * (input.ndim - 2)
    if training:
        n = input.numel() // max(input.shape[1], 1)
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        mean, var = input.mean(axes), input.var(axes, correction=0)
        with no_grad():
            for run, stat in ((running_mean, mean), (running_var, var * (n / (n - 1)))):
                if run is not None:
                    run.mul_(1 - momentum).add_(stat.detach().to(dtype=run.dtype) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are needed when not training")
        mean, var = running_mean, running_var
    y = (input - mean.reshape(shape)) * (var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    y = y + bias.reshape(shape) if bias is not None else y
    return named(y, "NativeBatchNormBackward0")  # torch's one node for the whole composition


def embedding(input, weight, padding_idx=None):
    """weight[input]: rows of the (num, dim) table for integer ids of any shape (output: ids.shape + (dim,))."""
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    ids = _index_array(input, weight, "embedding")
    return _Embedding.apply(weight, ids=ids, padding_idx=padding_idx)
