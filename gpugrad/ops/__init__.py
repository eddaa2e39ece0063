"""The op registry: every differentiable op class, by name.  ``tests/op_cases.py`` must have a case for each."""
from __future__ import annotations

REGISTRY: dict[str, type] = {}


def register(name: str):
    def deco(cls):
        if name in REGISTRY:
            raise ValueError(f"op {name!r} registered twice")
        REGISTRY[name] = cls
        cls.op_name = name
        return cls

    return deco


from gpugrad.ops import activation, arith, convert, loss, matmul, movement, norm, reduce, softmax  # noqa: E402,F401
from gpugrad.ops import linalg, rounding, scan, scatter  # noqa: E402,F401
