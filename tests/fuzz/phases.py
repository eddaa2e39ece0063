"""How a program ends: one or two backward passes (backward, backward(inputs=), autograd.grad with or without
create_graph, a second-order pass, and in forward-mode programs the tangents of the gradients and a backward pass
through the tangents), or ``autograd.functional`` on the program replayed as a function of some of its leaves.

Also the finite-difference oracle: the derivative of a pass's loss, or a value's tangent, from float64 central
differences of the replayed program (tests/fuzz/known_differences.py asks it before excusing a derivative).
"""
from __future__ import annotations

import numpy as np

from tests.fuzz.libs import G, T, torch
from tests.fuzz.program import Mismatch, Stop, Var, compare, tangent, to_numpy


def finish(p):
    """The program's last phase: autograd.functional (a fifth of the programs without tangents) or backward passes."""
    if not p.forward and p.src.bool(20):
        functional(p)
        return
    for k in range(2 if p.src.bool(35) else 1):
        backward_pass(p, k, last=True)


MODES = ["backward", "backward", "grad", "grad_create", "backward_inputs", "backward_create"]


def loss(p, terms, lib):
    """sum_i (v_i * w_i).sum(): fixed random weights, so gradients are not all ones."""
    total = None
    for v, w in terms:
        x = v.g if lib is G else v.t
        s = (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
        total = s if total is None else total + s
    return total


def _tangent_terms(p, terms, lib):
    """The tangents of the chosen values, weighted and summed: a loss whose gradient is reverse over forward."""
    total = None
    for v, w in terms:
        x = tangent(v.g if lib is G else v.t)
        s = (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
        total = s if total is None else total + s
    return total


def backward_pass(p, k, last):
    src = p.src
    modes = MODES + (["tangent", "grad", "grad_create"] if p.forward else [])
    mode = src.choice(modes)
    if mode == "tangent":
        cands = [v for v in p.vars if tangent(v.t) is not None and tangent(v.t).requires_grad]
    else:
        cands = [v for v in p.vars if v.requires_grad and not v.t.is_complex()]
    if not cands:
        raise Stop
    n = src.int(1, min(3, len(cands)))
    roots = list(dict.fromkeys(cands[-n:] if src.bool(70) else [src.choice(cands) for _ in range(n)]))
    terms = [(v, p.data(v.shape, values="normal")) for v in roots]
    retain = not last or src.bool(30)
    p.feature(mode)
    if retain:
        p.feature("retain_graph")
    leaves = [v for v in p.vars if v.leaf and v.requires_grad]
    names = " + ".join(f"({'tangent(' + v.name + ')' if mode == 'tangent' else v} * w).sum()" for v, _ in terms)
    where = f"pass{k}:{mode}"
    make_loss = _tangent_terms if mode == "tangent" else loss
    p.passes = getattr(p, "passes", []) + [(mode, terms)]
    if mode in ("backward", "backward_create", "backward_inputs", "tangent"):
        inputs = None
        if mode == "backward_inputs":
            pool = leaves + [v for v in p.vars if not v.leaf and v.requires_grad and src.bool(20)]
            if not pool:
                raise Stop
            inputs = list(dict.fromkeys(src.choice(pool) for _ in range(src.int(1, 2))))
            if any(not v.leaf for v in inputs):
                p.feature("backward_inputs_nonleaf")
            input_features(p, inputs)
        create = mode == "backward_create"
        p.lines.append(f"({names}).backward(retain_graph={retain}" + (", create_graph=True" if create else "")
                       + (f", inputs={inputs}" if inputs else "") + ")")

        def run(lib):
            lib_inputs = None if inputs is None else [v.g if lib is G else v.t for v in inputs]
            make_loss(p, terms, lib).backward(retain_graph=retain, create_graph=create, inputs=lib_inputs)

        _, eg = p.call(G, lambda lib: run(lib), [])
        _, et = p.call(T, lambda lib: run(lib), [])
        p.agree(where, eg, et, strict=True)
        check_grads(p, where)
        if create and src.bool(60):
            second_order(p, where, [v for v in leaves if v.t.grad is not None and v.t.grad.requires_grad])
        return
    # autograd.grad, maybe w.r.t. intermediate values, maybe with create_graph
    create = mode == "grad_create"
    pool = leaves + [v for v in p.vars if not v.leaf and v.requires_grad]
    inputs = list(dict.fromkeys(src.choice(pool) for _ in range(src.int(1, 3))))
    if any(not v.leaf for v in inputs):
        p.feature("grad_wrt_intermediate")
    input_features(p, inputs)
    p.lines.append(f"gs = autograd.grad({names}, {inputs}, retain_graph={retain}, create_graph={create}, "
                   "allow_unused=True)")
    gg, eg = p.call(G, lambda lib: lib.grad(loss(p, terms, lib), [v.g for v in inputs], retain_graph=retain,
                                            create_graph=create, allow_unused=True), [])
    gt, et = p.call(T, lambda lib: lib.grad(loss(p, terms, lib), [v.t for v in inputs], retain_graph=retain,
                                            create_graph=create, allow_unused=True), [])
    p.agree(where, eg, et, strict=True)
    for v, a, b in zip(inputs, gg, gt):
        compare(a, b, where, f"autograd.grad w.r.t. {v}", p.grad_lowp)
        if p.forward:
            compare(tangent(a), tangent(b), where, f"the tangent of autograd.grad w.r.t. {v}", p.grad_lowp,
                    kind="tangent")
    check_grads(p, where)
    if create:
        pairs = [(a, b) for a, b in zip(gg, gt) if b is not None and b.requires_grad]
        for a, b in pairs:
            if not a.requires_grad:
                raise Mismatch("requires-grad", where, "create_graph=True returned a gradient without a graph")
        if pairs and src.bool(80):
            p.feature("second_order")
            ws = [p.data(tuple(b.shape), values="normal") for _, b in pairs]
            p.lines.append("sum((g * w).sum() for g in gs).backward()")

            def run2(lib):
                total = 0
                for (a, b), w in zip(pairs, ws):
                    x = a if lib is G else b
                    total = total + (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
                total.backward()
            _, eg = p.call(G, run2, [])
            _, et = p.call(T, run2, [])
            p.agree(where + ":second_order", eg, et, strict=True)
            check_grads(p, where + ":second_order")


def input_features(p, inputs):
    """backward(inputs=) and autograd.grad: hooks on the inputs, and hooks or retain_grad elsewhere."""
    hooked = [h for h, _, _ in p.hooks]
    if any(v in hooked for v in inputs):
        p.feature("grad_of_hooked_input")
    if any(v not in inputs for v in hooked + p.retained):
        p.feature("hooks_outside_inputs")


def second_order(p, where, leaves):
    if not leaves:
        return
    p.feature("second_order")
    ws = [p.data(v.shape, values="normal") for v in leaves]
    p.lines.append(f"sum((x.grad * w).sum() for x in {leaves}).backward()")

    def run(lib):
        total = 0
        for v, w in zip(leaves, ws):
            x = (v.g if lib is G else v.t).grad
            total = total + (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
        total.backward()

    _, eg = p.call(G, run, [])
    _, et = p.call(T, run, [])
    p.agree(where + ":second_order", eg, et, strict=True)
    check_grads(p, where + ":second_order")


def _is_leaf(x):
    """x.is_leaf, or "raises": both libraries refuse to say for an output of unbind/split whose base was written
    in place afterwards."""
    try:
        return x.is_leaf
    except RuntimeError:
        return "raises"


def check_grads(p, where):
    lowp = p.grad_lowp
    for v in p.vars:
        leaf_g, leaf_t = _is_leaf(v.g), _is_leaf(v.t)
        if leaf_t != leaf_g:
            raise Mismatch("is-leaf", where, f"{v}: is_leaf {leaf_g}, torch {leaf_t}")
        if leaf_t is True and v.t.requires_grad:
            compare(v.g.grad, v.t.grad, where, f"{v}.grad", lowp)
            if p.forward and v.t.grad is not None:
                compare(tangent(v.g.grad), tangent(v.t.grad), where, f"the tangent of {v}.grad", lowp,
                        kind="tangent")
    for v in p.retained:
        compare(v.g.grad, v.t.grad, where, f"{v}.grad (retain_grad)", lowp)
    for v, rg, rt in p.hooks:
        if len(rg) != len(rt):
            raise Mismatch("hook", where, f"the hook on {v} ran {len(rg)} times, torch {len(rt)}")
        for i, (a, b) in enumerate(zip(rg, rt)):
            compare(a, b, where, f"gradient #{i} seen by the hook on {v}", lowp)


# ---- autograd.functional on the replayed program --------------------------------------------------------------------
FUNCTIONAL = ["jacobian", "jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"]


def functional(p):
    """torch.autograd.functional's ``fn`` of the program as a function of one or two of its float leaves: its last
    values (jacobian, vjp, jvp) or a weighted sum of them (hessian, hvp, vhp)."""
    src = p.src
    fn = src.choice(FUNCTIONAL)
    leaves = [v for v in p.vars if v.leaf and v.is_float]
    if not leaves or len(p.vars) < 2:
        raise Stop
    ins = list(dict.fromkeys(src.choice(leaves) for _ in range(src.int(1, 2))))
    floats = [v for v in p.vars if v.is_float and not v.leaf] or leaves
    outs = list(dict.fromkeys(floats[-1:] + [src.choice(floats) for _ in range(src.int(0, 1))]))
    scalar = fn in ("hessian", "hvp", "vhp")
    ws = [p.data(v.shape, values="normal") for v in outs]
    tuple_in = len(ins) > 1 or src.bool(30)
    kw = {}
    if fn in ("jacobian", "hessian") and src.bool(40):
        kw["vectorize"] = True
        if fn == "jacobian" and src.bool(50):
            kw["strategy"] = "forward-mode"
    if src.bool(25):
        kw["create_graph"] = True
    vs = None
    if fn in ("vjp",):
        vs = [p.data(v.shape, v.dtype, values="normal") for v in outs] if not scalar else None
    elif fn in ("jvp", "hvp", "vhp"):
        vs = [p.data(v.shape, v.dtype, values="normal") for v in ins]
    p.feature("functional", f"functional_{fn}", *(f"functional_{k}" for k in kw))
    p.lines.append(f"autograd.functional.{fn}(f of {ins} -> {'sum of weighted ' if scalar else ''}{outs}"
                   f"{', v' if vs else ''}{''.join(f', {k}={v!r}' for k, v in kw.items())})")
    where = f"functional:{fn}"

    def run(lib):
        def f(*xs):
            env = p.replay(lib, inputs=dict(zip(ins, xs)))
            if scalar:
                return sum((env[v] * lib.const(w.astype(to_numpy(env[v]).dtype))).sum() for v, w in zip(outs, ws))
            res = tuple(env[v] for v in outs)
            return res if len(res) > 1 else res[0]
        xs = tuple(lib.const(v.init) for v in ins)
        args = [f, xs if tuple_in else xs[0]]
        if vs is not None:
            vv = tuple(lib.const(a) for a in vs)
            args.append(vv if (tuple_in if fn != "vjp" else len(outs) > 1) else vv[0])
        return getattr(lib.AF, fn)(*args, **kw)

    rg, eg = p.call(G, run, [])
    rt, et = p.call(T, run, [])
    if fn == "jvp" and rg is not None:  # the oracles known_differences.py may ask
        p.fd_functional = lambda: _fd_jvp(p, ins, outs, vs, rg[1])
    if kw.get("vectorize") and rg is not None:
        p.torch_unvectorized = lambda: _same_unvectorized(p, run, kw, rg, where, fn)
    p.agree(where, eg, et, strict=False)
    _compare_nested(p, rg, rt, where, fn)


def _same_unvectorized(p, run, kw, rg, where, fn):
    """Whether gpugrad's vectorized result equals torch's computed without vectorize (torch's vmap refused)."""
    plain = {k: v for k, v in kw.items() if k not in ("vectorize", "strategy")}
    kw.clear()
    kw.update(plain)
    rt, et = p.call(T, run, [])
    if et is not None:
        return False
    try:
        _compare_nested(p, rg, rt, where, fn)
    except Mismatch:
        return False
    return True


def _fd_jvp(p, ins, outs, vs, got):
    """Whether gpugrad's functional.jvp ``got`` matches central differences of the replayed function (float64, or
    float32's tolerance where the program has float32 values, as fd_tangent_confirms)."""
    if any(f in p.features for f in FD_UNSAFE if f != "float32"):
        return None
    lowp = "float32" in p.features

    def value(eps):
        env = p.replay(T, inputs={v: T.const(v.init + eps * d) for v, d in zip(ins, vs)})
        return np.concatenate([to_numpy(env[o]).astype(np.float64).reshape(-1) for o in outs])
    fd = _central(value)
    if fd is None:
        return None
    mine = np.concatenate([to_numpy(g).astype(np.float64).reshape(-1) for g in (got if isinstance(got, tuple)
                                                                                 else (got,))])
    scale = max(1.0, float(np.abs(fd[np.isfinite(fd)]).max(initial=0)))
    return mine.shape == fd.shape and np.allclose(mine, fd, rtol=1e-3 if lowp else 1e-4,
                                                  atol=(1e-5 if lowp else 1e-6) * scale, equal_nan=True)


def _compare_nested(p, a, b, where, what):
    if isinstance(b, (tuple, list)):
        if not isinstance(a, (tuple, list)) or len(a) != len(b):
            raise Mismatch("result", where, f"{what}: gpugrad gave {type(a).__name__} "
                           f"{len(a) if isinstance(a, (tuple, list)) else ''}, torch {type(b).__name__} of {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _compare_nested(p, x, y, where, f"{what}[{i}]")
        return
    if isinstance(a, (tuple, list)):
        raise Mismatch("result", where, f"{what}: gpugrad gave a {type(a).__name__}, torch a {type(b).__name__}")
    compare(a, b, where, what, p.grad_lowp)
    if b is not None and a is not None and b.requires_grad != a.requires_grad:
        raise Mismatch("requires-grad", where, f"{what}: requires_grad {a.requires_grad}, torch {b.requires_grad}")


# ---- finite differences --------------------------------------------------------------------------------------------
FD_UNSAFE = ("hook_scale", "float32", "dropout")  # where autograd's derivative is not d/dx of the replayed values


def fd_loss_confirms(p, rtol=1e-4):
    """Whether gpugrad's leaf gradients of the program's first backward pass match float64 central differences of
    the replayed loss along a random direction (None where the oracle does not apply: see FD_UNSAFE)."""
    passes = getattr(p, "passes", [])
    if len(passes) != 1 or passes[0][0] not in ("backward", "grad") or any(f in p.features for f in FD_UNSAFE):
        return None
    _, terms = passes[0]
    leaves = [v for v in p.vars if v.leaf and v.requires_grad and v.g.grad is not None]
    if not leaves or passes[0][0] != "backward":
        return None
    rng = np.random.default_rng(0)
    dirs = {v: rng.standard_normal(v.shape) for v in leaves}
    want = sum(float((to_numpy(v.g.grad) * d).sum()) for v, d in dirs.items())
    got = _central(lambda eps: _replayed_loss(p, terms, {v: eps * d for v, d in dirs.items()}))
    return got is not None and np.isclose(want, got, rtol=rtol, atol=1e-6 * max(1.0, abs(got)))


def fd_tangent(p, var, float32=False):
    """``var``'s directional derivative along the duals' tangents, by central differences (an array), or None.
    ``float32``: also for programs with float32 values (the shifted duals replay in float64; the caller compares with
    a float32 tolerance)."""
    unsafe = [f for f in FD_UNSAFE if f != "float32" or not float32]
    if any(f in p.features for f in unsafe) or not p.duals:
        return None
    shift = {d: np.asarray(d.init, np.float64) if float32 else d.init for d in p.duals}  # float64: a float32 dual
    # plus a float64 shift replays in float64 (steps of 1e-6 in float32 would leave ~1% of the derivative)

    consts = _constants(p, ("detach",))  # forward mode differentiates through no_grad, not through detach

    def value(eps):
        env = p.replay(T, shift={d: eps * s for d, s in shift.items()}, consts=consts)
        return to_numpy(env[var]).astype(np.float64)
    return _central(value)


def _constants(p, kinds):
    """The outputs of the program's steps of ``kinds`` (detach; grad_off: no_grad), from a replay without shifts:
    autograd takes them as constants, so the finite differences must too."""
    try:
        with torch.no_grad():
            env = p.replay(T)
    except Exception:  # noqa: BLE001
        return None
    return {v: env[v].detach().clone() for kind, v in p.const_outputs if kind in kinds and v in env}


def fd_tangent_confirms(p, m, rtol=1e-4, float32=False):
    """Whether gpugrad's tangent in the tangent mismatch ``m`` equals central differences of the replayed program
    along the duals' tangents (None where the oracle does not apply; ``float32``: see fd_tangent, at rtol 1e-3)."""
    var = getattr(m, "var", None)
    if var is None or m.got is None:
        return None
    fd = fd_tangent(p, var, float32)
    rtol = max(rtol, 1e-3) if float32 and "float32" in p.features else rtol
    if fd is None or fd.shape != m.got.shape:
        return None
    with np.errstate(invalid="ignore"):  # only where the two libraries differ
        differ = ~np.isclose(m.got, m.want, rtol=1e-5, atol=1e-8, equal_nan=True)
    scale = max(1.0, float(np.abs(fd[np.isfinite(fd)]).max(initial=0)))
    return bool(np.allclose(m.got[differ], fd[differ], rtol=rtol, atol=1e-5 * scale, equal_nan=True))


def _replayed_loss(p, terms, shift):
    env = p.replay(T, shift=shift, consts=_constants(p, ("detach", "grad_off")))
    with torch.no_grad():
        return float(sum((env[v].double() * torch.tensor(w)).sum() for v, w in terms))


def _central(f, h=1e-6):
    try:
        with torch.no_grad():
            return (f(h) - f(-h)) / (2 * h)
    except Exception:  # noqa: BLE001 - a replay that cannot run gives no oracle
        return None


__all__ = ["backward_pass", "functional", "fd_loss_confirms", "fd_tangent", "Var"]
