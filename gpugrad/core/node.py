"""Graph nodes as the engine sees them: ``Node`` (a recorded op, the ``grad_fn`` of its output) and
``AccumulateGrad`` (the sink of a leaf that requires grad), plus the handles that remove hooks."""
from __future__ import annotations

import re
import weakref


def freed_error(node):
    """torch's error for a saved tensor read after backward freed it (its first sentence, then the node's name)."""
    return RuntimeError(
        "Trying to backward through the graph a second time (or directly access saved tensors after they have already "
        f"been freed). The node is {node.name()}. Saved intermediate values of the graph are freed when you call "
        ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second "
        "time or if you need to access saved tensors after calling backward.")


def modified_error(tensor, producer, now, expected, detail=""):
    """torch's error for a saved ``tensor`` changed in place since it was saved: its legacy type and shape, the node
    that made it (None for a leaf; an OutputSlot says which output), and both versions; ``detail`` is gpugrad's."""
    what = f"[{tensor.type()} [{', '.join(map(str, tensor.shape))}]]"
    if producer is not None:  # torch 2.13 names the node without its Backward suffix: "output 0 of Exp"
        nr = producer.k if producer.routes_output else 0
        what += f", which is output {nr} of {re.sub(r'Backward[0-9]*$', '', producer.name())},"
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"{what} is at version {now}; expected version {expected} instead. Hint: enable anomaly detection to find "
        "the operation that failed to compute its gradient, with gpugrad.autograd.set_detect_anomaly(True, "
        f"check_nan=False).{detail}")


class RemovableHandle:
    """What every hook registration returns (torch's ``torch.utils.hooks.RemovableHandle``, also as
    ``gpugrad.utils.hooks.RemovableHandle``): ``remove()`` takes the hook out of ``hooks_dict`` (a mapping from
    handle ids to hooks: an OrderedDict, or :class:`Hooks`); a context manager that removes on exit.
    ``extra_dict`` (a dict or a list of them) loses the same key on removal."""

    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        extras = extra_dict if isinstance(extra_dict, list) else [] if extra_dict is None else [extra_dict]
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            hooks = ref()
            if hooks is not None and self.id in hooks:
                del hooks[self.id]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Hooks:
    """A tensor's or a node's hooks in registration order, removable by handle: iterating gives the hooks."""

    __slots__ = ("_by_id", "__weakref__")

    def __init__(self):
        self._by_id = {}

    def add(self, hook) -> RemovableHandle:
        handle = RemovableHandle(self)
        self._by_id[handle.id] = hook
        return handle

    def __iter__(self):
        return iter(list(self._by_id.values()))

    def __len__(self):
        return len(self._by_id)

    def __contains__(self, handle_id):
        return handle_id in self._by_id

    def __delitem__(self, handle_id):
        del self._by_id[handle_id]

    def clear(self):
        self._by_id.clear()


_NO_EDGE = object()  # an edge slot not in use (None is an edge: to an input that needs no gradient)


class InlineEdges:
    """``Node._parents``: the node each input's gradient flows into (None: the input needs none), in input order.

    A node with one or two edges keeps them in its own attributes ``_p0`` and ``_p1`` (``Op._connect``) and this
    makes the tuple when the engine asks; any other node stores ``_parents`` itself, which wins over this (a non-data
    descriptor). NOTE: a stored tuple of nodes is one more object per node for the cyclic GC to track and traverse,
    for as long as the graph lives: on a 100,000-op chain the GC's full passes cost as much as the ops themselves.
    """

    def __get__(self, node, owner=None):
        if node is None:
            return self
        p1 = node._p1
        if p1 is _NO_EDGE:
            p0 = node._p0
            return () if p0 is _NO_EDGE else (p0,)
        return (node._p0, p1)


class Node:
    """A recorded op as seen by the engine: ``next_functions`` lead towards the inputs.

    The engine calls ``run_backward(gy, create_graph)`` (one gradient per input, or None) and then ``release()``;
    ``_be`` is the node's backend and ``_in_meta`` the (shape, dtype) of each input, which its gradient is fitted to.
    """

    _parents = InlineEdges()
    _p0 = _p1 = _NO_EDGE
    fresh_grads = True  # the VJP returns new arrays (or gy / views of it), never arrays someone else keeps
    routes_output = False  # an OutputSlot: its gradient goes to one output of a node with several
    _pre_hooks = None  # hooks of the tensor this node produced (register_hook on a non-leaf)
    _retain = None  # weakref to that tensor when it asked to retain_grad()

    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self):
        """torch's view of the edges: ((node, 0) or (None, 0)) per input."""
        return tuple((p, 0) for p in self._parents)

    @next_functions.setter
    def next_functions(self, edges):
        self._parents = [p for p, _ in edges]

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    def register_prehook(self, hook):
        if self._pre_hooks is None:
            self._pre_hooks = Hooks()
        return self._pre_hooks.add(hook)

    def run_backward(self, gy, create_graph: bool):
        raise NotImplementedError(f"{self.name()} has no backward")

    def release(self):
        """Free what backward needed (called after the node ran, unless retain_graph)."""


class AccumulateGrad(Node):
    """The sink for a leaf that requires grad: adds incoming gradients into ``leaf.grad``."""

    def __init__(self, variable):
        self.variable = variable

    @property
    def _be(self):
        return self.variable._backend

    @property
    def _pre_hooks(self):
        link = self.variable._accumulator  # the leaf's hooks live on the leaf's side: see _LeafHooks
        return link.hooks if type(link) is _LeafHooks else None

    def register_prehook(self, hook):
        return AccumulateGrad.register_leaf_hook(self.variable, hook)

    @staticmethod
    def register_leaf_hook(tensor, hook):
        link = tensor._accumulator
        if type(link) is not _LeafHooks:
            link = tensor._accumulator = _LeafHooks(link)
        return link.hooks.add(hook)

    @staticmethod
    def of(tensor) -> "AccumulateGrad":
        # The tensor keeps only a weak reference, like PyTorch: graph nodes keep the accumulator alive.
        link = tensor._accumulator
        acc = link() if link is not None else None
        if acc is None:
            acc = AccumulateGrad(tensor)
            if type(link) is _LeafHooks:
                link.ref = weakref.ref(acc)
            else:
                tensor._accumulator = weakref.ref(acc)
        return acc


class OutputSlot(Node):
    """Output ``k`` of ``node``, a node with several outputs (torch's ``output_nr``): the ``_grad_fn`` of that
    output, so a consumer's edge ``(slot, 0)`` is an ordinary one, and tensor hooks, ``retain_grad`` and
    ``autograd.grad`` w.r.t. that output live here.  The engine hands the gradient this slot receives to ``node`` as
    its k-th (``routes_output``); ``node`` then runs once with one gradient per output, None where none came.
    ``Tensor.grad_fn`` shows ``node`` itself, as torch's."""

    routes_output = True
    fresh_grads = False  # it passes its gradient on as is

    def __init__(self, node, k, meta):
        self.node, self.k = node, k
        self._parents = (node,)
        self._in_meta = (meta,)
        self._be = node._be

    @property
    def next_functions(self):
        return ((self.node, self.k),)

    def name(self):
        return self.node.name()

    def run_backward(self, gy, create_graph):
        return (gy,)


class SeveralOutputs:
    """Mixin of a Node with ``n_outputs`` outputs: one OutputSlot per output (held weakly: an output's tensor holds
    its slot, and the slot this node), and torch's call of hooks on outputs that got no gradient."""

    n_outputs = 1
    _slots = None

    def output_slot(self, k, meta):
        """Output k's slot (``meta``: its (shape, dtype)), made when none is alive."""
        if self._slots is None:
            self._slots = [None] * self.n_outputs
        ref = self._slots[k]
        slot = ref() if ref is not None else None
        if slot is None:
            slot = OutputSlot(self, k, meta)
            self._slots[k] = weakref.ref(slot)
        return slot

    def call_hooks_of_unused_outputs(self, grads):
        """As torch: when this node runs, the hooks of an output that got no gradient are called with None (and may
        not replace it). The other outputs' hooks ran at their slots, as the gradients came (the engine)."""
        for ref, g in zip(self._slots or (), grads):
            slot = ref() if ref is not None and g is None else None
            for hook in list(slot._pre_hooks or ()) if slot is not None else ():
                if hook(None) is not None:
                    raise RuntimeError("can't replace a None gradient with a non-None value")


class _LeafHooks:
    """A leaf's ``_accumulator`` once hooks are registered on it: the accumulator, still held weakly, and the hooks,
    which must outlive graphs.  NOTE: holding the accumulator strongly instead would make a cycle (leaf -> node ->
    node.variable is the leaf), so a hooked leaf and its .grad would wait for the cyclic GC to be freed."""

    __slots__ = ("ref", "hooks")

    def __init__(self, ref):
        self.ref, self.hooks = ref, Hooks()

    def __call__(self):
        return self.ref() if self.ref is not None else None


def grad_edge(tensor):
    """The node a gradient for ``tensor`` flows into: its grad_fn, or its leaf accumulator."""
    return tensor._grad_fn or AccumulateGrad.of(tensor)
