"""Derivatives of whole functions, as ``torch.autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``,
``hvp`` and ``vhp`` take ``func`` and its ``inputs`` (a Tensor or a tuple of Tensors) and return results nested the
way the inputs and outputs were (a Tensor where a Tensor was given, tuples where tuples were).

    J = jacobian(f, x)                                  # reverse mode: one backward per output element
    J = jacobian(f, x, vectorize=True)                  # reverse mode, all output elements in one backward
    J = jacobian(f, x, vectorize=True, strategy="forward-mode")   # all input elements in one forward pass

A full Jacobian of f: R^n -> R^m costs n forward-mode directions or m reverse-mode ones: forward mode wins when
n < m, reverse mode when m < n (``gpugrad bench --modes`` measures where). ``jvp`` runs forward mode (tangents
through ``Op.apply``), not torch's double-backward trick. ``vectorize=True`` in reverse mode is forward over
reverse: the cotangent fed to the backward pass is a batched dual whose tangents are the basis vectors, so the
tangent of the gradient is every row of J at once. ``hvp`` is reverse over forward: H v = grad_x(<grad f, v>),
with <grad f, v> the tangent of f along v.
"""
from __future__ import annotations

import itertools

from gpugrad._tensor import Tensor
from gpugrad.autograd import forward_ad as fwd
from gpugrad.backend import on
from gpugrad.core.backprop import grad
from gpugrad.core.forward_state import set_tangent
from gpugrad.core.grad_mode import enable_grad, is_grad_enabled, set_grad_enabled
from gpugrad.core.tensor_xp import depends
from gpugrad.creation import ones_like, zeros, zeros_like
from gpugrad.ops.movement import Stack

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]

_OUT = "outputs of the user-provided function"
_STRICT = {  # torch's messages (their first sentences, which torch's tests match)
    "outputs": "Output {i} of the user-provided function does not require gradients. The outputs must be computed in a "
               "differentiable manner from the input when running in strict mode.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided function with respect to "
                "input {i} is independent of the input. This is not allowed in strict mode. You should ensure that "
                "your function is twice differentiable and that the jacobian depends on the inputs (this would be "
                "violated by a linear function for example).",
    "back": "The output of the user-provided function is independent of input {i}. This is not allowed in strict mode.",
    "jac": "Output {o} of the user-provided function is independent of input {i}. This is not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the grad_outputs when using "
                  "the double backward trick to compute forward mode gradients. This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. This is not allowed in "
                   "strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} in the grad_jacobian. "
                         "This is not allowed in strict mode as it prevents from using the double backward trick to "
                         "replace forward mode AD.",
}


# ---- the plumbing torch's functions share ----------------------------------------------------------------------------
def _as_tuple(x, what, fn):
    """(was it a tuple, the Tensors as a tuple)."""
    is_tuple = isinstance(x, tuple)
    x = x if is_tuple else (x,)
    for i, el in enumerate(x):
        if not isinstance(el, Tensor):
            which = f"the value at index {i}" if is_tuple else f"the given {what}"
            raise TypeError(f"The {what} given to {fn} must be either a Tensor or a tuple of Tensors but {which} has "
                            f"type {type(el)}.")
    return is_tuple, x


def _prep(xs, create_graph, need_graph):
    """New Tensor objects, so ``func``'s inputs are told apart from the same tensors captured in its closure: a
    differentiable view where create_graph keeps the caller's graph, else a detached leaf."""
    return tuple(x.reshape(x.shape) if create_graph and x.requires_grad else x.detach().requires_grad_(need_graph)
                 for x in xs)


def _post(xs, create_graph):
    """Results without history unless create_graph asked for it (nested tuples too)."""
    return tuple(_post(x, create_graph) if isinstance(x, tuple) else x if create_graph else x.detach() for x in xs)


def _unpack(res, is_tuple):
    """Undo ``_as_tuple``: ``is_tuple`` is one flag, or (outer, inner) for a tuple of tuples."""
    if isinstance(is_tuple, tuple):
        res = res if is_tuple[1] else tuple(r[0] for r in res)
        is_tuple = is_tuple[0]
    return res if is_tuple else res[0]


def _v(v, other, is_tuple, fn, create_graph):
    """``v`` checked against the tensors it multiplies (None only where they are one single-element Tensor)."""
    if v is None:
        if len(other) != 1 or other[0].numel() != 1:
            what = "user-provided function returns" if fn == "vjp" else "input to the user-provided function is"
            raise RuntimeError(f"The vector v can only be None if the {what} a single Tensor with a single element.")
        return None
    _, v = _as_tuple(v, "v", fn)
    if len(v) != len(other):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}." if is_tuple
                           else "The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if a.shape != b.shape:
            raise RuntimeError(f"{f'Entry {i} in ' if is_tuple else ''}v has invalid size: should be {b.shape} but "
                               f"got {a.shape}.")
    return _prep(v, create_graph, False)


def _strict(xs, kind, strict):
    for i, x in enumerate(xs if strict else ()):
        if x is None or not x.requires_grad:
            raise RuntimeError(_STRICT["back" if x is None else kind].format(i=i))


def _fill(grads, refs, strict, create_graph, stage, out=None):
    """None (independent of that input) -> zeros, or torch's error in strict mode (``out``: which output's)."""
    for i, g in enumerate(grads):
        if strict and g is None:
            raise RuntimeError(_STRICT[stage].format(i=i, o=out))
        if strict and create_graph and not g.requires_grad:
            raise RuntimeError(f"The {'hessian' if 'double' in stage else 'jacobian'} of the user-provided function "
                               f"is independent of input {i}. This is not allowed in strict mode when "
                               "create_graph=True.")
    return tuple(zeros_like(r) if g is None else g for g, r in zip(grads, refs))


def _grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """``autograd.grad`` over the outputs that require grad (all None when none does)."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs or (None,) * len(outputs))
             if o is not None and o.requires_grad]  # None: a gradient of an input the function does not use
    if not pairs:
        return (None,) * len(inputs)
    return grad(tuple(o for o, _ in pairs), inputs, tuple(g for _, g in pairs), retain_graph=retain_graph,
                create_graph=create_graph, allow_unused=True)


def _basis(ts):
    """The identity of R^N (N: all elements of ``ts``) cut by columns into one (N, *t.shape) block per tensor: batched
    tangents (or cotangents) that pick every element once."""

    n, be = sum(t.numel() for t in ts), ts[0]._backend
    with on(be):
        eye = be.xp.eye(n)
        starts = itertools.accumulate((t.numel() for t in ts), initial=0)
        return [Tensor._wrap(eye[:, a:a + t.numel()].astype(t.dtype).reshape(n, *t.shape), be)
                for a, t in zip(starts, ts)]


def _rows(t, ts):
    """``t``'s leading axis cut into one block of rows per tensor of ``ts`` (as many rows as it has elements)."""
    starts = itertools.accumulate((x.numel() for x in ts), initial=0)
    return [t[a:a + x.numel()] for a, x in zip(starts, ts)]


# ---- the API ---------------------------------------------------------------------------------------------------------
def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): one backward pass."""
    with enable_grad():
        is_in, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prep(inputs, create_graph, True)
        is_out, outputs = _as_tuple(func(*inputs), _OUT, "vjp")
        _strict(outputs, "outputs", strict)
        v = _v(v, outputs, is_out, "vjp", create_graph)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        res = _fill(_grad(outputs, inputs, v, create_graph), inputs, strict, create_graph, "back")
    return _unpack(_post(outputs, create_graph), is_out), _unpack(_post(res, create_graph), is_in)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v): one forward pass carrying the tangents ``v``."""
    with enable_grad():
        is_in, inputs = _as_tuple(inputs, "inputs", "jvp")
        # leaves that require grad, as torch's (its jvp is the double-backward trick): func sees requires_grad, and an
        # in-place op on an input raises torch's leaf error
        inputs = _prep(inputs, create_graph, True)
        v = _v(v, inputs, is_in, "jvp", create_graph) or tuple(ones_like(x) for x in inputs)
        with fwd.dual_level():
            is_out, outputs = _as_tuple(func(*(_carrying(x, t) for x, t in zip(inputs, v))), _OUT, "jvp")
            tangents = [fwd.unpack_dual(o).tangent for o in outputs]
        _strict(outputs, "outputs", strict)
        if strict:  # which inputs the outputs depend on: one backward pass, only here
            _fill(_grad(outputs, inputs, tuple(zeros_like(o) for o in outputs), retain_graph=True), inputs, True,
                  False, "back")
        res = _fill(tangents, outputs, strict, create_graph, "back_trick")
    return _unpack(_post(outputs, create_graph), is_out), _unpack(_post(res, create_graph), is_out)


def _carrying(x, t):
    """jvp's input ``x`` (a fresh leaf or view of _prep's) carrying the tangent ``t`` itself: make_dual would hand func
    a view of it, where torch's func gets the leaf (an in-place op on it raises torch's leaf error, not the view's)."""
    if x.dtype.kind not in "fV" or t.shape != x.shape or t.dtype != x.dtype or t.device != x.device:
        return fwd.make_dual(x, t)  # its error says what is wrong
    set_tangent(x, t)
    return x


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """d func(inputs) / d inputs: J[i][j] has shape outputs[i].shape + inputs[j].shape."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(f'Expected strategy to be either "forward-mode" or "reverse-mode", got {strategy!r}')
    if strategy == "forward-mode" and (create_graph or strict or not vectorize):  # torch's errors, of its types
        bad = "create_graph=True" if create_graph else "strict=True" if strict else "vectorize=False"
        raise (RuntimeError if strict and not create_graph else NotImplementedError)(
            f'jacobian: strategy="forward-mode" does not support {bad} (as in torch); it needs vectorize=True')
    if strategy == "forward-mode":
        return _jacfwd(func, inputs)
    with enable_grad():
        is_in, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prep(inputs, create_graph, True)
        is_out, outputs = _as_tuple(func(*inputs), _OUT, "jacobian")
        _strict(outputs, "outputs", strict)
        if vectorize and strict:
            raise RuntimeError("jacobian: strict=True and vectorize=True are not supported together (as in torch)")
        jac = (_jacrev_vectorized if vectorize else _jacrev)(outputs, inputs, create_graph, strict)
    return _unpack(_post(jac, create_graph), (is_out, is_in))


def _jacrev(outputs, inputs, create_graph, strict):
    """One backward pass per output element (the graph retained between them)."""
    jac = []
    for o, out in enumerate(outputs):
        rows, flat = [[] for _ in inputs], out.reshape(-1)
        for k in range(out.numel()):
            grads = _grad((flat[k],), inputs, None, create_graph, retain_graph=True)
            for r, g in zip(rows, _fill(grads, inputs, strict, create_graph, "jac", o)):
                r.append(g)
        jac.append(tuple(Stack.stack(r).reshape(*out.shape, *x.shape) for r, x in zip(rows, inputs)))
    return tuple(jac)


def _jacrev_vectorized(outputs, inputs, create_graph, strict):
    """One backward pass for all output elements: forward mode over it, the cotangents u = 0 carrying the basis
    vectors as B = (elements of the outputs) tangents. The gradient is linear in u, so its tangent is J^T e_k for
    every k: the rows of J. create_graph=True always, so the backward runs on Tensors and carries the tangents."""

    with fwd.dual_level():
        us = tuple(fwd.make_batched_dual(zeros_like(o), b) for o, b in zip(outputs, _basis(outputs)))
        try:
            grads = _grad(outputs, inputs, us, create_graph=True, retain_graph=True)
        except (NotImplementedError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and "create_graph" not in str(e):
                raise
            raise NotImplementedError(f"jacobian(vectorize=True) runs forward mode over the backward pass, which needs "
                                      f"every op's double backward and JVP: {e}. Use vectorize=False.") from e
        m = sum(o.numel() for o in outputs)
        cols = [_rows_of(g, m, x) for g, x in zip(grads, inputs)]
    per_input = [[r.reshape(*o.shape, *x.shape) for r, o in zip(_rows(c, outputs), outputs)]
                 for c, x in zip(cols, inputs)]
    return tuple(zip(*per_input))


def _rows_of(g, m, x):
    """The tangent of the gradient ``g`` w.r.t. ``x``: its ``m`` rows of J (zeros where ``g`` has none), requiring
    grad where ``g`` does: torch's vmapped backward is one computation, so its rows depend on the inputs exactly when
    the gradient does. A VJP that reads an input only through a comparison (relu's) or ignores it (zero_'s) gives
    ``g`` a dependence with derivative 0 (tensor_xp.depends) that no tangent rule passes on."""
    t = None if g is None else fwd.unpack_dual(g).tangent
    if t is None:
        t = zeros(m, *x.shape, dtype=x.dtype, device=x.device)
    if g is not None and g.requires_grad and not t.requires_grad:
        t = depends(t, g)
    return t


def _jacfwd(func, inputs):
    """One forward pass whose tangents are the basis of all input elements: B = n directions at once."""
    is_in, inputs = _as_tuple(inputs, "inputs", "jacobian")
    inputs = tuple(x.detach() for x in inputs)  # no create_graph here: the tangents take the fast array path
    with fwd.dual_level():
        duals = [fwd.make_batched_dual(x, b) for x, b in zip(inputs, _basis(inputs))]
        is_out, outputs = _as_tuple(func(*duals), _OUT, "jacobian")
        tangents = [fwd.unpack_dual(o).tangent for o in outputs]
    jac = []
    for o, t in zip(outputs, tangents):
        if t is None:
            jac.append(tuple(zeros(*o.shape, *x.shape, dtype=o.dtype, device=o.device) for x in inputs))
            continue  # the tangent's leading axis is the input element: moved last, as J's input axes are
        jac.append(tuple(r.permute(*range(1, r.ndim), 0).reshape(*o.shape, *x.shape)
                         for r, x in zip(_rows(t, inputs), inputs)))
    return _unpack(_post(tuple(jac), False), (is_out, is_in))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Jacobian of the gradient of a scalar ``func``: H[i][j] has shape inputs[i].shape + inputs[j].shape."""
    is_in, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(f'Expected strategy to be either "forward-mode" or "reverse-mode", got '
                             f'{outer_jacobian_strategy!r}')

    def scalar(*x):
        return _scalar(func(*x), "hessian", strict)[0].squeeze()

    def gradient(*x):
        if outer_jacobian_strategy == "forward-mode":  # keep the duals: _prep views them, detaching drops tangents
            x = tuple(t.requires_grad_(True) for t in x)
        g = jacobian(scalar, x, create_graph=True)
        _strict(g, "jacobian", strict)
        return g

    res = jacobian(gradient, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                   strategy=outer_jacobian_strategy)
    return _unpack(res, (is_in, is_in))


def _scalar(out, fn, strict):
    """``out`` as a 1-tuple, checked to be the single single-element Tensor of a ``hessian``/``vhp``/``hvp``."""
    is_out, outputs = _as_tuple(out, _OUT, fn)
    _strict(outputs, "outputs", strict)
    if is_out:
        raise RuntimeError(f"The function given to {fn} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn} should contain a single element")
    return outputs


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H): double backward."""
    with enable_grad():
        is_in, inputs = _as_tuple(inputs, "inputs", "vhp")
        inputs = _prep(inputs, create_graph, True)
        v = _v(v, inputs, is_in, "vhp", create_graph)
        outputs = _scalar(func(*inputs), "vhp", strict)
        jac = _grad(outputs, inputs, create_graph=True)
        _strict(jac, "jacobian", strict)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        res = _fill(_grad(jac, inputs, v, create_graph), inputs, strict, create_graph, "double_back")
    return _post(outputs, create_graph)[0], _unpack(_post(res, create_graph), is_in)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v): reverse over forward. One forward pass carrying v gives <grad f, v> as the tangent of f
    (recorded, since the inputs require grad); one backward of it gives H v."""

    with enable_grad():
        is_in, inputs = _as_tuple(inputs, "inputs", "hvp")
        inputs = _prep(inputs, create_graph, True)
        v = _v(v, inputs, is_in, "hvp", create_graph) or tuple(ones_like(x) for x in inputs)
        with fwd.dual_level():
            outputs = _scalar(func(*(fwd.make_dual(x, t) for x, t in zip(inputs, v))), "hvp", strict)
            tangent = fwd.unpack_dual(outputs[0]).tangent
        if strict:  # torch's check that the gradient depends on the inputs: one more backward, only here
            _strict(_grad(outputs, inputs, create_graph=True), "jacobian", True)
        grads = _grad((tangent,), inputs, None, create_graph) if tangent is not None else (None,) * len(inputs)
    res = _fill(grads, inputs, strict, create_graph, "double_back_trick")
    return _post(outputs, create_graph)[0], _unpack(_post(res, create_graph), is_in)
