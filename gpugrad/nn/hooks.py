"""Module hooks, as torch's: forward pre-hooks, forward hooks and full backward (pre-)hooks, removable by handle.

A full backward hook ``hook(module, grad_input, grad_output)`` sees the gradients of the module's positional
Tensor inputs and of its outputs, and may replace grad_input. As torch's BackwardHookFunction does, the call wraps
the inputs that require grad and the outputs in identity nodes: each output's node records its gradient; each
input's node records its own and hands the engine a 0-d zero for one shared node below them all, which the engine
therefore runs only after every input's gradient has arrived. That node calls the hooks and passes the (possibly
replaced) gradients on to the real inputs.
"""
from __future__ import annotations

from collections import OrderedDict

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of
from gpugrad.core import tensor_xp
from gpugrad.core.grad_mode import STATE
from gpugrad.core.node import AccumulateGrad, Node, RemovableHandle

KINDS = ("forward_pre", "forward", "backward", "backward_pre")


def new_hooks():
    return {k: OrderedDict() for k in KINDS}


def add(module, kind, hook, prepend=False, **flags):
    hooks = module._hook_dicts[kind]
    handle = RemovableHandle(hooks)
    hooks[handle.id] = (hook, flags)
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def call(module, forward, args, kwargs):
    """``forward(*args, **kwargs)`` with the module's hooks around it, in torch's order."""
    hooks = module._hook_dicts
    for hook, flags in list(hooks["forward_pre"].values()):
        if flags.get("with_kwargs"):
            out = hook(module, args, kwargs)
            if out is not None:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {out}.")
                args, kwargs = out
        else:
            out = hook(module, args)
            if out is not None:
                args = out if isinstance(out, tuple) else (out,)
    grads = _BackwardHook(module, args) if (hooks["backward"] or hooks["backward_pre"]) and STATE.enabled else None
    if grads is not None:
        args = grads.wrap_inputs(args)
    try:
        result = forward(*args, **kwargs)
    except Exception:
        for hook, flags in list(hooks["forward"].values()):
            if flags.get("always_call"):
                hook(module, args, kwargs, None) if flags.get("with_kwargs") else hook(module, args, None)
        raise
    for hook, flags in list(hooks["forward"].values()):
        out = hook(module, args, kwargs, result) if flags.get("with_kwargs") else hook(module, args, result)
        if out is not None:
            result = out
    return result if grads is None else grads.wrap_outputs(result)


class _HookNode(Node):
    """An identity node of a hooked call: role "in" (input k), "out" (output k) or "gather" (below the inputs)."""
    fresh_grads = False

    def __init__(self, owner, role, k, sources, be):
        self.owner, self.role, self.k, self._be = owner, role, k, be
        self.next_functions = tuple(((s._grad_fn or AccumulateGrad.of(s)), 0) if isinstance(s, Tensor) and
                                    s._requires_grad else (s, 0) for s in sources)
        self._in_meta = tuple((s.shape, s.dtype) if isinstance(s, Tensor) else ((), owner.dtype) for s in sources)

    def name(self):
        return "BackwardHookFunctionBackward"

    def release(self):
        pass

    def run_backward(self, g, create_graph):
        return getattr(self.owner, self.role)(self.k, g, create_graph)


def _relabel(t, node):
    y = t.detach()
    y._requires_grad, y._grad_fn = True, node
    return y


class _BackwardHook:
    def __init__(self, module, args):
        self.module, self.n_args = module, len(args)
        self.gather, self.grad_in, self.grad_out = None, [], []

    def _tensor(self, g, create_graph):
        return g if create_graph or g is None else Tensor._wrap(g, self.be)

    def wrap_inputs(self, args):
        self.idx = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
        if not self.idx:
            return args
        first = args[self.idx[0]]
        self.be, self.dtype = first._backend, first.dtype
        self.gather = _HookNode(self, "gather_", 0, [args[i] for i in self.idx], self.be)
        self.grad_in = [None] * len(self.idx)
        args = list(args)
        for k, i in enumerate(self.idx):
            args[i] = _relabel(args[i], _HookNode(self, "input_", k, [self.gather], self.be))
        return tuple(args)

    def wrap_outputs(self, result):
        outs = result if isinstance(result, tuple) else (result,)
        self.grad_out = [None] * len(outs)
        outs = tuple(_relabel(o, _HookNode(self, "output_", k, [o], o._backend))
                     if isinstance(o, Tensor) and o.requires_grad else o for k, o in enumerate(outs))
        return outs if isinstance(result, tuple) else outs[0]

    def _call_hooks(self):
        grad_input = [None] * self.n_args
        for k, i in enumerate(getattr(self, "idx", ())):
            grad_input[i] = self.grad_in[k]
        grad_input = tuple(grad_input)
        for hook, _ in list(self.module._hook_dicts["backward"].values()):
            out = hook(self.module, grad_input, tuple(self.grad_out))
            if out is not None:
                out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                if len(out) != len(grad_input):
                    raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(out)}, but "
                                       f"expected {len(grad_input)}")
                grad_input = out
        return grad_input

    def output_(self, k, g, create_graph):
        """Output k's gradient: recorded (backward pre-hooks may replace it); with no input to wait for, the
        hooks run now, with grad_input all None, as torch."""
        self.be = getattr(self, "be", None) or self.module_be(g)
        self.grad_out[k] = self._tensor(g, create_graph)
        for hook, _ in list(self.module._hook_dicts["backward_pre"].values()):
            out = hook(self.module, tuple(self.grad_out))
            if out is not None:
                self.grad_out = list(out) if isinstance(out, (tuple, list)) else [out]
        if self.gather is None:
            self._call_hooks()
        gk = self.grad_out[k]
        return (gk if create_graph or gk is None else gk._data,)

    def module_be(self, g):

        return g._backend if isinstance(g, Tensor) else backend_of(g)

    def input_(self, k, g, create_graph):
        self.grad_in[k] = self._tensor(g, create_graph)
        zero = self.be.xp.zeros((), g.dtype if not create_graph else g._data.dtype)
        return (tensor_xp._const(zero, g) if create_graph else zero,)

    def gather_(self, k, g, create_graph):
        grad_input = self._call_hooks()
        return tuple(None if grad_input[i] is None else grad_input[i] if create_graph else grad_input[i]._data
                     for i in self.idx)
