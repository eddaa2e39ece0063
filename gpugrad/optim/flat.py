"""Flat buffers: every parameter's data and gradient as views into one contiguous buffer per (device, dtype).

Then zeroing all gradients is one ``fill`` and an optimizer step is one fused kernel launch over the buffer
instead of one per parameter.  The gradient views are created up front as each parameter's ``.grad``: the
engine accumulates into an existing leaf ``.grad`` in place, so backward writes straight into the flat buffer
(a parameter whose ``.grad`` were None would instead get a fresh array of its own).

>>> flat = flatten_parameters(model)            # parameters keep their identity; only .data/.grad move
>>> loss.backward(); flat.zero_grad()           # one fill per buffer
"""
from __future__ import annotations

from typing import NamedTuple

from gpugrad.backend import on
from gpugrad._tensor import Tensor


class Slot(NamedTuple):
    """Where one parameter lives: buffer ``key``, elements [start, stop), its data view and grad Tensor."""
    key: tuple
    start: int
    stop: int
    data: object
    grad: Tensor


class Segment(NamedTuple):
    """A run of parameters that occupy [start, stop) of buffer ``key`` back to back."""
    key: tuple
    start: int
    stop: int
    params: list


class FlatParams:
    """The buffers of :func:`flatten_parameters`: ``buffers[(device, dtype)] = (data, grad)`` (1-D arrays),
    ``slots[param]`` = its :class:`Slot`."""

    def __init__(self, params):
        self.buffers, self.slots, self._backends = {}, {}, {}
        # A gradient view that no backward wrote into since zero_grad(set_to_none=True) stands for "no gradient"
        # (None in the non-flat path): such parameters are skipped by steps, as torch skips None gradients.
        self._none_if_untouched, self._zeroed_at = True, {}
        by_key = {}
        for p in dict.fromkeys(params):  # identity-deduplicated (tied weights), order kept
            if p.requires_grad:  # frozen parameters keep their own buffers and are never stepped
                by_key.setdefault((p.device, p.dtype), []).append(p)
        for key, ps in by_key.items():
            be = self._backends[key] = ps[0]._backend
            with on(be):
                self._fill(key, be, ps)

    def _fill(self, key, be, ps):
        total = sum(p.numel() for p in ps)
        data, grad = be.xp.empty(total, dtype=key[1]), be.xp.zeros(total, dtype=key[1])
        start = 0
        for p in ps:
            stop = start + p.numel()
            dv, gv = data[start:stop].reshape(p.shape), grad[start:stop].reshape(p.shape)
            dv[...] = p._data
            had_grad = p._grad is not None
            if had_grad:
                gv[...] = p._grad._data
            p.data = dv  # same Parameter object, new home: optimizers and modules keep their references
            gt = p._grad = Tensor._wrap(gv, be)
            self.slots[p] = Slot(key, start, stop, dv, gt)
            if not had_grad:
                self._zeroed_at[p] = gt._version
            start = stop
        self.buffers[key] = (data, grad)

    def zero_grad(self, set_to_none=True):
        """Zero every gradient: one fill per buffer; a parameter whose ``.grad`` was dropped or replaced gets
        its view back.  With ``set_to_none`` a view that no backward writes into counts as no gradient."""
        for key, (_, grad) in self.buffers.items():
            with on(self._backends[key]):
                grad.fill(0)
        self._none_if_untouched = set_to_none
        for p, s in self.slots.items():
            if p._grad is not s.grad:
                p._grad = s.grad
            s.grad._version_counter[0] += 1
            self._zeroed_at[p] = s.grad._version

    def received(self, p):
        """Whether p has a gradient to step with (the engine bumps the view's version when it accumulates)."""
        s = self.slots.get(p)
        if s is None or p._grad is not s.grad:
            return p._grad is not None
        return not self._none_if_untouched or s.grad._version != self._zeroed_at.get(p)

    def attach_grad(self, p):
        """Make sure p's data and grad are its views (copying a foreign gradient in); False if p has no
        gradient or no longer lives in the buffer (its ``.data`` was replaced, e.g. by ``Module.to``)."""
        s = self.slots.get(p)
        if s is None or p._data is not s.data or not self.received(p):
            return False
        if p._grad is not s.grad:
            s.grad._data[...] = p._grad._data
            s.grad._version_counter[0] += 1  # it holds a gradient now: received() must keep saying so
            p._grad = s.grad
        return True

    def segments(self, params):
        """``params`` as maximal runs of neighbours in the buffers (one run per buffer when laid out in order)."""
        runs, order = [], {k: i for i, k in enumerate(self.buffers)}
        flat = [p for p in dict.fromkeys(params) if p in self.slots]
        for p in sorted(flat, key=lambda p: (order[self.slots[p].key], self.slots[p].start)):
            s = self.slots[p]
            last = runs[-1] if runs else None
            if last is not None and last.key == s.key and last.stop == s.start:
                runs[-1] = Segment(s.key, last.start, s.stop, last.params + [p])
            else:
                runs.append(Segment(s.key, s.start, s.stop, [p]))
        return runs


def flatten_parameters(module_or_params):
    """Re-home the parameters of a Module (or an iterable of Tensors) into flat buffers; returns FlatParams.

    Values and existing gradients are copied once; afterwards ``p.data`` and ``p.grad.data`` are views.
    Moving the parameters later (``Module.to``) takes them out of the buffers again.
    """
    params = module_or_params.parameters() if hasattr(module_or_params, "parameters") else module_or_params
    params = list(params)
    if not params:
        raise ValueError("flatten_parameters: no parameters given")
    return FlatParams(params)
