"""The pointwise ops, declared once.  Each row is all gpugrad needs besides the op's math:

- for a kernel op, its ``pw::<name>`` struct in ``kernels/elementwise.cu`` (fwd, and bwd = g * f') and its NumPy
  reference ``<name>_fwd`` / ``<name>_bwd`` in ``backend/reference.py`` (the same g * f', written against ``xp``);
- for a kernel-less op, ``f`` and ``df`` (= g * f') here, against ``xp``.

From the row, gpugrad generates the op class and its node name, the VJP (gy * f'), the JVP (t * f') and the double
backward (the same g * f' formula run on Tensors), the CUDA launchers, ElementwiseKernel strings and template
instantiations, ``bias_act``'s activations, the Tensor methods, the ``nn.functional`` and top-level functions, and the
rows of the op and kernel test tables (sampled in [low, high], 0.05 away from each kink).
This module imports nothing from gpugrad: the backend reads it too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Pointwise:
    name: str
    saves: str  # what g * f' reads: "x" (the input), "y" (the output) or "" (nothing: f' is a constant)
    params: tuple = ()  # ((name, default), ...): the kernel's p0, p1, in order
    low: float = -3.0
    high: float = 3.0
    kinks: tuple = ()  # points where f' jumps (or a branch switches): tests sample 0.05 away from them
    kernel: bool = True  # a pw:: struct in kernels/elementwise.cu
    functional: bool = False  # also gpugrad.nn.functional.<name> (torch has it there)
    top: bool = True  # also gpugrad.<name> (torch has torch.<name>)
    node: str | None = None  # grad_fn name when torch's is not the registry's rule (core/registry.py node_name)
    frontend: bool = True  # Tensor.<name>, <name>_ (and gpugrad.<name> if top); False: a composite gives them
    ints: bool = False  # integer inputs stay integers (relu, floor), not promoted to the default float dtype
    f: Callable | None = None  # kernel-less ops: f(xp, x, *params)
    df: Callable | None = None  # kernel-less ops: df(xp, saved, g, *params) = g * f'(x)

    @property
    def camel(self) -> str:
        return "".join(p.capitalize() for p in self.name.split("_"))

    @property
    def defaults(self) -> tuple:
        return tuple(d for _, d in self.params)


_INTS, _HALVES = (-2.0, -1.0, 0.0, 1.0, 2.0), (-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)  # the jumps of floor / round


POINTWISE = {d.name: d for d in (
    Pointwise("relu", "y", kinks=(0.0,), functional=True, ints=True),
    # gelu is torch's approximate='tanh', gelu_erf its default (exact) form: Tensor.gelu / F.gelu pick by approximate=
    Pointwise("gelu", "x", low=-5.0, high=5.0, top=False, frontend=False),
    Pointwise("gelu_erf", "x", low=-5.0, high=5.0, top=False, node="GeluBackward0"),
    Pointwise("erf", "x"),
    Pointwise("sigmoid", "y", low=-8.0, high=8.0, functional=True),
    Pointwise("tanh", "y", functional=True),
    # x > 20 takes the other branch: sampled to 30 so a wrong branch there fails a test
    Pointwise("softplus", "x", params=(("beta", 1.0), ("threshold", 20.0)), low=-30.0, high=30.0, kinks=(20.0,),
              functional=True, top=False),
    Pointwise("silu", "x", low=-6.0, high=6.0, functional=True, top=False),
    Pointwise("leaky_relu", "x", params=(("negative_slope", 0.01),), kinks=(0.0,), functional=True, top=False),
    Pointwise("elu", "x", params=(("alpha", 1.0),), kinks=(0.0,), functional=True, top=False),
    Pointwise("sin", "x", low=-6.0, high=6.0),
    Pointwise("cos", "x", low=-6.0, high=6.0),
    Pointwise("log1p", "x", low=-0.9, high=3.0, node="Log1PBackward0"),
    Pointwise("expm1", "y"),
    Pointwise("exp", "y", kernel=False, f=lambda xp, x: xp.exp(x), df=lambda xp, y, g: g * y),
    Pointwise("log", "x", low=0.1, high=3.0, kernel=False, f=lambda xp, x: xp.log(x), df=lambda xp, x, g: g / x),
    Pointwise("sqrt", "y", low=0.1, high=3.0, kernel=False, f=lambda xp, x: xp.sqrt(x),
              df=lambda xp, y, g: g / (y * 2)),
    # rounding and sign: piecewise constant, f' = 0 away from the jumps (integer inputs stay integers, as in torch);
    # their derivatives read nothing, so nothing is saved (an in-place change of x afterwards is legal, as in torch)
    *(Pointwise(n, "", low=-2.5, high=2.5, kinks=k, kernel=False, df=lambda xp, x, g: xp.zeros_like(g), ints=True,
                f=lambda xp, x, n=n: getattr(xp, n)(x) if x.dtype.kind in "fV" else x.copy(),
                frontend=n != "round")  # round(decimals=) is a composition (functional.py)
      for n, k in (("floor", _INTS), ("ceil", _INTS), ("trunc", _INTS), ("round", _HALVES))),
    # torch's sign: 0 for NaN (NumPy's is NaN), and the sign of an integer as an integer
    Pointwise("sign", "", low=-2.5, high=2.5, kinks=(0.0,), kernel=False, df=lambda xp, x, g: xp.zeros_like(g),
              ints=True, f=lambda xp, x: xp.where(x == x, xp.sign(x), 0).astype(x.dtype, copy=False)),
    Pointwise("frac", "", low=-2.5, high=2.5, kinks=_INTS, kernel=False, f=lambda xp, x: x - xp.trunc(x),
              df=lambda xp, x, g: g),
    Pointwise("reciprocal", "y", low=0.3, high=3.0, kernel=False, f=lambda xp, x: 1 / x,
              df=lambda xp, y, g: -g * y * y),
    Pointwise("rsqrt", "y", low=0.2, high=3.0, kernel=False, f=lambda xp, x: 1 / xp.sqrt(x),
              df=lambda xp, y, g: g * y * y * y * -0.5),
    Pointwise("log2", "x", low=0.1, high=3.0, kernel=False, f=lambda xp, x: xp.log2(x),
              df=lambda xp, x, g: g / (x * math.log(2))),
    Pointwise("log10", "x", low=0.1, high=3.0, kernel=False, f=lambda xp, x: xp.log10(x),
              df=lambda xp, x, g: g / (x * math.log(10))),
    Pointwise("exp2", "y", kernel=False, f=lambda xp, x: xp.exp2(x), df=lambda xp, y, g: g * y * math.log(2)),
    Pointwise("tan", "y", low=-1.2, high=1.2, kernel=False, f=lambda xp, x: xp.tan(x),
              df=lambda xp, y, g: g * (1 + y * y)),
    Pointwise("asin", "x", low=-0.9, high=0.9, kernel=False, f=lambda xp, x: xp.arcsin(x),
              df=lambda xp, x, g: g / xp.sqrt(1 - x * x)),
    Pointwise("acos", "x", low=-0.9, high=0.9, kernel=False, f=lambda xp, x: xp.arccos(x),
              df=lambda xp, x, g: -g / xp.sqrt(1 - x * x)),
    Pointwise("atan", "x", kernel=False, f=lambda xp, x: xp.arctan(x), df=lambda xp, x, g: g / (1 + x * x)),
    Pointwise("sinh", "x", kernel=False, f=lambda xp, x: xp.sinh(x),
              df=lambda xp, x, g: g * (xp.exp(x) + xp.exp(-x)) / 2),
    Pointwise("cosh", "x", kernel=False, f=lambda xp, x: xp.cosh(x),
              df=lambda xp, x, g: g * (xp.exp(x) - xp.exp(-x)) / 2),
)}

KERNEL_OPS = tuple(d for d in POINTWISE.values() if d.kernel)
# bias_act's activations: every kernel op, and the identity (a Linear without activation); the ids order the kernels
ACTIVATIONS = ("identity",) + tuple(d.name for d in KERNEL_OPS)
