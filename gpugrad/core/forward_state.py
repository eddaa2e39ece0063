"""Forward-mode state: the active dual level, batched tangents, and the tensors that carry a tangent.

``autograd/forward_ad.py`` is the public API (dual_level, make_dual, unpack_dual); ``core/forward.py`` computes the
tangents of op outputs. Both read this state; ``Op.apply`` leaves its fast path while a level is active.
"""
from __future__ import annotations

import contextlib
import weakref


class _State:
    level = None  # the active dual level (one at a time, as torch)
    batch = None  # B when tangents carry B directions at once, shape (B, *primal.shape): make_batched_dual
    paused = False  # set while a JVP runs, so the ops computing a tangent carry no tangents of their own
    duals = None  # weakrefs to tensors holding a tangent at this level: cleared when it exits
    writing = None  # the tensor an in-place op is computing new values for (forward.inplace_result)


STATE = _State()


def set_tangent(t, tangent):
    t._fw_grad = tangent
    STATE.duals.append(weakref.ref(t))


@contextlib.contextmanager
def pause():
    was, STATE.paused = STATE.paused, True
    try:
        yield
    finally:
        STATE.paused = was


# id(view) -> (the view, the base tangent its tangent was made from, that tangent's version), weakly (Tensors compare by value, so no
# WeakKeyDictionary): a view's tangent is its base's, viewed, made again when the base's changed (forward.tangent_of)
DERIVED = {}


PARENTS = {}  # id(view) -> (the view, the tensor it was made from, view_fn from that tensor, that tensor's tangent
#               then and its version), weakly


def note_view(view, root, base, view_fn):
    """``view`` was just marked a view of ``base`` (whose root is ``root``; views.mark_view) and got its tangent from
    its op's JVP: out of root's tangent, or out of base's own (a dual made of a view; write_tangent goes back to it)."""
    if view._fw_grad is None:
        return
    if root._fw_grad is not None:
        remember(view, root._fw_grad)
    elif base._fw_grad is not None:
        key = id(view)
        bt = base._fw_grad  # and the parent's tangent it was made from, at its version (forward.tangent_of)
        PARENTS[key] = (weakref.ref(view, lambda _, k=key: PARENTS.pop(k, None)), weakref.ref(base), view_fn,
                        weakref.ref(bt), bt._version_counter[0])


def remember(view, base_tangent):
    key = id(view)
    DERIVED[key] = (weakref.ref(view, lambda _, k=key: DERIVED.pop(k, None)), weakref.ref(base_tangent),
                    base_tangent._version_counter[0])


def tangent_of_output(t, node):
    """Give ``t``, a Tensor rebuilt from ``node``'s saved output, the tangent that output had (if the level is on)."""
    if STATE.level is not None and getattr(node, "_fw_grad", None) is not None:
        set_tangent(t, node._fw_grad)
    return t
