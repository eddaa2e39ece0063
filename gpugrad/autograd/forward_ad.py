"""Forward-mode AD, as ``torch.autograd.forward_ad``: a tangent travels with each value.

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        y_p, jvp = forward_ad.unpack_dual(y)      # jvp = J_f(primal) @ tangent, in one forward pass

Every op gets its output's tangent from its inputs' tangents in ``Op.apply`` (:func:`propagate`), by its JVP:
pointwise ops run the same ``g * f'`` formula (and CUDA kernel) as their VJP with g = the tangent; linear ops
apply themselves to the tangents; the rest have a hand-written ``jvp`` beside their ``backward``.  A tangent is a
Tensor; when the inputs or tangents require grad, the JVP is computed with recorded Tensor ops, so reverse mode
over forward mode gives Hessian-vector products.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import NamedTuple

from gpugrad.autograd.grad_mode import STATE as _GRAD


class _State:
    level = None  # the active dual level (one at a time, as torch)
    batch = None  # B when tangents carry B directions at once, shape (B, *primal.shape): make_batched_dual
    paused = False  # set while a JVP runs, so the ops computing a tangent carry no tangents of their own
    duals = None  # weakrefs to tensors holding a tangent at this level: cleared when it exits


STATE = _State()


class UnpackedDualTensor(NamedTuple):
    primal: object
    tangent: object


@contextlib.contextmanager
def dual_level():
    """A scope for dual tensors: tangents made in it are dropped when it exits (``unpack_dual`` then gives None)."""
    if STATE.level is not None:
        raise RuntimeError("dual_level: forward-mode levels cannot be nested (as in torch); exit the current "
                           "dual_level() first")
    STATE.level, STATE.duals = 0, []
    try:
        yield 0
    finally:
        for ref in STATE.duals:
            t = ref()
            if t is not None:
                t._fw_grad = None
        STATE.level = STATE.duals = STATE.batch = None


def enter_dual_level():
    """torch's non-context form; pair with :func:`exit_dual_level`."""
    cm = dual_level()
    cm.__enter__()
    _OPEN.append(cm)
    return 0


def exit_dual_level(*, level=None):
    if not _OPEN:
        raise RuntimeError("exit_dual_level: no dual level is active")
    _OPEN.pop().__exit__(None, None, None)


_OPEN = []


def _require_level(what):
    if STATE.level is None:
        raise RuntimeError(f"{what}: forward-mode AD needs an active level: run it inside "
                           "`with gpugrad.autograd.forward_ad.dual_level():`")


def set_tangent(t, tangent):
    t._fw_grad = tangent
    STATE.duals.append(weakref.ref(t))


def make_dual(tensor, tangent, *, level=None):
    """A view of ``tensor`` (sharing its memory and its graph) that carries ``tangent`` (same shape, dtype, device)."""
    from gpugrad._tensor import Tensor

    _require_level("make_dual")
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError(f"make_dual: expected two Tensors, got {type(tensor).__name__} and "
                        f"{type(tangent).__name__}")
    if tensor.dtype.kind != "f":
        raise TypeError(f"make_dual: the primal must be floating point to carry a tangent, got {tensor.dtype}")
    if tangent.shape != tensor.shape or tangent.dtype != tensor.dtype or tangent.device != tensor.device:
        raise ValueError(f"make_dual: the tangent must match the primal: primal {tuple(tensor.shape)} {tensor.dtype} "
                         f"on {tensor.device}, tangent {tuple(tangent.shape)} {tangent.dtype} on {tangent.device}; "
                         "convert it with .to(...) / .reshape(...) first")
    dual = tensor.reshape(tensor.shape) if tensor.requires_grad else tensor.detach()
    set_tangent(dual, tangent)
    return dual


def make_batched_dual(tensor, tangents):
    """``make_dual`` with B tangents at once, ``tangents`` of shape (B, *tensor.shape): every op then computes B
    directional derivatives in the same forward pass (``autograd.functional``'s ``vectorize=True``). All batched
    duals of a level must share B; ``unpack_dual`` gives (B, *shape) tangents."""
    _require_level("make_batched_dual")
    b = tangents.shape[0] if tangents.ndim else None
    if b is None or tuple(tangents.shape[1:]) != tuple(tensor.shape) or STATE.batch not in (None, b):
        raise ValueError(f"make_batched_dual: tangents must have shape (B, *{tuple(tensor.shape)}) with one B per "
                         f"level (now {STATE.batch}), got {tuple(tangents.shape)}")
    STATE.batch = b
    dual = tensor.reshape(tensor.shape) if tensor.requires_grad else tensor.detach()
    set_tangent(dual, tangents.to(dtype=tensor.dtype))
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent): the primal as a view without the tangent; the tangent, or None."""
    tangent = getattr(tensor, "_fw_grad", None) if STATE.level is not None else None
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with pause():
        primal = tensor.reshape(tensor.shape) if tensor.requires_grad else tensor.detach()
    primal._fw_grad = None
    return UnpackedDualTensor(primal, tangent)


@contextlib.contextmanager
def pause():
    was, STATE.paused = STATE.paused, True
    try:
        yield
    finally:
        STATE.paused = was


def propagate(fn, args, datas, result, params):
    """Give ``result`` (the output of op instance ``fn`` on ``args`` with keyword ``params``) its tangent, if an
    input has one."""
    from gpugrad._tensor import Tensor, _make

    tangents = [a._fw_grad if isinstance(a, Tensor) else None for a in args]
    if STATE.batch is not None:
        tangents = [_batched_view_tangent(a) if t is not None and a._base is not None else t
                    for a, t in zip(args, tangents)]
    if all(t is None for t in tangents) or result._data.dtype.kind != "f":
        return
    differentiable = _GRAD.enabled and any(
        (isinstance(a, Tensor) and a._requires_grad) or (t is not None and t._requires_grad)
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
            from gpugrad.autograd import tensor_xp

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
            out = _make(be.as_array(out), be)
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


def tangent_of_output(t, node):
    """Give ``t``, a Tensor rebuilt from ``node``'s saved output, the tangent that output had (if the level is on)."""
    if STATE.level is not None and getattr(node, "_fw_grad", None) is not None:
        set_tangent(t, node._fw_grad)
    return t


def _zeros(a):
    from gpugrad._tensor import Tensor, _make

    if not isinstance(a, Tensor):
        return a
    return _make(a._backend.xp.zeros((STATE.batch, *a.shape), dtype=a._data.dtype), a._backend)


def _batched_view_tangent(view):
    """A view's batched tangent, re-read from its base's (B, ...) tangent: it is a stacked copy, not a view, so a later
    in-place change of the base would otherwise leave it stale."""
    from gpugrad._tensor import _make

    base = view._base
    if view._view_fn is None or base._fw_grad is None:
        return view._fw_grad
    xp = base._backend.xp
    view._fw_grad = _make(xp.stack([view._view_fn(t) for t in base._fw_grad._data]), base._backend)
    return view._fw_grad


def _per_direction(fn, args, datas, result, params, tangents):
    """Batched tangents through an op whose JVP takes one direction: run it for each of the B directions (the primal
    values are still computed once) and stack the results."""
    from gpugrad._tensor import Tensor
    from gpugrad.functional import stack

    b, outs = STATE.batch, []
    STATE.batch = None
    try:
        for i in range(b):
            for a, t in zip(args, tangents):
                if isinstance(a, Tensor):
                    with pause():
                        a._fw_grad = t[i] if t is not None else None
            propagate(fn, args, datas, result, params)
            outs.append(result._fw_grad)
    finally:
        STATE.batch = b
        for a, t in zip(args, tangents):
            if isinstance(a, Tensor):
                a._fw_grad = t
    result._fw_grad = None
    with pause():
        _finish(result, stack([o if o is not None else result.detach() * 0 for o in outs]))


def write_tangent(tensor, new):
    """``tensor`` was changed in place and its new values have tangent ``new`` (None: zero). The tangent is written
    into the existing tangent buffer, so views of it (the tangents of views of ``tensor``) see the change, as in
    torch; a view without a tangent writes into its base's (created as zeros if needed)."""
    from gpugrad._tensor import _make

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
            set_tangent(base, _make(xp.zeros(shape, dtype=base._data.dtype), base._backend))
        if batch is None:
            old = _make(tensor._view_fn(base._fw_grad._data), tensor._backend)
        else:  # one view per direction: written into each, and the view keeps its own (B, ...) copy
            for i in range(batch):
                tensor._view_fn(base._fw_grad._data[i])[...] = 0 if new is None else new._data[i]
            old = None
        if old is not None:
            set_tangent(tensor, old)
    if old is None:
        set_tangent(tensor, new if new is not None else _make(xp.zeros_like(tensor._data), tensor._backend))
    elif new is None:
        old._data[...] = 0
    else:
        old._data[...] = new._data


def _linear_jvp(cls, args, tangents, params, differentiable):
    """A linear op's JVP is the op itself applied to the tangents (zeros for an input without one; 0 for a Python
    number, which only shifts a linear op: add, sub, where, fill)."""
    from gpugrad._tensor import Tensor

    ins = []
    for a, t in zip(args, tangents):
        if t is not None:
            ins.append(t)
        elif isinstance(a, Tensor):
            ins.append(a.detach() * 0 if a._data.dtype.kind == "f" else a)
        else:
            ins.append(0 if isinstance(a, (int, float)) and not isinstance(a, bool) else a)
    if differentiable:
        return cls.apply(*ins, **params)
    from gpugrad.autograd.grad_mode import no_grad

    with no_grad():
        return cls.apply(*ins, **params)
