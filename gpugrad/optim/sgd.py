"""Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)."""
from __future__ import annotations

from gpugrad.optim.optimizer import Optimizer


class SGD(Optimizer):
    """d = g + weight_decay * p;  buf = d on the first step, else momentum * buf + (1 - dampening) * d;
    d = d + momentum * buf (nesterov) or buf (momentum != 0);  p -= lr * d.

    Each step is one ``sgd_update_`` kernel per parameter (per flat buffer with ``flat=True``), in place.

    >>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, flat=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov), flat=flat)

    def _validate(self, g):
        if not g["lr"] >= 0:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if not g["momentum"] >= 0:
            raise ValueError(f"Invalid momentum value: {g['momentum']}")
        if not g["weight_decay"] >= 0:
            raise ValueError(f"Invalid weight_decay value: {g['weight_decay']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _signature(self, state):
        return "momentum_buffer" in state  # False: the first step, where buf = d (no dampening)

    def _init_state(self, p, state, group):
        if group["momentum"] != 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = self._zeros(p, "momentum_buffer")

    def _kernel(self, be, p, g, arrays, group, started):
        be.kernels.sgd_update_(be.xp, p, g, arrays.get("momentum_buffer"), group["lr"], group["momentum"],
                               group["dampening"], group["weight_decay"], group["nesterov"], not started)
