"""Adam (L2 weight decay) and AdamW (decoupled weight decay), as torch.optim.Adam / AdamW."""
from __future__ import annotations

import numpy as np

from gpugrad.optim.optimizer import Optimizer


class Adam(Optimizer):
    """t += 1;  g += weight_decay * p (Adam) or p *= 1 - lr * weight_decay (AdamW);
    m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).

    Each step is one ``adam_multi_update_`` launch per group and (device, dtype) for up to 16 parameters, in place.
    The step count t of each parameter is an int64 0-d array on its device (``state["step"]``), advanced by the
    kernel, which also computes the bias corrections from it; lr, betas, eps and weight_decay are read from the
    device (see :mod:`gpugrad.optim.optimizer`). ``state_dict()`` reports t as a Python int (a transfer).

    >>> opt = optim.Adam(model.parameters(), lr=1e-3)
    """

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0):
        self._tickets = {}  # backend -> the kernel's uint32 block counter (0 between launches)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

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

    def _hyper_values(self, g):
        return g["lr"], *g["betas"], g["eps"], g["weight_decay"]

    def _update(self, be, params, states, group, hyper):
        for p, st in zip(params, states):
            if "exp_avg" not in st:
                st["exp_avg"], st["exp_avg_sq"] = self._zeros(p), self._zeros(p)
            if not isinstance(st.get("step"), be.array_type):  # new, or a number from load_state_dict
                st["step"] = be.asarray(np.array(int(st.get("step", 0)), np.int64))
        ticket = self._tickets.get(be)
        if ticket is None:
            ticket = self._tickets[be] = be.xp.zeros(1, np.uint32)
        be.kernels.adam_multi_update_(be.xp, hyper, ticket, self.decoupled, *(p._data for p in params),
                                      *(p._grad._data for p in params), *(st["exp_avg"] for st in states),
                                      *(st["exp_avg_sq"] for st in states), *(st["step"] for st in states))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay before the Adam step;
    weight_decay defaults to 1e-2."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
