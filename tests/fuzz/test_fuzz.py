"""Differential fuzzing against PyTorch: random define-by-run programs, run step by step in gpugrad and in torch.

A program is a DAG of 3-25 steps over gpugrad's ops (elementwise math, reductions with axis/keepdims, views and
movement, indexing, matmul, the softmax family, losses) with broadcasting, in-place ops on tensors and on views,
hooks, retain_grad, no_grad, 0-d and empty shapes, float32/float64 and int64 inputs. Every step runs in both
libraries on the same inputs (float64 data, cast where a leaf is float32); after it every live value is compared
(value, shape, dtype) and errors must agree (error or not; the type too where it matters: in place and engine
errors). The program ends with one or two backward passes (backward, backward(inputs=), autograd.grad with or
without create_graph, then a second-order pass), after which the leaves' grads, retained grads, returned grads
and the gradients hooks saw are compared.

Mismatches may be excused only by an entry of tests/fuzz/known_differences.py (deliberate differences, and bugs being
fixed); anything else fails with the program printed as code.

    python -m pytest tests/fuzz/test_fuzz.py            # 500 programs from a fixed seed (hypothesis, derandomized)
    python -m pytest tests/fuzz/test_fuzz.py -m slow    # thousands; random seeds unless GPUGRAD_FUZZ_SEED is set
    python -m tests.fuzz.test_fuzz 2000 [seed]          # figures: programs run, mismatches by class (no hypothesis)
"""
from __future__ import annotations

import collections
import os
import sys
import warnings

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as gF
from gpugrad.ops.activation import Dropout

try:
    import torch
    import torch.nn.functional as tF
except ImportError:  # the oracle is optional: the tests below skip
    torch = tF = None

try:
    import hypothesis
    from hypothesis import strategies as st
except ImportError:
    hypothesis = st = None

from tests.fuzz.known_differences import explain  # noqa: E402


# ---- the two libraries, spelled once -----------------------------------------------------------------------------
class G:
    """gpugrad: the steps whose spelling differs from torch's (the rest are the same method calls)."""

    @staticmethod
    def leaf(a, requires_grad):
        return gpugrad.tensor(a, requires_grad=requires_grad)

    const = staticmethod(gpugrad.tensor)
    cat = staticmethod(lambda xs, axis: gpugrad.cat(xs, axis))
    stack = staticmethod(lambda xs, axis: gpugrad.stack(xs, axis))
    where = staticmethod(gpugrad.where)
    no_grad = staticmethod(gpugrad.no_grad)
    grad = staticmethod(gpugrad.autograd.grad)
    var = staticmethod(lambda x, axis, keepdims, c: x.var(axis, keepdim=keepdims, correction=c))
    std = staticmethod(lambda x, axis, keepdims, c: x.std(axis, keepdim=keepdims, correction=c))
    gelu = staticmethod(lambda x: x.gelu(approximate="tanh"))
    cross_entropy = staticmethod(lambda x, t, reduction: gF.cross_entropy(x, t, reduction=reduction))
    mse_loss = staticmethod(lambda a, b, reduction: gF.mse_loss(a, b, reduction=reduction))
    layer_norm = staticmethod(lambda x, w, b: gF.layer_norm(x, x.shape[-1:], w, b, eps=1e-5))
    embedding = staticmethod(lambda ids, w: gF.embedding(ids, w))
    linear = staticmethod(lambda x, w, b: gF.linear(x, w, b))
    token_logprob = staticmethod(lambda x, t: gF.token_logprob(x, t))

    @staticmethod
    def dropout(x, p, u):
        return Dropout.apply(x, p=p, u=x._backend.asarray(u, x.dtype))


class T:
    """torch: the same steps."""

    @staticmethod
    def leaf(a, requires_grad):
        return torch.tensor(a, requires_grad=requires_grad)

    const = staticmethod(lambda a: torch.tensor(a))
    cat = staticmethod(lambda xs, axis: torch.cat(xs, axis))
    stack = staticmethod(lambda xs, axis: torch.stack(xs, axis))
    where = staticmethod(torch.where) if torch else None
    no_grad = staticmethod(torch.no_grad) if torch else None
    grad = staticmethod(torch.autograd.grad) if torch else None
    var = staticmethod(lambda x, axis, keepdims, c: x.var(axis, keepdim=keepdims, correction=c))
    std = staticmethod(lambda x, axis, keepdims, c: x.std(axis, keepdim=keepdims, correction=c))
    gelu = staticmethod(lambda x: tF.gelu(x, approximate="tanh"))
    cross_entropy = staticmethod(lambda x, t, reduction: tF.cross_entropy(x, t, reduction=reduction))
    mse_loss = staticmethod(lambda a, b, reduction: tF.mse_loss(a, b, reduction=reduction))
    layer_norm = staticmethod(lambda x, w, b: tF.layer_norm(x, x.shape[-1:], w, b, eps=1e-5))
    embedding = staticmethod(lambda ids, w: tF.embedding(ids, w))
    linear = staticmethod(lambda x, w, b: tF.linear(x, w, b))
    token_logprob = staticmethod(lambda x, t: torch.log_softmax(x, -1).gather(1, t[:, None])[:, 0])

    @staticmethod
    def dropout(x, p, u):  # torch's native_dropout: input * mask * scale, the mask drawn in x's dtype
        mask = u.astype(np_dtype(x)) >= np_dtype(x).type(p)
        return x * torch.tensor(mask) * (1.0 / (1.0 - p))


# ---- choices: from hypothesis (shrinkable) or from a seeded generator (the figures runner) ------------------------
class Source:
    def __init__(self, draw_int):
        self._int = draw_int  # (lo, hi) -> an int in [lo, hi]

    def int(self, lo, hi):
        return self._int(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self._int(0, len(seq) - 1)]

    def bool(self, percent=50):
        return self._int(0, 99) < percent

    @classmethod
    def from_hypothesis(cls, data):
        return cls(lambda lo, hi: data.draw(st.integers(lo, hi)))

    @classmethod
    def from_seed(cls, seed):
        rng = np.random.default_rng(seed)
        return cls(lambda lo, hi: int(rng.integers(lo, hi + 1)))


# ---- comparison ------------------------------------------------------------------------------------------------------
TOL = {np.dtype(np.float64): (1e-7, 1e-7), np.dtype(np.float32): (2e-3, 1e-4), np.dtype(np.float16): (1e-2, 1e-2)}


class Mismatch(Exception):
    """gpugrad and torch disagree. ``kind`` (value, dtype, shape, error, error-type, grad, grad-none, hook, warning)
    and ``where`` (the step's op, or the backward mode) name its class."""

    def __init__(self, kind, where, detail, got=None, want=None):
        super().__init__(f"{kind} at {where}: {detail}")
        self.kind, self.where, self.detail, self.got, self.want = kind, where, detail, got, want

    @property
    def cls(self):
        return f"{self.kind}@{self.where}"


class Stop(Exception):
    """Both libraries raised at the same step: the program ends there (in agreement)."""


def to_numpy(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().numpy(force=True)  # force: torch's gradients may be ZeroTensors (e.g. through sgn)
    return x.detach().numpy() if isinstance(x, gpugrad.Tensor) else np.asarray(x)


def shares(x, y):
    """Whether two tensors (of one library) share memory."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.numel() > 0 and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    return bool(np.shares_memory(x.data, y.data)) if x.numel() else False


def np_dtype(t):
    return torch.empty((), dtype=t.dtype).numpy().dtype


def compare(g, t, where, what, lowp=False):
    """Raise a Mismatch unless gpugrad's g matches torch's t in shape, dtype and value (to float32's tolerance when
    ``lowp``: the value went through float32 on the way)."""
    if (g is None) != (t is None):
        raise Mismatch("grad-none", where, f"{what}: gpugrad {'None' if g is None else 'a tensor'}, torch "
                       f"{'None' if t is None else 'a tensor'}")
    if g is None:
        return
    a, b = to_numpy(g), to_numpy(t)
    if a.shape != b.shape:
        raise Mismatch("shape", where, f"{what}: shape {a.shape}, torch {b.shape}")
    if a.dtype != b.dtype:
        raise Mismatch("dtype", where, f"{what}: dtype {a.dtype}, torch {b.dtype}")
    if a.dtype.kind in "biu":
        ok = np.array_equal(a, b)
    else:
        rtol, atol = TOL[np.dtype(np.float32) if lowp and a.dtype == np.float64 else a.dtype]
        if lowp == "grad":  # float32 gradients: rounding amplified through several VJPs (normalizations)
            atol = max(atol, 1e-3)
        finite = np.isfinite(b)
        scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0  # sums cancel: errors scale with |b|
        ok = np.allclose(a, b, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True)
        if ok and not np.allclose(a, b, rtol=rtol, atol=1e-300, equal_nan=True):
            return "near_zero"  # equal only to the absolute tolerance: their gradients may differ a lot (1 / std)
    if not ok:
        raise Mismatch("value", where, f"{what}: values differ\n gpugrad {a!r}\n torch   {b!r}", a, b)
    return None


# ---- the program -------------------------------------------------------------------------------------------------------
class Var:
    """One value of the program, in both libraries."""

    def __init__(self, name, g, t, leaf=False):
        self.name, self.g, self.t, self.leaf = name, g, t, leaf
        self.view_of = None  # the Var whose memory this one shares (basic index, reshape, permute, ...)
        self.expanded = False  # a view made by expand, or a view of one
        self.retained = False
        self.lowp = False  # went through float32: compared to float32's tolerance
        self.drift = False  # gpugrad's value differs from torch's only through its inputs' rounding (see step)

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

    def __repr__(self):
        return self.name


class Both:
    """A side input (index, mask, target): the same data in each library."""

    def __init__(self, g, t, text):
        self.g, self.t, self.text = g, t, text

    def __repr__(self):
        return self.text


SHAPES = [(), (1,), (2,), (3,), (4,), (2, 3), (3, 1), (1, 4), (3, 4), (2, 2), (2, 3, 4), (2, 1, 3), (4, 3, 2)]
EMPTY_SHAPES = [(0,), (0, 3), (2, 0), (3, 0, 2)]


class Program:
    def __init__(self, src):
        self.src = src
        self.rng = np.random.default_rng(src.int(0, 2 ** 16))
        self.vars = []
        self.lines = []
        self.features = set()  # what the program uses, for tests/fuzz/known_differences.py
        self.hooks = []  # (var, records_g, records_t)
        self.retained = []
        self.warnings = []  # RuntimeWarnings NumPy raised inside gpugrad during the current step
        self.values = src.choice(["normal", "normal", "wide", "ties", "huge"])

    # -- output ----------------------------------------------------------------------------------------------------
    def code(self):
        return "\n".join(self.lines)

    def feature(self, *names):
        self.features.update(names)

    # -- data --------------------------------------------------------------------------------------------------------
    def data(self, shape, dtype=np.float64):
        if np.dtype(dtype).kind == "i":
            return self.rng.integers(-3, 4, shape).astype(dtype)
        x = self.rng.standard_normal(shape) * {"normal": 1.0, "wide": 3.0, "ties": 1.0, "huge": 300.0}[self.values]
        if self.values == "ties":  # zeros and repeated values: subgradients and max/min ties
            x = np.round(x * 2) / 2
        return x.astype(dtype)

    def shape(self):
        if self.src.bool(6):
            self.feature("empty")
            return self.src.choice(EMPTY_SHAPES)
        s = self.src.choice(SHAPES)
        if not s:
            self.feature("0d")
        return s

    def dtype(self):
        k = self.src.int(0, 9)
        return np.float32 if k == 0 else np.int64 if k == 1 else np.float64

    def float_like(self, x):
        """x's float dtype, mostly: torch refuses mixed float dtypes in matmul, linear and layer_norm."""
        return np_dtype(x.t) if self.src.bool(90) else self.src.choice([np.float32, np.float64])

    def leaf(self, shape=None, dtype=None, requires_grad=None):
        shape = self.shape() if shape is None else shape
        dtype = self.dtype() if dtype is None else dtype
        if not shape:
            self.feature("0d")
        if 0 in shape:
            self.feature("empty")
        a = self.data(shape, dtype)
        floating = np.dtype(dtype).kind == "f"
        if requires_grad is None:
            requires_grad = floating and self.src.bool(85)
        if dtype == np.float32:
            self.feature("float32")
        if not floating:
            self.feature("int")
        v = Var(f"v{len(self.vars)}", G.leaf(a, requires_grad), T.leaf(a, requires_grad), leaf=True)
        v.lowp = dtype == np.float32
        self.vars.append(v)
        self.lines.append(f"{v} = leaf({shape}, {np.dtype(dtype).name}{', requires_grad=True' if requires_grad else ''})")
        return v

    def const(self, array, text):
        return Both(G.const(array), T.const(array), text)

    # -- choosing operands ------------------------------------------------------------------------------------------
    def pick(self, pred=lambda v: True):
        cands = [v for v in self.vars if pred(v)]
        if not cands:
            return None
        if len(cands) > 3 and self.src.bool(60):
            cands = cands[-3:]  # mostly recent values: deep graphs, not only wide ones
        return self.src.choice(cands)

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
        self.feature("broadcast") if tuple(shape) != x.shape else None
        dtype = self.src.choice([np.float64] * 6 + [np.float32] * 2 + [np.int64] * allow_int)
        return self.leaf(tuple(shape), dtype)

    # -- running a step in both libraries -----------------------------------------------------------------------------
    def step(self, op, text, fn, *args, out=True, strict=False, grad_off=False):
        """Run ``fn(lib, *args)`` in both libraries (Vars and Boths are replaced by each library's value), compare,
        and add the result as a new Var (``out``) or re-compare everything (in-place steps)."""
        name = f"v{len(self.vars)}"
        self.lines.append(f"{name} = {text}" if out else text)
        self.feature(op)
        if ".abs()" in text:
            self.feature("abs")  # the positive operands of log, sqrt, pow and division
        gargs = [a.g if isinstance(a, (Var, Both)) else a for a in args]
        targs = [a.t if isinstance(a, (Var, Both)) else a for a in args]
        rg, eg = self.call(G, fn, gargs, grad_off)
        rt, et = self.call(T, fn, targs, grad_off)
        warned = self.warnings
        self.agree(op, eg, et, strict)
        vargs = [a for a in args if isinstance(a, Var)]
        finite = [bool(torch.isfinite(t).all()) for t in [rt] + [a.t for a in vargs]
                  if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if warned and all(finite):
            # NumPy's warnings are fine where the values are inf or NaN (torch's too); here they are not, so the
            # library computed something that over- or underflowed on the way (exp without a max shift, ...)
            raise Mismatch("warning", op, f"NumPy warned inside gpugrad where torch's inputs and result are "
                           f"finite: {sorted(set(warned))}")
        lowp, drift = any(a.lowp for a in vargs), any(a.drift for a in vargs)
        if out:
            if any(rt is a for a in targs) and not any(rg is a for a in gargs):
                self.feature("torch_returns_input")  # e.g. torch's flatten of a 1-D tensor is the tensor itself
            v = Var(name, rg, rt)
            v.lowp, v.drift = lowp or rt.dtype == torch.float32, drift
            for a in vargs:
                if rt is a.t and rg is a.g:  # both return the input itself (x.double() of float64): an alias
                    v.view_of, v.expanded = a.view_of or a, a.expanded
            if vargs and shares(rg, vargs[0].g) != shares(rt, vargs[0].t):
                self.feature(f"alias_differs_{op}")  # a view in one library, a copy in the other
            self.shape_features(rt)
            try:
                if compare(rg, rt, op, f"{name} = {text}", v.lowp):
                    self.feature("near_zero")
            except Mismatch as m:
                if m.kind != "value" or not self.drifted(rg, fn, args, grad_off, v.lowp):
                    raise
                v.drift = True
                self.feature("drift")
            if rt.requires_grad != rg.requires_grad:
                raise Mismatch("requires-grad", op, f"{name}: requires_grad {rg.requires_grad}, torch "
                               f"{rt.requires_grad}")
            self.vars.append(v)
            return v
        target = args[0]  # in place: the written tensor and the values sharing its memory take its history
        target.lowp, target.drift = target.lowp or lowp, target.drift or drift
        self.compare_all(op)
        return None

    def drifted(self, rg, fn, args, grad_off, lowp):
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
        try:
            compare(rg, alt, "", "", lowp)
        except Mismatch:
            return False
        return True

    def shape_features(self, t):
        if t.dim() == 0:
            self.feature("0d")
        if t.numel() == 0:
            self.feature("empty")

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
        elif result is not None:
            for r in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(r, torch.Tensor) and r.is_floating_point() and torch.isnan(r).any():
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
            if v.g.requires_grad != v.t.requires_grad:
                raise Mismatch("requires-grad", where, f"{v} after the in-place step: requires_grad "
                               f"{v.g.requires_grad}, torch {v.t.requires_grad}")

    # -- the backward phase ----------------------------------------------------------------------------------------
    def loss(self, terms, lib):
        """sum_i (v_i * w_i).sum(): fixed random weights, so gradients are not all ones."""
        total = None
        for v, w in terms:
            x = v.g if lib is G else v.t
            s = (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
            total = s if total is None else total + s
        return total

    def weights(self, vs):
        return [(v, self.data(v.shape)) for v in vs]

    def backward_pass(self, k, last):
        src = self.src
        cands = [v for v in self.vars if v.requires_grad]
        if not cands:
            raise Stop
        n = src.int(1, min(3, len(cands)))
        roots = list(dict.fromkeys(cands[-n:] if src.bool(70) else [src.choice(cands) for _ in range(n)]))
        terms = self.weights(roots)
        mode = src.choice(["backward", "backward", "grad", "grad_create", "backward_inputs", "backward_create"])
        retain = not last or src.bool(30)
        self.feature(mode)
        if retain:
            self.feature("retain_graph")
        leaves = [v for v in self.vars if v.leaf and v.requires_grad]
        names = " + ".join(f"({v} * w).sum()" for v, _ in terms)
        where = f"pass{k}:{mode}"
        if mode in ("backward", "backward_create", "backward_inputs"):
            inputs = None
            if mode == "backward_inputs":
                pool = leaves + [v for v in self.vars if not v.leaf and v.requires_grad and src.bool(20)]
                if not pool:
                    raise Stop
                inputs = list(dict.fromkeys(src.choice(pool) for _ in range(src.int(1, 2))))
                if any(not v.leaf for v in inputs):
                    self.feature("backward_inputs_nonleaf")
                self.input_features(inputs)
            create = mode == "backward_create"
            self.lines.append(f"({names}).backward(retain_graph={retain}"
                              + (", create_graph=True" if create else "")
                              + (f", inputs={inputs}" if inputs else "") + ")")

            def run(lib):
                lib_inputs = None if inputs is None else [v.g if lib is G else v.t for v in inputs]
                self.loss(terms, lib).backward(retain_graph=retain, create_graph=create, inputs=lib_inputs)

            _, eg = self.call(G, lambda lib: run(lib), [])
            _, et = self.call(T, lambda lib: run(lib), [])
            self.agree(where, eg, et, strict=True)
            self.check_grads(where, inputs)
            if create and src.bool(60):
                self.second_order(where, [v for v in leaves if v.t.grad is not None and v.t.grad.requires_grad])
            return
        # autograd.grad, maybe w.r.t. intermediate values, maybe with create_graph
        create = mode == "grad_create"
        pool = leaves + [v for v in self.vars if not v.leaf and v.requires_grad]
        inputs = list(dict.fromkeys(src.choice(pool) for _ in range(src.int(1, 3))))
        if any(not v.leaf for v in inputs):
            self.feature("grad_wrt_intermediate")
        self.input_features(inputs)
        self.lines.append(f"gs = autograd.grad({names}, {inputs}, retain_graph={retain}, create_graph={create}, "
                          "allow_unused=True)")
        gg, eg = self.call(G, lambda lib: lib.grad(self.loss(terms, lib), [v.g for v in inputs],
                                                   retain_graph=retain, create_graph=create, allow_unused=True), [])
        gt, et = self.call(T, lambda lib: lib.grad(self.loss(terms, lib), [v.t for v in inputs],
                                                   retain_graph=retain, create_graph=create, allow_unused=True), [])
        self.agree(where, eg, et, strict=True)
        for v, a, b in zip(inputs, gg, gt):
            compare(a, b, where, f"autograd.grad w.r.t. {v}", self.grad_lowp)
        self.check_grads(where, [])
        if create:
            pairs = [(a, b) for a, b in zip(gg, gt) if b is not None and b.requires_grad]
            for a, b in pairs:
                if not a.requires_grad:
                    raise Mismatch("requires-grad", where, "create_graph=True returned a gradient without a graph")
            if pairs and src.bool(80):
                self.feature("second_order")
                ws = [self.data(tuple(b.shape)) for _, b in pairs]
                self.lines.append("sum((g * w).sum() for g in gs).backward()")
                def run2(lib):
                    total = 0
                    for (a, b), w in zip(pairs, ws):
                        x = a if lib is G else b
                        total = total + (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
                    total.backward()
                _, eg = self.call(G, run2, [])
                _, et = self.call(T, run2, [])
                self.agree(where + ":second_order", eg, et, strict=True)
                self.check_grads(where + ":second_order", None)

    def input_features(self, inputs):
        """backward(inputs=) and autograd.grad: hooks on the inputs, and hooks or retain_grad elsewhere."""
        hooked = [h for h, _, _ in self.hooks]
        if any(v in hooked for v in inputs):
            self.feature("grad_of_hooked_input")
        if any(v not in inputs for v in hooked + self.retained):
            self.feature("hooks_outside_inputs")

    def second_order(self, where, leaves):
        if not leaves:
            return
        self.feature("second_order")
        ws = [self.data(v.shape) for v in leaves]
        self.lines.append(f"sum((x.grad * w).sum() for x in {leaves}).backward()")

        def run(lib):
            total = 0
            for v, w in zip(leaves, ws):
                x = (v.g if lib is G else v.t).grad
                total = total + (x * lib.const(w.astype(to_numpy(x).dtype))).sum()
            total.backward()

        _, eg = self.call(G, run, [])
        _, et = self.call(T, run, [])
        self.agree(where + ":second_order", eg, et, strict=True)
        self.check_grads(where + ":second_order", None)

    @property
    def grad_lowp(self):
        """Gradients flow through every value: float32 anywhere (or drift) sets their tolerance."""
        return "grad" if "float32" in self.features or "drift" in self.features else False

    def check_grads(self, where, inputs):
        lowp = self.grad_lowp
        for v in self.vars:
            if v.t.is_leaf != v.g.is_leaf:
                raise Mismatch("is-leaf", where, f"{v}: is_leaf {v.g.is_leaf}, torch {v.t.is_leaf}")
            if v.t.is_leaf and v.t.requires_grad:
                compare(v.g.grad, v.t.grad, where, f"{v}.grad", lowp)
        for v in self.retained:
            compare(v.g.grad, v.t.grad, where, f"{v}.grad (retain_grad)", lowp)
        for v, rg, rt in self.hooks:
            if len(rg) != len(rt):
                raise Mismatch("hook", where, f"the hook on {v} ran {len(rg)} times, torch {len(rt)}")
            for i, (a, b) in enumerate(zip(rg, rt)):
                compare(a, b, where, f"gradient #{i} seen by the hook on {v}", lowp)

    def finish(self):
        for k in range(2 if self.src.bool(35) else 1):
            self.backward_pass(k, last=True)



# ---- the steps ---------------------------------------------------------------------------------------------------------
# Each step takes the program, picks operands and parameters, and runs one op (p.step). Simple steps come first:
# hypothesis shrinks choices towards 0.
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
    if v is not None and v.t._base is not None:
        v.view_of = x.view_of or x
        v.expanded = x.expanded or op == "expand"
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
        v = p.step("index", f"{x}[{text}]", lambda lib, a: a[key], x)
        if v is not None:
            v.view_of, v.expanded = x.view_of or x, x.expanded
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
    y = y or p.leaf(tuple(shape), p.src.choice([np.float64, np.float64, x.t.numpy().dtype if not x.requires_grad
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
            records[i].append(g.detach().clone())
            return g * 2 if scale else None
        return hook

    p.lines.append(f"{x}.register_hook(lambda g: {'g * 2' if scale else 'record(g)'})")
    eg = p.call(G, lambda lib: x.g.register_hook(make(0)), [])[1]
    x.t.grad_fn  # NOTE: torch 2.13 segfaults registering a hook on a view whose base changed in place since the
    et = p.call(T, lambda lib: x.t.register_hook(make(1)), [])[1]  # view was taken, unless grad_fn was read first
    p.agree("register_hook", eg, et, strict=True)
    p.hooks.append((x, *records))
    return True


def run_program(src):
    """Generate and run one program: (program, mismatch or None, the known difference that excuses it or None)."""
    p = Program(src)
    try:
        for _ in range(src.int(1, 3)):
            p.leaf()
        steps, done, tries = src.int(3, 25), 0, 0
        while done < steps and tries < steps * 4:  # a step may not apply (no operand of the kind it needs)
            tries += 1
            done += bool(src.choice(STEPS)(p))
        p.finish()
    except Stop:
        pass
    except Mismatch as m:
        return p, m, explain(p.features, m)
    return p, None, None


# ---- tests ---------------------------------------------------------------------------------------------------------------
needs_oracle = pytest.mark.skipif(torch is None or hypothesis is None,
                                  reason="the fuzzer needs PyTorch (the oracle) and hypothesis: "
                                         "pip install 'gpugrad[test,oracle]'")


def _fuzz(data):
    p, m, known = run_program(Source.from_hypothesis(data))
    if known is not None:
        hypothesis.event(f"excused: {known.name}")  # pytest --hypothesis-show-statistics counts them
    if m is not None and known is None:
        raise AssertionError(f"gpugrad and torch disagree ({m.cls}): {m.detail}\n\nprogram:\n{p.code()}\n"
                             f"features: {sorted(p.features)}")


if hypothesis is not None:
    _COMMON = dict(deadline=None, database=None, print_blob=True,
                   suppress_health_check=list(hypothesis.HealthCheck))

    @needs_oracle
    @hypothesis.settings(max_examples=500, derandomize=True, **_COMMON)
    @hypothesis.given(st.data())
    def test_programs_match_torch(data):
        _fuzz(data)

    _SEED = os.environ.get("GPUGRAD_FUZZ_SEED")

    @pytest.mark.slow
    @needs_oracle
    @hypothesis.settings(max_examples=int(os.environ.get("GPUGRAD_FUZZ_EXAMPLES", 3000)), derandomize=False,
                         **_COMMON)
    @hypothesis.given(st.data())
    def test_programs_match_torch_long(data):
        _fuzz(data)

    if _SEED is not None:
        test_programs_match_torch_long = hypothesis.seed(int(_SEED))(test_programs_match_torch_long)
else:
    @needs_oracle
    def test_programs_match_torch():
        pass


# ---- figures ------------------------------------------------------------------------------------------------------------
def figures(n, seed=0):
    """Run n programs from seeded generators: counts of programs, steps, and mismatches by class."""
    classes = collections.Counter()
    examples = {}
    steps = 0
    for i in range(n):
        p, m, known = run_program(Source.from_seed((seed, i)))
        steps += len(p.lines)
        if m is None:
            continue
        key = f"known:{known.name}" if known else f"NEW:{m.cls}"
        classes[key] += 1
        if key not in examples or len(p.lines) < len(examples[key][0].lines):
            examples[key] = (p, m)
    return n, steps, classes, examples


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    warnings.simplefilter("ignore")
    total, lines, classes, examples = figures(n, seed)
    print(f"{total} programs, {lines} lines; {sum(classes.values())} mismatches")
    for key, count in classes.most_common():
        print(f"  {count:5d}  {key}")
    show = [a[3:] for a in sys.argv if a.startswith("-k=")]
    for key, (p, m) in sorted(examples.items()):
        if any(k in key for k in show) or (not show and key.startswith("NEW")):
            print(f"\n==== {key}: {m.detail[:600]}\n{p.code()}\nfeatures: {sorted(p.features)}")
