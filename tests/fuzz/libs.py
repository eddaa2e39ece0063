"""The two libraries the fuzzer runs every step in, spelled once: ``G`` (gpugrad) and ``T`` (torch).

A step is ``fn(lib, *args)`` with lib one of these classes: calls that both libraries spell the same (Tensor methods,
``lib.m.<function>``, ``lib.F.<function>``) need nothing here; the few spellings that differ are static methods.
"""
from __future__ import annotations

import numpy as np

import gpugrad
import gpugrad.autograd.forward_ad as gfw
import gpugrad.autograd.functional as gaf
import gpugrad.nn.functional as gF
from gpugrad.backend import reference as R
from gpugrad.ops.activation import POINTWISE_OPS, Dropout
from gpugrad.ops.convert import ToDevice

try:
    import torch
    import torch.autograd.forward_ad as tfw
    import torch.autograd.functional as taf
    import torch.nn.functional as tF
except ImportError:  # the oracle is optional: the fuzzer's tests skip
    torch = tfw = taf = tF = None


def np_dtype(t):
    """A torch tensor's NumPy dtype."""
    return torch.empty((), dtype=t.dtype).numpy().dtype


class _Spelled:
    """What both libraries spell alike, through the library's module ``m`` and its ``nn.functional`` ``F``."""

    @classmethod
    def leaf(cls, a, requires_grad):
        return cls.m.tensor(a, requires_grad=requires_grad)

    @classmethod
    def const(cls, a):
        return cls.m.tensor(a)

    @classmethod
    def cat(cls, xs, axis):
        return cls.m.cat(xs, axis)

    @classmethod
    def stack(cls, xs, axis):
        return cls.m.stack(xs, axis)

    @classmethod
    def where(cls, c, a, b):
        return cls.m.where(c, a, b)

    @classmethod
    def no_grad(cls):
        return cls.m.no_grad()

    @classmethod
    def grad(cls, *args, **kw):
        return cls.m.autograd.grad(*args, **kw)

    @classmethod
    def cross_entropy(cls, x, t, reduction):
        return cls.F.cross_entropy(x, t, reduction=reduction)

    @classmethod
    def mse_loss(cls, a, b, reduction):
        return cls.F.mse_loss(a, b, reduction=reduction)

    @classmethod
    def layer_norm(cls, x, w, b):
        return cls.F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)

    @classmethod
    def embedding(cls, ids, w):
        return cls.F.embedding(ids, w)

    @classmethod
    def linear(cls, x, w, b):
        return cls.F.linear(x, w, b)

    @staticmethod
    def var(x, axis, keepdims, c):
        return x.var(axis, keepdim=keepdims, correction=c)

    @staticmethod
    def std(x, axis, keepdims, c):
        return x.std(axis, keepdim=keepdims, correction=c)


class G(_Spelled):
    """gpugrad."""
    name = "gpugrad"
    m, F, fw, AF = gpugrad, gF, gfw, gaf
    Tensor = gpugrad.Tensor

    gelu = staticmethod(lambda x, approximate="tanh": x.gelu(approximate=approximate))
    token_logprob = staticmethod(lambda x, t: gF.token_logprob(x, t))
    bias_act = staticmethod(lambda x, b, act: gF.bias_act(x, b, act))
    # the op of a device move, here CPU to CPU (where it passes the array on): a copy, as torch's .to(copy=True)
    to_device = staticmethod(lambda x: ToDevice.apply(x, source=x._backend, target=x._backend).clone())

    @staticmethod
    def pointwise(name, x, *params):
        """A declared pointwise op (ops/declarations.py) by its registered name: its Tensor method where it has one."""
        if name == "gelu":
            return x.gelu(approximate="tanh")
        if hasattr(gpugrad.Tensor, name):
            return getattr(x, name)(*params)
        return POINTWISE_OPS[name].apply(x, **dict(zip((p for p, _ in POINTWISE_OPS[name].decl.params), params)))

    @staticmethod
    def pointwise_(name, x, *params):
        if name == "gelu":
            return x.gelu_(approximate="tanh")
        return getattr(x, name + "_")(*params)

    @staticmethod
    def dropout(x, p, u):
        return Dropout.apply(x, p=p, u=x._backend.asarray(u, x.dtype))


def _torch_pointwise(name):
    """torch's spelling of a declared pointwise op: the Tensor method where torch has one, else nn.functional."""
    if name == "gelu":
        return lambda x: tF.gelu(x, approximate="tanh")
    if name == "gelu_erf":
        return lambda x: tF.gelu(x)
    if hasattr(torch.Tensor, name):
        return lambda x, *p: getattr(x, name)(*p)
    return lambda x, *p: getattr(tF, name)(x, *p)


class T(_Spelled):
    """torch: the same steps."""
    name = "torch"
    m, F, fw, AF = torch, tF, tfw, taf
    Tensor = torch.Tensor if torch else None

    gelu = staticmethod(lambda x, approximate="tanh": tF.gelu(x, approximate=approximate))
    token_logprob = staticmethod(lambda x, t: torch.log_softmax(x, -1).gather(1, t[:, None])[:, 0])
    to_device = staticmethod(lambda x: x.to("cpu", copy=True))

    @staticmethod
    def bias_act(x, b, act):  # torch has no fused op: the activation of x + b
        return x + b if act == "identity" else _torch_pointwise(act)(x + b)

    @staticmethod
    def pointwise(name, x, *params):
        return _torch_pointwise(name)(x, *params)

    @staticmethod
    def pointwise_(name, x, *params):
        if hasattr(torch.Tensor, name + "_"):
            return getattr(x, name + "_")(*params)
        return x.copy_(_torch_pointwise(name)(x, *params))  # F.silu_ and the like do not exist: the same write

    @staticmethod
    def dropout(x, p, u):  # torch's native_dropout: input * mask * scale, the mask drawn in x's dtype
        mask = u.astype(np_dtype(x)) >= np_dtype(x).type(p)
        return x * torch.tensor(mask) * (1.0 / (1.0 - p))


def in_place_name(name):
    """Whether torch spells ``x.<name>_()`` for a declared pointwise op (else T.pointwise_ writes with copy_)."""
    return torch is not None and hasattr(torch.Tensor, name + "_")


__all__ = ["G", "T", "R", "np", "np_dtype", "torch", "tF", "in_place_name"]
