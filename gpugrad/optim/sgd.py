"""Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)."""
from __future__ import annotations

from gpugrad.optim.optimizer import Optimizer, check_options


class SGD(Optimizer):
    """d = -g (maximize) or g;  d += weight_decay * p;  buf = d on the first step, else
    momentum * buf + (1 - dampening) * d;  d = d + momentum * buf (nesterov) or buf (momentum != 0);  p -= lr * d.

    Each step is one ``sgd_multi_update_`` launch per group and (device, dtype) for up to 16 parameters, in place
    (float16 and bfloat16 parameters through float32 master weights, see :mod:`gpugrad.optim.optimizer`);
    lr, momentum, dampening, weight_decay, nesterov and maximize are read from the device (see
    :mod:`gpugrad.optim.optimizer`). ``foreach`` and ``fused`` are accepted and recorded: every step is fused.

    >>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False, fused=None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def _validate(self, g):
        check_options(g, "lr", "momentum", "weight_decay")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _hyper_values(self, g):
        return g["lr"], g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"], g["maximize"]

    def _update(self, be, params, states, group, hyper):
        first = ["momentum_buffer" not in st for st in states]  # torch: buf = d when there is none yet
        bufs = []
        if group["momentum"] != 0:  # NOTE: decided on the host; a graph captured with momentum keeps using buffers
            for p, st, new in zip(params, states, first):
                if new:
                    st["momentum_buffer"] = self._zeros(p)
            bufs = [st["momentum_buffer"] for st in states]
        targets, low = self._targets(params, states)
        be.kernels.sgd_multi_update_(be.xp, hyper, first, *targets, *(p._grad._data for p in params), *bufs,
                                     skip=self._skip(be), low_params=low)
