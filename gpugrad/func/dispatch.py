"""The batching layer: ``Op.apply`` calls :func:`dispatch` for every op while a vmap runs (``core/batching.py``).

It finds the op's batched inputs (BatchedTensor arguments, and SampleArrays that a frontend put into the op's keyword
parameters: ``where``'s condition, ``gather``'s index), then runs the op's batching rule (``rules.py``) on their
values, or, where the op has none, the op once per sample with the results stacked, saying once that it is slow.
"""
from __future__ import annotations

import itertools
import math

from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import TensorBase
from gpugrad.func.batched import BatchedTensor, SampleArray, aligned, batched, full, merge, sizes
from gpugrad.func.levels import check_alive, warn_once
from gpugrad.func.rules import rule_for


class Call:
    """One op call with batched inputs: the op, its arguments, its parameters and the levels they are batched at
    (``k`` leading batch dims in every aligned value)."""

    __slots__ = ("args", "batched_params", "cls", "k", "levels", "params", "sizes")

    def __init__(self, cls, args, params, levels, batched_params):
        self.cls, self.args, self.params, self.levels = cls, args, params, levels
        self.k, self.sizes, self.batched_params = len(levels), sizes(levels), batched_params

    @property
    def name(self):
        return self.cls.op_name or self.cls.__name__

    def is_batched(self, i):
        return type(self.args[i]) is BatchedTensor

    def value(self, i):
        """Argument i: a batched one as its value aligned to the call's levels (size 1 where it is not batched)."""
        a = self.args[i]
        return aligned(a, self.levels) if type(a) is BatchedTensor else a

    def full(self, i):
        """Argument i with every batch dim at full size (a plain tensor is expanded too)."""
        a = self.args[i]
        return full(a, self.levels) if isinstance(a, TensorBase) else a

    def param(self, name):
        """A parameter: a batched array aligned as ``value`` aligns tensors, anything else as given."""
        v = self.params.get(name)
        return aligned(v.owner, self.levels)._data if type(v) is SampleArray else v

    def apply(self, *args, **params):
        return self.cls.apply(*args, **{**self.params, **params})

    def wrap(self, value):
        """The op's result over the whole batch (k leading dims) as a batched tensor."""
        lead = tuple(value.shape[:self.k])
        if lead != self.sizes:
            if any(n not in (1, s) for n, s in zip(lead, self.sizes)):
                raise RuntimeError(f"vmap: the batching rule of {self.name} gave batch dims {lead}, expected "
                                   f"{self.sizes}")
            value = value.expand(*self.sizes, *value.shape[self.k:])
        return batched(self.levels, value)


def _batched_param(v):
    return type(v) is SampleArray or type(v) is tuple and any(type(x) is SampleArray for x in v)


def _owners(v):
    return (v.owner,) if type(v) is SampleArray else tuple(x.owner for x in v if type(x) is SampleArray)


def dispatch(cls, args, params):
    """The op's result if an input is batched, else None (the op then runs as usual)."""
    levels = ()
    for a in args:
        if type(a) is BatchedTensor:
            levels = merge(levels, a._levels)
    names = ()
    if params:
        for name, v in params.items():
            if _batched_param(v):
                names += (name,)
                for owner in _owners(v):
                    levels = merge(levels, owner._levels)
    if not levels:
        return None
    check_alive(levels)
    call = Call(cls, args, params, levels, names)
    rule = rule_for(cls)
    if rule is not None and set(names) <= set(rule.batched_params):
        out = rule(call)
        if out is not None:
            return out
    return per_sample(call)


def _index(value, k, idx):
    """The sample ``idx`` of an aligned value (index 0 along its size-1 batch dims)."""
    return value[tuple(i if n != 1 else 0 for i, n in zip(idx, value.shape[:k]))]


def _sample_param(call, v, idx):
    if type(v) is SampleArray:
        return _index(aligned(v.owner, call.levels)._data, call.k, idx)
    if type(v) is tuple and any(type(x) is SampleArray for x in v):
        return tuple(_sample_param(call, x, idx) for x in v)
    return v


def per_sample(call):
    """The fallback: the op once per sample (a loop over every batch dim), the results stacked."""
    warn_once(("op", call.name), f"vmap: there is no batching rule for {call.name} here; it runs once per sample, "
              "which is slow")
    if not math.prod(call.sizes):
        raise RuntimeError(f"vmap: {call.name} has no batching rule, and a batch of size 0 has no sample to run it on")
    values = [call.value(i) if call.is_batched(i) else a for i, a in enumerate(call.args)]
    outs = []
    for idx in itertools.product(*map(range, call.sizes)):
        args = [_index(v, call.k, idx) if call.is_batched(i) else v for i, v in enumerate(values)]
        params = {n: _sample_param(call, v, idx) for n, v in call.params.items()} if call.batched_params \
            else call.params
        outs.append(call.cls.apply(*args, **params))
    out = REGISTRY["stack"].apply(*outs, axis=0)
    return call.wrap(out.reshape(*call.sizes, *out.shape[1:]))
