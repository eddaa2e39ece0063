"""One random define-by-run program, run step by step in gpugrad and in torch, compared after every step.

A ``Program`` holds the values (``Var``: one tensor per library), the lines of code that made them (printed when the
libraries disagree), the features it used (for tests/fuzz/known_differences.py) and a tape of its steps, so that it
can be replayed as a function of its leaves: by ``autograd.functional`` (jacobian, hessian, vjp, jvp, hvp, vhp, the
same function in both libraries) and by float64 central differences, the oracle the excuses of gpugrad's derivatives
rest on.

Forward-mode programs run inside a dual level of each library: some leaves are duals with random tangents, every
value's tangent is compared with torch's after every step, and the backward passes compare the tangents of the
gradients (forward over reverse) and may differentiate the tangents themselves (reverse over forward).
"""
from __future__ import annotations

import contextlib
import warnings
import zlib

import numpy as np

from tests.fuzz.libs import G, T, np_dtype, torch

TOL = {np.dtype(np.float64): (1e-7, 1e-7), np.dtype(np.float32): (2e-3, 1e-4), np.dtype(np.float16): (1e-2, 1e-2)}
SHAPES = [(), (1,), (2,), (3,), (4,), (2, 3), (3, 1), (1, 4), (3, 4), (2, 2), (3, 3), (2, 3, 4), (2, 1, 3), (4, 3, 2),
          (2, 2, 2)]
EMPTY_SHAPES = [(0,), (0, 3), (2, 0), (3, 0, 2)]
VALUES = ["normal", "normal", "normal", "wide", "ties", "ties", "huge", "nonfinite"]


class Source:
    """The program's choices: from hypothesis (shrinkable) or from a seeded generator (the figures runner)."""

    def __init__(self, draw_int):
        self._int = draw_int  # (lo, hi) -> an int in [lo, hi]

    def int(self, lo, hi):
        return self._int(lo, max(lo, hi))  # an empty range (a size-0 dim) gives lo

    def choice(self, seq):
        seq = list(seq)
        return seq[self._int(0, len(seq) - 1)]

    def bool(self, percent=50):
        return self._int(0, 99) < percent

    @classmethod
    def from_seed(cls, seed):
        # names in a seed (the coverage sweep's) become numbers: SeedSequence takes integers only
        rng = np.random.default_rng([zlib.crc32(x.encode()) if isinstance(x, str) else x for x in seed])
        return cls(lambda lo, hi: int(rng.integers(lo, hi + 1)))


class Mismatch(Exception):
    """gpugrad and torch disagree. ``kind`` (value, dtype, shape, error, error-type, grad-none, requires-grad, is-leaf,
    hook, warning, tangent, tangent-none, result) and ``where`` (the step's op, "pass<k>:<mode>", "functional:<fn>")
    name its class; ``got``/``want`` are gpugrad's and torch's arrays or exceptions; ``program`` the Program."""

    def __init__(self, kind, where, detail, got=None, want=None):
        super().__init__(f"{kind} at {where}: {detail}")
        self.kind, self.where, self.detail, self.got, self.want = kind, where, detail, got, want
        self.program = None

    @property
    def cls(self):
        return f"{self.kind}@{self.where}"


class Stop(Exception):
    """Both libraries raised at the same step: the program ends there (in agreement)."""


def to_numpy(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().numpy(force=True)  # force: torch's gradients may be ZeroTensors (e.g. through sgn)
    if isinstance(x, G.Tensor):
        return x.detach().numpy()  # detach reads the primal's values without recording (a split's invalidated view)
    return np.asarray(x)


def tangent(x):
    """x's forward-mode tangent (None if it has none), in either library."""
    if isinstance(x, G.Tensor):
        return _unpacked_tangent(G.fw, x)
    if torch is not None and isinstance(x, torch.Tensor):
        return _unpacked_tangent(T.fw, x)
    return None


def _unpacked_tangent(fw, x):
    # Both libraries refuse to unpack a view whose base an in-place op changed after a multi-output view op (split):
    # such a tangent reads as None, so a refusal in both agrees and a refusal in one is a tangent-none mismatch.
    try:
        return fw.unpack_dual(x).tangent
    except RuntimeError:
        return None


def shares(x, y):
    """Whether two tensors (of one library) share memory."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.numel() > 0 and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    return bool(np.shares_memory(x._data, y._data)) if x.numel() else False


def compare(g, t, where, what, lowp=False, kind="value"):
    """Raise a Mismatch unless gpugrad's g matches torch's t in shape, dtype and value (to float32's tolerance when
    ``lowp``: the value went through float32 on the way). Returns "near_zero" when they agree only absolutely."""
    if (g is None) != (t is None):
        raise Mismatch(f"{'grad' if kind == 'value' else kind}-none", where,
                       f"{what}: gpugrad {'None' if g is None else 'a tensor'}, torch "
                       f"{'None' if t is None else 'a tensor'}", g, t)
    if g is None:
        return None
    a, b = to_numpy(g), to_numpy(t)
    if a.shape != b.shape:
        raise Mismatch("shape", where, f"{what}: shape {a.shape}, torch {b.shape}")
    if a.dtype != b.dtype:
        raise Mismatch("dtype", where, f"{what}: dtype {a.dtype}, torch {b.dtype}")
    if a.dtype.kind in "biu":
        ok = np.array_equal(a, b)
    elif a.dtype.kind == "c":  # complex: each part at its float's tolerance
        part = np.float32 if a.dtype == np.complex64 else np.float64
        for x, y in ((a.real, b.real), (a.imag, b.imag)):
            compare(x.astype(part), y.astype(part), where, what, lowp, kind)
        return None
    else:
        rtol, atol = TOL[np.dtype(np.float32) if lowp and a.dtype == np.float64 else a.dtype]
        if lowp == "grad":  # float32 gradients: rounding amplified through several VJPs (normalizations)
            atol = max(atol, 1e-3)
        finite = np.isfinite(b)
        scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0  # sums cancel: errors scale with |b|
        same_inf = np.array_equal(np.isposinf(a), np.isposinf(b)) and np.array_equal(np.isneginf(a), np.isneginf(b))
        ok = same_inf and np.allclose(a, b, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True)
        if ok and not np.allclose(a, b, rtol=rtol, atol=1e-300, equal_nan=True):
            return "near_zero"  # equal only to the absolute tolerance: their gradients may differ a lot (1 / std)
    if not ok:
        raise Mismatch(kind, where, f"{what}: values differ\n gpugrad {a!r}\n torch   {b!r}", a, b)
    return None


class Var:
    """One value of the program, in both libraries."""

    def __init__(self, name, g, t, leaf=False):
        self.name, self.g, self.t, self.leaf = name, g, t, leaf
        self.view_of = None  # the Var whose memory this one shares (basic index, reshape, permute, ...)
        self.expanded = False  # a view made by expand, or a view of one
        self.retained = False
        self.lowp = False  # went through float32: compared to float32's tolerance
        self.drift = False  # gpugrad's value differs from torch's only through its inputs' rounding (see step)
        self.init = None  # a leaf's data (replays start from it)

    @property
    def shape(self):
        return tuple(self.t.shape)

    @property
    def ndim(self):
        return self.t.dim()

    def numel(self):
        return self.t.numel()

    @property
    def is_float(self):
        return self.t.is_floating_point()

    @property
    def requires_grad(self):
        return self.t.requires_grad

    @property
    def dtype(self):
        return np_dtype(self.t)

    def __repr__(self):
        return self.name


class Both:
    """A side input (index, mask, target): the same data in each library."""

    def __init__(self, g, t, text):
        self.g, self.t, self.text = g, t, text

    def __repr__(self):
        return self.text


def lib_value(a, lib):
    return (a.g if lib is G else a.t) if isinstance(a, (Var, Both)) else a


class Program:
    def __init__(self, src, forced=None):
        self.src = src
        self.rng = np.random.default_rng(src.int(0, 2 ** 16))
        self.vars = []
        self.lines = []
        self.features = set()  # what the program uses, for tests/fuzz/known_differences.py
        self.hooks = []  # (var, records_g, records_t)
        self.retained = []
        self.tape = []  # ("leaf", var) | ("dual", var, base, tangent) | ("step", fn, args, outs (a list), grad_off)
        self.const_outputs = []  # (kind, Var): outputs of detach ("detach") and no_grad ("grad_off") steps
        self.ran = set()  # surface ops that completed a compared step (the coverage meta-test reads it)
        self.forced = forced  # the coverage sweep: the op the surface step runs
        self.warnings = []  # RuntimeWarnings NumPy raised inside gpugrad during the current step
        self.values = src.choice(VALUES)
        self.forward = src.bool(25)
        self.duals = []  # Vars that are duals made by make_dual
        if self.forward:
            self.feature("forward")
        if self.values == "nonfinite":
            self.feature("nonfinite")

    # -- output ----------------------------------------------------------------------------------------------------
    def code(self):
        return "\n".join(self.lines)

    def feature(self, *names):
        self.features.update(names)

    # -- data --------------------------------------------------------------------------------------------------------
    def data(self, shape, dtype=np.float64, values=None):
        values = values or self.values
        if np.dtype(dtype).kind in "iu":
            return self.rng.integers(-3, 4, shape).astype(dtype)
        if np.dtype(dtype).kind == "b":
            return self.rng.random(shape) < 0.5
        x = self.rng.standard_normal(shape) * {"wide": 3.0, "huge": 300.0}.get(values, 1.0)
        if values == "ties":  # zeros and repeated values: subgradients and max/min ties
            x = np.round(x * 2) / 2
        elif values == "nonfinite" and x.size:
            x = np.where(self.rng.random(shape) < 0.15, self.rng.choice([np.nan, np.inf, -np.inf], shape), x)
        elif values == "positive":  # the domain of log, sqrt, reciprocal
            x = np.abs(x) + 0.1
        elif values == "unit":  # the domain of asin, acos
            x = self.rng.uniform(-0.95, 0.95, shape)
        elif values in ("prob", "binary"):  # probabilities (0 and 1 among them), or 0/1 labels
            x = self.rng.uniform(0, 1, shape) if values == "prob" else (self.rng.random(shape) < 0.5) * 1.0
            x = np.where(self.rng.random(shape) < 0.1, np.round(x), x)
        return np.asarray(x).astype(dtype)

    def shape(self):
        if self.src.bool(6):
            return self.src.choice(EMPTY_SHAPES)
        return self.src.choice(SHAPES)

    def dtype(self):
        k = self.src.int(0, 9)
        return np.float32 if k == 0 else np.int64 if k == 1 else np.float64

    def float_like(self, x):
        """x's float dtype, mostly: torch refuses mixed float dtypes in matmul, linear and layer_norm."""
        return x.dtype if self.src.bool(90) and x.is_float else self.src.choice([np.float32, np.float64])

    def leaf(self, shape=None, dtype=None, requires_grad=None, values=None, dual=None):
        shape = self.shape() if shape is None else tuple(shape)
        dtype = self.dtype() if dtype is None else dtype
        a = self.data(shape, dtype, values)
        floating = np.dtype(dtype).kind == "f"
        if requires_grad is None:
            requires_grad = floating and self.src.bool(85)
        self.shape_features(shape)
        if dtype == np.float32:
            self.feature("float32")
        if not floating:
            self.feature("int")
        v = Var(f"v{len(self.vars)}", G.leaf(a, requires_grad), T.leaf(a, requires_grad), leaf=True)
        v.lowp, v.init = dtype == np.float32, a
        self.vars.append(v)
        self.tape.append(("leaf", v))
        self.lines.append(f"{v} = leaf({shape}, {np.dtype(dtype).name}{', requires_grad=True' if requires_grad else ''})")
        if self.forward and floating and (self.src.bool(55) if dual is None else dual):
            return self.make_dual(v)
        return v

    def make_dual(self, base):
        """A dual of ``base`` (make_dual in both libraries) with a random tangent (zeros sometimes)."""
        tan = self.data(base.shape, base.dtype, "ties" if self.src.bool(20) else "normal")
        d = Var(f"v{len(self.vars)}", G.fw.make_dual(base.g, G.const(tan)), T.fw.make_dual(base.t, T.const(tan)))
        d.view_of, d.lowp, d.init = base, base.lowp, tan
        self.vars.append(d)
        self.duals.append(d)
        self.tape.append(("dual", d, base, tan))
        self.lines.append(f"{d} = make_dual({base}, tangent{base.shape})")
        self.feature("dual")
        return d

    def const(self, array, text):
        return Both(G.const(array), T.const(array), text)

    def shape_features(self, shape):
        if not len(shape):
            self.feature("0d")
        if 0 in tuple(shape):
            self.feature("empty")

    # -- choosing operands ------------------------------------------------------------------------------------------
    def pick(self, pred=lambda v: True):
        cands = [v for v in self.vars if not v.t.is_complex() and pred(v)]  # complex values are only compared
        if not cands:
            return None
        if len(cands) > 3 and self.src.bool(60):
            cands = cands[-3:]  # mostly recent values: deep graphs, not only wide ones
        return self.src.choice(cands)

    def operand(self, pred=lambda v: v.is_float, shape=None, dtype=None, fresh=30, **leaf_kw):
        """An existing value that ``pred`` accepts, or (``fresh`` percent of the time, or if none fits) a new leaf of
        ``shape`` (a shape, or a function of the source giving one)."""
        v = None if self.src.bool(fresh) else self.pick(pred)
        if v is not None:
            return v
        shape = shape(self) if callable(shape) else shape
        return self.leaf(shape, dtype if dtype is not None else self.src.choice([np.float64] * 5 + [np.float32]),
                         **leaf_kw)

    def partner(self, x, allow_int=True):
        """A second operand broadcastable with x: an existing value, or a new leaf (maybe another dtype)."""
        def fits(v):
            try:
                np.broadcast_shapes(v.shape, x.shape)
            except ValueError:
                return False
            return v.is_float or allow_int
        if self.src.bool(55):
            v = self.pick(fits)
            if v is not None:
                if v is x:
                    self.feature("double_use")
                return v
        shape = list(x.shape)
        k = self.src.int(0, 3)
        if k == 1 and shape:
            shape = shape[self.src.int(0, len(shape)):]  # a suffix: broadcast over the leading axes
        elif k == 2:
            shape = [1 if self.src.bool(40) else n for n in shape]
        elif k == 3 and len(shape) < 3:
            shape = [self.src.int(1, 2)] + shape
        if tuple(shape) != x.shape:
            self.feature("broadcast")
        dtype = self.src.choice([np.float64] * 6 + [np.float32] * 2 + [np.int64] * allow_int)
        return self.leaf(tuple(shape), dtype)

    # -- running a step in both libraries -----------------------------------------------------------------------------
    def step(self, op, text, fn, *args, out=True, strict=False, grad_off=False, multi=False, scalar=False):
        """Run ``fn(lib, *args)`` in both libraries (Vars and Boths are replaced by each library's value), compare,
        and add the result as a new Var (``out``; ``multi``: a tuple of them; ``scalar``: a Python value, compared
        and dropped) or re-compare everything (in-place steps)."""
        name = f"v{len(self.vars)}"
        self.lines.append(f"{name} = {text}" if out else text)
        self.feature(op)
        if ".abs()" in text:
            self.feature("abs")  # the positive operands of log, sqrt, pow and division
        gargs = [lib_value(a, G) for a in args]
        targs = [lib_value(a, T) for a in args]
        rg, eg = self.call(G, fn, gargs, grad_off)
        rt, et = self.call(T, fn, targs, grad_off)
        warned = self.warnings
        self.agree(op, eg, et, strict)
        vargs = [a for a in args if isinstance(a, Var)]
        values = _tensors(rt) + [a.t for a in vargs]
        values += [tangent(t) for t in values if self.forward and tangent(t) is not None]  # JVPs may warn too
        finite = [_finite(t) for t in values
                  if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]
        if warned and all(finite):
            # NumPy's warnings are fine where the values are inf or NaN (torch's too); here they are not, so the
            # library computed something that over- or underflowed on the way (exp without a max shift, ...)
            raise Mismatch("warning", op, f"NumPy warned inside gpugrad where torch's inputs and result are "
                           f"finite: {sorted(set(warned))}")
        lowp, drift = any(a.lowp for a in vargs), any(a.drift for a in vargs)
        if scalar:
            if type(rg) is not type(rt) or rg != rt:
                raise Mismatch("result", op, f"{name} = {text}: gpugrad {rg!r}, torch {rt!r}", rg, rt)
            self.tape.append(("step", fn, args, None, grad_off))
            self.ran.add(op)
            return rt
        if not out:
            target = args[0]  # in place: the written tensor and the values sharing its memory take its history
            if (rg is not target.g) != (rt is not target.t):
                raise Mismatch("result", op, f"{text}: the in-place op returned {'another tensor' if rg is not target.g else 'itself'} in gpugrad, torch "
                               f"{'another tensor' if rt is not target.t else 'itself'}")
            target.lowp, target.drift = target.lowp or lowp, target.drift or drift
            self.tape.append(("step", fn, args, None, grad_off))
            self.compare_all(op)
            self.ran.add(op)
            return None
        if multi:
            if not isinstance(rt, tuple) or not isinstance(rg, tuple) or len(rg) != len(rt):
                raise Mismatch("result", op, f"{name} = {text}: gpugrad gave {type(rg).__name__} of "
                               f"{len(rg) if isinstance(rg, tuple) else '-'}, torch {type(rt).__name__} of "
                               f"{len(rt) if isinstance(rt, tuple) else '-'}")
            fields = getattr(rt, "_fields", None)
            if fields is not None and getattr(rg, "_fields", None) != fields:
                raise Mismatch("result", op, f"{name} = {text}: fields {getattr(rg, '_fields', None)}, torch "
                               f"{fields}")
            pairs = list(zip(rg, rt))
        else:
            pairs = [(rg, rt)]
        if vargs and vargs[0].is_float and any(isinstance(t, torch.Tensor) and t.dtype == torch.int64 for _, t in pairs):
            x = vargs[0].t.detach()  # indices of a selection: which of equal values is reported may differ
            if x.numel() and torch.unique(x).numel() < x.numel():
                self.feature("input_ties")
        outs = []  # on the tape before the values are compared: a mismatch can replay its own step
        self.tape.append(("step", fn, args, outs, grad_off))
        kind = "detach" if op == "detach" or text.endswith(".detach()") else "grad_off" if grad_off else None
        for i, (g, t) in enumerate(pairs):
            if not isinstance(t, torch.Tensor) or not isinstance(g, G.Tensor):
                raise Mismatch("result", op, f"{name} = {text}: gpugrad gave {type(g).__name__}, torch "
                               f"{type(t).__name__}")
            self._new_var(op, text, fn, args, gargs, targs, g, t, f"v{len(self.vars) + i}",
                          i if multi else None, lowp, drift, grad_off, outs)
        for v in outs:
            self.vars.append(v)
            if kind is not None:
                self.const_outputs.append((kind, v))
        if multi:
            self.lines[-1] = f"{name} = {text}  # {len(outs)} results: {', '.join(v.name for v in outs)}"
        self.ran.add(op)
        return tuple(outs) if multi else outs[0]

    def _new_var(self, op, text, fn, args, gargs, targs, rg, rt, label, index, lowp, drift, grad_off, outs):
        vargs = [a for a in args if isinstance(a, Var)]
        if any(rt is a for a in targs) and not any(rg is a for a in gargs):
            self.feature("torch_returns_input")  # e.g. torch's flatten of a 1-D tensor is the tensor itself
        v = Var(label, rg, rt)
        outs.append(v)
        v.lowp, v.drift = lowp or rt.dtype in (torch.float32, torch.float16), drift
        if v.lowp:
            self.feature("float32")  # (ints become float32 through exp, sigmoid...: the gradients' tolerance)
        for a in vargs:
            if rt is a.t and rg is a.g:  # both return the input itself (x.double() of float64): an alias
                v.view_of, v.expanded = a.view_of or a, a.expanded
        if vargs and rt._base is not None:
            src = next((a for a in vargs if rt._base is (a.t._base if a.t._base is not None else a.t)), None)
            if src is not None:
                v.view_of = src.view_of or src
                v.expanded = src.expanded or op == "expand"
        if vargs and shares(rg, vargs[0].g) != shares(rt, vargs[0].t):
            self.feature(f"alias_differs_{op}")  # a view in one library, a copy in the other
        self.shape_features(rt.shape)
        where = f"{label} = {text}" if index is None else f"{label} = ({text})[{index}]"
        try:
            if compare(rg, rt, op, where, v.lowp):
                self.feature("near_zero")
        except Mismatch as m:
            if m.kind != "value" or not self.drifted(rg, fn, args, grad_off, v.lowp, index):
                raise
            v.drift = True
            self.feature("drift")
        if rt.requires_grad != rg.requires_grad:
            raise Mismatch("requires-grad", op, f"{label}: requires_grad {rg.requires_grad}, torch {rt.requires_grad}")
        if self.forward:
            self.compare_tangent(v, op, where)
        return v

    def compare_tangent(self, v, op, where):
        tg, tt = tangent(v.g), tangent(v.t)
        if tt is not None and tg is None and not to_numpy(tt).any() and v.view_of is None and v.is_float:
            self.feature("zero_tangent_only_torch")
        if (tg is None) != (tt is None):
            self.feature("tangent_none_differs")
        try:
            compare(tg, tt, op, f"the tangent of {where}", v.lowp or (v.view_of.lowp if v.view_of else False),
                    kind="tangent")
        except Mismatch as m:
            m.var = v  # for the finite-difference oracle (phases.fd_tangent)
            raise

    def drifted(self, rg, fn, args, grad_off, lowp, index):
        """Whether torch's op on gpugrad's inputs gives gpugrad's result: then the values differ only because the
        inputs did (rounding amplified by an ill-conditioned op), not because of this op."""
        targs = [torch.tensor(to_numpy(a.g)) if isinstance(a, Var) else a.t if isinstance(a, Both) else a
                 for a in args]
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                alt = fn(T, *targs)
            except Exception:  # noqa: BLE001
                return False
        if isinstance(alt, tuple):
            alt = alt[index] if index is not None else None
        try:
            compare(rg, alt, "", "", lowp)
        except Mismatch:
            return False
        return True

    def call(self, lib, fn, args, grad_off=False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if grad_off:
                    with lib.no_grad():
                        result = fn(lib, *args)
                else:
                    result = fn(lib, *args)
                err = None
            except Exception as e:  # noqa: BLE001 - any error is compared with the other library's
                result, err = None, e
        if lib is G:
            self.warnings = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        else:
            for r in _tensors(result):
                if r.is_floating_point() and bool(torch.isnan(r).any()):
                    self.feature("nan_values")
        return result, err

    def agree(self, where, eg, et, strict):
        if eg is None and et is None:
            return
        if (eg is None) != (et is None):
            who, e = ("gpugrad", eg) if eg is not None else ("torch", et)
            raise Mismatch("error", where, f"only {who} raised {type(e).__name__}: {e}", eg, et)
        self.lines.append(f"#   both raise: gpugrad {type(eg).__name__}: {str(eg)[:120]!r}; torch "
                          f"{type(et).__name__}: {str(et)[:120]!r}")
        if strict and type(eg) is not type(et):
            raise Mismatch("error-type", where, f"gpugrad raised {type(eg).__name__} ({eg}), torch "
                           f"{type(et).__name__} ({et})", eg, et)
        raise Stop

    def compare_all(self, where):
        for v in self.vars:
            base = v.view_of or v
            if not (v.drift or base.drift):
                compare(v.g, v.t, where, f"{v} after the in-place step", v.lowp or base.lowp)
                if self.forward:
                    self.compare_tangent(v, where, f"{v} after the in-place step")
            if v.g.requires_grad != v.t.requires_grad:
                raise Mismatch("requires-grad", where, f"{v} after the in-place step: requires_grad "
                               f"{v.g.requires_grad}, torch {v.t.requires_grad}")

    @property
    def grad_lowp(self):
        """Gradients flow through every value: float32 anywhere (or drift) sets their tolerance."""
        return "grad" if "float32" in self.features or "drift" in self.features else False

    # -- replaying the tape ------------------------------------------------------------------------------------------
    def replay(self, lib, inputs=None, shift=None, stop=None, consts=None):
        """The program's values again, in ``lib``, as a dict Var -> value: the leaves in ``inputs`` (Var -> tensor)
        replaced, the others made afresh from their data (plus ``shift[var] * 1``, an array, for finite
        differences); duals are their primals (plus ``shift``); the Vars in ``consts`` take the values given there
        (outputs autograd treats as constants); steps up to the tape entry ``stop``."""
        env = {}
        for i, entry in enumerate(self.tape):
            if stop is not None and i >= stop:
                break
            if entry[0] == "leaf":
                v = entry[1]
                if inputs is not None and v in inputs:
                    env[v] = inputs[v]
                else:
                    a = v.init + shift[v] if shift is not None and v in shift else v.init
                    env[v] = lib.leaf(a, v.t.requires_grad and inputs is None)
            elif entry[0] == "dual":
                _, d, base, _ = entry
                env[d] = env[base] + lib.const(shift[d]) if shift is not None and d in shift else env[base]
            else:
                _, fn, args, outs, grad_off = entry
                vals = [env[a] if isinstance(a, Var) else lib_value(a, lib) for a in args]
                with lib.no_grad() if grad_off else contextlib.nullcontext():
                    r = fn(lib, *vals)
                if outs is not None:
                    env.update(zip(outs, r if isinstance(r, tuple) else (r,)))
                    for v in outs if consts else ():
                        if v in consts:
                            env[v] = consts[v].clone()
        return env


def _finite(t):
    """Whether torch's tensor holds only finite values; False where torch refuses to read it at all (an output of a
    multi-output view op whose base was then written in place: every use raises, which the step compared)."""
    try:
        return bool(torch.isfinite(t).all())
    except RuntimeError:
        return False


def _tensors(result):
    if torch is None:
        return []
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [r for r in items if isinstance(r, torch.Tensor)]
