"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict`` and ``MLP`` (a Sequential of Linear + activation)."""
from __future__ import annotations

import operator
from collections import OrderedDict

from gpugrad.nn import functional as F
from gpugrad.nn.activation import GELU, ReLU, Sigmoid, Tanh
from gpugrad.nn.linear import Linear
from gpugrad.nn.module import Module


class _Indexed(Module):
    """Children named "0", "1", ... addressed by position, as torch's Sequential and ModuleList."""

    def _index(self, idx):
        idx, n = operator.index(idx), len(self._modules)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return idx % n

    def _renumber(self, modules):
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx])) if isinstance(self, Sequential) else \
                ModuleList(list(self._modules.values())[idx])
        return list(self._modules.values())[self._index(idx)]

    def __setitem__(self, idx, module):
        self.add_module(list(self._modules)[self._index(idx)], module)

    def __delitem__(self, idx):
        mods = list(self._modules.values())
        del mods[idx if isinstance(idx, slice) else self._index(idx)]
        self._renumber(mods)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        for m in mods:
            if not isinstance(m, Module):
                raise TypeError(f"{type(m).__name__} is not a Module subclass")
        self._renumber(mods)

    def pop(self, key=-1):
        v = self[key]
        del self[key]
        return v

    def __iadd__(self, other):
        return self.extend(other)

    def __add__(self, other):
        return Sequential(*self, *other) if isinstance(self, Sequential) else ModuleList([*self, *other])

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]


class Sequential(_Indexed):
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

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(_Indexed):
    """A list of Modules, registered (so parameters(), to(), state_dict() see them); no forward of its own.

    >>> layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __repr__(self):
        """torch's: runs of equal (by repr) children are folded into "(i-j): n x child"."""
        lines, mods = [], [(k, repr(m)) for k, m in self._modules.items()]
        i = 0
        while i < len(mods):
            j = i
            while j + 1 < len(mods) and mods[j + 1][1] == mods[i][1]:
                j += 1
            head = f"({mods[i][0]}): " if i == j else f"({mods[i][0]}-{mods[j][0]}): {j - i + 1} x "
            lines.append(head + mods[i][1].replace("\n", "\n  "))
            i = j + 1
        return "ModuleList()" if not lines else "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """An ordered dict of Modules, registered under their keys.

    >>> heads = nn.ModuleDict({"cls": nn.Linear(8, 3), "reg": nn.Linear(8, 1)})
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for j, kv in enumerate(items):
            if len(kv) != 2:
                raise ValueError(f"ModuleDict update sequence element #{j} has length {len(kv)}; 2 is required")
            self[kv[0]] = kv[1]


_ACTS = {"relu": ReLU, "gelu": GELU, "tanh": Tanh, "sigmoid": Sigmoid}
_FUSED = {"gelu": "gelu_erf"}  # bias_act's activation for an MLP activation: GELU() is the exact form


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
        act = _FUSED.get(self.activation, self.activation)
        linears = [m for m in self._modules.values() if isinstance(m, Linear)]
        for lin in linears[:-1]:
            if lin.bias is None:
                x = getattr(F, self.activation)(F.linear(x, lin.weight))
            else:
                x = F.bias_act(F.linear(x, lin.weight), lin.bias, act)
        return linears[-1](x)
