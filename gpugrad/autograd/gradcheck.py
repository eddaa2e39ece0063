"""Numerical gradient checks, as ``torch.autograd.gradcheck`` / ``gradgradcheck``: float64 central differences
against the engine's VJPs (and, with ``check_forward_ad``, against forward mode's JVPs)."""
from __future__ import annotations

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.autograd import forward_ad
from gpugrad.core.backprop import grad
from gpugrad.core.tensor import new


class GradcheckError(RuntimeError):
    pass


def _outputs(fn, inputs):

    out = fn(*inputs)
    return (out,) if isinstance(out, Tensor) else tuple(out)


def _flat_outputs(fn, inputs):
    # Not under no_grad: fn may itself differentiate (a gradient-of-gradient check).
    return np.concatenate([np.asarray(o.detach().numpy(force=True), dtype=np.float64).ravel()
                               for o in _outputs(fn, inputs)])


def gradcheck(fn, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None, seed=0):
    """Check ``fn``'s gradients w.r.t. every input that requires grad against central finite differences.

    Full mode compares the whole Jacobian element by element; ``fast_mode`` compares one scalar
    ``<u, J v>`` for random directions u, v (HIPS' check_vjp).  ``check_backward_ad`` (default) checks the VJPs,
    ``check_forward_ad`` the JVPs (forward mode), ``check_grad_dtypes`` that each gradient has its input's dtype.
    Returns True, or raises GradcheckError naming the input, the element and both values (or returns False with
    ``raise_exception=False``). torch's ``nondet_tol``, ``check_undefined_grad`` and ``masked`` are accepted: gpugrad's
    backward is deterministic and gives zeros, never undefined gradients, for outputs that got none.
    """
    if check_batched_grad or check_batched_forward_grad:
        raise NotImplementedError("gradcheck: check_batched_grad and check_batched_forward_grad need vmap over the "
                                  "gradient, which gradcheck does not do; pass False")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them have "
                         "requires_grad=True.")
    for i in diff:
        if inputs[i].dtype != np.float64:
            raise TypeError(f"gradcheck: input {i} is {inputs[i].dtype}; finite differences need float64 inputs")
    outs = _outputs(fn, inputs)
    rng = np.random.default_rng(seed)

    def fail(msg):
        if raise_exception:
            raise GradcheckError(msg)
        return False

    if fast_mode:
        us = [rng.standard_normal(o.shape) for o in outs]
        vs = {i: rng.standard_normal(inputs[i].shape) for i in diff}
        plus = _perturbed(fn, inputs, {i: eps * vs[i] for i in diff})
        minus = _perturbed(fn, inputs, {i: -eps * vs[i] for i in diff})
        jv = (plus - minus) / (2 * eps)
        numeric = float(np.dot(jv, np.concatenate([u.ravel() for u in us])))
        if check_backward_ad:
            gouts = [new(u, dtype=o.dtype, device=o.device) for u, o in zip(us, outs)]
            live = [k for k, o in enumerate(outs) if o.requires_grad]
            grads = grad([outs[k] for k in live], [inputs[i] for i in diff], [gouts[k] for k in live],
                         retain_graph=True, allow_unused=True) if live else [None] * len(diff)
            if check_grad_dtypes and not _dtypes_match(grads, [inputs[i] for i in diff]):
                return fail("gradcheck: a gradient's dtype differs from its input's")
            analytic = sum(float(np.sum(g.numpy(force=True) * vs[i])) for g, i in zip(grads, diff) if g is not None)
            if not abs(analytic - numeric) <= atol + rtol * abs(numeric):
                return fail(f"gradcheck (fast mode): <u, J v> numeric {numeric!r} vs analytic {analytic!r} for inputs "
                            f"{diff} (random directions, seed {seed})")
        if check_forward_ad:
            got = _jvp(fn, inputs, {i: vs[i] for i in diff})
            if not np.allclose(got, jv, rtol=rtol, atol=atol):
                return fail(f"gradcheck (fast mode, forward AD): J v by forward mode differs from finite differences "
                            f"for inputs {diff}: max difference {float(np.max(np.abs(got - jv)))!r}")
        return True

    sizes = [o._data.size for o in outs]
    total = sum(sizes)
    for i in diff:
        x = inputs[i]
        n = x._data.size
        numeric = np.zeros((total, n))
        for j in range(n):
            idx = np.unravel_index(j, x.shape)
            delta = np.zeros(x.shape)
            delta[idx] = eps
            numeric[:, j] = (_perturbed(fn, inputs, {i: delta}) - _perturbed(fn, inputs, {i: -delta})) / (2 * eps)
        checks = []
        if check_backward_ad:
            analytic = np.zeros((total, n))
            row = 0
            for o in outs:
                for m in range(o._data.size):
                    if o.requires_grad:
                        onehot = np.zeros(o._data.size)
                        onehot[m] = 1.0
                        (g,) = grad(o, x, new(onehot.reshape(o.shape), dtype=o.dtype, device=o.device),
                                    retain_graph=True, allow_unused=True)
                        if g is not None:
                            if check_grad_dtypes and g.dtype != x.dtype:
                                return fail(f"gradcheck: the gradient of input {i} is {g.dtype}, the input {x.dtype}")
                            analytic[row] = np.asarray(g.numpy(force=True), dtype=np.float64).ravel()
                    row += 1
            checks.append(("analytic", analytic))
        if check_forward_ad:
            columns = [_jvp(fn, inputs, {i: np.eye(1, n, j).reshape(x.shape)}) for j in range(n)]
            checks.append(("forward AD", np.stack(columns, axis=1) if columns else np.zeros((total, 0))))
        for what, jac in checks:
            bad = ~(np.abs(jac - numeric) <= atol + rtol * np.abs(numeric))
            if bad.any():
                r, j = map(int, np.argwhere(bad)[0])
                where = tuple(int(v) for v in np.unravel_index(j, x.shape))
                return fail(f"gradcheck: Jacobian mismatch for input {i} (shape {tuple(x.shape)}) at element {where} "
                            f"and output element {r}: numeric {float(numeric[r, j])!r}, "
                            f"{what} {float(jac[r, j])!r}")
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, gen_non_contig_grad_outputs=False,
                  raise_exception=True, nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False, seed=0):
    """Check second derivatives: :func:`gradcheck` of the map (inputs, grad_outputs) -> the VJP of ``fn``, computed
    with ``create_graph=True``. ``grad_outputs`` default to random float64 values that require grad, one per output
    of ``fn`` that requires grad (torch draws its own; both are random)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(seed + 1)
        grad_outputs = tuple(new(rng.standard_normal(o.shape), dtype=o.dtype, device=o.device, requires_grad=True)
                             for o in _outputs(fn, inputs) if o.requires_grad)
    grad_outputs = (grad_outputs,) if isinstance(grad_outputs, Tensor) else tuple(grad_outputs)
    n = len(inputs)

    def vjp(*args):
        xs, us = args[:n], args[n:]
        outs = [o for o in _outputs(fn, xs) if o.requires_grad]
        grads = grad(outs, [xs[i] for i in diff], us, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(vjp, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception,
                     check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad,
                     check_forward_ad=check_fwd_over_rev, check_backward_ad=check_rev_over_rev, fast_mode=fast_mode,
                     seed=seed)


def _dtypes_match(grads, xs):
    return all(g is None or g.dtype == x.dtype for g, x in zip(grads, xs))


def _jvp(fn, inputs, directions):
    """fn's flattened Jacobian-vector product by forward mode, ``directions`` {input index: array} (others 0)."""
    with forward_ad.dual_level():
        duals = list(inputs)
        for i, v in directions.items():
            x = inputs[i]
            duals[i] = forward_ad.make_dual(x, new(v, dtype=x.dtype, device=x.device))
        parts = []
        for o in _outputs(fn, duals):
            t = forward_ad.unpack_dual(o).tangent
            parts.append(np.zeros(o._data.size) if t is None else
                         np.asarray(t.detach().numpy(force=True), dtype=np.float64).ravel())
    return np.concatenate(parts)


def _perturbed(fn, inputs, deltas):
    """fn's flattened outputs with inputs[i] += deltas[i], restoring the inputs afterwards."""
    saved = {}
    try:
        for i, d in deltas.items():
            t = inputs[i]
            saved[i] = t._data.copy()
            t._data[...] = saved[i] + t._backend.asarray(d)
        return _flat_outputs(fn, inputs)
    finally:
        for i, orig in saved.items():
            inputs[i]._data[...] = orig
