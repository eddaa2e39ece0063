"""The fuzzer's op table: how to call every op of gpugrad's registry, in both libraries, with random arguments.

``universe()`` is read from the registry when the fuzzer runs: every op class (``gpugrad.ops.REGISTRY``), every
registered frontend and composite (``core.registry.FRONTENDS``) and a few ``nn.functional`` compositions (``EXTRA``).
``SURFACE`` maps a name to a generator ``gen(p, name) -> bool`` that picks operands and parameters (zeros, ties,
NaN/inf come from the program's values; bad axes, out-of-range ids and misfit shapes now and then, where both
libraries must raise) and runs one step (``p.step``) in its out-of-place, functional or in-place form.

A name without an entry falls back to its rows in tests/op_cases.py (every registered op has one: its inputs and its
torch equivalent), then to ``x.<name>()``; tests/fuzz/test_fuzz.py's coverage test fails for a name that neither
reaches, naming it: add a generator here (``@spec("name")``).
"""
from __future__ import annotations

import math

import numpy as np

from gpugrad import return_types
from gpugrad.core.registry import FRONTENDS, REGISTRY
from gpugrad.ops.declarations import ACTIVATIONS, POINTWISE
from tests.fuzz.libs import G, T, in_place_name
from tests.op_cases import CASES

SURFACE = {}
# nn.functional compositions outside the registry that torch defines and the issues name (kl_div: #21)
EXTRA = ("kl_div", "l1_loss", "softmax_F", "log_softmax_F", "view")  # names beyond the registry's
INF = math.inf


def universe():
    """Every name the fuzzer must reach, from the registry as it is now (sorted: programs replay from a seed)."""
    return sorted(set(REGISTRY) | set(FRONTENDS) | set(EXTRA))


def spec(*names):
    def register(gen):
        for n in names:
            SURFACE[n] = gen
        return gen
    return register


# ---- operands --------------------------------------------------------------------------------------------------------
def flt(p, pred=lambda v: True, shape=None, **kw):
    """A float operand that ``pred`` accepts (an existing value, or a new leaf)."""
    return p.operand(lambda v: v.is_float and pred(v), shape=shape or (lambda q: q.shape()), **kw)


def nd(p, lo, hi=3, nonempty=False):
    """A float operand with lo..hi dims (non-empty if asked)."""
    def ok(v):
        return lo <= v.ndim <= hi and (not nonempty or v.numel() > 0)

    def shape(q):
        while True:
            s = q.shape()
            if lo <= len(s) <= hi and (not nonempty or 0 not in s):
                return s
    return flt(p, ok, shape)


def dim(p, x, none=False, bad=True):
    """An axis of x (negative ones too), None sometimes, an out-of-range one rarely (both must raise)."""
    n = max(x.ndim, 1)
    if bad and p.src.bool(3):
        p.feature("bad_axis")
        return p.src.choice([n, -n - 1])
    if none and p.src.bool(30):
        return None
    return p.src.int(-n, n - 1)


def dims(p, x):
    """A tuple of distinct axes (empty sometimes: all of them for most reductions, none for some)."""
    axes = sorted({p.src.int(0, x.ndim - 1) for _ in range(p.src.int(1, 2))}) if x.ndim else []
    return tuple(a - x.ndim if p.src.bool(30) else a for a in axes)


def index(p, n, shape, negative=False):
    """Integer ids in [0, n) of ``shape`` (one out of range now and then, or a negative one: both must raise)."""
    ids = p.rng.integers(0, max(n, 1), shape) if n else np.zeros(shape, np.int64)
    if ids.size and (negative or p.src.bool(3)):
        p.feature("bad_index")
        ids.flat[p.src.int(0, ids.size - 1)] = p.src.choice([-1, n])
    return ids


def number(p, *extra):
    return p.src.choice([2.0, -0.5, 0.0, 3, 1.5, *extra])


def call(x, name, *args, **kw):
    inner = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kw.items()])
    return f"{x}.{name}({inner})"


def method_or_function(p, name, x, *args, **kw):
    """(text, fn): ``x.name(*args)`` or ``lib.name(x, *args)`` (where both spell it)."""
    if p.src.bool(30) and _function(name):
        return (f"{name}({x}{''.join(', ' + repr(a) for a in args)}{''.join(f', {k}={v!r}' for k, v in kw.items())})",
                lambda lib, a: getattr(lib.m, name)(a, *args, **kw))
    return call(x, name, *args, **kw), lambda lib, a: getattr(a, name)(*args, **kw)


def _function(name):
    front = FRONTENDS.get(name)
    return front is None or front.function


def _inplace(name):
    front = FRONTENDS.get(name)
    return front is not None and front.inplace


# ---- pointwise: every row of ops/declarations.py ------------------------------------------------------------------------
PARAMS = {"softplus": [(1.0, 20.0), (2.0, 1.0), (0.5, 5.0)], "leaky_relu": [(0.01,), (0.2,), (-0.5,)],
          "elu": [(1.0,), (0.5,), (2.0,)]}
DOMAIN = {"log": "positive", "log2": "positive", "log10": "positive", "sqrt": "positive", "rsqrt": "positive",
          "log1p": "positive", "asin": "unit", "acos": "unit", "reciprocal": "positive"}


@spec(*POINTWISE)
def pointwise(p, name):
    d = POINTWISE[name]
    if p.src.bool(10) and d.frontend:  # integers: promoted to the default float dtype, or kept (relu, floor)
        x = p.operand(lambda v: not v.is_float, shape=lambda q: q.shape(), dtype=np.int64)
    elif name in DOMAIN and p.src.bool(50):
        x = p.leaf(p.shape(), np.float64, values=DOMAIN[name])
    else:
        x = flt(p)
    params = p.src.choice(PARAMS[name]) if name in PARAMS and p.src.bool(60) else ()
    if name == "round" and p.src.bool(30):
        params = ()
        kw = {"decimals": p.src.choice([1, -1, 2])}
        p.step(name, call(x, name, **kw), lambda lib, a: a.round(**kw), x)
        return True
    if hasattr(G.Tensor, name + "_") and p.src.bool(25) and x.is_float:
        p.step(name + "_", call(x, name + "_", *params), lambda lib, a: lib.pointwise_(name, a, *params), x,
               out=False, strict=True)
        if not in_place_name(name):
            p.feature("torch_inplace_by_copy")
    else:
        p.step(name, call(x, name, *params), lambda lib, a: lib.pointwise(name, a, *params), x)
    return True


@spec("abs", "neg")
def sign_ops(p, name):
    x = flt(p) if p.src.bool(90) else p.operand(lambda v: not v.is_float, dtype=np.int64)
    form = p.src.int(0, 3)
    if form == 0 and x.is_float:
        p.step(name + "_", call(x, name + "_"), lambda lib, a: getattr(a, name + "_")(), x, out=False, strict=True)
    elif form == 1:
        sym = "abs({})" if name == "abs" else "-{}"
        p.step(name, sym.format(x), lambda lib, a: abs(a) if name == "abs" else -a, x)
    else:
        text, fn = method_or_function(p, name, x)
        p.step(name, text, fn, x)
    return True


# ---- binary arithmetic ---------------------------------------------------------------------------------------------------
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod", "floor_divide", "rounding_div")
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "remainder": "%", "floor_divide": "//"}


@spec(*BINARY)
def binary(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    y = p.partner(x) if p.src.bool(70) else number(p, -1, 0.5)
    if p.src.bool(30) and not isinstance(y, (int, float)) or p.src.bool(10):
        x, y = y, x  # a number on the left: 2.0 - x, 2.0 ** x
    kw, label = {}, name  # (the step is counted under its registered name: rounding_div runs as div(rounding_mode=))
    if name == "rounding_div":
        name, kw = "div", {"rounding_mode": p.src.choice(["trunc", "floor"])}
        p.feature("rounding_div")
    elif name in ("add", "sub") and p.src.bool(20):
        kw = {"alpha": p.src.choice([2, -0.5])}
    elif name == "div" and p.src.bool(20):
        kw = {"rounding_mode": p.src.choice([None, "trunc", "floor"])}
    if isinstance(x, (int, float)):  # only the functions (and operators) take a number first
        if name in OPERATORS and not kw:
            sym = OPERATORS[name]
            p.step(label, f"{x} {sym} {y}", lambda lib, b: eval(f"x {sym} b", {"x": x, "b": b}), y)  # noqa: S307
        elif name == "pow":
            p.step(label, f"pow({x}, {y})", lambda lib, b: lib.m.pow(x, b), y)
        else:
            return False
        return True
    if _inplace(name) and p.src.bool(25) and x.is_float:
        if y is x or hasattr(y, "view_of") and (y.view_of or y) is (x.view_of or x):
            p.feature("inplace_self_operand")
        p.step(label + "_", call(x, name + "_", y, **kw), lambda lib, a, b: getattr(a, name + "_")(b, **kw), x, y,
               out=False, strict=True)
        return True
    if name in OPERATORS and not kw and p.src.bool(40):
        sym = OPERATORS[name]
        p.step(label, f"{x} {sym} {y}", lambda lib, a, b: eval(f"a {sym} b"), x, y)  # noqa: S307
        return True
    if p.src.bool(30):
        p.step(label, f"{name}({x}, {y}{''.join(f', {k}={v!r}' for k, v in kw.items())})",
               lambda lib, a, b: getattr(lib.m, name)(a, b, **kw), x, y)
    else:
        p.step(label, call(x, name, y, **kw), lambda lib, a, b: getattr(a, name)(b, **kw), x, y)
    return True


@spec("where")
def where(p, name):
    x = flt(p)
    y = p.partner(x) if p.src.bool(70) else number(p)
    if p.src.bool(20):
        x, y = y, x
    shape = np.broadcast_shapes(*(v.shape for v in (x, y) if not isinstance(v, (int, float))))
    cond = p.const(p.rng.random(shape) < 0.5, "cond")
    if p.src.bool(15):
        p.step(name, "where(cond)", lambda lib, c: lib.m.where(c), cond, multi=True)
    elif isinstance(x, (int, float)):
        p.step(name, f"where(cond, {x}, {y})", lambda lib, c, b: lib.m.where(c, x, b), cond, y)
    elif p.src.bool(30):
        p.step(name, f"{x}.where(cond, {y})", lambda lib, a, c, b: a.where(c, b), x, cond, y)
    else:
        p.step(name, f"where(cond, {x}, {y})", lambda lib, c, a, b: lib.m.where(c, a, b), cond, x, y)
    return True


@spec("clamp")
def clamp(p, name):
    x = flt(p)
    inplace = p.src.bool(30)
    if p.src.bool(50):  # numbers
        lo, hi = p.src.choice([(-0.5, 0.5), (None, 0.0), (0.0, None), (0.5, -0.5), (-1.0, 1.0), (None, None)])
        op = "clamp_" if inplace else "clamp"
        p.step(op, call(x, op, lo, hi), lambda lib, a: getattr(a, op)(lo, hi), x, out=not inplace, strict=inplace)
        return True
    p.feature("clamp_tensor")
    bound = p.partner(x, allow_int=False) if p.src.bool(60) else p.leaf(
        p.src.choice([x.shape, x.shape[-1:]]), np.float64, values=p.src.choice(["normal", "nonfinite"]))
    which = p.src.choice(["min", "max", "both"])
    other = p.partner(x, allow_int=False) if which == "both" else None
    kw = (lambda b, o: {"min": b}) if which == "min" else (lambda b, o: {"max": b}) if which == "max" else \
        (lambda b, o: {"min": b, "max": o})
    op = "clamp_" if inplace else "clamp"
    text = f"{x}.{op}({which}={bound}{f', max={other}' if other is not None else ''})"
    p.step(op, text, lambda lib, a, b, o: getattr(a, op)(**kw(b, o)), x, bound, other, out=not inplace,
           strict=inplace)
    return True


# ---- reductions ----------------------------------------------------------------------------------------------------------
@spec("sum", "mean", "amax", "amin", "nansum", "nanmean", "prod")
def reduction(p, name):
    x = flt(p) if name != "sum" or p.src.bool(85) else p.operand(lambda v: not v.is_float, dtype=np.int64)
    keep = p.src.bool(40)
    form = p.src.int(0, 2)
    if form == 0:
        text, fn = method_or_function(p, name, x)
    elif form == 1 or name == "prod" or not x.ndim:
        d = dim(p, x)
        text, fn = method_or_function(p, name, x, d, keep)
    else:
        d = dims(p, x)
        text, fn = method_or_function(p, name, x, d, keep)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("max", "min")
def extreme(p, name):
    x = flt(p)
    form = p.src.int(0, 3)
    if form == 0:
        text, fn = method_or_function(p, name, x)
        p.step(name, text, fn, x, strict=True)
    elif form == 1:
        y = p.partner(x, allow_int=False)
        p.step(name, f"{name}({x}, {y})", lambda lib, a, b: getattr(lib.m, name)(a, b), x, y)
    else:
        d, keep = dim(p, x), p.src.bool(40)
        text, fn = method_or_function(p, name, x, d, keep)
        p.step(name + "_dim", text, fn, x, strict=True, multi=True)
        p.ran.add(name)
    return True


@spec("aminmax")
def aminmax(p, name):
    x = flt(p)
    kw = {"dim": dim(p, x, none=True), "keepdim": p.src.bool(40)} if p.src.bool(70) else {}
    p.step(name, call(x, name, **kw), lambda lib, a: a.aminmax(**kw), x, multi=True, strict=True)
    return True


@spec("median", "mode", "kthvalue")
def selection(p, name):
    x = flt(p)
    if name == "median" and p.src.bool(40):
        text, fn = method_or_function(p, name, x)
        p.step(name, text, fn, x, strict=True)
        return True
    d = dim(p, x)
    keep = p.src.bool(40)
    n = x.shape[d] if x.ndim and -x.ndim <= d < x.ndim else 1
    args = (p.src.int(0 if p.src.bool(5) else 1, n + (1 if p.src.bool(5) else 0)),) if name == "kthvalue" else ()
    text, fn = method_or_function(p, name, x, *args, d, keep)
    p.step(name, text, fn, x, multi=True, strict=True)
    return True


@spec("var", "std", "var_mean", "std_mean")
def moments(p, name):
    x = flt(p)
    d = dim(p, x, none=True) if p.src.bool(70) else (dims(p, x) or None)
    kw = {"correction": p.src.choice([0, 1, 2])} if p.src.bool(60) else {}
    if not kw and p.src.bool(50):
        kw = {"unbiased": p.src.bool(50)}
    keep = p.src.bool(30)
    if name.endswith("_mean"):
        p.step(name, f"{name}({x}, {d!r}, keepdim={keep}{''.join(f', {k}={v!r}' for k, v in kw.items())})",
               lambda lib, a: getattr(lib.m, name)(a, d, keepdim=keep, **kw), x, multi=True, strict=True)
    else:
        p.step(name, call(x, name, d, keepdim=keep, **kw), lambda lib, a: getattr(a, name)(d, keepdim=keep, **kw),
               x, strict=True)
    return True


@spec("norm")
def norm(p, name):
    x = flt(p)
    order = p.src.choice(["fro", 1, 2, 3, 0.5, INF, -INF, 0, -1])
    d = None if p.src.bool(40) else dim(p, x) if p.src.bool(50) else (dims(p, x) or None)
    keep = p.src.bool(30)
    p.step(name, call(x, "norm", order, d, keep), lambda lib, a: a.norm(order, d, keep), x, strict=True)
    return True


@spec("logsumexp")
def logsumexp(p, name):
    x = flt(p)
    d = dim(p, x) if p.src.bool(70) or not x.ndim else dims(p, x)
    keep = p.src.bool(40)
    text, fn = method_or_function(p, name, x, d, keep)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("softmax", "log_softmax", "softmax_F", "log_softmax_F")
def softmax(p, name):
    x = flt(p)
    d = dim(p, x)
    op = name.replace("_F", "")
    if name.endswith("_F"):
        p.step(op, f"F.{op}({x}, {d})", lambda lib, a: getattr(lib.F, op)(a, d), x, strict=True)
    else:
        text, fn = method_or_function(p, op, x, d)
        p.step(op, text, fn, x, strict=True)
    p.ran.add(name)
    return True


@spec("cumsum", "cumprod")
def scan(p, name):
    x = flt(p)
    d = dim(p, x)
    if p.src.bool(25) and x.is_float:
        p.step(name + "_", call(x, name + "_", d), lambda lib, a: getattr(a, name + "_")(d), x, out=False, strict=True)
    else:
        text, fn = method_or_function(p, name, x, d)
        p.step(name, text, fn, x, strict=True)
    return True


@spec("sort", "argsort", "topk")
def ordering(p, name):
    x = flt(p)
    d = dim(p, x)
    if name == "topk":
        n = x.shape[d % x.ndim] if x.ndim and -x.ndim <= d < x.ndim else 1
        k = p.src.int(0, n + (1 if p.src.bool(5) else 0))
        kw = {"largest": p.src.bool(70)}
        p.step(name, call(x, name, k, d, **kw), lambda lib, a: a.topk(k, d, **kw), x, multi=True, strict=True)
        return True
    kw = {"dim": d, "descending": p.src.bool(40)}
    if p.src.bool(30):
        kw["stable"] = True
    text, fn = method_or_function(p, name, x, **kw)
    p.step(name, text, fn, x, multi=name == "sort", strict=True)
    return True


# ---- movement and views -----------------------------------------------------------------------------------------------
def factor_shape(p, shape):
    n = math.prod(shape)
    if n == 0:
        return p.src.choice([(0,), (0, 1), (1, 0), (-1, 0)])
    dims_, rest = [], n
    for d in (4, 3, 2):
        while rest % d == 0 and p.src.bool(50):
            dims_.append(d)
            rest //= d
    dims_.append(rest)
    if p.src.bool(30):
        dims_.insert(p.src.int(0, len(dims_)), 1)
    if p.src.bool(25):
        dims_[p.src.int(0, len(dims_) - 1)] = -1
    return tuple(dims_) if n != 1 or p.src.bool(70) else ()


@spec("reshape", "view")
def reshape(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    shape = factor_shape(p, x.shape)
    op = name if p.src.bool(70) else "view"
    p.step(op, call(x, op, shape), lambda lib, a: getattr(a, op)(shape), x, strict=op == "view")
    p.ran.add(name)
    return True


@spec("flatten", "unflatten")
def flatten(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "flatten":
        s, e = (dim(p, x), dim(p, x)) if p.src.bool(60) else (0, -1)
        text, fn = method_or_function(p, name, x, s, e)
    else:
        if not x.ndim:
            return False
        d = dim(p, x, bad=False)
        n = x.shape[d]
        sizes = p.src.choice([(n,), (1, n), (n, 1), (-1,)] + ([(2, n // 2)] if n % 2 == 0 and n else []) +
                             [(-1, 1), (n + 1,)])
        text, fn = method_or_function(p, name, x, d, sizes)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("permute", "transpose", "t", "swapaxes", "swapdims", "movedim", "moveaxis")
def permute(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "permute":
        perm = tuple(int(a) for a in p.rng.permutation(x.ndim))
        if p.src.bool(30):
            perm = tuple(a - x.ndim for a in perm)
        args = (perm,) if p.src.bool(50) else perm
        text, fn = call(x, name, *args), (lambda lib, a: a.permute(*args))
    elif name == "t":
        text, fn = method_or_function(p, name, x)
        if p.src.bool(20):
            text, fn = f"{x}.T" if x.ndim <= 2 else f"{x}.mT", (lambda lib, a: a.T if a.dim() <= 2 else a.mT)
    elif name in ("movedim", "moveaxis"):
        if p.src.bool(50) or x.ndim < 2:
            src_, dst = dim(p, x), dim(p, x)
        else:
            src_ = tuple(sorted({p.src.int(0, x.ndim - 1) for _ in range(2)}))
            dst = tuple(int(a) for a in p.rng.permutation(x.ndim)[:len(src_)])
        text, fn = method_or_function(p, name, x, src_, dst)
    else:
        text, fn = method_or_function(p, name, x, dim(p, x), dim(p, x))
    p.step(name, text, fn, x, strict=True)
    return True


@spec("expand")
def expand(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    shape = [p.src.int(2, 3) if n == 1 and p.src.bool(70) else (-1 if p.src.bool(20) else n) for n in x.shape]
    if p.src.bool(40) or not shape:
        shape = [p.src.int(1, 3)] + shape
    if p.src.bool(4):
        shape = [n + 1 if n > 1 else n for n in shape]  # misfit: both must raise
    shape = tuple(shape)
    form = p.src.int(0, 2)
    if form == 0:
        p.step(name, call(x, name, *shape), lambda lib, a: a.expand(*shape), x)
    elif form == 1:
        p.step(name, call(x, "broadcast_to", shape), lambda lib, a: a.broadcast_to(shape), x)
    else:
        y = p.leaf([abs(n) if n != -1 else 1 for n in shape], np.float64, requires_grad=False)
        p.step(name, call(x, "expand_as", y), lambda lib, a, b: a.expand_as(b), x, y)
    return True


@spec("squeeze", "unsqueeze")
def squeeze(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "unsqueeze":
        d = p.src.int(-x.ndim - 1, x.ndim) if not p.src.bool(3) else x.ndim + 1
        text, fn = method_or_function(p, name, x, d)
    elif p.src.bool(30) or not x.ndim:
        text, fn = method_or_function(p, name, x)
    elif p.src.bool(25):
        d = dims(p, x)
        text, fn = method_or_function(p, name, x, d)
    else:
        text, fn = method_or_function(p, name, x, dim(p, x))
    p.step(name, text, fn, x, strict=True)
    return True


@spec("narrow", "select")
def narrow(p, name):
    x = p.operand(lambda v: v.ndim > 0, shape=lambda q: q.shape() or (3,))
    if not x.ndim:
        return False
    d = dim(p, x)
    n = x.shape[d] if -x.ndim <= d < x.ndim else 1
    if name == "select":
        i = p.src.int(-n, n - 1) if n and not p.src.bool(4) else n
        text, fn = method_or_function(p, name, x, d, i)
    else:
        start = p.src.int(-n, n) if n else 0
        room = n - (start + n if start < 0 else start)
        length = p.src.int(0, max(room, 0) + (1 if p.src.bool(5) else 0))
        text, fn = method_or_function(p, name, x, d, start, length)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("split", "chunk", "tensor_split", "unbind")
def pieces(p, name):
    x = p.operand(lambda v: v.ndim > 0, shape=lambda q: q.shape() or (4,))
    if not x.ndim:
        return False
    d = dim(p, x)
    n = x.shape[d] if -x.ndim <= d < x.ndim else 1
    if name == "split":
        arg = p.src.int(1, max(n, 1)) if p.src.bool(60) else _sizes_summing(p, n)
    elif name == "chunk":
        arg = p.src.int(1, n + 1)
    elif name == "tensor_split":
        arg = p.src.int(1, n + 1) if p.src.bool(50) else sorted(p.src.int(0, n + 1) for _ in range(p.src.int(1, 2)))
    else:
        arg = None
    args = (d,) if arg is None else (arg, d)
    text, fn = method_or_function(p, name, x, *args)
    p.step(name, text, fn, x, multi=True, strict=True)
    return True


def _sizes_summing(p, n):
    sizes, left = [], n
    while left > 0:
        k = p.src.int(0 if p.src.bool(10) else 1, left)
        sizes.append(k)
        left -= k
    if p.src.bool(5):
        sizes.append(1)  # too many: both must raise
    return sizes or [0]


@spec("diagonal", "diag", "trace")
def diagonal(p, name):
    if name == "diag":
        x = nd(p, 1, 2)
        k = p.src.int(-2, 2)
        text, fn = method_or_function(p, name, x, k)
    elif name == "trace":
        x = nd(p, 2, 2)
        text, fn = method_or_function(p, name, x)
    else:
        x = nd(p, 2, 3)
        k = p.src.int(-2, 2)
        d1, d2 = dim(p, x), dim(p, x)
        text, fn = method_or_function(p, name, x, k, d1, d2)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("flip", "fliplr", "flipud", "roll")
def flip(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "flip":
        d = dims(p, x)
        text, fn = method_or_function(p, name, x, d)
    elif name == "roll":
        if p.src.bool(30):
            s = p.src.int(-3, 3)
            text, fn = method_or_function(p, name, x, s)
        else:
            d = dims(p, x) or (0,)
            s = tuple(p.src.int(-3, 4) for _ in d)
            text, fn = method_or_function(p, name, x, s, d)
    else:
        text, fn = method_or_function(p, name, x)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("repeat", "tile", "repeat_interleave")
def repeat(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "repeat_interleave":
        d = dim(p, x, none=True)
        n = x.numel() if d is None else (x.shape[d] if x.ndim and -x.ndim <= d < x.ndim else 1)
        if p.src.bool(60):
            r = p.src.int(0, 3)
            text, fn = method_or_function(p, name, x, r, d)
            p.step(name, text, fn, x, strict=True)
        else:
            reps = p.const(p.rng.integers(0, 3, n), "repeats")
            p.step(name, f"{x}.repeat_interleave(repeats, {d})", lambda lib, a, r: a.repeat_interleave(r, d), x, reps,
                   strict=True)
        return True
    k = x.ndim + p.src.int(0 if name == "repeat" else -x.ndim, 1)
    sizes = tuple(p.src.int(0 if p.src.bool(10) else 1, 3) for _ in range(max(k, 0)))
    if name == "repeat":
        p.step(name, call(x, name, *sizes), lambda lib, a: a.repeat(*sizes), x, strict=True)
    else:
        text, fn = method_or_function(p, name, x, sizes)
        p.step(name, text, fn, x, strict=True)
    return True


@spec("tril", "triu")
def triangle(p, name):
    x = nd(p, 2, 3) if p.src.bool(95) else nd(p, 1, 1)
    k = p.src.int(-2, 2)
    text, fn = method_or_function(p, name, x, k)
    p.step(name, text, fn, x, strict=True)
    return True


@spec("atleast_1d", "atleast_2d", "atleast_3d")
def at_least(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    p.step(name, f"{name}({x})", lambda lib, a: getattr(lib.m, name)(a), x, strict=True)
    return True


@spec("cat", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack")
def join(p, name):
    x = p.operand(lambda v: v.ndim > 0 or name != "cat", shape=lambda q: q.shape() or (2,))
    k = p.src.int(1, 3)
    d = dim(p, x, bad=True) if name in ("cat", "stack") else None
    parts = [x]
    for _ in range(k - 1):
        shape = list(x.shape)
        if name == "cat" and x.ndim and d is not None and -x.ndim <= d < x.ndim:
            shape[d] = p.src.int(0, 3)
        elif name == "hstack" and x.ndim:
            shape[0 if x.ndim == 1 else 1] = p.src.int(1, 3)
        elif name in ("vstack", "row_stack") and x.ndim > 1:
            shape[0] = p.src.int(1, 3)
        elif name == "dstack" and x.ndim > 2 or name == "column_stack" and x.ndim > 1:
            shape[2 if name == "dstack" else 1] = p.src.int(1, 3)
        if p.src.bool(4):
            shape = shape + [2]  # misfit: both must raise
        y = p.pick(lambda v, s=tuple(shape): v.shape == s and v.is_float) if p.src.bool(40) else None
        parts.append(y or p.leaf(tuple(shape), p.src.choice([np.float64, np.float64, np.float32, np.int64])))
    text = f"{name}([{', '.join(v.name for v in parts)}]{'' if d is None else f', {d}'})"
    if d is None:
        p.step(name, text, lambda lib, *xs: getattr(lib.m, name)(list(xs)), *parts, strict=True)
    else:
        p.step(name, text, lambda lib, *xs: getattr(lib.m, name)(list(xs), d), *parts, strict=True)
    return True


@spec("clone")
def clone(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    form = p.src.int(0, 2)
    if form == 0:
        text, fn = method_or_function(p, name, x)
    elif form == 1:
        text, fn = call(x, "contiguous"), (lambda lib, a: a.contiguous())
    else:
        text, fn = call(x, "detach"), (lambda lib, a: a.detach())
    v = p.step(name, text, fn, x)
    if form == 2 and v is not None:  # shares x's memory: in-place writes through it are writes into x
        p.feature("detach")
        v.view_of, v.expanded = x.view_of or x, x.expanded
    return True


# ---- indexing, gathering and scattering ------------------------------------------------------------------------------
@spec("index", "index_place", "as_view", "copy_slices")
def indexing(p, name):
    """x[key] for every kind of key, and the ops the engine makes behind in-place writes: t[key] = v (index_place for
    tensor keys), an in-place op on a view (copy_slices), a view read after its base changed in place (as_view)."""
    x = p.operand(lambda v: v.ndim > 0, shape=lambda q: q.shape() or (3,))
    if not x.ndim:
        return False
    key, text = _key(p, x, tensors=name in ("index", "index_place"))
    tensors = [p.const(k.a, "idx") for k in key if isinstance(k, _Tensor)]
    if name == "index":
        p.step(name, f"{x}[{text}]", lambda lib, a, *k: a[_lib_key(key, k)], x, *tensors)
        return True
    if name == "index_place" or name == "copy_slices" and p.src.bool(30):
        value = p.src.choice([0.0, 2.5]) if p.src.bool(40) else flt(p, shape=lambda q: ())
        p.step(name, f"{x}[{text}] = {value}", lambda lib, a, v, *k: a.__setitem__(_lib_key(key, k), v), x, value,
               *tensors, out=False, strict=True)
        return True
    if name == "copy_slices":
        view = p.step("index", f"{x}[{text}]", lambda lib, a: a[key], x)
        op = p.src.choice(["add_", "mul_", "zero_", "fill_", "copy_", "clamp_"])
        y = p.partner(view, allow_int=False) if op in ("add_", "mul_", "copy_") else None
        args = {"add_": (y,), "mul_": (y,), "copy_": (y,), "zero_": (), "fill_": (1.5,), "clamp_": (-0.5, 0.5)}[op]
        p.step("copy_slices", call(view, op, *args),
               lambda lib, a, *b: getattr(a, op)(*b), view, *args, out=False, strict=True)
        return True
    view = p.step("index", f"{x}[{text}]", lambda lib, a: a[key], x)  # as_view
    y = p.partner(x, allow_int=False)
    if y is x or (y.view_of or y) is (x.view_of or x):
        p.feature("inplace_self_operand")
    p.step("mul_", f"{x}.mul_({y})", lambda lib, a, b: a.mul_(b), x, y, out=False, strict=True)
    p.step(name, f"{view} * 1", lambda lib, a: a * 1, view)
    return True


def _key(p, x, tensors=True):
    """A key of slices, ints, None, Ellipsis and (if ``tensors``) integer arrays or a mask, with its text."""
    kind = p.src.choice(["basic", "basic", "int", "tensor", "mask", "mixed"] if tensors else ["basic", "int"])
    if kind == "mask":
        m = p.rng.random(x.shape[:p.src.int(1, x.ndim)]) < 0.5
        return (_Tensor(m),), "mask"
    key, parts = [], []
    for i, n in enumerate(x.shape[:p.src.int(1, x.ndim)]):
        r = p.src.int(0, 9)
        if kind in ("int", "mixed") and n and r < 4:
            k = p.src.int(-n, n - 1)
            key.append(k)
            parts.append(str(k))
        elif kind in ("tensor", "mixed") and r < 7 and sum(isinstance(k, _Tensor) for k in key) < 2:
            ids = p.rng.integers(-n, max(n, 1), p.src.int(0, 3)) if n else np.zeros(0, np.int64)
            key.append(_Tensor(ids))
            parts.append(f"tensor({ids.tolist()})")
        elif r == 8 and i == 0:
            key.append(None)
            parts.append("None")
        else:
            start, stop, step = p.src.int(0, max(n, 1)), p.src.choice([None, n, max(n - 1, 0)]), p.src.choice([1, 1, 2])
            key.append(slice(start, stop, step))
            parts.append(f"{start}:{'' if stop is None else stop}{'' if step == 1 else ':' + str(step)}")
    if p.src.bool(10):
        key.append(Ellipsis)
        parts.append("...")
    return tuple(key), ", ".join(parts)


class _Tensor:
    """An index tensor inside a key: the same data as a tensor in each library (made per library)."""

    def __init__(self, a):
        self.a = a


def _lib_key(key, made):
    it = iter(made)
    return tuple(next(it) if isinstance(k, _Tensor) else k for k in key)


@spec("gather", "take_along_dim", "index_select")
def gather(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "index_select":
        d = dim(p, x)
        n = x.shape[d] if x.ndim and -x.ndim <= d < x.ndim else 1
        idx = p.const(index(p, n, (p.src.int(0, 4),), negative=p.src.bool(5)), "idx")
        p.step(name, f"{x}.index_select({d}, idx)", lambda lib, a, i: a.index_select(d, i), x, idx, strict=True)
        return True
    d = dim(p, x, none=name == "take_along_dim")
    if d is None:
        idx = p.const(index(p, x.numel(), (p.src.int(0, 4),)), "idx")
        p.step(name, f"{x}.take_along_dim(idx)", lambda lib, a, i: a.take_along_dim(i), x, idx, strict=True)
        return True
    axis = d % max(x.ndim, 1)
    shape = tuple(p.src.int(0 if p.src.bool(10) else 1, max(m, 1)) if a != axis else p.src.int(0, 3)
                  for a, m in enumerate(x.shape)) or ()
    n = x.shape[axis] if x.ndim else 1
    idx = p.const(index(p, n, shape), "idx")
    fn = (lambda lib, a, i: a.gather(d, i)) if name == "gather" else (lambda lib, a, i: a.take_along_dim(i, d))
    p.step(name, f"{x}.{name}({d}, idx{shape})" if name == "gather" else f"{x}.take_along_dim(idx{shape}, {d})",
           fn, x, idx, strict=True)
    return True


@spec("masked_select", "masked_fill")
def masked(p, name):
    x = flt(p)
    shape = x.shape[p.src.int(0, x.ndim):] if p.src.bool(30) else x.shape
    mask = p.const(p.rng.random(shape) < 0.5, "mask")
    if name == "masked_select":
        p.step(name, f"{x}.masked_select(mask)", lambda lib, a, m: a.masked_select(m), x, mask)
        return True
    value = number(p) if p.src.bool(60) else flt(p, lambda v: v.ndim == 0, shape=lambda q: ())
    if p.src.bool(35):
        p.step("masked_fill_", f"{x}.masked_fill_(mask, {value})", lambda lib, a, m, v: a.masked_fill_(m, v),
               x, mask, value, out=False, strict=True)
    else:
        p.step(name, f"{x}.masked_fill(mask, {value})", lambda lib, a, m, v: a.masked_fill(m, v), x, mask, value)
    return True


@spec("scatter", "scatter_add", "index_add")
def scatter(p, name):
    x = nd(p, 1, 3, nonempty=p.src.bool(90))
    d = dim(p, x)
    axis = d % x.ndim if -x.ndim <= d < x.ndim else 0
    n = x.shape[axis]
    inplace = p.src.bool(35)
    op = name + "_" if inplace else name
    if name == "index_add":
        k = p.src.int(0, 4)
        idx = p.const(index(p, n, (k,)), "idx")
        shape = tuple(k if a == axis else m for a, m in enumerate(x.shape))
        src = p.operand(lambda v, s=shape: v.shape == s and v.is_float, shape=shape, fresh=60)
        kw = {"alpha": p.src.choice([2.0, -1])} if p.src.bool(30) else {}
        p.step(op, f"{x}.{op}({d}, idx, {src}{''.join(f', {k}={v!r}' for k, v in kw.items())})",
               lambda lib, a, i, s: getattr(a, op)(d, i, s, **kw), x, idx, src, out=not inplace, strict=True)
        return True
    shape = tuple(p.src.int(1, m) if a != axis and m else p.src.int(0, 3) if a == axis else 0
                  for a, m in enumerate(x.shape))
    if name == "scatter":  # distinct ids per line: torch leaves the order of repeated writes undefined
        full = list(shape)
        full[axis] = max(n, shape[axis])
        ids = np.take(np.argsort(p.rng.random(full), axis=axis), range(shape[axis]), axis=axis)
        if ids.size and p.src.bool(3):
            ids.flat[0] = n
            p.feature("bad_index")
    else:
        ids = index(p, n, shape)
    idx = p.const(ids.astype(np.int64), "idx")
    bigger = tuple(s + p.src.int(0, 1) for s in shape)
    src = number(p) if name == "scatter" and p.src.bool(30) else \
        p.operand(lambda v, s=bigger: v.shape == s and v.is_float, shape=bigger, fresh=60)
    if name == "scatter" and isinstance(src, (int, float)) is False and p.src.bool(20):
        reduce = "add"
        p.step(op, f"{x}.{op}({d}, idx, {src}, reduce='add')",
               lambda lib, a, i, s: getattr(a, op)(d, i, s, reduce=reduce), x, idx, src, out=not inplace, strict=True)
        return True
    p.step(op, f"{x}.{op}({d}, idx, {src})", lambda lib, a, i, s: getattr(a, op)(d, i, s), x, idx, src,
           out=not inplace, strict=True)
    return True


@spec("nonzero", "argwhere", "unique")
def selections(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape(), values="ties")
    if name == "unique":
        kw = {"sorted": True, "return_inverse": p.src.bool(40), "return_counts": p.src.bool(40)}
        if p.src.bool(30) and x.ndim:
            kw["dim"] = dim(p, x, bad=False)
        multi = kw["return_inverse"] or kw["return_counts"]
        p.step(name, call(x, name, **kw), lambda lib, a: a.unique(**kw), x, multi=multi)
        return True
    if name == "nonzero" and p.src.bool(40):
        p.step(name, call(x, name, as_tuple=True), lambda lib, a: a.nonzero(as_tuple=True), x, multi=True)
        return True
    text, fn = method_or_function(p, name, x)
    p.step(name, text, fn, x)
    return True


# ---- products ------------------------------------------------------------------------------------------------------------
@spec("matmul", "mm", "bmm", "mv", "dot", "outer", "ger")
def products(p, name):
    ranks = {"matmul": (p.src.int(1, 3), p.src.int(1, 3)), "mm": (2, 2), "bmm": (3, 3), "mv": (2, 1), "dot": (1, 1),
             "outer": (1, 1), "ger": (1, 1)}[name]
    x = p.operand(lambda v, r=ranks[0]: v.ndim == r and v.is_float, shape=lambda q: tuple(
        q.src.int(0 if q.src.bool(5) else 1, 3) for _ in range(ranks[0])))
    k = x.shape[-1]
    if name in ("outer", "ger"):
        shape = (p.src.int(0, 3),)
    elif ranks[1] == 1:
        shape = (k,)
    else:
        shape = tuple(x.shape[:-2]) if name == "bmm" else tuple(p.src.int(1, 2) for _ in range(ranks[1] - 2))
        shape = shape + (k, p.src.int(1, 3))
    if p.src.bool(4):
        shape = shape[:-1] + (shape[-1] + 1,) if ranks[1] == 1 else shape[:-2] + (shape[-2] + 1, shape[-1])
    y = p.pick(lambda v, s=shape: v.shape == s and v.is_float) if p.src.bool(40) else None
    y = y or p.leaf(shape, p.float_like(x))
    if name == "matmul" and p.src.bool(40):
        p.step(name, f"{x} @ {y}", lambda lib, a, b: a @ b, x, y)
    else:
        text, fn = (f"{name}({x}, {y})", lambda lib, a, b: getattr(lib.m, name)(a, b)) if p.src.bool(40) else \
            (call(x, name, y), lambda lib, a, b: getattr(a, name)(b))
        p.step(name, text, lambda lib, a, b: fn(lib, a, b), x, y)
    return True


EINSUM = [("ij,jk->ik", ((2, 3), (3, 4))), ("ij->ji", ((2, 3),)), ("ii->i", ((3, 3),)), ("ij->", ((2, 3),)),
          ("i,i->", ((3,), (3,))), ("bij,bjk->bik", ((2, 2, 3), (2, 3, 2))), ("ij,ij->ij", ((2, 3), (2, 3))),
          ("i,j->ij", ((2,), (3,))), ("...ij->...ji", ((2, 2, 3),)), ("ij,jk", ((2, 3), (3, 2))),
          ("ii", ((3, 3),)), ("ijk,ik->j", ((2, 3, 2), (2, 2))), ("i,i,i->i", ((3,), (3,), (3,)))]


@spec("einsum")
def einsum(p, name):
    eq, shapes = p.src.choice(EINSUM)
    xs = [p.operand(lambda v, s=s: v.shape == s and v.is_float, shape=s, fresh=50) for s in shapes]
    if len({x.dtype for x in xs}) > 1:
        p.feature("einsum_mixed_dtypes")
    p.step(name, f"einsum({eq!r}, {', '.join(x.name for x in xs)})", lambda lib, *a: lib.m.einsum(eq, *a), *xs)
    return True


@spec("linear")
def linear(p, name):
    x = nd(p, 1, 3)
    out = p.src.int(0 if p.src.bool(5) else 1, 3)
    w = p.leaf((out, x.shape[-1]), p.float_like(x))
    b = p.leaf((out,), p.float_like(x)) if p.src.bool(60) else None
    p.step(name, f"linear({x}, {w}, {b})", lambda lib, a, ww, bb: lib.F.linear(a, ww, bb), x, w, b)
    return True


@spec("bias_act")
def bias_act(p, name):
    x = nd(p, 1, 3)
    act = p.src.choice(ACTIVATIONS)
    b = p.operand(lambda v, s=x.shape[-1:]: v.shape == s and v.is_float, shape=x.shape[-1:], fresh=70)
    p.step(name, f"bias_act({x}, {b}, {act!r})", lambda lib, a, bb: lib.bias_act(a, bb, act), x, b)
    return True


# ---- comparisons ------------------------------------------------------------------------------------------------------
@spec("isclose", "allclose", "equal")
def closeness(p, name):
    x = flt(p)
    y = p.partner(x, allow_int=False) if p.src.bool(60) else x
    if name == "equal":
        p.step(name, f"equal({x}, {y})", lambda lib, a, b: lib.m.equal(a, b), x, y, scalar=True)
        return True
    kw = {"rtol": p.src.choice([1e-5, 0.1]), "atol": p.src.choice([1e-8, 0.5]), "equal_nan": p.src.bool(50)}
    p.step(name, call(x, name, y, **kw), lambda lib, a, b: getattr(a, name)(b, **kw), x, y, scalar=name == "allclose")
    return True


# ---- casts and devices ------------------------------------------------------------------------------------------------
@spec("cast", "to_device")
def cast(p, name):
    x = p.operand(lambda v: True, shape=lambda q: q.shape())
    if name == "to_device":
        p.step(name, f"{x}.to('cpu', copy=True)", lambda lib, a: lib.to_device(a), x)
        return True
    to = p.src.choice(["float", "double", "half", "long", "int", "bool", "float32", "float64", "int64", "complex64",
                       "type_as"])
    if to == "type_as":
        y = p.pick(lambda v: v is not x) or p.leaf((), np.float32)
        p.step(name, f"{x}.type_as({y})", lambda lib, a, b: a.type_as(b), x, y)
        return True
    if to in ("float", "half"):
        p.feature("float32")
    if to in ("float", "double", "half", "long", "int", "bool"):
        p.step(name, f"{x}.{to}()", lambda lib, a: getattr(a, to)(), x)
    else:
        if to == "complex64":
            p.feature("complex")
        p.step(name, f"{x}.to({to})", lambda lib, a: a.to(getattr(lib.m, to)), x)
    return True


@spec("overwrite")
def overwrite(p, name):
    x = flt(p)
    op = p.src.choice(["copy_", "fill_", "zero_"])
    if op == "copy_":
        y = p.partner(x)
        p.step(name, f"{x}.copy_({y})", lambda lib, a, b: a.copy_(b), x, y, out=False, strict=True)
    elif op == "fill_":
        v = number(p) if p.src.bool(70) else flt(p, lambda t: t.ndim == 0, shape=lambda q: ())
        p.step(name, f"{x}.fill_({v})", lambda lib, a, b: a.fill_(b), x, v, out=False, strict=True)
    else:
        p.step(name, f"{x}.zero_()", lambda lib, a: a.zero_(), x, out=False, strict=True)
    return True


# ---- nn.functional: losses, normalization, embeddings, dropout -------------------------------------------------------
REDUCTIONS = ["mean", "sum", "none"]


def _targets(p, rows, classes, ignore):
    t = p.rng.integers(0, max(classes, 1), rows)
    if ignore and rows:
        t[p.rng.random(rows) < 0.3] = -100
    if rows and p.src.bool(3):
        t[0] = classes  # out of range: both must raise
        p.feature("bad_index")
    return t


@spec("cross_entropy", "nll_loss", "token_logprob")
def class_losses(p, name):
    x = p.operand(lambda v: v.ndim in (1, 2, 3) and v.is_float and v.shape[min(1, v.ndim - 1)] > 0,
                  shape=lambda q: q.src.choice([(4, 5), (3, 2), (0, 3), (5,), (2, 3, 2), (1, 4)]))
    if not x.ndim or x.shape[min(1, x.ndim - 1)] == 0:
        return False
    C = x.shape[min(1, x.ndim - 1)]
    tshape = () if x.ndim == 1 else (x.shape[0],) + x.shape[2:]
    if name == "token_logprob":
        if x.ndim != 2:
            return False
        t = p.const(_targets(p, x.shape[0], C, False), "target")
        p.step(name, f"token_logprob({x}, target)", lambda lib, a, tt: lib.token_logprob(a, tt), x, t)
        return True
    kw = {"reduction": p.src.choice(REDUCTIONS)}
    ignore = p.src.bool(30)
    if p.src.bool(30):
        kw["weight"] = p.const(np.abs(p.rng.standard_normal(C)).astype(x.dtype) + 0.1, "weight")
    if name == "cross_entropy" and p.src.bool(25):
        kw["label_smoothing"] = p.src.choice([0.1, 0.5])
    if name == "cross_entropy" and p.src.bool(20):  # class probabilities
        t = p.leaf(x.shape, x.dtype, requires_grad=False, values="positive") if p.src.bool(70) else \
            p.leaf(x.shape, x.dtype, requires_grad=False)
        p.feature("soft_targets")
    else:
        t = p.const(_targets(p, math.prod(tshape), C, ignore).reshape(tshape), "target")
    if name == "nll_loss" and p.src.bool(60):
        x = p.step("log_softmax", f"{x}.log_softmax({min(1, x.ndim - 1)})",
                   lambda lib, a: a.log_softmax(min(1, a.dim() - 1)), x)
    text = f"{name}({x}, {t}{''.join(f', {k}={v!r}' for k, v in kw.items())})"
    p.step(name, text, lambda lib, a, tt, w: getattr(lib.F, name)(a, tt, **dict(kw, **({} if w is None else
                                                                                      {"weight": w}))),
           x, t, kw.pop("weight", None), strict=True)
    return True


@spec("binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "smooth_l1_loss", "huber_loss",
      "l1_loss", "kl_div")
def pointwise_losses(p, name):
    x = flt(p)
    if name == "binary_cross_entropy":
        if p.src.bool(80):
            x = p.step("sigmoid", f"{x}.sigmoid()", lambda lib, a: a.sigmoid(), x)
        t = p.leaf(x.shape, x.dtype, requires_grad=p.src.bool(20), values=p.src.choice(
            ["prob", "prob", "prob", "normal", "binary"]))
    elif name == "kl_div":
        t = p.leaf(x.shape, x.dtype, requires_grad=p.src.bool(30),
                   values=p.src.choice(["prob", "prob", "normal", "ties"]))
    else:
        t = p.partner(x, allow_int=False) if p.src.bool(80) else p.leaf(x.shape, x.dtype)
    kw = {"reduction": p.src.choice(REDUCTIONS + (["batchmean"] if name == "kl_div" else []))}
    w = None
    if name in ("binary_cross_entropy", "binary_cross_entropy_with_logits") and p.src.bool(30):
        w = p.const(np.abs(p.rng.standard_normal(x.shape[-1:])).astype(x.dtype), "weight")
    if name == "binary_cross_entropy_with_logits" and p.src.bool(30):
        kw["pos_weight"] = None  # filled per library below
    if name == "smooth_l1_loss" and p.src.bool(50):
        kw["beta"] = p.src.choice([0.0, 0.5, 2.0])
    if name == "huber_loss" and p.src.bool(50):
        kw["delta"] = p.src.choice([0.5, 2.0])
    if name == "kl_div" and p.src.bool(40):
        kw["log_target"] = True
    pos = p.const(np.abs(p.rng.standard_normal(x.shape[-1:])).astype(x.dtype), "pos_weight") \
        if "pos_weight" in kw else None
    kw.pop("pos_weight", None)
    text = f"{name}({x}, {t}{''.join(f', {k}={v!r}' for k, v in kw.items())}{', weight' if w else ''}" \
           f"{', pos_weight' if pos else ''})"

    def fn(lib, a, b, ww, pw):
        extra = {} if ww is None else {"weight": ww}
        if pw is not None:
            extra["pos_weight"] = pw
        return getattr(lib.F, name)(a, b, **kw, **extra)
    p.step(name, text, fn, x, t, w, pos, strict=True)
    return True


@spec("layer_norm")
def layer_norm(p, name):
    x = nd(p, 1, 3)
    k = p.src.int(1, x.ndim)
    ns = x.shape[x.ndim - k:]
    w = p.leaf(ns, p.float_like(x)) if p.src.bool(60) else None
    b = p.leaf(ns, p.float_like(x)) if p.src.bool(60) else None
    eps = p.src.choice([1e-5, 1e-5, 0.1])
    p.step(name, f"layer_norm({x}, {ns}, {w}, {b}, eps={eps})",
           lambda lib, a, ww, bb: lib.F.layer_norm(a, ns, ww, bb, eps=eps), x, w, b, strict=True)
    return True


@spec("embedding")
def embedding(p, name):
    w = p.operand(lambda v: v.ndim == 2 and v.is_float and v.shape[0] > 0, shape=lambda q: (q.src.int(1, 5), 3))
    if w.ndim != 2 or not w.shape[0]:
        return False
    ids = p.const(index(p, w.shape[0], p.src.choice([(3,), (2, 2), ()])), "ids")
    kw = {"padding_idx": p.src.int(0, w.shape[0] - 1)} if p.src.bool(25) else {}
    p.step(name, f"embedding(ids, {w}{''.join(f', {k}={v!r}' for k, v in kw.items())})",
           lambda lib, i, ww: lib.F.embedding(i, ww, **kw), ids, w, strict=True)
    return True


@spec("dropout")
def dropout(p, name):
    x = flt(p)
    prob = p.src.choice([0.0, 0.3, 0.5])
    u = p.rng.random(x.shape)
    p.step(name, f"dropout({x}, p={prob}, u=rand{x.shape})", lambda lib, a: lib.dropout(a, prob, u), x)
    return True


@spec("atan2", "arctan2")
def atan2(p, name):
    x = flt(p)
    y = p.partner(x)
    text, fn = method_or_function(p, name, x)
    p.step(name, f"{text[:-1]}{y})" if text.endswith("()") else text, lambda lib, a, b: getattr(a, name)(b), x, y)
    return True


@spec("bincount")
def bincount(p, name):
    n = p.src.int(0, 6)
    x = p.leaf((n,), np.int64)  # -3..3: abs() makes them counts' bins
    kw = {"minlength": p.src.int(0, 6)} if p.src.bool(40) else {}
    if p.src.bool(40):
        w = p.leaf((n,), np.float64, requires_grad=False)
        p.step(name, f"bincount({x}.abs(), {w}, **{kw!r})", lambda lib, a, b: lib.m.bincount(a.abs(), b, **kw), x, w)
    else:
        p.step(name, f"bincount({x}.abs(), **{kw!r})", lambda lib, a: lib.m.bincount(a.abs(), **kw), x)
    return True


@spec("bernoulli", "bernoulli_")
def bernoulli(p, name):
    """Probabilities of 0 and 1 only: the draws are certain, so the two libraries' generators agree on them."""
    if name == "bernoulli":
        x = p.leaf(p.shape(), np.float64, requires_grad=False, values="binary")
        p.step(name, call(x, name), lambda lib, a: a.bernoulli(), x)
        return True
    x = flt(p)  # written in place with draws of probabilities q
    q = p.leaf(x.shape, np.float64, requires_grad=False, values="binary")
    p.step(name, call(x, name, q), lambda lib, a, b: a.bernoulli_(b), x, q, out=False, strict=True)
    return True


@spec("multinomial")
def multinomial(p, name):
    """One-hot rows of probabilities: the draws are certain, so the two libraries' generators agree on them."""
    rows, k = p.src.int(1, 4), p.src.int(1, 4)
    x = p.leaf((rows,), np.int64)
    draws, again = p.src.int(1, 3), True
    if p.src.bool(40):
        draws, again = 1, False  # without replacement: one draw of the one possible class
    p.step(name, f"multinomial(one_hot({x}.abs() % {k}, {k}).double(), {draws}, replacement={again})",
           lambda lib, a: lib.m.multinomial(lib.m.nn.functional.one_hot(a.abs() % k, k).double(), draws,
                                            replacement=again), x)
    return True


# ---- a name nothing above covers: its op-table rows, or x.<name>() ------------------------------------------------------
def fallback(p, name):
    rows = [c for c in CASES if (c.op == name or c.name == name) and c.torch_fn is not None]
    if rows:
        case = p.src.choice(rows)
        shapes = p.src.choice(case.shapes)
        xs = [p.leaf(s, np.float64, values="normal") for s in shapes]
        p.step(name, f"{case.name}({', '.join(v.name for v in xs)})  # tests/op_cases.py",
               lambda lib, *a: (case.fn if lib is G else case.torch_fn)(*a), *xs)
        return True
    x = flt(p)
    # (an op whose result is one of torch.return_types' named tuples gives several values)
    p.step(name, call(x, name), lambda lib, a: getattr(a, name)(), x, multi=name in return_types.__all__)
    return True


SURFACE["__fallback__"] = fallback

__all__ = ["SURFACE", "universe", "T"]
