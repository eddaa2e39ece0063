"""Reverse-mode engine: iterative topological order, gradients freed as consumed, leaf buffers reused.

No recursion anywhere (a 100,000-op chain must work): dependency counts are gathered with an explicit stack and
nodes run in Kahn order.  Each gradient is popped from ``grads`` when its node runs, so it is freed as soon as
it is consumed; the node's saved arrays are released right after its VJP unless ``retain_graph``.
Broadcasting is undone here, in :func:`unbroadcast`, and nowhere else: on arrays, and on Tensors under create_graph.
"""
from __future__ import annotations

import contextlib
import threading

from gpugrad.backend import graphs as _graphs
from gpugrad.core import anomaly as _anomaly, trace as _trace
from gpugrad.core.forward_state import STATE as _FORWARD
from gpugrad.core.grad_mode import enable_grad, no_grad
from gpugrad.core.node import AccumulateGrad
from gpugrad.core.tensor import TensorBase, make


def toposort(roots):
    """Nodes reachable from ``roots``, each after every node that feeds it a gradient."""
    deps = {}
    stack = list(dict.fromkeys(roots))
    seen = set(stack)
    while stack:
        node = stack.pop()
        for parent in node._parents:
            if parent is not None:
                deps[parent] = deps.get(parent, 0) + 1
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
    order = []
    ready = [r for r in dict.fromkeys(roots) if r not in deps]
    while ready:
        node = ready.pop()
        order.append(node)
        for parent in node._parents:
            if parent is not None:
                left = deps[parent] - 1
                deps[parent] = left
                if left == 0:
                    ready.append(parent)
    return order


def unbroadcast(gx, meta):
    """Sum a gradient over the axes its input was broadcast along, and cast it to the input's dtype. ``gx`` is an
    array, or a Tensor under create_graph (the same methods: reshape, sum, astype), so this is the one place."""
    shape, dtype = meta
    gshape = tuple(gx.shape)
    if len(gshape) < len(shape):  # e.g. t[0] = w with w (1, 3): the gradient lost w's leading size-1 axes
        gx = gx.reshape((1,) * (len(shape) - len(gshape)) + gshape)
        gshape = tuple(gx.shape)
    if gshape != shape:
        lead = len(gshape) - len(shape)
        axes = tuple(range(lead)) + tuple(
            i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1)
        gx = gx.sum(axis=axes, keepdims=True) if axes else gx
        gx = gx.reshape(shape) if lead or tuple(gx.shape) != shape else gx
        if tuple(gx.shape) != shape:
            raise RuntimeError(f"internal: gradient of shape {gshape} does not broadcast to input shape {shape}")
    if gx.dtype != dtype:
        gx = gx.astype(dtype)
    return gx


class _Passes(threading.local):
    callbacks = None  # this thread's backward passes in progress (innermost last): each a list of callbacks


_PASSES = _Passes()
# Backward may run in several threads at once (torch's is thread-safe): what they can share is a leaf's .grad, a
# retained .grad and their hooks. The read-add-write of a gradient buffer (NumPy releases the GIL inside the add)
# is done under this lock, as torch's AccumulateGrad holds a mutex; everything else a pass touches is its own.
_ACCUMULATE = threading.Lock()


def queue_callback(fn):
    """Call ``fn()`` once the backward pass now running (in this thread) has finished (torch's
    ``Variable._execution_engine.queue_callback``): DistributedDataParallel waits for its all-reduces there."""
    if not _PASSES.callbacks:
        raise RuntimeError("queue_callback: no backward pass is running")
    _PASSES.callbacks[-1].append(fn)


def run(roots, retain_graph=False, create_graph=False, capture=None, only=None):
    """:func:`_run`, then the callbacks queued during it (not when it raised)."""
    if _PASSES.callbacks is None:
        _PASSES.callbacks = []
    _PASSES.callbacks.append([])
    try:
        out = _run(roots, retain_graph, create_graph, capture, only)
    finally:
        queued = _PASSES.callbacks.pop()
    for fn in queued:
        fn()
    return out


def _run(roots, retain_graph=False, create_graph=False, capture=None, only=None):
    """Backpropagate ``roots`` = [(node, gradient)], accumulating into leaves, or into ``capture`` if given.

    ``capture`` maps nodes to ``None``; their incoming gradients are stored there and leaves are left alone
    (``autograd.grad``).  ``only`` (backward(inputs=)): run just these nodes and those above them.
    Gradients are arrays, or Tensors when ``create_graph``.
    """
    # Forward over reverse without create_graph (a dual level is active): as torch, the VJPs run as ops on Tensors, so
    # the gradients carry the tangents of the saved values and of the seeds; under no_grad, so they keep no graph.
    tangents = not create_graph and _FORWARD.level is not None
    tensors = create_graph or tangents
    if tangents:
        roots = [(n, g if isinstance(g, TensorBase) else make(g, n._be)) for n, g in roots]
    order = toposort([n for n, _ in roots])
    check = _anomaly.checker(len(order))  # None unless detect_anomaly() is on
    observe = _trace.WATCH.observer  # None unless explain() is watching (in this thread)
    needed = None
    targets = capture if capture is not None else only
    if targets is not None:
        # As torch: a node runs only if a target lies strictly below it (or, for backward(inputs=), it is one).  A
        # captured node with none below is not run (its saved tensors stay, so a later backward through it works)
        # and its hooks run before the capture; nodes that lead to no target are skipped, hooks and all.
        # Output k of a node with several is torch's input k of that node, reached once every output's gradient is
        # in and its hooks ran: the paths to its siblings run too.
        needed = set() if capture is not None else set(only)
        reached = {*targets, *(n._parents[0] for n in targets if n.routes_output)}
        for node in reversed(order):  # inputs first
            if any(p in needed or p in reached for p in node._parents):
                needed.add(node)
    grads = {}
    for node, g in roots:
        _add(grads, node, g, False, tensors)
    device = _DeviceSwitch()
    with enable_grad() if create_graph else no_grad() if tangents else _nullcontext, device:
        for node in order:
            entry = grads.pop(node, None)
            if entry is None:
                continue
            if node._be.device_scope is not device.scope:
                device.use(node._be.device_scope)
            g, owned = entry
            if needed is not None and (node not in needed or node.routes_output and node._parents[0] not in needed):
                # captured with nothing to run, or an output of a node that has one captured and will not run:
                # hooks, then the capture
                if node not in needed and (capture is None or node not in capture):
                    continue
                if node._pre_hooks:
                    g, owned = _run_hooks(node, g, owned, tensors)
                if node._retain is not None:
                    _retain_grad(node, g, tensors)
                if capture is not None and node in capture:
                    capture[node] = g
                continue
            if capture is not None and node in capture:
                capture[node] = g  # it also runs: captured before its hooks (torch's NOTE [Hooks ordering])
            if node._pre_hooks:
                g, owned = _run_hooks(node, g, owned, tensors)
            if node._retain is not None:
                _retain_grad(node, g, tensors)
            if isinstance(node, AccumulateGrad):
                leaf = node.variable
                _accumulate_leaf(leaf, g, owned, create_graph)
                for hook in list(leaf._post_acc_hooks or ()):  # torch: hook(leaf), once .grad holds the sum
                    hook(leaf)
                continue
            try:
                gxs = _on_arrays(node, g) if tangents and not _on_tensors(node) else node.run_backward(g, tensors)
            except Exception as e:
                _anomaly.annotate(node, e)  # under detect_anomaly(): where the forward made this node
                if _graphs.CAPTURING:
                    raise _graphs.capture_error(node.name(), e) from e
                raise
            if check is not None:
                check(node, gxs)
            if observe is not None:
                observe(node, g, gxs)
            del entry
            if not retain_graph:
                node.release()
            parents = node._parents
            if node.routes_output:  # output k of a node with several: its own place in that node's gradients
                if gxs[0] is not None:
                    _add_output(grads, parents[0], node.k, gxs[0])
                del g, gxs
                continue
            if tensors:  # create_graph, or a pass carrying tangents
                for parent, gx, meta in zip(parents, gxs, node._in_meta):
                    if parent is not None and gx is not None:
                        _add(grads, parent, unbroadcast(gx, meta), False, True)
                del g, gxs
                continue
            be = node._be
            array_type = be.array_type
            if len(gxs) == 1:
                shared = ()
            elif len(gxs) == 2:
                a, b = gxs
                shared = (id(a),) if a is b and a is not None else ()
            else:
                shared = _repeated_ids(gxs)
            fresh = node.fresh_grads
            for parent, gx, meta in zip(parents, gxs, node._in_meta):
                if parent is None or gx is None:
                    continue
                if not isinstance(gx, array_type):
                    gx = be.as_array(gx)
                if gx.shape == meta[0] and gx.dtype == meta[1]:
                    # A VJP may hand back gy itself or a view of it (add, reshape) or one array for two inputs,
                    # and a user's Function may return an array it keeps: such a gradient is shared, so it must
                    # be copied before anyone adds into it in place.
                    owned = fresh and gx is not g and gx.base is None and id(gx) not in shared
                else:
                    gx = unbroadcast(gx, meta)  # a new array: ours
                    owned = True
                prev = grads.get(parent)
                if prev is None:
                    grads[parent] = (gx, owned)
                elif prev[1]:
                    acc = prev[0]
                    acc += gx  # the first sum below made this buffer ours: add in place
                else:
                    grads[parent] = (be.as_array(prev[0] + gx), True)  # NumPy sums 0-d arrays into a scalar
            del g, gxs
    if check is not None:
        check.finish()  # CUDA: one read of the per-node flags
    return capture


def _on_tensors(node):
    """Whether a node's VJP runs as ops on Tensors (every op with a double backward, the linear ones, Functions)."""
    return (getattr(node, "backward_graph", None) is not None or getattr(node, "double_backward", True)
            or getattr(node, "linear", False))


def _on_arrays(node, g):
    """A node without a Tensor VJP in a pass carrying tangents: its VJP on arrays (gradients without tangents)."""
    be = node._be
    return tuple(None if gx is None else make(be.as_array(gx), be) for gx in node.run_backward(g._data, False))


def _repeated_ids(gxs):
    if len(gxs) == 2:
        a, b = gxs
        return (id(a),) if a is b and a is not None else ()
    ids = [id(x) for x in gxs if x is not None]
    return {i for i in ids if ids.count(i) > 1}


class _DeviceSwitch:
    """Keeps the current CUDA device equal to the running node's: CuPy launches on the current device, and a graph
    may span devices (x.to("cuda:1") halfway). Switches only when the device changes, so one-device graphs pay
    one enter and one exit."""

    def __init__(self):
        self.scope = None

    def use(self, scope):
        if self.scope is not None:
            self.scope.__exit__(None, None, None)
            self.scope = None
        if scope is not None:
            scope.__enter__()
            self.scope = scope

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.scope is not None:
            self.scope.__exit__(None, None, None)
            self.scope = None
        return False


_nullcontext = contextlib.nullcontext()


def _add(grads, node, g, owned, create_graph):
    prev = grads.get(node)
    if prev is None:
        grads[node] = (g, owned)
    elif create_graph:
        grads[node] = (prev[0] + g, False)
    elif prev[1]:
        acc = prev[0]
        acc += g  # the first sum below made this buffer ours: add in place
        grads[node] = (acc, True)
    else:
        grads[node] = (node._be.as_array(prev[0] + g), True)  # NumPy sums 0-d arrays into a scalar


def _add_output(grads, node, k, g):
    """Output k's gradient, for a node with several outputs (``node.n_outputs``): each output has one OutputSlot,
    which summed what reached it, so a place is filled once. Shared (not owned): the slot passed it on as it came."""
    entry = grads.get(node)
    if entry is None:
        entry = grads[node] = ([None] * node.n_outputs, False)
    entry[0][k] = g


def _run_hooks(node, g, owned, create_graph):
    for hook in list(node._pre_hooks):
        gt = g if create_graph else make(g, node._be)
        out = hook(gt)
        if out is not None:
            if not isinstance(out, TensorBase) or out.shape != gt.shape or out.dtype != gt.dtype:
                what = (f"shape {out.shape}, dtype {out.dtype}" if isinstance(out, TensorBase)
                        else type(out).__name__)
                raise RuntimeError(f"a hook on the output of {node.name()} returned {what}; it must return None "
                                   f"or a Tensor of the gradient's shape {gt.shape} and dtype {gt.dtype}")
            g = out if create_graph else out._data
            owned = False
    return g, owned


def _retain_grad(node, g, create_graph):
    t = node._retain()
    if t is None:
        return
    gt = g if create_graph else make(g.copy(), t._backend)
    with _ACCUMULATE:
        t._grad = gt if t._grad is None else t._grad + gt


def _accumulate_leaf(leaf, g, owned, create_graph):
    with _ACCUMULATE:
        _accumulate_leaf_locked(leaf, g, owned, create_graph)


def _accumulate_leaf_locked(leaf, g, owned, create_graph):
    if not create_graph and isinstance(g, TensorBase):  # a pass carrying tangents (a dual level: see _run)
        grad = leaf._grad
        if grad is None:  # a copy with g's tangent (NOTE: torch drops it where it steals g's buffer: known difference)
            leaf._grad = g.clone()
        elif grad.requires_grad:
            leaf._grad = grad + g
        else:
            grad.add_(g)  # in place, as torch: the buffer stays and its tangent gains g's (core/forward.py)
        return
    if create_graph:
        if leaf._grad is None:  # a copy, as torch's: g may be another edge's gradient or a read-only broadcast view
            g = g.clone() if g._requires_grad or g._fw_grad is not None else make(g._data.copy(), leaf._backend)
        leaf._grad = g if leaf._grad is None else leaf._grad + g
        return
    grad = leaf._grad
    if grad is None:
        # Take ownership: a fresh gradient becomes .grad as is; a shared one is copied first.
        leaf._grad = make(g if owned else g.copy(), leaf._backend)
    elif grad.requires_grad:
        leaf._grad = grad + g  # .grad itself carries a graph (from create_graph): stay out of place
    else:
        if grad.shape != leaf.shape:
            raise RuntimeError(f"leaf .grad has shape {grad.shape} but the leaf is {leaf.shape}")
        # In place: the leaf keeps one gradient buffer across steps (optimizers and pointers rely on it).
        leaf._backend.accumulate_(grad._data, g)
        grad._version_counter[0] += 1
