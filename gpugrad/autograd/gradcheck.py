"""Numerical gradient checks: float64 central differences against the engine's VJPs."""
from __future__ import annotations

import numpy as np

from gpugrad._tensor import Tensor
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


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=False, seed=0, raise_exception=True):
    """Check ``fn``'s gradients w.r.t. every input that requires grad against central finite differences.

    Full mode compares the whole Jacobian element by element; ``fast_mode`` compares one scalar
    ``<u, J v>`` for random directions u, v (HIPS' check_vjp).  Returns True, or raises GradcheckError naming
    the input, the element and both values (or returns False with ``raise_exception=False``).
    """

    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck: no input requires grad")
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
        gouts = [new(u, dtype=o.dtype, device=o.device) for u, o in zip(us, outs)]
        live = [k for k, o in enumerate(outs) if o.requires_grad]
        grads = grad([outs[k] for k in live], [inputs[i] for i in diff], [gouts[k] for k in live],
                     retain_graph=True, allow_unused=True) if live else [None] * len(diff)
        analytic = sum(float(np.sum(g.numpy(force=True) * vs[i])) for g, i in zip(grads, diff) if g is not None)
        plus = _perturbed(fn, inputs, {i: eps * vs[i] for i in diff})
        minus = _perturbed(fn, inputs, {i: -eps * vs[i] for i in diff})
        numeric = float(np.dot((plus - minus) / (2 * eps), np.concatenate([u.ravel() for u in us])))
        if not abs(analytic - numeric) <= atol + rtol * abs(numeric):
            return fail(f"gradcheck (fast mode): <u, J v> numeric {numeric!r} vs analytic {analytic!r} for inputs "
                        f"{diff} (random directions, seed {seed})")
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
                        analytic[row] = np.asarray(g.numpy(force=True), dtype=np.float64).ravel()
                row += 1
        bad = ~(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric))
        if bad.any():
            r, j = map(int, np.argwhere(bad)[0])
            where = tuple(int(v) for v in np.unravel_index(j, x.shape))
            return fail(f"gradcheck: Jacobian mismatch for input {i} (shape {tuple(x.shape)}) at element {where} "
                        f"and output element {r}: numeric {float(numeric[r, j])!r}, "
                        f"analytic {float(analytic[r, j])!r}")
    return True


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
