"""The entry points of reverse mode: ``backward`` (accumulate into the leaves' ``.grad``) and ``grad`` (return the
gradients instead), as torch.autograd's. Both turn their arguments into (node, gradient) roots and run the engine."""
from __future__ import annotations

from gpugrad.backend import on
from gpugrad.core import engine
from gpugrad.core.forward_state import STATE as FORWARD
from gpugrad.core.node import AccumulateGrad
from gpugrad.core.tensor import TensorBase, make, new
from gpugrad.core.views import fresh


def _roots(outputs, grad_outputs, create_graph, what):
    outputs = (outputs,) if isinstance(outputs, TensorBase) else tuple(outputs)
    if grad_outputs is None or isinstance(grad_outputs, TensorBase):
        grad_outputs = (grad_outputs,) * len(outputs) if grad_outputs is None else (grad_outputs,)
    grad_outputs = tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grad_outputs)} gradients ({what}: one gradient per "
                           "output, None for a scalar one)")
    roots = []
    for i, (t, g) in enumerate(zip(outputs, grad_outputs)):
        if not fresh(t)._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn ({what}: "
                               "nothing to differentiate; did a no_grad() or detach() cut it off?)")
        if g is None:
            if t._data.size != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs ({what}: output {i} has "
                                   f"shape {t.shape}: pass gradient=<tensor of that shape>, e.g. ones_like)")
            with on(t._backend):
                g = t._backend.xp.ones_like(t._data)
        else:
            if not isinstance(g, TensorBase):
                g = new(g, dtype=t.dtype, device=t.device)
            if g.shape != t.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] has a "
                                   f"shape of {t.shape}.")
            if g.device != t.device:
                raise RuntimeError(f"invalid gradient at index {i} - expected device {t.device} but got {g.device} "
                                   f"({what}: move the gradient with .to(device) first)")
            if create_graph:
                roots.append((t._grad_fn or AccumulateGrad.of(t), g))
                continue
            with on(t._backend):
                g = g._data if g.dtype == t.dtype else g._data.astype(t.dtype)
        node = t._grad_fn or AccumulateGrad.of(t)
        roots.append((node, make(g, t._backend) if create_graph else g))
    return roots


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves (only ``inputs``, if given)."""
    roots = _roots(tensors, grad_tensors, create_graph or FORWARD.level is not None, "backward")
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is None:
        engine.run(roots, retain, create_graph)
        return
    inputs = (inputs,) if isinstance(inputs, TensorBase) else tuple(inputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    for i, t in enumerate(inputs):  # as torch: a non-leaf input retains its grad from now on, and its grad_fn runs
        if not fresh(t)._requires_grad:
            raise RuntimeError(f"can't retain_grad on Tensor that has requires_grad=False (backward: input {i}, of "
                               f"shape {t.shape}, does not require grad)")
        if t._grad_fn is not None:
            t.retain_grad()
    engine.run(roots, retain, create_graph, only=[t._grad_fn or AccumulateGrad.of(t) for t in inputs])


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """Gradients of ``outputs`` w.r.t. ``inputs``, returned instead of accumulated into ``.grad``."""
    single = isinstance(inputs, TensorBase)
    inputs = (inputs,) if single else tuple(inputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    for i, t in enumerate(inputs):
        if not fresh(t)._requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors does not require grad (grad: input {i}, of shape "
                               f"{t.shape})")
    roots = _roots(outputs, grad_outputs, create_graph or FORWARD.level is not None, "grad")
    nodes = [t._grad_fn or AccumulateGrad.of(t) for t in inputs]
    capture = engine.run(roots, create_graph if retain_graph is None else retain_graph, create_graph,
                         capture=dict.fromkeys(nodes))
    out = []
    for i, (t, node) in enumerate(zip(inputs, nodes)):
        g = capture[node]
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in the "
                                   "graph. Set allow_unused=True if this is the desired behavior.")
            out.append(None)
        else:
            # Copy: the captured array may be shared with another path or be the caller's own grad_outputs (a
            # Tensor carrying its tangent in a dual level: engine.py; the copy carries it too).
            out.append(g if create_graph else g.clone() if isinstance(g, TensorBase) else make(g.copy(), t._backend))
    return tuple(out)


def clear_grad(p, set_to_none=True):
    """``p.grad`` reset for the next backward (Module.zero_grad, Optimizer.zero_grad): None, so backward hands its
    fresh gradient over, or zeros written into the existing buffer (any flat-buffer view of it survives)."""
    g = p._grad
    if g is None:
        return
    if set_to_none:
        p._grad = None
        return
    with on(p._backend):
        if g._grad_fn is not None:
            p._grad = make(p._backend.xp.zeros_like(g._data), p._backend)  # a graph-carrying grad
        else:
            g._data.fill(0)
            g._version_counter[0] += 1
