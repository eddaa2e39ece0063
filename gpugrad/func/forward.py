"""Forward-mode transforms, as ``torch.func``: ``jvp`` and ``jacfwd``, on ``gpugrad.autograd.forward_ad``.

``jvp`` makes each primal a dual tensor (inside vmap: its value, with the tangent expanded to the same levels).
Where the tangents are batched at the innermost vmap level and the primals are not (``jacfwd``'s vmap over the
basis), that level goes into forward mode's batched tangents instead (``make_batched_dual``): the primal is computed
once and every op carries the B directions in one pass. gpugrad's forward-mode levels do not nest, so a jvp inside
another one (jacfwd of jacfwd) is computed by reverse mode twice: J t = d<J^T u, t>/du.
"""
from __future__ import annotations

import functools

from gpugrad.autograd import forward_ad
from gpugrad.core.forward_state import STATE as _FORWARD
from gpugrad.core.tensor import TensorBase
from gpugrad.creation import zeros_like
from gpugrad.func import pytree
from gpugrad.func.batched import batched, full, levels_of, merge
from gpugrad.func.levels import ACTIVE
from gpugrad.func.reverse import (basis, call_with_aux, check_argnums, check_outputs, detached_tree, grad, put_argnums,
                                  take_argnums, vjp_with_argnums)
from gpugrad.func.vmap import vmap

_API = "jvp(f, primals, tangents)"


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J @ tangents)`` (and aux): the directional derivative along ``tangents`` (the primals'
    structure) in one forward pass."""
    return _jvp(func, primals, tangents, None, strict, has_aux)


def _jvp(func, args, tangents, argnums, strict, has_aux):
    if not isinstance(args, tuple):
        raise RuntimeError(f"{_API}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals).")
    nums = tuple(range(len(args))) if argnums is None else argnums
    flat_p, spec = pytree.flatten(take_argnums(args, nums))
    flat_t, t_spec = pytree.flatten(tangents)
    if spec != t_spec:
        raise RuntimeError(f"{_API}: Expected primals and tangents to have the same python structure. For example, "
                           f"if primals is a tuple of 3 tensors, tangents also must be. Got primals with structure "
                           f"{spec} and tangents with structure {t_spec}")
    for what, xs in (("primals", flat_p), ("tangents", flat_t)):
        if not xs:
            raise RuntimeError(f"{_API}: Expected {what} to contain at least one Tensor.")
        if not all(isinstance(x, TensorBase) for x in xs):
            raise RuntimeError(f"{_API}: Expected {what} to be a tuple of Tensors, got a tuple with an element of "
                               f"type {type(next(x for x in xs if not isinstance(x, TensorBase)))}")
    for p, t in zip(flat_p, flat_t):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"Trying to set a forward gradient that has a different size than that of the original "
                               f"Tensor, this is not supported. Tensor is of size {list(p.shape)} while the given "
                               f"forward gradient is of size {list(t.shape)}.")
    if _FORWARD.level is not None:
        return _jvp_by_vjp(func, args, nums, flat_t, has_aux)
    fast = _tangent_level(flat_p, flat_t)
    res = _forward(func, args, nums, spec, flat_p, flat_t, fast, strict, has_aux)
    if res is None:  # an output is batched at the tangents' level too (a tensor the function captured): expand
        res = _forward(func, args, nums, spec, flat_p, flat_t, None, strict, has_aux)
    return res


def _tangent_level(flat_p, flat_t):
    """The innermost vmap level, if every tangent is batched there and no primal is (their other levels agreeing):
    it can be forward mode's batch of directions."""
    if not ACTIVE:
        return None
    lv = ACTIVE[-1].id
    for p, t in zip(flat_p, flat_t):
        lp, lt = levels_of(p), levels_of(t)
        if lv not in lt or lv in lp or any(x not in lp for x in lt if x != lv):
            return None
    return lv


def _forward(func, args, nums, spec, flat_p, flat_t, fast, strict, has_aux):
    with forward_ad.dual_level():
        duals = []
        for p, t in zip(flat_p, flat_t):
            if fast is not None:  # the tangents' level becomes the B directions of forward mode
                lp = levels_of(p)
                tv = full(t, lp + (fast,)).movedim(len(lp), 0)
                duals.append(batched(lp, forward_ad.make_batched_dual(p._value if lp else p, tv)))
            else:
                both = merge(levels_of(p), levels_of(t))
                duals.append(batched(both, forward_ad.make_dual(full(p, both) if both else p,
                                                                full(t, both) if both else t)))
        out, aux = call_with_aux(func, put_argnums(args, nums, pytree.unflatten(duals, spec)), has_aux, _API)
        if has_aux:
            detached_tree(aux, True)  # (tensors only, as torch)
        flat_out, out_spec = pytree.flatten(out)
        check_outputs(flat_out, _API)
        primals, tangents = [], []
        for o in flat_out:
            lo = levels_of(o)
            if fast is not None and fast in lo:
                return None
            primal, tangent = forward_ad.unpack_dual(o._value if lo else o)
            tlevels = lo
            if tangent is None:
                if strict:
                    raise RuntimeError("jvp(f, primals, tangents, strict=True): The output of f is independent of "
                                       "the inputs. This is not allowed with strict=True.")
                tangent = zeros_like(primal)
            elif fast is not None:
                tangent, tlevels = tangent.movedim(0, len(lo)), lo + (fast,)
            primals.append(batched(lo, primal))
            tangents.append(batched(tlevels, tangent))
    res = (pytree.unflatten(primals, out_spec), pytree.unflatten(tangents, out_spec))
    return res + (aux,) if has_aux else res


def _jvp_by_vjp(func, args, nums, flat_t, has_aux):
    """J t = d<J^T u, t>/du at u = 0: a jvp inside an active forward-mode level."""
    res = vjp_with_argnums(func, args, nums, has_aux)
    out, vjp_fn = res[:2]
    flat_out, out_spec = pytree.flatten(out)

    def pairing(*us):
        gs, _ = pytree.flatten(vjp_fn(pytree.unflatten(list(us), out_spec)))
        return sum((g * t).sum() for g, t in zip(gs, flat_t))

    jt = grad(pairing, argnums=tuple(range(len(flat_out))))(*(zeros_like(o) for o in flat_out))
    return (out, pytree.unflatten(list(jt), out_spec)) + ((res[2],) if has_aux else ())


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian of ``func`` w.r.t. the arguments ``argnums`` by forward mode: a vmap of jvp over the standard
    basis of the inputs (forward mode's batched tangents: all directions in one pass). Nested as the outputs, then
    as ``argnums``."""
    @functools.wraps(func)
    def wrapper(*args):
        nums = check_argnums(argnums, len(args))
        flat_p, spec = pytree.flatten(take_argnums(args, nums))
        directions, _ = basis(flat_p)

        def push(*ds):
            res = _jvp(func, args, pytree.unflatten(list(ds), spec), nums, False, has_aux)
            return (res[1], res[2]) if has_aux else res[1]

        out = vmap(push, randomness=randomness)(*directions)
        aux = None
        if has_aux:
            out, aux = out
            leaves, aux_spec = pytree.flatten(aux)
            aux = pytree.unflatten([a[0] if isinstance(a, TensorBase) else a for a in leaves], aux_spec)
        flat_out, out_spec = pytree.flatten(out)
        jac = []
        for r in flat_out:  # (N, *out): the derivative along each input element
            moved, start, blocks = r.movedim(0, -1), 0, []
            for p in flat_p:
                n = p.numel()
                blocks.append(moved[..., start:start + n].reshape(*r.shape[1:], *p.shape))
                start += n
            jac.append(pytree.unflatten(blocks, spec))
        jac = pytree.unflatten(jac, out_spec)
        return (jac, aux) if has_aux else jac

    return wrapper
