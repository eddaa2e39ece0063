"""User-defined ops in PyTorch's style: ``class F(gpugrad.autograd.Function)`` with static forward/backward."""
from __future__ import annotations

from gpugrad._tensor import Tensor
from gpugrad.core.anomaly import STATE as _ANOMALY, record as _record_stack
from gpugrad.core.grad_mode import STATE, enable_grad, no_grad
from gpugrad.core.node import AccumulateGrad, Node


class FunctionCtx:
    """What ``forward`` and ``backward`` share: saved tensors and any attributes the user sets."""
    _saved = ()
    _released = False

    def save_for_backward(self, *tensors):
        self._saved = tensors
        self._versions = [t._version if t is not None else None for t in tensors]

    @property
    def saved_tensors(self):
        if self._released:
            raise RuntimeError(f"Trying to backward through the graph a second time at {self._node_name}: saved "
                               "tensors were freed. Specify retain_graph=True on the first backward() call.")
        for t, v in zip(self._saved, self._versions if self._saved else ()):
            if t is not None and t._version != v:
                raise RuntimeError(f"a tensor saved by {self._node_name} was modified in place (version {v} -> "
                                   f"{t._version}); avoid the in-place change or .clone() first")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        pass


class _CustomNode(Node):
    fresh_grads = False  # a user's backward may return a tensor it keeps: never add into it in place

    def __init__(self, cls, ctx):
        self.cls, self.ctx = cls, ctx
        ctx._node_name = self.name()

    def name(self):
        return f"{self.cls.__name__}Backward"

    def run_backward(self, g, create_graph):

        gt = g if create_graph else Tensor._wrap(g, self._be)
        with enable_grad() if create_graph else no_grad():
            gxs = self.cls.backward(self.ctx, gt)
        gxs = gxs if isinstance(gxs, tuple) else (gxs,)
        if len(gxs) != len(self._in_meta):
            raise RuntimeError(f"{self.name()}: backward returned {len(gxs)} gradients for "
                               f"{len(self._in_meta)} forward inputs")
        return tuple(None if gx is None or m is None else (gx if create_graph else gx._data)
                     for gx, m in zip(gxs, self._in_meta))

    def release(self):
        if self.ctx._saved:
            self.ctx._released = True
        self.ctx._saved = ()


class Function:
    """Base for custom differentiable functions::

        class Exp(gpugrad.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp(); ctx.save_for_backward(y); return y
            @staticmethod
            def backward(ctx, gy):
                (y,) = ctx.saved_tensors; return gy * y

        y = Exp.apply(x)
    """

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError

    @staticmethod
    def setup_context(ctx, inputs, output):
        """torch 2's style: a class that defines it has ``forward(*args)`` without ctx, then this fills ctx."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args):

        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        with no_grad():
            if cls.setup_context is Function.setup_context:
                out = cls.forward(ctx, *args)
            else:
                out = cls.forward(*args)
                cls.setup_context(ctx, args, out)
        if not isinstance(out, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return one Tensor, got {type(out).__name__}")
        ts = [a for a in args if isinstance(a, Tensor)]
        if STATE.enabled and any(t._requires_grad for t in ts):
            node = _CustomNode(cls, ctx)
            node._be = ts[0]._backend
            node.next_functions = tuple(
                (a._grad_fn or AccumulateGrad.of(a), 0) if isinstance(a, Tensor) and a._requires_grad else (None, 0)
                for a in args)
            node._in_meta = tuple((a.shape, a.dtype) if isinstance(a, Tensor) else None for a in args)
            out = out.detach()  # never relabel a tensor the user holds (forward may return an input)
            out._requires_grad, out._grad_fn = True, node
            if _ANOMALY.enabled:
                _record_stack(node)
        return out
