"""Activation layers, ``Softmax`` / ``LogSoftmax`` and ``Dropout``: stateless wrappers over ``nn.functional``,
made from one table (torch's constructor arguments, in torch's order, and its ``extra_repr``)."""
from __future__ import annotations

from gpugrad.nn import functional as F
from gpugrad.nn.module import Module


def _layer(name, fn, params=(), inplace=False, doc=""):
    """A Module ``name(*params, inplace=False)`` whose forward is ``fn(x, *params[, inplace=...])``."""
    names = [p for p, _ in params] + (["inplace"] if inplace else [])
    defaults = dict(params, **({"inplace": False} if inplace else {}))

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        unknown = set(kwargs) - set(names)
        if len(args) > len(names) or unknown:
            raise TypeError(f"{name}.__init__() takes arguments {tuple(names)}, got {len(args)} positional and "
                            f"{sorted(kwargs)}")
        for k, v in {**defaults, **dict(zip(names, args)), **kwargs}.items():
            setattr(self, k, v)

    def forward(self, input):
        return fn(input, *(getattr(self, p) for p, _ in params), **({"inplace": self.inplace} if inplace else {}))

    def extra_repr(self):  # torch's: the parameters, then ", inplace=True" only when set
        parts = [f"{p}={getattr(self, p)!r}" for p, _ in params] + (["inplace=True"] if inplace and self.inplace
                                                                     else [])
        return ", ".join(parts)

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                  "__doc__": doc, "__module__": __name__})


ReLU = _layer("ReLU", F.relu, inplace=True, doc="y = max(x, 0).")
LeakyReLU = _layer("LeakyReLU", F.leaky_relu, (("negative_slope", 0.01),), True, "y = x if x > 0 else slope x.")
ELU = _layer("ELU", F.elu, (("alpha", 1.0),), True, "y = x if x > 0 else alpha (e^x - 1).")
SiLU = _layer("SiLU", F.silu, inplace=True, doc="y = x sigmoid(x) (swish).")
Softplus = _layer("Softplus", F.softplus, (("beta", 1.0), ("threshold", 20.0)),
                  doc="y = log(1 + e^(beta x)) / beta, and x where beta x > threshold.")
GELU = _layer("GELU", F.gelu, (("approximate", "none"),),
              doc="y = x Φ(x) (approximate='none', exact, torch's default) or its tanh approximation ('tanh').")
Tanh = _layer("Tanh", F.tanh, doc="y = tanh x.")
Sigmoid = _layer("Sigmoid", F.sigmoid, doc="y = 1 / (1 + e^-x).")
Softmax = _layer("Softmax", F.softmax, (("dim", None),), doc="y = e^x / Σ e^x along dim.")
LogSoftmax = _layer("LogSoftmax", F.log_softmax, (("dim", None),), doc="y = x - logsumexp(x) along dim.")


class Dropout(Module):
    """While training, zero each element with probability p and scale the rest by 1 / (1 - p); identity in
    eval mode (``module.eval()``)."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"
