"""Containers: ``Sequential`` and ``MLP`` (a Sequential of Linear + activation pairs)."""
from __future__ import annotations

from collections import OrderedDict

from gpugrad.nn import functional as F
from gpugrad.nn.activation import GELU, ReLU, Sigmoid, Tanh
from gpugrad.nn.linear import Linear
from gpugrad.nn.module import Module


class Sequential(Module):
    """Modules applied in order: y = m_k(...m_1(x)).  Children are named "0", "1", ... (or by an OrderedDict).

    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> len(net), type(net[1]).__name__
    (3, 'ReLU')
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(mods[idx]))
        if not -len(mods) <= idx < len(mods):
            raise IndexError(f"index {idx} is out of range for a Sequential of length {len(mods)}")
        return mods[idx][1]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


_ACTS = {"relu": ReLU, "gelu": GELU, "tanh": Tanh, "sigmoid": Sigmoid}


class MLP(Sequential):
    """Linear(sizes[0], sizes[1]), act, Linear(sizes[1], sizes[2]), act, ..., Linear(sizes[-2], sizes[-1]).

    ``fused=True`` (the default) runs each hidden layer as ``bias_act(x @ Wᵀ, b)``: the bias add and the activation
    in one pass (one fused kernel on CUDA, whose backward also sums the bias gradient) instead of Linear's bias add
    followed by a separate activation; ``fused=False`` calls the modules one by one, as ``Sequential`` does.
    The parameters and state_dict names ("0.weight", "2.bias", ...) are the same either way.

    >>> net = nn.MLP([784, 256, 10], activation="relu")
    """

    def __init__(self, sizes, activation="relu", fused=True, bias=True, device=None, dtype=None):
        if activation not in _ACTS:
            raise ValueError(f"MLP: activation must be one of {sorted(_ACTS)}, got {activation!r}")
        if len(sizes) < 2:
            raise ValueError(f"MLP: need at least an input and an output size, got {sizes}")
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(Linear(n_in, n_out, bias=bias, device=device, dtype=dtype))
            if i < len(sizes) - 2:
                layers.append(_ACTS[activation]())
        super().__init__(*layers)
        self.activation, self.fused = activation, fused

    def forward(self, x):
        if not self.fused:
            return super().forward(x)
        linears = [m for m in self._modules.values() if isinstance(m, Linear)]
        for lin in linears[:-1]:
            if lin.bias is None:
                x = getattr(F, self.activation)(F.linear(x, lin.weight))
            else:
                x = F.bias_act(F.linear(x, lin.weight), lin.bias, self.activation)
        return linears[-1](x)
