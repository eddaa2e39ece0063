"""Where ``gpugrad.func.vmap`` hooks into the layers below it (which must not import it).

While a vmap is active, ``Op.apply`` hands every op to ``STATE.dispatch`` first: it returns the op's result when an
input is a batched tensor (its batching rule, or a loop over the samples), and None to let the op run as usual. Every
random draw (``random.generator``) calls ``STATE.on_random`` first, which applies vmap's ``randomness=`` (raise for
"error", nothing for "same", a per-sample run for "different"), and a custom ``autograd.Function`` calls
``STATE.on_function`` (its node cannot record a batched graph: a per-sample run where one is needed). All are None
outside vmap.
"""
from __future__ import annotations


class _State:
    dispatch = None
    on_random = None
    on_function = None


STATE = _State()
