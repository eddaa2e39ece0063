"""Adam (L2 weight decay) and AdamW (decoupled weight decay), with AMSGrad, as torch.optim.Adam / AdamW."""
from __future__ import annotations

from gpugrad.optim.optimizer import Optimizer, check_options


class Adam(Optimizer):
    """t += 1;  g = -g (maximize);  g += weight_decay * p (Adam) or p *= 1 - lr * weight_decay (AdamW, or
    ``decoupled_weight_decay=True``);  m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2;
    amsgrad: vmax = max(vmax, v), used for v below;  p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).

    Each step is one ``adam_multi_update_`` launch per group and (device, dtype) for up to 16 parameters, in place
    (float16 and bfloat16 parameters through float32 master weights, see :mod:`gpugrad.optim.optimizer`).
    The step count t of each parameter is an int64 0-d array on its device (``state["step"]``), advanced by the
    kernel, which also computes the bias corrections from it; lr, betas, eps, weight_decay and maximize are read
    from the device (see :mod:`gpugrad.optim.optimizer`). ``state_dict()`` reports t as a float32 Tensor, as torch.

    >>> opt = optim.Adam(model.parameters(), lr=1e-3)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _validate(self, g):
        check_options(g, "lr", "eps")
        for i, b in enumerate(g["betas"]):
            if not 0 <= b < 1:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        check_options(g, "weight_decay")

    def _hyper_values(self, g):
        return g["lr"], *g["betas"], g["eps"], g["weight_decay"], g["maximize"]

    def _update(self, be, params, states, group, hyper):
        amsgrad = bool(group["amsgrad"])
        for p, st in zip(params, states):
            if "exp_avg" not in st:  # torch's order of the state's entries
                st.update(step=0, exp_avg=self._zeros(p), exp_avg_sq=self._zeros(p))
            if amsgrad and "max_exp_avg_sq" not in st:
                st["max_exp_avg_sq"] = self._zeros(p)
        targets, low = self._targets(params, states)
        be.kernels.adam_multi_update_(be.xp, hyper, self._ticket(be), group["decoupled_weight_decay"], amsgrad,
                                      *targets, *(p._grad._data for p in params),
                                      *(st["exp_avg"] for st in states), *(st["exp_avg_sq"] for st in states),
                                      *((st["max_exp_avg_sq"] for st in states) if amsgrad else ()),
                                      *[self._count(be, st) for st in states], skip=self._skip(be), low_params=low)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay before the Adam step;
    weight_decay defaults to 1e-2."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         foreach=foreach, maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)
