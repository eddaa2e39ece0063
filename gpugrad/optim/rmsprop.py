"""RMSprop (Hinton's, optionally centered and with momentum) and Adagrad, as torch.optim.RMSprop / Adagrad."""
from __future__ import annotations

from gpugrad.backend import on
from gpugrad.optim.optimizer import Optimizer, check_options


class RMSprop(Optimizer):
    """g = -g (maximize);  g += weight_decay * p;  sq = alpha * sq + (1 - alpha) * g^2;
    avg = sqrt(sq - ga^2) + eps with ga = lerp(ga, g, 1 - alpha) (centered), else sqrt(sq) + eps;
    buf = momentum * buf + g / avg, p -= lr * buf (momentum > 0), else p -= lr * g / avg.

    One ``rmsprop_multi_update_`` launch per group and (device, dtype) for up to 16 parameters, options read from
    the device. ``state["step"]`` (which torch keeps but RMSprop's math never reads) lives on the device and is
    advanced by the kernel, as Adam's, so a step that GradScaler skips does not count.

    >>> opt = optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _validate(self, g):
        check_options(g, "lr", "eps", "momentum", "weight_decay", "alpha")

    def _hyper_values(self, g):
        return g["lr"], g["alpha"], g["eps"], g["weight_decay"], g["momentum"], g["maximize"]

    def _update(self, be, params, states, group, hyper):
        momentum, centered = group["momentum"] > 0, bool(group["centered"])  # NOTE: host decisions, as SGD's
        for p, st in zip(params, states):
            if "square_avg" not in st:
                st.update(step=0, square_avg=self._zeros(p))
            if momentum and "momentum_buffer" not in st:
                st["momentum_buffer"] = self._zeros(p)
            if centered and "grad_avg" not in st:
                st["grad_avg"] = self._zeros(p)
        targets, low = self._targets(params, states)
        be.kernels.rmsprop_multi_update_(be.xp, hyper, self._ticket(be), centered, momentum, *targets,
                                         *(p._grad._data for p in params), *(st["square_avg"] for st in states),
                                         *((st["grad_avg"] for st in states) if centered else ()),
                                         *((st["momentum_buffer"] for st in states) if momentum else ()),
                                         *[self._count(be, st) for st in states], skip=self._skip(be),
                                         low_params=low)


class Adagrad(Optimizer):
    """t += 1;  g = -g (maximize);  g += weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay);  sum += g^2;
    p -= clr * g / (sqrt(sum) + eps).

    The state (``step`` and ``sum`` = initial_accumulator_value) is made at construction, as torch does. One
    ``adagrad_multi_update_`` launch per group and (device, dtype); the step counts live on the device, as Adam's.

    >>> opt = optim.Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-4)
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))

    def _validate(self, g):
        check_options(g, "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    _state_made_lazily = False

    def _init_state(self, group):

        for p in group["params"]:
            with on(p._backend):
                self.state[p].update(step=0, sum=self._zeros(p, group["initial_accumulator_value"]))

    def _hyper_values(self, g):
        return g["lr"], g["lr_decay"], g["weight_decay"], g["eps"], g["maximize"]

    def _update(self, be, params, states, group, hyper):
        targets, low = self._targets(params, states)
        be.kernels.adagrad_multi_update_(be.xp, hyper, self._ticket(be), *targets,
                                         *(p._grad._data for p in params), *(st["sum"] for st in states),
                                         *[self._count(be, st) for st in states], skip=self._skip(be),
                                         low_params=low)
