"""Views and in-place writes: how a tensor that shares memory with another keeps its values and its graph right.

- A view (``reshape``, ``permute``, ``x[1:]``, ``expand``, ...) shares its root's memory and version counter and
  remembers how to re-make itself from the root (``view_fn``): :func:`mark_view`.
- An in-place op on a tensor with a graph moves its grad_fn to the new node (:func:`rebase`); on a view, the root
  becomes ``CopySlices(root, value)`` and the view is re-derived from it (:func:`write_through`), as torch does.
- A view whose root was changed in place re-derives its grad_fn (an ``AsView`` node) when it is next read
  (:func:`fresh`), as torch re-derives a view's grad_fn lazily.
- Nodes that saved a value torch would have copied subscribe to the version counter and copy it just before it is
  overwritten (:func:`before_write`): copy-on-write, paid only when such a write happens.

The AsView and CopySlices ops are registered ops (``ops/convert.py``), looked up in the registry here so that this
module stays below the op machinery it serves.
"""
from __future__ import annotations

import weakref

import numpy as np

from gpugrad.core.forward_state import STATE as FORWARD, note_view, set_tangent
from gpugrad.core.grad_mode import enable_grad
from gpugrad.core.node import AccumulateGrad
from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import make

OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
           "Please clone() the tensor before performing the operation.")


def root_array(array):
    """The array that owns the memory ``array`` views (NumPy and CuPy both keep ``.base``)."""
    while getattr(array, "base", None) is not None:
        array = array.base
    return array


def shares_memory(a, b):
    return root_array(a._data) is root_array(b._data)


def may_overlap(a, b):
    """Whether two tensors' memory ranges may overlap (views of one base may not: shares_memory says they share it);
    False for vmap's batched tensors, whose values are not read."""
    be = a._backend
    return isinstance(a._data, be.array_type) and isinstance(b._data, be.array_type) and bool(
        be.xp.may_share_memory(a._data, b._data))


def overlaps(array):
    """Whether elements of ``array`` share memory (a stride 0 along an axis of more than one element: an expand)."""
    return array.size > 1 and any(st == 0 and n > 1 for st, n in zip(array.strides, array.shape))


def check_overlap(t, op, other=None):
    """torch refuses in-place writes into a tensor whose elements share memory (an expand along a size-1 axis):
    NumPy would refuse with a read-only error, and CuPy would write each element's several updates in a race.
    fill_ and zero_ write one value everywhere, and x.copy_(x) nothing: torch allows them (and raises at backward,
    in CopySlices)."""
    if op not in ("fill_", "zero_") and not (op == "copy_" and other is t) and overlaps(t._data):
        raise RuntimeError(f"{op}: {OVERLAP}")


def check_fits(t, other, op):
    """As torch: x.op_(y) may not grow x (NumPy's copyto would drop the broadcast's leading size-1 axes)."""
    shape = np.broadcast_shapes(t.shape, other.shape)
    if shape != t.shape:
        raise RuntimeError(f"{op}: output with shape {list(t.shape)} doesn't match the broadcast shape {list(shape)}")


def writable_broadcast(xp, a, shape):
    """``xp.broadcast_to``, writable where ``a`` is: NumPy marks it read-only, but torch lets in-place ops write into
    a view of an expand that repeats no element (a column of rows expanded); check_overlap refuses the others."""
    y = xp.broadcast_to(a, shape)
    if not getattr(y.flags, "writeable", True) and a.flags.writeable:  # CuPy's arrays are always writable
        y.flags.writeable = True
    return y


def _compose(outer, inner):
    def view_fn(a):
        return outer(inner(a))
    multi = getattr(inner, "multi_output", None) or getattr(outer, "multi_output", None)
    if multi is not None:  # a view of one of several views stays one (torch's creation meta propagates)
        view_fn.multi_output = multi
    return view_fn


def mark_multi_output(view, name, index):
    """``view`` is output ``index`` of ``name`` (Split, SplitWithSizes, Unbind), an op that returns several views:
    as in torch, an in-place op on it that records a graph is refused (methods/inplace.py)."""
    fn = view._view_fn
    if fn is not None:
        def view_fn(a):
            return fn(a)
        view_fn.multi_output = (name, index)
        view._view_fn = view_fn
    return view


def mark_view(out, base, view_fn):
    """Mark ``out`` as a view of ``base``'s memory.  Views share the root's version counter (in-place writes
    through either are seen by saved copies of both) and remember how to re-make themselves from the root:
    ``view_fn`` maps the root's array to the view's."""
    root = base if base._base is None else base._base
    if FORWARD.level is not None:  # its tangent (from the op's JVP) is the view of base's: forward.tangent_of
        note_view(out, root, base, view_fn)
    if root is not base:
        view_fn = _compose(view_fn, base._view_fn)
    out._version_counter = root._version_counter
    out._base, out._view_fn, out._base_fn = root, view_fn, root._grad_fn
    return out


def refresh_view(view):
    """Re-derive a view's grad_fn from its base's current graph (the base was rebased by an in-place op)."""
    multi = getattr(view._view_fn, "multi_output", None)
    if multi is not None:  # as torch: which of the op's outputs the write changed is not known
        raise RuntimeError(f"Output {multi[1]} of {multi[0]} is a view and its base or another view of its base has "
                           "been modified inplace. This view is the output of a function that returns multiple "
                           "views. Such functions do not allow the output views to be modified inplace. You should "
                           "replace the inplace operation by an out-of-place one (or .clone() the outputs first).")
    base = view._base
    with enable_grad():
        derived = REGISTRY["as_view"].apply(base, view_fn=view._view_fn)
    rebase(view, derived._grad_fn)
    view._requires_grad, view._base_fn = derived._requires_grad, base._grad_fn


def fresh(tensor):
    """``tensor``, its grad_fn re-derived first if it is a view whose base was changed in place with a graph since it
    was taken: torch re-derives a view's grad_fn whenever it is read (requires_grad, hooks, backward)."""
    if tensor._base is not None and tensor._base_fn is not tensor._base._grad_fn:
        refresh_view(tensor)
    return tensor


def rebase(tensor, node):
    """``tensor`` now holds the output of ``node`` (it was changed in place): its grad_fn moves there, and so does
    ``retain_grad()``, as in torch (.grad is then the gradient of the new value); hooks stay on the old value's node."""
    old = tensor._grad_fn
    if old is not None and old._retain is not None and old._retain() is tensor:
        old._retain = None
        if node is not None:
            node._retain = weakref.ref(tensor)
    tensor._grad_fn, tensor._requires_grad = node, node is not None or tensor._requires_grad


def write_through(view, value):
    """An in-place op on a view, recorded: the root becomes CopySlices(root, value) (torch's way), and the view
    is re-derived from it, so both the root and the view see the change in values and in graph."""
    root = view._base
    new_root = REGISTRY["copy_slices"].apply(root, value, view_fn=view._view_fn)
    rebase(root, new_root._grad_fn)
    refresh_view(view)


def subscribe(node, tensor):
    """Have ``node`` copy what it saved of ``tensor``'s memory before the next in-place write into it."""
    counter = tensor._version_counter
    if len(counter) == 1:
        counter.append(weakref.WeakSet())
    counter[1].add(node)


def before_write(tensor):
    """Called before an in-place write into ``tensor``'s memory.  Nodes that saved one of its values where torch
    saves a copy or an intermediate of its own (so torch raises nothing when the tensor is then changed) take a
    private copy now. They subscribed in the tensor's version counter, which every alias (view, detach()) shares:
    ``[version, WeakSet of nodes]``."""
    counter = tensor._version_counter
    if len(counter) > 1:
        for node in list(counter.pop()):
            node.unshare_saved(None, counter)


def shadow(array, ref):
    """(copy, ref) for a saved value of an input about to be overwritten: a private copy, held by a tensor with the
    input's history (its grad_fn, or for a leaf its accumulator), so create_graph still differentiates through it."""
    kind, tensor, _ = ref
    copy = make(array.copy(), tensor._backend, tensor._requires_grad)
    if tensor._grad_fn is not None:
        copy._grad_fn = tensor._grad_fn
    elif tensor._requires_grad:
        acc = AccumulateGrad.of(tensor)
        copy._accumulator = lambda: acc
    if tensor._fw_grad is not None and FORWARD.level is not None:  # and its tangent (forward over reverse)
        set_tangent(copy, tensor._fw_grad)
    return copy._data, (kind, copy, 0)
