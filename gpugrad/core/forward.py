"""Tangents of op outputs (forward-mode AD): ``Op.apply`` calls :func:`propagate` while a dual level is active.

Every op gets its output's tangent from its inputs' tangents by its JVP: pointwise ops run the same ``g * f'``
formula (and CUDA kernel) as their VJP with g = the tangent; linear ops apply themselves to the tangents; the rest
have a hand-written ``jvp`` beside their ``backward``.  A tangent is a Tensor; when the inputs or tangents require
grad, the JVP is computed with recorded Tensor ops, so reverse mode over forward mode gives Hessian-vector products.
"""
from __future__ import annotations

import weakref

from gpugrad.backend import on
from gpugrad.core import tensor_xp
from gpugrad.core.forward_state import DERIVED, PARENTS, STATE, pause, remember, set_tangent
from gpugrad.core.grad_mode import STATE as _GRAD, no_grad
from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import TensorBase, make
from gpugrad.core.views import root_array, shadow


def propagate(fn, args, datas, result, params, tangents=None):
    """Give ``result`` (the output of op instance ``fn`` on ``args`` with keyword ``params``) its tangent, if an
    input has one (``tangents``: the inputs' tangents, when one direction of a batch is taken at a time)."""

    if tangents is None:
        tangents = [tangent_of(a) for a in args]
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
            ins = tuple(args)
            if STATE.writing is not None:  # an in-place op: its JVP reads the values it is about to overwrite
                ins = _before_the_write(fn, ins, STATE.writing)
            with tensor_xp.on_device(result._backend):
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
    _finish(result, _owned(out, args, tangents, result))


def _owned(out, args, tangents, result):
    """``out``, copied if it shares memory with an input's tangent while ``result`` is not a view of that input (a
    JVP that returns an input's tangent as it is: linear's bias, frac, remainder's): tangents are written in place
    (write_tangent), and a write into the result's must not change the input's."""
    if out is None or STATE.batch is not None:
        return out
    mine = root_array(out._data)
    for a, t in zip(args, tangents):
        if t is not None and root_array(t._data) is mine and root_array(result._data) is not root_array(a._data):
            with pause():
                return out.clone()
    return out


def _before_the_write(fn, ins, target):
    """torch's JVP formulas of in-place ops read the original self: the node's saved copies of ``target`` (which the
    in-place op overwrites next) and the inputs sharing its memory become private copies with its history and
    tangent (views.shadow), so the tangent's graph survives the write."""
    fn.unshare_saved(target)
    counter = target._version_counter
    return tuple(shadow(a._data, ("in", a, 0))[1][1] if isinstance(a, TensorBase) and a._version_counter is counter
                 else a for a in ins)


def tangent_of(t):
    """``t``'s tangent at the active level (None for a number or a tensor without one), as torch's: a view's own
    tangent (make_dual's) first; else, if its base has one, the view of that, kept while the base's tangent is the
    one (and at the version) it was made from, made again from it otherwise."""
    if not isinstance(t, TensorBase):
        return None
    base, own = t._base, t._fw_grad
    if base is None or t._view_fn is None:
        return own
    if base._fw_grad is None:  # a view of a dual made of a view: its parent dual's tangent may have been replaced
        return own if own is None or STATE.batch is not None else _from_parent(t, own)
    bt = base._fw_grad
    seen = DERIVED.get(id(t))
    if seen is None or seen[0]() is not t:  # not made from the base's: its own (make_dual), or none yet
        if own is not None:
            return own
    elif own is not None and seen[1]() is bt and seen[2] == bt._version_counter[0]:
        return own
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


def _from_parent(t, own):
    """``t``'s tangent, made again from the dual it was viewed from (forward_state.PARENTS) when that dual's tangent
    is no longer the one (or at the version) ``t``'s was made from: an in-place write into the dual rebinds it."""
    entry = PARENTS.get(id(t))
    parent = entry[1]() if entry is not None and entry[0]() is t else None
    pt = tangent_of(parent) if parent is not None else None
    if pt is None or entry[3]() is pt and entry[4] == pt._version_counter[0]:
        return own
    with pause():
        if _GRAD.enabled and pt._requires_grad:
            tv = REGISTRY["as_view"].apply(pt, view_fn=entry[2])
        else:
            tv = make(entry[2](pt._data), pt._backend)
    set_tangent(t, tv)
    PARENTS[id(t)] = entry[:3] + (weakref.ref(pt), pt._version_counter[0])
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
        if not outs:  # no directions (the Jacobian of an empty input): a (0, ...) tangent, not a stack of nothing
            _finish(result, make(result._backend.xp.zeros((0, *result.shape), dtype=result._data.dtype),
                                 result._backend))
            return
        _finish(result, REGISTRY["stack"].apply(*[o if o is not None else result.detach() * 0 for o in outs], axis=0))


def write_tangent(tensor, new):
    """``tensor`` was changed in place and its new values have tangent ``new`` (None: zero), as torch updates
    tangents: in place, into ``tensor``'s tangent buffer, which for a view is a view of its base's tangent (or of the
    dual's own, for a view of a dual made of a view), so every view of that memory sees it; a view without one first
    gets the view of its base's (made of zeros if the base had none). Where recorded ops may have saved the old
    tangent (_graphed) it is not overwritten: the tensor's is rebound to ``new``, a view's base's to a CopySlices of it
    (recorded; views' tangents are then made again); batched tangents of views (stacked copies) are written into the
    base's, per direction."""

    if STATE.level is None:
        return
    if new is not None and new._data.dtype != tensor._data.dtype:  # x32.mul_(y64): the values were cast too
        with pause():
            new = new.to(dtype=tensor.dtype)
    values = None if new is None else new._data
    base, view_fn = tensor._base, tensor._view_fn
    if base is None or view_fn is None:
        old = tensor._fw_grad
        if old is None and new is None:
            return
        if old is None or _graphed(tensor, old, new) or not _overwrite(old, values, None):
            set_tangent(tensor, new if new is not None else _zeros_of(tensor, tensor._data.shape))
        return
    old = tangent_of(tensor)
    if old is None:
        if new is None:  # nothing carries a tangent
            return
        set_tangent(base, _zeros_of(base, base._data.shape))
        old = tangent_of(tensor)
    if STATE.batch is None and not _graphed(tensor, old, new) and _overwrite(old, values, None):
        return  # in place: the tangent it is a view of sees the change
    bt = base._fw_grad
    if bt is None:  # a dual made of a view, its base without a tangent: its own changes (or its parent dual's)
        parent = PARENTS.get(id(tensor))
        if parent is not None and parent[0]() is tensor and parent[1]() is not None \
                and tangent_of(parent[1]()) is not None:
            src, fn = parent[1](), parent[2]
            with pause():
                whole = REGISTRY["copy_slices"].apply(tangent_of(src), 0 if new is None else new, view_fn=fn)
            write_tangent(src, whole)
            with pause():
                set_tangent(tensor, REGISTRY["as_view"].apply(tangent_of(src), view_fn=fn))
            return
        set_tangent(tensor, new if new is not None else _zeros_of(tensor, tensor._data.shape))
        return
    if _graphed(tensor, bt, new) and STATE.batch is None:
        with pause():
            set_tangent(base, REGISTRY["copy_slices"].apply(bt, 0 if new is None else new, view_fn=view_fn))
    elif not _overwrite(bt, values, view_fn):
        with pause():
            set_tangent(base, make(bt._data.copy(), bt._backend))
        _overwrite(base._fw_grad, values, view_fn)
    tensor._fw_grad = None  # made again from the base's (tangent_of)


def _graphed(tensor, old, new):
    """Whether recorded ops may have saved ``old`` (JVPs run as recorded ops when a primal or a tangent requires
    grad): then it is not overwritten, but replaced."""
    root = tensor._base if tensor._base is not None else tensor
    return _GRAD.enabled and (tensor._requires_grad or root._requires_grad or old._requires_grad
                              or new is not None and new._requires_grad)


def _zeros_of(t, shape):
    shape = shape if STATE.batch is None else (STATE.batch, *shape)
    be = t._backend
    with on(be):
        return make(be.xp.zeros(shape, dtype=t._data.dtype), be)


def _overwrite(tangent, values, view_fn):
    """Write ``values`` (an array; None: zeros) into ``tangent``'s buffer, or into its region ``view_fn`` (one per
    direction of a batch), and bump its version (views' tangents made from it are made again). False if the buffer
    is read-only (a broadcast)."""
    data = tangent._data
    if not getattr(data.flags, "writeable", True):
        return False
    with on(tangent._backend):
        if view_fn is None:
            data[...] = 0 if values is None else values
        else:
            for i in range(STATE.batch or 1):
                region = view_fn(data[i] if STATE.batch else data)
                region[...] = 0 if values is None else (values[i] if STATE.batch else values)
    tangent._version_counter[0] += 1
    return True


def _linear_jvp(cls, args, tangents, params, differentiable):
    """A linear op's JVP is the op itself applied to the tangents (zeros for an input without one; 0 for a Python
    number, which only shifts a linear op: add, sub, where, fill)."""

    ins = []
    for a, t in zip(args, tangents):
        if t is not None:
            ins.append(t)
        elif isinstance(a, TensorBase):  # zeros, not a * 0: an inf or NaN of a must not reach the tangent
            if a._data.dtype.kind in "fV":
                with on(a._backend):
                    a = make(a._backend.xp.zeros(a._data.shape, dtype=a._data.dtype), a._backend)
            ins.append(a)
        else:
            ins.append(0 if isinstance(a, (int, float)) and not isinstance(a, bool) else a)
    if differentiable:
        return cls.apply(*ins, **params)

    with no_grad():
        return cls.apply(*ins, **params)
