"""Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import capture as _capture
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
        self._unwritten = {}  # parameter -> int32 device flag: its buffer was made for a step GradScaler may skip
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
        skip = self._skip(be)
        first = ["momentum_buffer" not in st for st in states]  # torch: buf = d when there is none yet
        bufs, flags = [], None
        if group["momentum"] != 0:  # NOTE: decided on the host; a graph captured with momentum keeps using buffers
            for p, st, new in zip(params, states, first):
                if new:
                    st["momentum_buffer"] = self._zeros(p)
                    if skip is not None:  # GradScaler may skip this step on the device: the kernel decides first
                        self._unwritten[p] = self._flag(p)
            bufs = [st["momentum_buffer"] for st in states]
            flags = [self._unwritten.get(p) for p in params]
            first = [new and f is None for new, f in zip(first, flags)]
            if not any(f is not None for f in flags):
                flags = None
        targets, low = self._targets(params, states)
        be.kernels.sgd_multi_update_(be.xp, hyper, first, *targets, *(p._grad._data for p in params), *bufs,
                                     skip=skip, low_params=low, unwritten=flags,
                                     ticket=None if flags is None else self._ticket(be))
        if skip is None and flags is not None:  # this step ran: those buffers are written
            for p, f in zip(params, flags):
                if f is not None:
                    del self._unwritten[p]

    def _flag(self, p):
        _capture.refuse_missing(self._step_name(), f"the first-step flag of a parameter of shape {tuple(p.shape)}")
        return p._backend.xp.ones(1, np.int32)

    def state_dict(self):
        """As torch's: a buffer that no step has written yet (its only steps were skipped by GradScaler) is not in
        it, as torch makes the buffer at the first step that runs (one read of each such flag: a sync on CUDA)."""
        out = super().state_dict()
        order = [p for g in self.param_groups for p in g["params"]]
        for i, p in enumerate(order):
            flag = self._unwritten.get(p)
            if flag is None:
                continue
            if not int(p._backend.to_host(flag)[0]):
                del self._unwritten[p]  # written by a step the device ran
                continue
            st = out["state"][i]
            st.pop("momentum_buffer", None)
            if not st:
                del out["state"][i]
        return out

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._unwritten.clear()  # the loaded state says which buffers exist
