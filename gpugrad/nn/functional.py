"""``gpugrad.nn.functional``: the functions layers are made of.  Compositions get no op class of their own."""
from __future__ import annotations

from math import prod as _prod

from gpugrad.ops.activation import POINTWISE_OPS, BiasAct, Dropout
from gpugrad.ops.declarations import ACTIVATIONS
from gpugrad.ops.loss import CrossEntropy, TokenLogProb
from gpugrad.ops.matmul import Linear
from gpugrad.ops.norm import Embedding as _Embedding, LayerNorm as _LayerNorm
import numpy as np

from gpugrad.backend import on
from gpugrad.random import generator
from gpugrad._tensor import Tensor, _index_array



def _activation(name):
    """F.<name>(input, *params, inplace=False), generated from the op's declaration (ops/declarations.py)."""
    method, in_place = getattr(Tensor, name), getattr(Tensor, name + "_")

    def f(input, *args, inplace=False, **kwargs):
        return (in_place if inplace else method)(input, *args, **kwargs)

    f.__name__, f.__doc__ = name, method.__doc__
    return f


globals().update({n: _activation(n) for n, op in POINTWISE_OPS.items() if op.decl.functional and n != "gelu"})


def gelu(x, approximate="tanh"):
    if approximate != "tanh":
        raise NotImplementedError("gelu: only approximate='tanh' is implemented")
    return x.gelu()


def softmax(x, axis=-1):
    return x.softmax(axis)


def log_softmax(x, axis=-1):
    return x.log_softmax(axis)


def logsumexp(x, axis=-1, keepdims=False):
    return x.logsumexp(axis, keepdims)


def linear(x, weight, bias=None):
    """y = x @ weightᵀ + bias, weight (out, in)."""
    return Linear.apply(x, weight, bias) if bias is not None else Linear.apply(x, weight)


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


def dropout(x, p=0.5, training=True):
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training."""
    if not 0.0 <= p < 1.0:
        if p == 1.0 and training:
            return x * 0.0
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout: probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    # NOTE: generators draw float32/float64 only; float16 inputs draw float32 (Dropout compares u in its dtype).
    with on(x._backend):
        u = generator(x._backend).random(x.shape, dtype=x.dtype if x.dtype.itemsize >= 4 else np.float32)
    return Dropout.apply(x, p=p, u=u)


def _target(target, logits, op):
    return _index_array(target, logits, op)


def cross_entropy(logits, target, reduction="mean"):
    """Softmax cross-entropy with integer class targets (N,) for logits (N, C); reduction mean | sum | none."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return CrossEntropy.apply(logits, target=_target(target, logits, "cross_entropy"), reduction=reduction)


def token_logprob(logits, ids):
    """log_softmax(logits)[i, ids[i]] for each row, fused (the per-token score of a sequence)."""
    return TokenLogProb.apply(logits, target=_target(ids, logits, "token_logprob"))


def mse_loss(input, target, reduction="mean"):
    """mean (or sum, or none) of (input - target)^2."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if input.shape != getattr(target, "shape", input.shape):
        raise ValueError(f"mse_loss: input {input.shape} and target {target.shape} must have the same shape")
    err = (input - target) * (input - target)
    return {"mean": err.mean, "sum": err.sum, "none": lambda: err}[reduction]()




def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing ``normalized_shape`` axes (biased var)."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not ns or len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ValueError(f"layer_norm: normalized_shape {ns} does not match the trailing axes of input {x.shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != ns:
            raise ValueError(f"layer_norm: {name} has shape {t.shape}, expected normalized_shape {ns}")
    return _LayerNorm.apply(x, weight, bias, n=_prod(ns), eps=float(eps))


def embedding(input, weight, padding_idx=None):
    """weight[input]: rows of the (num, dim) table for integer ids of any shape (output: ids.shape + (dim,))."""
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    ids = _index_array(input, weight, "embedding")
    return _Embedding.apply(weight, ids=ids, padding_idx=padding_idx)
