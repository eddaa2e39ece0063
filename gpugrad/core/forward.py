"""Tangents of op outputs (forward-mode AD): ``Op.apply`` calls :func:`propagate` while a dual level is active.

Every op gets its output's tangent from its inputs' tangents by its JVP: pointwise ops run the same ``g * f'``
formula (and CUDA kernel) as their VJP with g = the tangent; linear ops apply themselves to the tangents; the rest
have a hand-written ``jvp`` beside their ``backward``.  A tangent is a Tensor; when the inputs or tangents require
grad, the JVP is computed with recorded Tensor ops, so reverse mode over forward mode gives Hessian-vector products.
"""
from __future__ import annotations

from gpugrad.backend import on
from gpugrad.core import tensor_xp
from gpugrad.core.forward_state import DERIVED, STATE, pause, remember, set_tangent
from gpugrad.core.grad_mode import STATE as _GRAD
from gpugrad.core.grad_mode import no_grad
from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import TensorBase, make
from gpugrad.core.views import shadow


def propagate(fn, args, datas, result, params, tangents=None):
    """Give ``result`` (the output of op instance ``fn`` on ``args`` with keyword ``params``) its tangent, if an
    input has one (``tangents``: the inputs' tangents, when one direction of a batch is taken at a time)."""

    if tangents is None:
        tangents = [tangent_of(a) for a in args]
    if all(t is None for t in tangents) or result._data.dtype.kind != "f":
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
            ins = tuple(args)
            if STATE.writing is not None:  # an in-place op: its JVP reads the values it is about to overwrite
                ins = _before_the_write(fn, ins, STATE.writing)
            out = fn.jvp(tensor_xp, ins, result, tangents)
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


def _before_the_write(fn, ins, target):
    """torch's JVP formulas of in-place ops read the original self: the node's saved copies of ``target`` (which the
    in-place op overwrites next) and the inputs sharing its memory become private copies with its history and
    tangent (views.shadow), so the tangent's graph survives the write."""
    fn.unshare_saved(target)
    counter = target._version_counter
    return tuple(shadow(a._data, ("in", a, 0))[1][1] if isinstance(a, TensorBase) and a._version_counter is counter
                 else a for a in ins)


def tangent_of(t):
    """``t``'s tangent at the active level (None for a number or a tensor without one). A view of a tensor with a
    tangent has the view of that tangent, as in torch: made (or made again) from the base's tangent when it is read,
    so it follows the base's in-place writes (a view that was given a tangent of its own by make_dual keeps it while
    its base has none)."""
    if not isinstance(t, TensorBase):
        return None
    base = t._base
    if base is None or t._view_fn is None or base._fw_grad is None:
        return t._fw_grad
    bt = base._fw_grad
    seen = DERIVED.get(id(t))
    if seen is not None and seen[0]() is t and seen[1]() is bt and t._fw_grad is not None:
        return t._fw_grad
    if STATE.batch is not None:
        tv = _batched_view_tangent(t)
    else:
        with pause():
            if _GRAD.enabled and bt._requires_grad:
                tv = REGISTRY["as_view"].apply(bt, view_fn=t._view_fn)
            else:
                tv = make(t._view_fn(bt._data), bt._backend)
        set_tangent(t, tv)
    remember(t, bt)
    return tv


def inplace_result(target, result_fn):
    """``result_fn()``, the out-of-place values of an in-place op on ``target``, computed while a dual level is
    active: the differentiable JVPs it runs read private copies of ``target`` (see _before_the_write)."""
    was, STATE.writing = STATE.writing, target
    try:
        return result_fn()
    finally:
        STATE.writing = was


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
            propagate(fn, args, datas, result, params, [t[i] if t is not None else None for t in tangents])
            outs.append(result._fw_grad)
    finally:
        STATE.batch = b
    result._fw_grad = None
    with pause():
        _finish(result, REGISTRY["stack"].apply(*[o if o is not None else result.detach() * 0 for o in outs], axis=0))


def write_tangent(tensor, new):
    """``tensor`` was changed in place and its new values have tangent ``new`` (None: zero). A tensor that is not a
    view takes ``new`` as its tangent (the old one is left as it was: tangents other nodes saved stay valid); a view
    writes ``new`` into its region of its base's tangent (a CopySlices of it, recorded when the tangents carry a
    graph), and its tangent and its fellow views' are made again from that when read (tangent_of)."""

    if STATE.level is None:
        return
    base, view_fn = tensor._base, tensor._view_fn
    if new is not None and new._data.dtype != tensor._data.dtype:  # x32.mul_(y64): the values were cast too
        with pause():
            new = new.to(dtype=tensor.dtype)
    if base is None or view_fn is None:
        if new is not None or tensor._fw_grad is not None:
            set_tangent(tensor, new if new is not None else _zeros_of(tensor, tensor._data.shape))
        return
    bt = base._fw_grad
    if bt is None:
        if new is None:  # nothing carries a tangent; a dual made of this view has constants now
            if tensor._fw_grad is not None:
                set_tangent(tensor, _zeros_of(tensor, tensor._data.shape))
            return
        bt = _zeros_of(base, base._data.shape)
    set_tangent(base, _written(bt, new, view_fn))
    tensor._fw_grad = None  # made again from the base's (tangent_of)


def _zeros_of(t, shape):
    shape = shape if STATE.batch is None else (STATE.batch, *shape)
    be = t._backend
    with on(be):
        return make(be.xp.zeros(shape, dtype=t._data.dtype), be)


def _written(bt, new, view_fn):
    """The base tangent ``bt`` with the region ``view_fn`` picks replaced by ``new`` (None: zeros)."""
    with pause():
        if STATE.batch is None and _GRAD.enabled and (bt._requires_grad or new is not None and new._requires_grad):
            return REGISTRY["copy_slices"].apply(bt, 0 if new is None else new, view_fn=view_fn)
        be = bt._backend
        with on(be):
            out = bt._data.copy()
            for i in range(STATE.batch or 1):  # a batch: the region of each direction
                region = view_fn(out[i] if STATE.batch else out)
                region[...] = 0 if new is None else (new._data[i] if STATE.batch else new._data)
        return make(out, be)


def _linear_jvp(cls, args, tangents, params, differentiable):
    """A linear op's JVP is the op itself applied to the tangents (zeros for an input without one; 0 for a Python
    number, which only shifts a linear op: add, sub, where, fill)."""

    ins = []
    for a, t in zip(args, tangents):
        if t is not None:
            ins.append(t)
        elif isinstance(a, TensorBase):  # zeros, not a * 0: an inf or NaN of a must not reach the tangent
            if a._data.dtype.kind == "f":
                with on(a._backend):
                    a = make(a._backend.xp.zeros(a._data.shape, dtype=a._data.dtype), a._backend)
            ins.append(a)
        else:
            ins.append(0 if isinstance(a, (int, float)) and not isinstance(a, bool) else a)
    if differentiable:
        return cls.apply(*ins, **params)

    with no_grad():
        return cls.apply(*ins, **params)
