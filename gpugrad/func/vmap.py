"""``vmap``: a function of one sample run over a batch, as ``torch.func.vmap``.

    vmap(torch.dot, in_dims=(0, None))(xs, w)              # one dot per row of xs
    vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)   # per-sample gradients

The function sees each batched input without its batch dim (``batched.BatchedTensor``); each op runs once over the
whole batch by its batching rule (``rules.py``), or once per sample where it has none. Where the function needs a
batched tensor's values as plain data (a frontend that computes on arrays, a draw under ``randomness="different"``),
vmap runs the function once per sample and stacks the results, with a warning. Levels nest: vmap of vmap, and grad
or jacrev inside vmap. NOTE: the active levels are process-global, as gpugrad's grad mode is: one vmap per thread.
"""
from __future__ import annotations

import functools

from gpugrad.core.batching import STATE as _HOOKS
from gpugrad.core.grad_mode import is_grad_enabled
from gpugrad.core.tensor import TensorBase
from gpugrad.func import pytree
from gpugrad.func.batched import BatchedTensor, add_level, levels_of, merge, remove_level
from gpugrad.func.dispatch import dispatch
from gpugrad.func.levels import ACTIVE, NeedsPerSample, pop_level, push_level, warn_once
from gpugrad.ops.movement import Cat, Stack

_RANDOMNESS = ("error", "different", "same")


def _name(func):
    return getattr(func, "__name__", repr(func))


def on_random():
    """Applies the active vmaps' ``randomness=`` to a random draw (``random.generator``)."""
    if any(lv.randomness == "error" for lv in ACTIVE):
        raise RuntimeError("vmap: called random operation while in randomness error mode. Please either use the "
                           "'same' or 'different' randomness flags on vmap or perform the randomness operation out "
                           "of vmap")
    different = tuple(lv.id for lv in ACTIVE if lv.randomness == "different")
    if different:
        raise NeedsPerSample(different, "randomness='different' takes one draw per sample")


def on_function(cls, args):
    """A custom autograd.Function called on batched inputs that require grad: its node would record the batch's
    graph on the wrapper, not on the values autograd differentiates, so the enclosing vmap runs once per sample."""
    levels = ()
    for a in args:
        if type(a) is BatchedTensor and a._value.requires_grad and is_grad_enabled():
            levels = merge(levels, a._levels)
    if levels:
        raise NeedsPerSample(levels, f"{cls.__name__}.apply, a custom autograd.Function, records its graph for plain "
                                     "tensors only")


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` over a batch: ``in_dims`` says which dim of each input (a pytree prefix of the arguments; None: not
    batched) is the batch, ``out_dims`` where the batch goes in each output; ``randomness`` is "error" (random ops
    raise), "same" (one draw for the whole batch) or "different" (one per sample); ``chunk_size`` runs the batch in
    chunks of that many samples."""
    if randomness not in _RANDOMNESS:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")
    _check_out_dims(out_dims, func)

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        flat, spec, flat_in, size = _inputs(func, in_dims, args)
        if chunk_size is None or chunk_size >= size:
            return _run(func, flat, flat_in, spec, kwargs, size, out_dims, randomness)
        parts = []
        for start in range(0, size, chunk_size):
            n = min(chunk_size, size - start)
            chunk = [a.narrow(d, start, n) if d is not None else a for a, d in zip(flat, flat_in)]
            parts.append(_run(func, chunk, flat_in, spec, kwargs, n, out_dims, randomness))
        return _concat(parts, out_dims)

    return wrapped


def _check_out_dims(out_dims, func):
    leaves, _ = pytree.flatten(out_dims)
    if not all(d is None or isinstance(d, int) for d in leaves):
        raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims}): `out_dims` must be an int, None or a python "
                         "collection of ints representing where in the outputs the vmapped dimension should appear.")


def _inputs(func, in_dims, args):
    """(flat args, their structure, one in_dim per leaf, the batch size), checked as torch checks them."""
    head = f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>)"
    if not isinstance(in_dims, (int, tuple)):
        raise ValueError(f"{head}: expected `in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({_name(func)})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you are "
                         "trying to vmap over a function with no inputs. The latter is unsupported.")
    flat, spec = pytree.flatten(args)
    flat_in = pytree.broadcast_prefix(in_dims, spec)
    if flat_in is None:
        raise ValueError(f"{head}: in_dims is not compatible with the structure of `inputs`. in_dims has structure "
                         f"{pytree.flatten(in_dims)[1]} but inputs has structure {spec}.")
    sizes = []
    for i, (a, d) in enumerate(zip(flat, flat_in)):
        if d is None:
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(f"{head}: Got in_dim={d} for an input but in_dim must be either an integer dimension or "
                             "None.")
        if not isinstance(a, TensorBase):
            raise ValueError(f"{head}: Got in_dim={d} for an input but the input is of type {type(a)}. We cannot vmap "
                             "over non-Tensor arguments, please use None as the respective in_dim")
        if not -a.dim() <= d < a.dim():
            raise ValueError(f"{head}: Got in_dim={d} for some input, but that input is a Tensor of dimensionality "
                             f"{a.dim()} so expected in_dim to satisfy -{a.dim()} <= in_dim < {a.dim()}.")
        flat_in[i] = d % a.dim()
        sizes.append(a.shape[flat_in[i]])
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return flat, spec, flat_in, sizes[0]


def _run(func, flat, flat_in, spec, kwargs, size, out_dims, randomness):
    level = push_level(size, randomness)
    _HOOKS.dispatch, _HOOKS.on_random, _HOOKS.on_function = dispatch, on_random, on_function
    try:
        inputs = [add_level(a, d, level.id) if d is not None else a for a, d in zip(flat, flat_in)]
        out = func(*pytree.unflatten(inputs, spec), **kwargs)
        return _outputs(func, out, out_dims, lambda o, d: remove_level(o, level.id, size, d), level.id)
    except NeedsPerSample as e:
        if level.id not in e.levels:
            raise
        reason = e.reason
    finally:
        pop_level(level)
        if not ACTIVE:
            _HOOKS.dispatch = _HOOKS.on_random = _HOOKS.on_function = None
    warn_once(("vmap", reason), f"vmap: {reason}; vmap runs {_name(func)} once per sample instead, which is slow")
    if not size:
        raise RuntimeError(f"vmap: {reason}, and a batch of size 0 has no sample to run {_name(func)} on")
    outs = [func(*pytree.unflatten([a.select(d, i) if d is not None else a for a, d in zip(flat, flat_in)], spec),
                 **kwargs) for i in range(size)]
    return _stack(func, outs, out_dims)


def _flat_out_dims(func, out, out_dims):
    leaves, spec = pytree.flatten(out)
    if isinstance(out, TensorBase):
        dims = [out_dims] if not isinstance(out_dims, tuple) else list(out_dims) if len(out_dims) == 1 else None
    else:
        dims = pytree.broadcast_prefix(out_dims, spec)
    if dims is None:
        raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with "
                         f"the structure of `outputs`. out_dims has structure {pytree.flatten(out_dims)[1]} but "
                         f"outputs has structure {spec}.")
    return leaves, spec, dims


def _outputs(func, out, out_dims, remove, level):
    leaves, spec, dims = _flat_out_dims(func, out, out_dims)
    res = []
    for o, d in zip(leaves, dims):
        if d is None:
            if level in levels_of(o):
                raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` can not return a BatchedTensor when "
                                 "out_dim is None")
            res.append(o)
        elif not isinstance(o, TensorBase):
            raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` must only return Tensors, got type "
                             f"{type(o)}. Did you mean to set out_dims= to None for output?")
        else:
            res.append(remove(o, d))
    return pytree.unflatten(res, spec)


def _stack(func, outs, out_dims):
    """The per-sample results of the fallback, stacked as vmap's outputs would be."""
    flats = [pytree.flatten(o) for o in outs]
    leaves, spec, dims = _flat_out_dims(func, outs[0], out_dims)
    if any(s != spec for _, s in flats):
        raise ValueError(f"vmap({_name(func)}, ...): the samples' outputs differ in structure")
    res = []
    for j, d in enumerate(dims):
        if d is None:
            res.append(leaves[j])
        elif not isinstance(leaves[j], TensorBase):
            raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` must only return Tensors, got type "
                             f"{type(leaves[j])}. Did you mean to set out_dims= to None for output?")
        else:
            res.append(Stack.stack([f[0][j] for f in flats], d % (leaves[j].ndim + 1)))
    return pytree.unflatten(res, spec)


def _concat(parts, out_dims):
    """The chunks' outputs joined along their out_dims."""
    flats = [pytree.flatten(p) for p in parts]
    leaves, spec = flats[0]
    dims = [out_dims] if isinstance(parts[0], TensorBase) and not isinstance(out_dims, tuple) else \
        list(out_dims) if isinstance(parts[0], TensorBase) else pytree.broadcast_prefix(out_dims, spec)
    return pytree.unflatten([leaves[j] if d is None else Cat.cat([f[0][j] for f in flats], d)
                             for j, d in enumerate(dims)], spec)
