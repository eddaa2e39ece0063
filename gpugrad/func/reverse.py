"""Reverse-mode transforms, as ``torch.func``: ``grad``, ``grad_and_value``, ``vjp``, ``jacrev`` and ``hessian``, on
gpugrad.autograd.grad.

Each differentiated input becomes a new tensor for the function (a view where it already requires grad, so an
enclosing transform or the caller's own backward sees through it; else a detached leaf). Inside vmap it is first
expanded to every active level, so that each sample gets a gradient of its own. The backward pass records a graph
(``create_graph``) only where something needs it: a graph that reaches tensors requiring grad besides these inputs
(nested transforms, parameters captured by the function), a cotangent that requires grad or is batched (a vmap over
``vjp_fn``: the backward runs on Tensors, through the batching rules), or an active forward-mode level (jacfwd
over jacrev); the results are detached again (their tangents kept) when the graph was only needed for the pass.
"""
from __future__ import annotations

import functools

from gpugrad.core.backprop import grad as autograd_grad
from gpugrad.core.forward_state import STATE as _FORWARD, set_tangent
from gpugrad.core.grad_mode import enable_grad, is_grad_enabled
from gpugrad.core.node import AccumulateGrad
from gpugrad.core.tensor import TensorBase
from gpugrad.creation import eye, ones_like, zeros, zeros_like
from gpugrad.func import pytree
from gpugrad.func.batched import BatchedTensor, batched, full, levels_of, merge
from gpugrad.func.levels import active_ids
from gpugrad.func.vmap import vmap


# -- argnums, as torch checks them ----------------------------------------------------------------------------
def _wrap_argnum(argnum, n):
    if not isinstance(argnum, int):
        raise RuntimeError(f"argnum must be int, got: {type(argnum)}")
    if -n <= argnum < n:
        return argnum % n
    raise RuntimeError(f"Got argnum={argnum}, but only {n} positional inputs")


def check_argnums(argnums, n):
    """argnums (an int or a non-empty tuple of distinct ints) made non-negative."""
    if isinstance(argnums, int):
        return _wrap_argnum(argnums, n)
    if not isinstance(argnums, tuple):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    argnums = tuple(_wrap_argnum(a, n) for a in argnums)
    if not argnums:
        raise RuntimeError("argnums must be non-empty")
    if len(set(argnums)) != len(argnums):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return argnums


def take_argnums(args, argnums):
    return args[argnums] if isinstance(argnums, int) else tuple(args[i] for i in argnums)


def put_argnums(args, argnums, new):
    out = list(args)
    for i, v in zip((argnums,) if isinstance(argnums, int) else argnums, (new,) if isinstance(argnums, int) else new):
        out[i] = v
    return tuple(out)


# -- the inputs and the backward pass --------------------------------------------------------------------------
def detached(t):
    """``t`` without its graph; a forward-mode tangent it carries stays (jacfwd over a reverse-mode transform)."""
    if type(t) is BatchedTensor:
        return batched(t._levels, detached(t._value))
    d = t.detach()
    if _FORWARD.level is not None and t._fw_grad is not None:
        set_tangent(d, t._fw_grad)
    return d


def differentiable(x, levels):
    """(x as the function sees it, the tensor gradients are taken for)."""
    if not isinstance(x, TensorBase):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    v = full(x, levels) if levels else x
    leaf = v.view_as(v) if v.requires_grad else detached(v).requires_grad_()
    return batched(levels, leaf), leaf


def reaches_outside(roots, leaves):
    """Whether the graph of ``roots`` reaches a tensor that requires grad other than ``leaves``."""
    if any(leaf._grad_fn is not None for leaf in leaves):
        return True
    inner = {id(leaf) for leaf in leaves}
    stack, seen = [], set()
    for r in roots:
        if r._grad_fn is not None:
            stack.append(r._grad_fn)
        elif r._requires_grad and id(r) not in inner:
            return True
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, AccumulateGrad):
            if id(node.variable) not in inner:
                return True
            continue
        stack.extend(p for p, _ in node.next_functions if p is not None)
    return False


def backward(outs, leaves, cots, outside, grad_mode, retain_graph=None, create_graph=None):
    """d<outs, cots>/d leaves (zeros where a leaf is unused), with a graph only where it is needed."""
    pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
    if not pairs:
        return [zeros_like(leaf) for leaf in leaves]
    is_batched = any(type(c) is BatchedTensor for _, c in pairs)
    outside = outside or any(c.requires_grad for _, c in pairs)
    keep = grad_mode and outside if create_graph is None else create_graph
    graph = keep or is_batched or _FORWARD.level is not None
    with enable_grad():
        gs = autograd_grad(tuple(o for o, _ in pairs), leaves, tuple(c for _, c in pairs),
                           retain_graph=retain_graph, create_graph=graph, allow_unused=True)
    return [zeros_like(leaf) if g is None else g if keep or not graph else detached(g) for g, leaf in zip(gs, leaves)]


def _expose(c, levels):
    """A cotangent for an output value batched at ``levels`` (its leading dims): c's other levels stay batched."""
    own = levels_of(c)
    extra = tuple(lv for lv in own if lv not in levels)
    if not extra:
        return full(c, levels) if levels else c
    both = merge(levels, own)
    v = full(c, both)
    return batched(extra, v.permute(*(both.index(lv) for lv in extra + levels), *range(len(both), v.ndim)))


def _hide(g, levels):
    """The inverse of _expose on a gradient: ``levels`` (its leading dims) batched again."""
    own = levels_of(g)
    if not own:
        return batched(levels, g)
    both, order = merge(levels, own), own + levels
    v = g._value
    return batched(both, v.permute(*(order.index(lv) for lv in both), *range(len(both), v.ndim)))


def call_with_aux(func, args, has_aux, api, kwargs=None):
    """(output, aux) of ``func(*args)``: aux None without has_aux."""
    out = func(*args, **(kwargs or {}))
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True")
    return out


def _call(func, args, nums, levels, has_aux, api, kwargs=None):
    """func with its arguments ``nums`` made differentiable: (output, aux, the tensors to take gradients for, the
    structure of those arguments)."""
    flat, spec = pytree.flatten(take_argnums(args, nums))
    made = [differentiable(x, levels) for x in flat]
    out, aux = call_with_aux(func, put_argnums(args, nums, pytree.unflatten([m[0] for m in made], spec)), has_aux,
                             api, kwargs)
    return out, aux, [m[1] for m in made], spec


def detached_tree(tree, outside):
    """A pytree of tensors (torch refuses anything else), detached unless its graph reaches ``outside`` tensors."""
    leaves, spec = pytree.flatten(tree)
    for t in leaves:
        if not isinstance(t, TensorBase):
            raise RuntimeError(f"Expected tensors, got unsupported type {type(t)}")
    return tree if outside else pytree.unflatten([detached(t) for t in leaves], spec)


# -- the transforms --------------------------------------------------------------------------------------------
def grad_and_value(func, argnums=0, has_aux=False):
    """``func``'s gradient w.r.t. the arguments ``argnums`` (pytrees of Tensors) and its value, as one function:
    ``(grad, value)``, or ``(grad, (value, aux))`` with ``has_aux``. ``func`` returns a scalar Tensor."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        levels, grad_mode = active_ids(), is_grad_enabled()
        nums = check_argnums(argnums, len(args))
        with enable_grad():
            output, aux, leaves, spec = _call(func, args, nums, levels, has_aux, "grad_and_value(f)(*args)", kwargs)
            if not isinstance(output, TensorBase):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got "
                                   f"{type(output)}")
            if output.dim() != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
                                   f"tensor with {output.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs "
                                   "instead?")
            value = full(output, levels) if levels else output
            outside = reaches_outside([value], leaves)
            gs = backward([value], leaves, [ones_like(value)], outside, grad_mode)
        grads = pytree.unflatten([batched(levels, g) for g in gs], spec)
        value = detached_tree(output, outside)
        return (grads, (value, detached_tree(aux, outside))) if has_aux else (grads, value)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """The gradient of ``func`` (which returns a scalar Tensor) w.r.t. its arguments ``argnums``, nested as they
    are; ``(grad, aux)`` with ``has_aux``. Composes with vmap, jvp and itself (``grad(grad(f))``)."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)`` (and aux): ``vjp_fn(cotangents)`` gives one gradient per primal, a tuple."""
    return vjp_with_argnums(func, primals, None, has_aux)


def vjp_with_argnums(func, args, argnums, has_aux):
    levels = active_ids()
    nums = tuple(range(len(args))) if argnums is None else check_argnums(argnums, len(args))
    with enable_grad():
        out, aux, leaves, spec = _call(func, args, nums, levels, has_aux, "vjp(f, *primals)")
        flat_out, out_spec = pytree.flatten(out)
        check_outputs(flat_out, "vjp(f, *primals)")
        for o in flat_out:
            if not o.is_floating_point():
                raise RuntimeError(f"vjp(f, ...): All outputs of f must be floating-point or complex Tensors, got "
                                   f"Tensor with dtype {o.dtype}")
        values = [full(o, levels) if levels else o for o in flat_out]
    outside = reaches_outside(values, leaves)

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        flat_c, c_spec = pytree.flatten(cotangents)
        if c_spec != out_spec:
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as pytree structure of "
                               f"outputs to the function. cotangents: {c_spec}, primal output: {out_spec}")
        for i, (c, o) in enumerate(zip(flat_c, flat_out)):
            if not isinstance(c, TensorBase) or tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{tuple(getattr(c, 'shape', ()))} and output[{i}] has a shape of {tuple(o.shape)}.")
        gs = backward(values, leaves, [_expose(c, levels) for c in flat_c], outside, is_grad_enabled(),
                      retain_graph, create_graph)
        return pytree.unflatten([_hide(g, levels) for g in gs], spec)

    primal = pytree.unflatten(detached_tree(flat_out, outside), out_spec)
    return (primal, vjp_fn, detached_tree(aux, outside)) if has_aux else (primal, vjp_fn)


def check_outputs(flat_out, api):
    if not flat_out or (len(flat_out) == 1 and flat_out[0] is None):
        raise RuntimeError(f"{api}: Expected f to be a function that has non-empty output (got output = {flat_out})")
    for o in flat_out:
        if not isinstance(o, TensorBase):
            raise RuntimeError(f"{api}: expected f(*primals) to return only tensors, got unsupported type {type(o)}")


def basis(tensors):
    """The standard basis of the tensors' concatenated elements: for each tensor, its rows (M, *shape) of an M x M
    identity, M the total number of elements."""
    m = sum(t.numel() for t in tensors)
    eye_m = eye(m, dtype=tensors[0].dtype, device=tensors[0].device)
    out, start = [], 0
    for t in tensors:
        n = t.numel()
        out.append(eye_m[:, start:start + n].reshape(m, *t.shape).to(dtype=t.dtype))
        start += n
    return tuple(out), m


def jacobian_blocks(rows, outs, out_spec):
    """Per output, ``rows`` (a pytree of (M, *arg) leaves, M the outputs' total size) cut and reshaped into
    (*out.shape, *arg.shape) blocks, nested as the outputs, then as the arguments."""
    flat_rows, arg_spec = pytree.flatten(rows)
    jac, start = [], 0
    for o in outs:
        n = o.numel()
        jac.append(pytree.unflatten([r[start:start + n].reshape(*o.shape, *r.shape[1:]) for r in flat_rows],
                                    arg_spec))
        start += n
    return pytree.unflatten(jac, out_spec)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """The Jacobian of ``func`` w.r.t. the arguments ``argnums`` by reverse mode: a vmap of ``vjp_fn`` over the
    standard basis of the outputs (``chunk_size`` rows at a time). Nested as the outputs, then as ``argnums``."""
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args):
        res = vjp_with_argnums(func, args, argnums, has_aux)
        out, vjp_fn = res[:2]
        flat_out, out_spec = pytree.flatten(out)
        cots, m = basis(flat_out)
        if m:
            rows = vmap(lambda *c: vjp_fn(pytree.unflatten(list(c), out_spec)), chunk_size=chunk_size)(*cots)
        else:  # no output elements: empty Jacobians
            leaves, spec = pytree.flatten(take_argnums(args, check_argnums(argnums, len(args))))
            rows = pytree.unflatten([zeros(0, *d.shape, dtype=d.dtype, device=d.device) for d in leaves], spec)
        jac = jacobian_blocks(rows, flat_out, out_spec)
        return (jac, res[2]) if has_aux else jac

    return wrapper


def hessian(func, argnums=0):
    """The Hessian of a scalar ``func`` w.r.t. ``argnums``: jacrev of jacrev (reverse over reverse, on
    gpugrad.autograd.grad with create_graph)."""
    return jacrev(jacrev(func, argnums), argnums)
