"""Forward-mode AD, as ``torch.autograd.forward_ad``: a tangent travels with each value.

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        y_p, jvp = forward_ad.unpack_dual(y)      # jvp = J_f(primal) @ tangent, in one forward pass

Every op gets its output's tangent from its inputs' tangents in ``Op.apply`` (``core/forward.py``), by its JVP:
pointwise ops run the same ``g * f'`` formula (and CUDA kernel) as their VJP with g = the tangent; linear ops
apply themselves to the tangents; the rest have a hand-written ``jvp`` beside their ``backward``.  A tangent is a
Tensor; when the inputs or tangents require grad, the JVP is computed with recorded Tensor ops, so reverse mode
over forward mode gives Hessian-vector products.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

from gpugrad.core.forward import tangent_of
from gpugrad.core.forward_state import STATE, pause, set_tangent
from gpugrad.core.tensor import TensorBase


class UnpackedDualTensor(NamedTuple):
    primal: object
    tangent: object


@contextlib.contextmanager
def dual_level():
    """A scope for dual tensors: tangents made in it are dropped when it exits (``unpack_dual`` then gives None)."""
    if STATE.level is not None:
        raise RuntimeError("Nested forward mode AD is not supported at the moment (dual_level: exit the current "
                           "dual_level() first)")
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


def make_dual(tensor, tangent, *, level=None):
    """A view of ``tensor`` (sharing its memory and its graph) that carries ``tangent`` (same shape, dtype, device)."""
    _require_level("make_dual")
    if not isinstance(tensor, TensorBase) or not isinstance(tangent, TensorBase):
        raise TypeError(f"make_dual: expected two Tensors, got {type(tensor).__name__} and "
                        f"{type(tangent).__name__}")
    if tensor.dtype.kind not in "fV":
        raise TypeError(f"make_dual: the primal must be floating point to carry a tangent, got {tensor.dtype}")
    if tangent.shape != tensor.shape or tangent.dtype != tensor.dtype or tangent.device != tensor.device:
        raise ValueError(f"make_dual: the tangent must match the primal: primal {tuple(tensor.shape)} {tensor.dtype} "
                         f"on {tensor.device}, tangent {tuple(tangent.shape)} {tangent.dtype} on {tangent.device}; "
                         "convert it with .to(...) / .reshape(...) first")
    # a view of tensor, as torch's (a write into either is seen by both, graph included)
    dual = tensor.reshape(tensor.shape)
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
    tangent = tangent_of(tensor) if STATE.level is not None else None  # a view's: its base's, viewed
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with pause():
        primal = tensor.reshape(tensor.shape) if tensor.requires_grad else tensor.detach()
    primal._fw_grad = None
    return UnpackedDualTensor(primal, tangent)
