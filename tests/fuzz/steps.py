"""The fuzzer's hand-written steps: each picks operands and parameters and runs one op in both libraries
(``p.step``). These exercise the common ops in depth (broadcasting, in-place writes on views, hooks, no_grad); the
``surface`` step (tests/fuzz/surface.py) reaches every op of the registry. Simple steps come first: hypothesis shrinks
choices towards 0."""
from __future__ import annotations

import contextlib

import numpy as np

from tests.fuzz.libs import G, T
from tests.fuzz.program import Var
from tests.fuzz.surface import SURFACE, universe

STEPS = []


def step(weight=1):
    def register(f):
        STEPS.extend([f] * weight)
        return f
    return register


def _safe(lib, x):
    return x.abs() + 0.5  # a positive operand for log, sqrt, pow, division


@step(6)
def unary(p):
    x = p.pick(lambda v: v.is_float)
    if x is None:
        return False
    op = p.src.choice(["neg", "exp", "tanh", "sigmoid", "relu", "abs", "square", "gelu", "log", "sqrt", "log_raw",
                       "sqrt_raw", "clamp", "pow", "rpow", "scalar", "dropout"])
    if op in ("neg", "exp", "tanh", "sigmoid", "relu", "abs", "square"):
        p.step(op, f"{x}.{op}()", lambda lib, a: getattr(a, op)(), x)
    elif op == "gelu":
        p.step(op, f"gelu({x})", lambda lib, a: lib.gelu(a), x)
    elif op in ("log", "sqrt"):
        p.step(op, f"({x}.abs() + 0.5).{op}()", lambda lib, a: getattr(_safe(lib, a), op)(), x)
    elif op in ("log_raw", "sqrt_raw"):
        f = op[:-4]
        p.step(f, f"{x}.{f}()", lambda lib, a: getattr(a, f)(), x)
    elif op == "clamp":
        lo, hi = p.src.choice([(-0.5, 0.5), (None, 0.0), (0.0, None), (0.5, -0.5), (-1.0, 1.0)])
        p.step("clamp", f"{x}.clamp({lo}, {hi})", lambda lib, a: a.clamp(lo, hi), x)
    elif op == "pow":
        c = p.src.choice([2, 3, 0, 0.5, -1, 2.5])
        if isinstance(c, int) and c >= 0:
            p.step("pow", f"{x} ** {c}", lambda lib, a: a ** c, x)
        else:
            p.step("pow", f"({x}.abs() + 0.5) ** {c}", lambda lib, a: _safe(lib, a) ** c, x)
    elif op == "rpow":
        c = p.src.choice([2.0, 0.5])
        p.step("pow", f"{c} ** {x}", lambda lib, a: c ** a, x)
    elif op == "scalar":
        c = p.src.choice([2.5, -1.0, 0.0, 3])
        forms = {"{a} + {c}": ("add", lambda a: a + c), "{c} - {a}": ("sub", lambda a: c - a),
                 "{a} - {c}": ("sub", lambda a: a - c), "{a} * {c}": ("mul", lambda a: a * c),
                 "{a} / {c}": ("div", lambda a: a / (c or 2.0)),
                 "{c} / ({a}.abs() + 0.5)": ("div", lambda a: c / (a.abs() + 0.5))}
        form = p.src.choice(sorted(forms))
        name, f = forms[form]
        p.step(name, form.format(a=x, c=c if "/ {c}" not in form else c or 2.0), lambda lib, a: f(a), x)
    else:
        prob = p.src.choice([0.0, 0.3, 0.5])
        u = p.rng.random(x.shape)
        p.step("dropout", f"dropout({x}, p={prob}, u=rand{x.shape})", lambda lib, a: lib.dropout(a, prob, u), x)
    return True


@step(6)
def binary(p):
    x = p.pick(lambda v: True)
    if x is None:
        return False
    y = p.partner(x)
    if p.src.bool(50):
        x, y = y, x
    if not x.is_float and not y.is_float:
        p.feature("int_only")
    op = p.src.choice(["add", "sub", "mul", "div", "maximum", "minimum", "pow", "where", "div_raw"])
    if op in ("add", "sub", "mul"):
        sym = {"add": "+", "sub": "-", "mul": "*"}[op]
        p.step(op, f"{x} {sym} {y}", lambda lib, a, b: eval(f"a {sym} b"), x, y)  # noqa: S307
    elif op == "div":
        p.step(op, f"{x} / ({y}.abs() + 0.5)", lambda lib, a, b: a / _safe(lib, b), x, y)
    elif op == "div_raw":
        p.step("div", f"{x} / {y}", lambda lib, a, b: a / b, x, y)
    elif op in ("maximum", "minimum"):
        p.step(op, f"{x}.{op}({y})", lambda lib, a, b: getattr(a, op)(b), x, y)
    elif op == "pow":
        p.step(op, f"({x}.abs() + 0.5) ** {y}", lambda lib, a, b: _safe(lib, a) ** b, x, y)
    else:
        shape = np.broadcast_shapes(x.shape, y.shape)
        cond = p.const(p.rng.random(shape) < 0.5, "cond")
        p.step(op, f"where(cond, {x}, {y})", lambda lib, c, a, b: lib.where(c, a, b), cond, x, y)
    return True


def _axis(p, x, allow_none=True, allow_bad=True):
    n = max(x.ndim, 1)
    if allow_bad and p.src.bool(3):
        p.feature("bad_axis")
        return n
    if allow_none and p.src.bool(30):
        return None
    return p.src.int(-n, n - 1)


@step(5)
def reduce(p):
    x = p.pick()
    if x is None:
        return False
    op = p.src.choice(["sum", "mean", "amax", "amin", "var", "std", "sum_tuple"])
    kd = p.src.bool(40)
    if not x.is_float and op in ("mean", "var", "std"):
        p.feature("int_reduce")
    if op == "sum_tuple":
        if x.ndim < 2:
            return False
        axes = tuple(sorted({p.src.int(0, x.ndim - 1) for _ in range(2)}))
        p.step("sum", f"{x}.sum({axes}, {kd})", lambda lib, a: a.sum(axes, kd), x)
        return True
    axis = _axis(p, x)
    if op in ("var", "std"):
        c = p.src.choice([0, 1])
        p.step(op, f"{x}.{op}({axis}, {kd}, correction={c})", lambda lib, a: getattr(lib, op)(a, axis, kd, c), x,
               strict=axis is not None and axis >= max(x.ndim, 1))
    elif axis is None:
        p.step(op, f"{x}.{op}()", lambda lib, a: getattr(a, op)(), x)
    else:
        p.step(op, f"{x}.{op}({axis}, {kd})", lambda lib, a: getattr(a, op)(axis, kd), x,
               strict=axis >= max(x.ndim, 1))
    return True


@step(4)
def softmax_family(p):
    x = p.pick(lambda v: v.is_float)
    if x is None:
        return False
    op = p.src.choice(["softmax", "log_softmax", "logsumexp"])
    axis = _axis(p, x, allow_none=False)
    if op == "logsumexp":
        kd = p.src.bool(40)
        if x.ndim and (axis % x.ndim != x.ndim - 1 or not x.t.is_contiguous()):
            p.feature("logsumexp_moved_axis")
        p.step(op, f"{x}.logsumexp({axis}, {kd})", lambda lib, a: a.logsumexp(axis, kd), x,
               strict=axis >= max(x.ndim, 1))
    else:
        p.step(op, f"{x}.{op}({axis})", lambda lib, a: getattr(a, op)(axis), x, strict=axis >= max(x.ndim, 1))
    return True


def _factor_shape(p, shape):
    n = int(np.prod(shape))
    if n == 0:
        return p.src.choice([(0,), (-1, 0) if False else (0, 1), (1, 0)]) if True else None
    dims = []
    rest = n
    for d in (4, 3, 2):
        while rest % d == 0 and p.src.bool(50):
            dims.append(d)
            rest //= d
    dims.append(rest)
    if p.src.bool(30):
        dims.insert(p.src.int(0, len(dims)), 1)
    if p.src.bool(25):
        dims[p.src.int(0, len(dims) - 1)] = -1
    return tuple(dims) if n != 1 or p.src.bool(70) else ()


@step(6)
def movement(p):
    x = p.pick()
    if x is None:
        return False
    op = p.src.choice(["reshape", "view", "flatten", "permute", "transpose", "T", "expand", "squeeze", "unsqueeze",
                       "clone", "detach", "cast"])
    if op in ("reshape", "view"):
        shape = _factor_shape(p, x.shape)
        if op == "view" and not x.t.is_contiguous():
            p.feature("view_noncontiguous")
        if x.numel() and x.g._data.flags.c_contiguous != x.t.is_contiguous():
            p.feature(f"layout_differs_{op}")  # e.g. gpugrad's softmax over a non-last axis is not C-contiguous
        v = p.step(op, f"{x}.{op}({shape})", lambda lib, a: getattr(a, op)(shape), x)
    elif op == "flatten":
        v = p.step(op, f"{x}.flatten()", lambda lib, a: a.flatten(), x)
    elif op == "permute":
        perm = tuple(p.rng.permutation(x.ndim).tolist())
        v = p.step(op, f"{x}.permute{perm}", lambda lib, a: a.permute(perm), x)
    elif op == "transpose":
        if x.ndim < 2:
            return False
        d0, d1 = p.src.int(-x.ndim, x.ndim - 1), p.src.int(-x.ndim, x.ndim - 1)
        v = p.step(op, f"{x}.transpose({d0}, {d1})", lambda lib, a: a.transpose(d0, d1), x)
    elif op == "T":
        if x.ndim > 2:
            v = p.step("mT", f"{x}.mT", lambda lib, a: a.mT, x)
        else:
            v = p.step("permute", f"{x}.T", lambda lib, a: a.T, x)
    elif op == "expand":
        shape = list(x.shape)
        shape = [p.src.int(2, 3) if n == 1 and p.src.bool(70) else (-1 if p.src.bool(20) else n) for n in shape]
        if p.src.bool(40) or not shape:
            shape = [p.src.int(1, 3)] + shape
        shape = tuple(shape)
        v = p.step(op, f"{x}.expand{shape}", lambda lib, a: a.expand(*shape), x)
    elif op == "squeeze":
        axis = None if p.src.bool(30) or not x.ndim else p.src.int(-x.ndim, x.ndim - 1)
        v = p.step(op, f"{x}.squeeze({axis})", lambda lib, a: a.squeeze() if axis is None else a.squeeze(axis), x)
    elif op == "unsqueeze":
        axis = p.src.int(-x.ndim - 1, x.ndim)
        v = p.step(op, f"{x}.unsqueeze({axis})", lambda lib, a: a.unsqueeze(axis), x)
    elif op == "clone":
        v = p.step(op, f"{x}.clone()", lambda lib, a: a.clone(), x)
        return True
    elif op == "detach":  # shares x's memory: in-place writes through it are writes into x
        v = p.step(op, f"{x}.detach()", lambda lib, a: a.detach(), x)
        if v is not None:
            v.view_of, v.expanded = x.view_of or x, x.expanded
        return True
    else:
        to = p.src.choice(["float", "double"])
        if to == "float":
            p.feature("float32")
        p.step("cast", f"{x}.{to}()", lambda lib, a: getattr(a, to)(), x)
        return True
    return True


@step(5)
def index(p):
    x = p.pick(lambda v: v.ndim > 0)
    if x is None:
        return False
    op = p.src.choice(["basic", "basic", "int", "ints", "mask", "gather", "negative"])
    if op in ("basic", "int"):
        key = []
        for n in x.shape[:p.src.int(1, x.ndim)]:
            if op == "int" and n and p.src.bool(50):
                key.append(p.src.int(-n, n - 1))
            else:
                start, stop, stride = p.src.int(0, max(n, 1)), p.src.choice([None, n, max(n - 1, 0)]), \
                    p.src.choice([1, 1, 2])
                key.append(slice(start, stop, stride))
        key = tuple(key)
        text = ", ".join(str(k) if isinstance(k, int) else
                         f"{k.start}:{'' if k.stop is None else k.stop}{'' if k.step == 1 else ':' + str(k.step)}"
                         for k in key)
        p.step("index", f"{x}[{text}]", lambda lib, a: a[key], x)
    elif op == "ints":
        n = x.shape[0]
        if n == 0:
            return False
        idx = p.rng.integers(-n, n, p.src.int(0, 4)).tolist()  # repeats and negative ids
        p.step("index", f"{x}[{idx}]", lambda lib, a: a[idx], x)
    elif op == "negative":  # an out-of-range id: both must raise
        n = x.shape[0]
        p.step("index", f"{x}[[{n}]]", lambda lib, a: a[[n]], x)
    elif op == "mask":
        mask = p.const(p.rng.random(x.shape) < 0.5, "mask")
        p.step("index", f"{x}[mask]", lambda lib, a, m: a[m], x, mask)
    else:
        axis = p.src.int(-x.ndim, x.ndim - 1)
        n = x.shape[axis]
        if n == 0:
            return False
        shape = tuple(p.src.int(1, m) if m and d != axis % x.ndim else (p.src.int(1, 3) if m else 0)
                      for d, m in enumerate(x.shape))
        idx = p.const(p.rng.integers(0, n, shape), "idx")
        p.step("gather", f"{x}.gather({axis}, idx{shape})", lambda lib, a, i: a.gather(axis, i), x, idx)
    return True


@step(3)
def join(p):
    x = p.pick(lambda v: v.ndim > 0)
    if x is None:
        return False
    op = p.src.choice(["cat", "stack"])
    axis = p.src.int(-x.ndim, x.ndim - 1)
    shape = list(x.shape)
    if op == "cat":
        shape[axis] = p.src.int(0, 3)
    y = p.pick(lambda v: v.shape == tuple(shape) and v is not x) if p.src.bool(40) else None
    y = y or p.leaf(tuple(shape), p.src.choice([np.float64, np.float64, x.dtype if not x.requires_grad
                                                 else np.float64]))
    if op == "cat":
        p.step(op, f"cat([{x}, {y}], {axis})", lambda lib, a, b: lib.cat([a, b], axis), x, y)
    else:
        p.step(op, f"stack([{x}, {y}], {axis})", lambda lib, a, b: lib.stack([a, b], axis), x, y)
    return True


@step(4)
def matmul(p):
    x = p.pick(lambda v: v.ndim > 0 and v.is_float)
    if x is None:
        return False
    k = x.shape[-1]
    op = p.src.choice(["right", "left", "linear"])
    if op == "linear":
        out = p.src.int(1, 3)
        dt = p.float_like(x)
        w = p.leaf((out, k), dt)
        b = p.leaf((out,), dt) if p.src.bool(60) else None
        p.step("linear", f"linear({x}, {w}, {b})", lambda lib, a, ww, bb: lib.linear(a, ww, bb), x, w, b)
        return True
    if op == "right":  # x @ y
        shape = p.src.choice([(k,), (k, p.src.int(1, 3)), (p.src.int(1, 2), k, 2)])
    else:  # y @ x, x as the right operand
        kk = x.shape[-2] if x.ndim > 1 else x.shape[0]
        shape = p.src.choice([(kk,), (p.src.int(1, 3), kk), (2, 1, kk)])
    if p.src.bool(5):
        shape = shape[:-1] + (shape[-1] + 1,)  # misaligned: both must raise
    y = p.pick(lambda v: v.shape == shape and v.is_float) if p.src.bool(40) else None
    y = y or p.leaf(shape, p.float_like(x))
    if x.ndim >= 3 or len(shape) >= 3:
        p.feature("bmm")
    a, b = (x, y) if op == "right" else (y, x)
    p.step("matmul", f"{a} @ {b}", lambda lib, u, v: u @ v, a, b)
    return True


@step(3)
def loss(p):
    op = p.src.choice(["cross_entropy", "token_logprob", "mse_loss", "layer_norm", "embedding"])
    if op in ("cross_entropy", "token_logprob"):
        x = p.pick(lambda v: v.ndim == 2 and v.is_float and v.shape[1] > 0)
        if x is None:
            return False
        t = p.const(p.rng.integers(0, x.shape[1], x.shape[0]), "target")
        if op == "token_logprob":
            p.step(op, f"token_logprob({x}, target)", lambda lib, a, tt: lib.token_logprob(a, tt), x, t)
        else:
            red = p.src.choice(["mean", "sum", "none"])
            p.step(op, f"cross_entropy({x}, target, {red!r})", lambda lib, a, tt: lib.cross_entropy(a, tt, red), x, t)
    elif op == "mse_loss":
        x = p.pick(lambda v: v.is_float)
        if x is None:
            return False
        y = p.pick(lambda v: v.shape == x.shape and v.is_float) or p.leaf(x.shape, np.float64)
        red = p.src.choice(["mean", "sum", "none"])
        p.step(op, f"mse_loss({x}, {y}, {red!r})", lambda lib, a, b: lib.mse_loss(a, b, red), x, y)
    elif op == "layer_norm":
        x = p.pick(lambda v: v.ndim > 0 and v.is_float)
        if x is None:
            return False
        w = p.leaf(x.shape[-1:], p.float_like(x)) if p.src.bool(60) else None
        b = p.leaf(x.shape[-1:], p.float_like(x)) if p.src.bool(60) else None
        p.step(op, f"layer_norm({x}, {w}, {b})", lambda lib, a, ww, bb: lib.layer_norm(a, ww, bb), x, w, b)
    else:
        w = p.pick(lambda v: v.ndim == 2 and v.is_float and v.shape[0] > 0)
        if w is None:
            return False
        ids = p.const(p.rng.integers(0, w.shape[0], p.src.choice([(3,), (2, 2), ()])), "ids")
        p.step(op, f"embedding(ids, {w})", lambda lib, i, ww: lib.embedding(i, ww), ids, w)
    return True


@step(5)
def inplace(p):
    x = p.pick(lambda v: v.is_float)
    if x is None:
        return False
    op = p.src.choice(["add_", "mul_", "sub_", "div_", "clamp_", "zero_", "fill_", "copy_", "setitem", "add_alpha"])
    p.feature("inplace")
    if x.view_of is not None:
        p.feature("inplace_on_view")
    if x.expanded:
        p.feature("inplace_on_expand")
    if x.leaf and x.requires_grad:
        p.feature("inplace_on_leaf")
    if x.retained:
        p.feature("retain_grad_then_inplace")
    if x.view_of is not None and any(h is x for h, _, _ in p.hooks):
        p.feature("inplace_on_hooked_view")
    if op in ("add_", "mul_", "sub_", "div_", "add_alpha"):
        y = p.partner(x, allow_int=False) if p.src.bool(60) else p.src.choice([2.0, -0.5, 3])
        if isinstance(y, Var) and np.broadcast_shapes(x.shape, y.shape) != x.shape:
            p.feature("inplace_broadcast_grow")
        if y is x or (isinstance(y, Var) and (y.view_of or y) is (x.view_of or x)):
            p.feature("inplace_self_operand")
        if op == "div_":
            text = f"{x}.div_({y}.abs() + 0.5)" if isinstance(y, Var) else f"{x}.div_({y})"
            fn = (lambda lib, a, b: a.div_(_safe(lib, b))) if isinstance(y, Var) else (lambda lib, a, b: a.div_(b))
        elif op == "add_alpha":
            text, fn = f"{x}.add_({y}, alpha=2)", lambda lib, a, b: a.add_(b, alpha=2)
        else:
            text, fn = f"{x}.{op}({y})", lambda lib, a, b: getattr(a, op)(b)
        p.step(op, text, fn, x, y, out=False, strict=True)
    elif op == "clamp_":
        p.step(op, f"{x}.clamp_(-0.5, 0.5)", lambda lib, a: a.clamp_(-0.5, 0.5), x, out=False, strict=True)
    elif op == "zero_":
        p.step(op, f"{x}.zero_()", lambda lib, a: a.zero_(), x, out=False, strict=True)
    elif op == "fill_":
        p.step(op, f"{x}.fill_(1.5)", lambda lib, a: a.fill_(1.5), x, out=False, strict=True)
    elif op == "copy_":
        y = p.partner(x, allow_int=False)
        p.step(op, f"{x}.copy_({y})", lambda lib, a, b: a.copy_(b), x, y, out=False, strict=True)
    else:
        if not x.ndim or not x.shape[0]:
            return False
        i = p.src.int(-x.shape[0], x.shape[0] - 1)
        if p.src.bool(50):
            y = p.src.choice([0.0, 2.5])
        else:
            y = p.pick(lambda v: v.is_float and v.shape == x.shape[1:]) or p.leaf(x.shape[1:], np.float64)
        p.step("setitem", f"{x}[{i}] = {y}", lambda lib, a, b: a.__setitem__(i, b), x, y, out=False, strict=True)
    return True


@step(2)
def autograd_state(p):
    op = p.src.choice(["hook", "hook_scale", "retain_grad", "no_grad"])
    if op == "no_grad":
        x = p.pick(lambda v: v.is_float)
        if x is None:
            return False
        p.feature("no_grad")
        p.step("no_grad", f"{x} * 2  # under no_grad()", lambda lib, a: a * 2, x, grad_off=True)
        return True
    x = p.pick(lambda v: v.requires_grad)
    if x is None:
        return False
    base = getattr(x.g, "_base", None)  # gpugrad's view bookkeeping (_tensor.py), read only to name the feature
    if base is not None and getattr(x.g, "_base_fn", None) is not base.grad_fn:
        p.feature("hook_on_stale_view")  # a view whose base changed in place after it was taken
    if op == "retain_grad":
        if x in p.retained:
            return False
        p.feature("retain_grad")
        p.lines.append(f"{x}.retain_grad()")
        p.agree("retain_grad", p.call(G, lambda lib: x.g.retain_grad(), [])[1],
                p.call(T, lambda lib: x.t.retain_grad(), [])[1], strict=True)
        x.retained = True
        p.retained.append(x)
        return True
    scale = op == "hook_scale"
    p.feature("hook", "hook_on_leaf" if x.leaf else "hook_on_intermediate")
    records = ([], [])

    def make(i):
        def hook(g):
            records[i].append(None if g is None else g.detach().clone())  # torch passes None for no gradient
            return g * 2 if scale else None
        return hook

    p.lines.append(f"{x}.register_hook(lambda g: {'g * 2' if scale else 'record(g)'})")
    eg = p.call(G, lambda lib: x.g.register_hook(make(0)), [])[1]
    # NOTE: torch 2.13 segfaults registering a hook on a view whose base changed in place since the view was taken,
    # unless grad_fn was read first (a read that raises where register_hook would: a multi-output view's)
    with contextlib.suppress(RuntimeError):
        x.t.grad_fn
    et = p.call(T, lambda lib: x.t.register_hook(make(1)), [])[1]
    p.agree("register_hook", eg, et, strict=True)
    p.hooks.append((x, *records))
    return True




@step(14)
def surface(p):
    """Any op of the registry (tests/fuzz/surface.py), uniformly: the whole surface, new ops included."""
    name = p.forced if p.forced is not None and p.src.bool(70) else p.src.choice(universe())
    return SURFACE.get(name, SURFACE["__fallback__"])(p, name)
