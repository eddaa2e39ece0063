"""Tangents of op outputs (forward-mode AD): ``Op.apply`` calls :func:`propagate` while a dual level is active.

Every op gets its output's tangent from its inputs' tangents by its JVP: pointwise ops run the same ``g * f'``
formula (and CUDA kernel) as their VJP with g = the tangent; linear ops apply themselves to the tangents; the rest
have a hand-written ``jvp`` beside their ``backward``.  A tangent is a Tensor; when the inputs or tangents require
grad, the JVP is computed with recorded Tensor ops, so reverse mode over forward mode gives Hessian-vector products.
"""
from __future__ import annotations

from gpugrad.core import tensor_xp
from gpugrad.core.forward_state import STATE, pause, set_tangent
from gpugrad.core.grad_mode import STATE as _GRAD, no_grad
from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import TensorBase, make


def propagate(fn, args, datas, result, params):
    """Give ``result`` (the output of op instance ``fn`` on ``args`` with keyword ``params``) its tangent, if an
    input has one."""

    tangents = [a._fw_grad if isinstance(a, TensorBase) else None for a in args]
    if STATE.batch is not None:
        tangents = [_batched_view_tangent(a) if t is not None and a._base is not None else t
                    for a, t in zip(args, tangents)]
    if all(t is None for t in tangents) or result._data.dtype.kind not in "fV":
        return
    differentiable = _GRAD.enabled and any(
        (isinstance(a, TensorBase) and a._requires_grad) or (t is not None and t._requires_grad)
        for a, t in zip(args, tangents))
    if STATE.batch is not None:
        if fn.linear and not fn.batched_jvp:
            with pause():
                out = fn.jvp_batched([t if t is not None else _zeros(a) for a, t in zip(args, tangents)], result,
                                     STATE.batch)
            if out is not None:
                return _finish(result, out)
        if not fn.batched_jvp:  # one direction at a time, stacked
            return _per_direction(fn, args, datas, result, params, tangents)
        # (B, *shape) tangents of inputs with fewer axes than the output: their B axis first, then size-1 axes, so
        # they broadcast against the other inputs and the output as their primals do
        with pause():
            tangents = [t if t is None or a.ndim >= result.ndim else
                        t.reshape((STATE.batch,) + (1,) * (result.ndim - a.ndim) + tuple(a.shape))
                        for a, t in zip(args, tangents)]
    was, STATE.paused = STATE.paused, True
    try:
        if fn.linear:
            out = _linear_jvp(type(fn), args, tangents, params, differentiable)
        elif differentiable:  # recorded Tensor ops: reverse mode can differentiate the tangent (Hessian products)

            with tensor_xp.on_device(result._backend):
                out = fn.jvp(tensor_xp, tuple(args), result, tangents)
        else:  # arrays and fast paths (the *_bwd kernels on CUDA)
            be = result._backend
            jvp = getattr(fn, "jvp_" + be.name, None) or fn.jvp
            arrays = [t._data if t is not None else None for t in tangents]
            if be.device_scope is None:
                out = jvp(be.xp, tuple(datas), result._data, arrays)
            else:
                with be.device_scope:
                    out = jvp(be.xp, tuple(datas), result._data, arrays)
            out = make(be.as_array(out), be)
    finally:
        STATE.paused = was
    _finish(result, out)


def _finish(result, out):
    if out is None:
        return
    shape = tuple(result.shape) if STATE.batch is None else (STATE.batch, *result.shape)
    if tuple(out.shape) != shape:  # a broadcast input's tangent: the output's shape, as torch
        with pause():
            out = out.expand(shape) * 1
    if out.dtype != result.dtype:
        out = out.to(dtype=result.dtype)
    set_tangent(result, out)
    if result._grad_fn is not None:  # the node keeps it too: a VJP on Tensors that rebuilds the node's output
        set_tangent(result._grad_fn, out)  # (tensor_xp.output_of) must carry it (forward over reverse)


def _zeros(a):

    if not isinstance(a, TensorBase):
        return a
    return make(a._backend.xp.zeros((STATE.batch, *a.shape), dtype=a._data.dtype), a._backend)


def _batched_view_tangent(view):
    """A view's batched tangent, re-read from its base's (B, ...) tangent: it is a stacked copy, not a view, so a later
    in-place change of the base would otherwise leave it stale."""

    base = view._base
    if view._view_fn is None or base._fw_grad is None:
        return view._fw_grad
    xp = base._backend.xp
    view._fw_grad = make(xp.stack([view._view_fn(t) for t in base._fw_grad._data]), base._backend)
    return view._fw_grad


def _per_direction(fn, args, datas, result, params, tangents):
    """Batched tangents through an op whose JVP takes one direction: run it for each of the B directions (the primal
    values are still computed once) and stack the results."""

    b, outs = STATE.batch, []
    STATE.batch = None
    try:
        for i in range(b):
            for a, t in zip(args, tangents):
                if isinstance(a, TensorBase):
                    with pause():
                        a._fw_grad = t[i] if t is not None else None
            propagate(fn, args, datas, result, params)
            outs.append(result._fw_grad)
    finally:
        STATE.batch = b
        for a, t in zip(args, tangents):
            if isinstance(a, TensorBase):
                a._fw_grad = t
    result._fw_grad = None
    with pause():
        _finish(result, REGISTRY["stack"].apply(*[o if o is not None else result.detach() * 0 for o in outs], axis=0))


def write_tangent(tensor, new):
    """``tensor`` was changed in place and its new values have tangent ``new`` (None: zero). The tangent is written
    into the existing tangent buffer, so views of it (the tangents of views of ``tensor``) see the change, as in
    torch; a view without a tangent writes into its base's (created as zeros if needed)."""

    if STATE.level is None:
        return
    old = tensor._fw_grad
    if (new is not None and new._requires_grad) or (old is not None and old._requires_grad):
        if new is not None:  # a tangent with a graph of its own is rebound, not overwritten
            set_tangent(tensor, new)
        return
    xp, batch = tensor._backend.xp, STATE.batch
    if batch is not None and tensor._base is not None and tensor._view_fn is not None:
        old = None  # a view's batched tangent is a stacked copy, not a view: write through to the base's
    if old is None and tensor._base is not None and tensor._view_fn is not None:
        base = tensor._base
        if base._fw_grad is None:
            shape = base._data.shape if batch is None else (batch, *base._data.shape)
            set_tangent(base, make(xp.zeros(shape, dtype=base._data.dtype), base._backend))
        if batch is None:
            old = make(tensor._view_fn(base._fw_grad._data), tensor._backend)
        else:  # one view per direction: written into each, and the view keeps its own (B, ...) copy
            for i in range(batch):
                tensor._view_fn(base._fw_grad._data[i])[...] = 0 if new is None else new._data[i]
            old = None
        if old is not None:
            set_tangent(tensor, old)
    if old is None:
        set_tangent(tensor, new if new is not None else make(xp.zeros_like(tensor._data), tensor._backend))
    elif new is None:
        old._data[...] = 0
    else:
        old._data[...] = new._data


def _linear_jvp(cls, args, tangents, params, differentiable):
    """A linear op's JVP is the op itself applied to the tangents (zeros for an input without one; 0 for a Python
    number, which only shifts a linear op: add, sub, where, fill)."""

    ins = []
    for a, t in zip(args, tangents):
        if t is not None:
            ins.append(t)
        elif isinstance(a, TensorBase):
            ins.append(a.detach() * 0 if a._data.dtype.kind in "fV" else a)
        else:
            ins.append(0 if isinstance(a, (int, float)) and not isinstance(a, bool) else a)
    if differentiable:
        return cls.apply(*ins, **params)

    with no_grad():
        return cls.apply(*ins, **params)
