"""Autograd state on a tensor: requires_grad, grad, grad_fn, hooks, backward, detach."""
from __future__ import annotations

import weakref

from gpugrad.backend import backend_of
from gpugrad.core.backprop import backward as _backward
from gpugrad.core.node import AccumulateGrad, Hooks
from gpugrad.core.tensor import TensorBase, make
from gpugrad.core.views import fresh


class AutogradMethods:
    """What a tensor knows of the graph. A view whose base changed in place re-derives its grad_fn before any of
    these is read (``core.views.fresh``), as torch does."""
    __slots__ = ()


    @property
    def data(self):
        """The same values as a tensor without a graph, sharing memory (as torch's): writes through it bypass
        autograd's version checks. The raw NumPy/CuPy array is ``numpy()`` (CPU) or ``_data``."""
        return make(self._data.view(), self._backend)  # (a new array object: see detach)

    @data.setter
    def data(self, value):
        """Swap in another tensor's (or array's) memory; its shape and dtype may differ, as in torch."""
        array = value._data if isinstance(value, TensorBase) else value
        self._data, self._backend = array, backend_of(array)

    @property
    def requires_grad(self):
        base = self._base
        if base is not None and self._base_fn is not base._grad_fn and getattr(self._view_fn, "multi_output", None):
            # an output of a multi-view op whose base was written since: torch raises when it is used, not when this
            # is read (it is a view of a base that requires grad now)
            return self._requires_grad or base._requires_grad
        return fresh(self)._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError("requires_grad can only be turned off on a leaf; use .detach() for a "
                                   "non-leaf tensor")
            return self
        if requires_grad and self._data.dtype.kind not in "fV":  # NOTE: torch allows complex too; gpugrad has no complex VJPs
            raise RuntimeError(f"Only Tensors of floating point dtype can require gradients, got {self.dtype}; "
                               "convert with .float() first")
        if requires_grad and self._inference:
            raise RuntimeError("an inference tensor (made under inference_mode) cannot require grad; "
                               "make a copy with .clone() outside inference_mode")
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad_fn(self):
        fn = fresh(self)._grad_fn
        return fn.node if fn is not None and fn.routes_output else fn  # one output of several: the node itself

    @property
    def output_nr(self):
        """Which output of its grad_fn this tensor is (0 for a node's only output, and for leaves)."""
        fn = fresh(self)._grad_fn
        return fn.k if fn is not None and fn.routes_output else 0

    def is_inference(self):
        """Whether the tensor was made under ``inference_mode()`` (it can then never join a graph)."""
        return self._inference

    @property
    def is_leaf(self):
        return fresh(self)._grad_fn is None

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, TensorBase):
                raise TypeError(f"assigned grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape or value.dtype != self.dtype or value.device != self.device:
                raise RuntimeError(f"assigned grad has shape {value.shape}, dtype {value.dtype}, device "
                                   f"{value.device}; the tensor has {self.shape}, {self.dtype}, {self.device}")
        self._grad = value

    def retain_grad(self):
        """Keep .grad on a non-leaf after backward (leaves always keep theirs)."""
        if not fresh(self)._requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        if self._grad_fn is not None:
            self._grad_fn._retain = weakref.ref(self)

    @property
    def retains_grad(self):
        """True on a non-leaf after ``retain_grad()`` (False on leaves, as torch)."""
        fn = fresh(self)._grad_fn
        return fn is not None and fn._retain is not None and fn._retain() is self

    def register_hook(self, hook):
        """``hook(grad) -> Tensor or None`` runs when this tensor's gradient is computed; may replace it."""
        if not fresh(self)._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is None:
            return AccumulateGrad.register_leaf_hook(self, hook)  # kept on the leaf's side: they outlive graphs
        return self._grad_fn.register_prehook(hook)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor)`` runs after backward has accumulated into this leaf's ``.grad`` (torch's hook of the same
        name; DistributedDataParallel starts a gradient bucket's all-reduce from it). Returns a handle to remove it."""
        if not fresh(self)._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = Hooks()
        return self._post_acc_hooks.add(hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (``gradient`` = upstream, for non-scalars)."""
        _backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def detach(self):
        """Same data (shared), no graph."""
        # NOTE: a new array object over the same memory, so Op._bind_saved tells x.detach() / x's operands apart by
        # identity (the same object would bind x's saved value to its detached alias: no second derivative)
        t = make(self._data.view(), self._backend)
        t._version_counter = self._version_counter  # in-place changes through it are seen by saved copies
        return t

    def detach_(self):
        if self._base is not None and self._base._requires_grad:
            raise RuntimeError("detach_() on a view of a tensor that requires grad is not allowed; use detach()")
        self._grad_fn = None
        self._requires_grad = False
        return self
