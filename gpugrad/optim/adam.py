"""Adam (L2 weight decay) and AdamW (decoupled weight decay), as torch.optim.Adam / AdamW."""
from __future__ import annotations

from gpugrad.optim.optimizer import Optimizer


class Adam(Optimizer):
    """t += 1;  g += weight_decay * p (Adam) or p *= 1 - lr * weight_decay (AdamW);
    m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).

    Each step is one ``adam_update_`` kernel per parameter (per flat buffer with ``flat=True``), in place.

    >>> opt = optim.Adam(model.parameters(), lr=1e-3)
    """

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, flat=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay), flat=flat)

    def _validate(self, g):
        if not g["lr"] >= 0:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if not g["eps"] >= 0:
            raise ValueError(f"Invalid epsilon value: {g['eps']}")
        b1, b2 = g["betas"]
        if not 0 <= b1 < 1:
            raise ValueError(f"Invalid beta parameter at index 0: {b1}")
        if not 0 <= b2 < 1:
            raise ValueError(f"Invalid beta parameter at index 1: {b2}")
        if not g["weight_decay"] >= 0:
            raise ValueError(f"Invalid weight_decay value: {g['weight_decay']}")

    def _signature(self, state):
        return state.get("step", 0)

    def _init_state(self, p, state, group):
        if "exp_avg" not in state:
            state["step"] = state.get("step", 0)
            state["exp_avg"] = self._zeros(p, "exp_avg")
            state["exp_avg_sq"] = self._zeros(p, "exp_avg_sq")

    def _kernel(self, be, p, g, arrays, group, step):
        b1, b2 = group["betas"]
        be.kernels.adam_update_(be.xp, p, g, arrays["exp_avg"], arrays["exp_avg_sq"], step + 1, group["lr"], b1, b2,
                                group["eps"], group["weight_decay"], self.decoupled)

    def _advance(self, state):
        state["step"] += 1


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay before the Adam step;
    weight_decay defaults to 1e-2."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, flat=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, flat=flat)
