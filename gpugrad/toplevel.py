"""torch's top-level functions: ``gpugrad.sum``, ``gpugrad.cat``, ``gpugrad.sin``, ... with ``out=``.

They are the registered frontends and composites that torch offers as functions (``core/registry.py``), the Tensor
methods that torch mirrors as functions, and torch's aliases. ``gpugrad/__init__.py`` exports ``FUNCTIONS``.
"""
from __future__ import annotations

from gpugrad import return_types
from gpugrad._tensor import Tensor
from gpugrad.core.registry import FRONTENDS
from gpugrad.core.tensor import TensorBase
from gpugrad.nn import functional as F
from gpugrad.ops.declarations import POINTWISE

# Tensor methods written in gpugrad/methods/ that torch also has as functions (torch.argmax(x), torch.eq(a, b), ...).
MIRRORED = ("argmax", "argmin", "all", "any", "count_nonzero", "square", "eq", "ne", "lt", "le", "gt", "ge", "isnan",
            "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not", "logical_and", "logical_or",
            "logical_xor", "numel", "broadcast_to", "detach", "detach_", "clip", "clamp_min", "clamp_max", "clamp_",
            "clamp_min_", "clamp_max_", "clip_", "abs_", "neg_", "fill_", "zero_", "get_device")
ALIASES = {"concat": "cat", "concatenate": "cat", "negative": "neg", "absolute": "abs", "arcsin": "asin",
           "arccos": "acos", "arctan": "atan"}


def _mirror(name, number_input=False):
    method = getattr(Tensor, name)

    def f(input, *args, **kwargs):
        if not number_input and not isinstance(input, TensorBase):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
        return method(input, *args, **kwargs)

    f.__name__, f.__qualname__, f.__doc__ = name, name, method.__doc__
    return f


def dropout(input, p=0.5, train=True):
    """torch.dropout: ``nn.functional.dropout(input, p, training=train)``."""
    return F.dropout(input, p, train)


def _functions():
    out = {}
    for front in FRONTENDS.values():
        if not front.function:
            continue
        # A function-only frontend (cat, einsum, where) takes its own arguments; a method's input must be a Tensor.
        out[front.name] = front.fn if not front.method or front.number_input else _mirror(front.name)
        if front.inplace and front.name in POINTWISE:  # torch.sin_(x), torch.relu_(x)
            out[front.name + "_"] = _mirror(front.name + "_")
    for name in MIRRORED:
        out[name] = _mirror(name)
    for alias, name in ALIASES.items():
        out[alias] = out[name]
    out["dropout"] = dropout
    return out


def _write(out, result, name):
    """torch's ``out=``: the result written into ``out`` (resized if its shape differs), which is returned."""
    if isinstance(result, tuple):  # (values, indices) as torch.return_types.max_out
        kind = getattr(return_types, type(result).__name__ + "_out", type(result))
        return kind(_write(o, r, name) for o, r in zip(out, result))
    if result.requires_grad:
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad. Call it without out=, or under no_grad().")
    if out.shape == result.shape:
        return out.copy_(result)
    out.data = result
    return out


def _with_out(name, f):
    def g(*args, out=None, **kwargs):
        result = f(*args, **kwargs)
        return result if out is None else _write(out, result, name)

    g.__name__, g.__qualname__, g.__doc__, g.__wrapped__ = name, name, f.__doc__, f
    return g


FUNCTIONS = {name: _with_out(name, f) for name, f in _functions().items()}
