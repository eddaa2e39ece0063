"""Function transforms, as ``torch.func``: ``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``,
``hessian``, ``vmap`` and ``functional_call``.

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    J = jacrev(f)(x);  H = hessian(f)(x);  out = functional_call(model, params, (x,))

``vmap``'s design (batched tensors and batching rules) is in ``batched.py``; the reverse-mode transforms are in
``reverse.py``, the forward-mode ones in ``forward.py``.
"""
from __future__ import annotations

from gpugrad.func.forward import jacfwd, jvp
from gpugrad.func.functional_call import functional_call
from gpugrad.func.reverse import grad, grad_and_value, hessian, jacrev, vjp
from gpugrad.func.vmap import vmap

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp", "vjp", "vmap"]
