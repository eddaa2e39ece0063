"""The op table: one row per case; every op suite (forward, gradcheck, torch oracle, GPU parity) runs over it.

``fn`` takes gpugrad Tensors, ``ref`` the same inputs as float64 NumPy arrays, ``torch_fn`` (optional) torch
tensors.  ``avoid`` keeps samples away from points where the op is not differentiable (Chainer's
dodge_nondifferentiable); ``low``/``high`` bound the samples and ``shift`` moves them all (rows around -1000: a
max that starts at 0 instead of -inf would read 0 there).  ``op`` names the registry entry it covers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.backend import reference as R
from gpugrad.ops.activation import Dropout
from gpugrad.ops.convert import ToDevice
from gpugrad.ops.declarations import ACTIVATIONS, POINTWISE


@dataclass
class OpCase:
    name: str
    fn: Callable
    ref: Callable
    shapes: list
    op: str = ""
    low: float = -2.0
    high: float = 2.0
    avoid: tuple = ()
    torch_fn: Callable | None = None
    grad: bool = True
    gpu_kernels: tuple = ()  # kernel launchers that must run on CUDA (proof the fast path ran)
    rtol32: float = 1e-5
    shift: float = 0.0  # added to every sample (after the kinks are avoided)

    def __post_init__(self):
        self.op = self.op or self.name

    def sample(self, rng, shape, dtype=np.float64):
        x = rng.uniform(self.low, self.high, size=shape)
        for a in self.avoid:  # push samples at least 0.05 away from each kink
            near = np.abs(x - a) < 0.05
            x = np.where(near, a + np.where(x >= a, 0.05, -0.05) + (x - a), x)
        return np.asarray(x + self.shift).astype(dtype)  # asarray: a 0-d sample stays an array, not a NumPy scalar


# Fixed side inputs (targets, indices, masks, randoms) shared by fn and ref.
T4 = np.array([1, 0, 3, 3], dtype=np.int64)
IDX = np.array([2, 0, 2], dtype=np.int64)
GATHER_IDX = np.array([[0, 2, 1, 2], [1, 1, 0, 0], [2, 0, 0, 1]], dtype=np.int64)
EMB_IDS = np.array([[4, 0, 4], [1, 1, 2]], dtype=np.int64)
MASK34 = np.array([[True, False, True, False], [False, False, True, True], [True, True, False, True]])
U34 = np.random.default_rng(7).random((3, 4))
U34_TIES = np.where(np.arange(4) % 2 == 0, 0.3, U34)  # randoms equal to p = 0.3: kept (mask = u >= p)
C_GELU = np.sqrt(2 / np.pi)


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_logsumexp(x, axis=-1, keepdims=False):
    m = x.max(axis, keepdims=True)
    out = m + np.log(np.exp(x - m).sum(axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis)


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(C_GELU * (x + 0.044715 * x ** 3)))


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_xent(x, t):
    return np_logsumexp(x, -1) - x[np.arange(len(t)), t]


# Every declared pointwise op (ops/declarations.py) gets its rows from the declaration: sampled in its range, away
# from its kinks, at its default parameters and (ops with parameters) at others, against torch's function.
NON_DEFAULT = {"softplus": (2.0, 10.0), "leaky_relu": (0.2,), "elu": (0.5,)}
PARAM_KINKS = {"softplus": lambda beta, threshold: (threshold / beta,)}


def _torch_pointwise(d, params):
    def run(a):
        torch = __import__("torch")
        if d.name == "gelu":
            return torch.nn.functional.gelu(a, approximate="tanh")
        if d.name == "gelu_erf":  # torch's default gelu
            return torch.nn.functional.gelu(a)
        return getattr(torch.nn.functional if d.functional and not d.top else torch, d.name)(a, *params)
    return run


def _pointwise_rows():
    rows = []
    for d in POINTWISE.values():
        for params in (d.defaults,) + ((NON_DEFAULT[d.name],) if d.name in NON_DEFAULT else ()):
            kinks = PARAM_KINKS[d.name](*params) if d.name in PARAM_KINKS else d.kinks
            ref = (lambda x, d=d, p=params: (getattr(R, f"{d.name}_fwd")(np, x, *p)) if d.kernel else d.f(np, x, *p))
            rows.append(OpCase(d.name if params == d.defaults else f"{d.name}{params}",
                               lambda a, d=d, p=params: a.gelu(approximate="tanh") if d.name == "gelu" else
                               getattr(a, d.name)(*p), ref,
                               [((3, 4),), ((),), ((0, 5),)] if params == d.defaults else [((2, 5),)], op=d.name,
                               low=d.low, high=d.high, avoid=kinks, torch_fn=_torch_pointwise(d, params),
                               gpu_kernels=(f"{d.name}_fwd", f"{d.name}_bwd") if d.kernel else ()))
    return rows


def _bias_act_rows():
    rows = []
    for act in ACTIVATIONS[1:]:
        d = POINTWISE[act]
        rows.append(OpCase(f"bias_act_{act}", lambda x, b, a=act: F.bias_act(x, b, a),
                           lambda x, b, d=d: getattr(R, f"{d.name}_fwd")(np, x + b, *d.defaults), [((2, 3, 4), (4,))],
                           op="bias_act", low=d.low / 2, high=d.high / 2, avoid=d.kinks,
                           torch_fn=lambda x, b, d=d: _torch_pointwise(d, d.defaults)(x + b)))  # torch: unfused
    return rows


POINTWISE_CASES, BIAS_ACT_CASES = _pointwise_rows(), _bias_act_rows()


# ---- losses and batch norm (nn.functional) with torch's options; compositions name the op they mostly exercise ----
W5 = np.array([0.5, 2.0, 1.0, 1.5, 0.8])  # class weights
T4_IGNORE = np.array([1, -100, 3, 0])  # a row ignored (ignore_index -100)
T23 = np.array([[0, 4, 2], [1, 1, 3]])  # targets of (2, 5, 3) logits
P45 = np_softmax(np.random.default_rng(3).standard_normal((4, 5)))  # class probabilities
Y34 = np.random.default_rng(4).uniform(0.0, 1.0, (3, 4))  # binary targets (soft)
Q34 = np.where(np.arange(12).reshape(3, 4) % 5 == 0, 0.0, np.random.default_rng(5).uniform(0.1, 1.0, (3, 4)))


def _nn(name, call, ref, shapes, op, **kw):
    """A row whose fn and torch_fn are ``call(F, lib, *inputs)`` with gpugrad's or torch's functional; the
    cross-entropy rows must run the fused kernels on CUDA."""
    if op == "cross_entropy":
        kw["gpu_kernels"] = ("softmax_xent_fwd", "softmax_xent_bwd")
    def fn(*a):
        return call(F, gpugrad, *a)

    def torch_fn(*a):
        return call(_torch_nn_f(), __import__("torch"), *a)
    return OpCase(name, fn, ref, shapes, op=op, torch_fn=torch_fn, **kw)


def _torch_nn_f():
    return __import__("torch").nn.functional


def _c(lib, a, like):
    """A constant side input in the dtype of ``like`` (a float64 constant would promote a float32 result)."""
    return lib.tensor(a, dtype=like.dtype) if a.dtype.kind == "f" else lib.tensor(a)


def np_weighted_xent(x, t, w, eps=0.0, ignore=-100):
    logp = np.log(np_softmax(x, 1))
    keep = t != ignore
    ts = np.where(keep, t, 0)
    nll = -logp[np.arange(len(t)), ts] * w[ts] * keep
    smooth = -(logp * w).sum(1) * keep
    return (1 - eps) * nll + eps / x.shape[1] * smooth, (w[ts] * keep).sum()


def np_bn(x, w, b, axes, eps=1e-5):
    shape = [1] * x.ndim
    shape[1] = -1
    m, v = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w.reshape(shape) + b.reshape(shape)


NN_CASES = [
    _nn("cross_entropy_weight", lambda F, lib, x: F.cross_entropy(x, _c(lib, T4, x), weight=_c(lib, W5, x)),
        lambda x: (lambda l, d: l.sum() / d)(*np_weighted_xent(x, T4, W5)), [((4, 5),)], "cross_entropy"),
    _nn("cross_entropy_ignore",
        lambda F, lib, x: F.cross_entropy(x, _c(lib, T4_IGNORE, x), weight=_c(lib, W5, x)),
        lambda x: (lambda l, d: l.sum() / d)(*np_weighted_xent(x, T4_IGNORE, W5)), [((4, 5),)], "cross_entropy"),
    _nn("cross_entropy_smoothing", lambda F, lib, x: F.cross_entropy(
        x, _c(lib, T4_IGNORE, x), weight=_c(lib, W5, x), label_smoothing=0.2, reduction="sum"),
        lambda x: np_weighted_xent(x, T4_IGNORE, W5, 0.2)[0].sum(), [((4, 5),)], "cross_entropy"),
    _nn("cross_entropy_smoothing_mean", lambda F, lib, x: F.cross_entropy(x, _c(lib, T4, x), label_smoothing=0.3),
        lambda x: np_weighted_xent(x, T4, np.ones(5), 0.3)[0].mean(), [((4, 5),)], "cross_entropy"),
    _nn("cross_entropy_nd", lambda F, lib, x: F.cross_entropy(x, _c(lib, T23, x), reduction="none"),
        lambda x: np_weighted_xent(x.transpose(0, 2, 1).reshape(-1, 5), T23.reshape(-1), np.ones(5))[0].reshape(2, 3),
        [((2, 5, 3),)], "cross_entropy"),
    _nn("cross_entropy_probs", lambda F, lib, x: F.cross_entropy(x, _c(lib, P45, x), label_smoothing=0.1),
        lambda x: -(np.log(np_softmax(x, 1)) * (P45 * 0.9 + 0.02)).sum(1).mean(), [((4, 5),)], "log_softmax"),
    _nn("nll_loss", lambda F, lib, x: F.nll_loss(x, _c(lib, T4_IGNORE, x), weight=_c(lib, W5, x)),
        lambda x: -(x[np.arange(4), np.where(T4_IGNORE < 0, 0, T4_IGNORE)] * W5[np.where(T4_IGNORE < 0, 0, T4_IGNORE)]
                    * (T4_IGNORE >= 0)).sum() / (W5[np.where(T4_IGNORE < 0, 0, T4_IGNORE)] * (T4_IGNORE >= 0)).sum(),
        [((4, 5),)], "nll_loss"),
    _nn("nll_loss_nd", lambda F, lib, x: F.nll_loss(x, _c(lib, T23, x), reduction="none"),
        lambda x: -np.take_along_axis(x, T23[:, None], 1)[:, 0], [((2, 5, 3),)], "nll_loss"),
    _nn("binary_cross_entropy", lambda F, lib, x, t: F.binary_cross_entropy(x, t, reduction="none"),
        lambda x, t: -(t * np.log(x) + (1 - t) * np.log1p(-x)), [((3, 4), (3, 4)), ((), ())], "binary_cross_entropy",
        low=0.05, high=0.95),
    _nn("binary_cross_entropy_weight",
        lambda F, lib, x: F.binary_cross_entropy(x, _c(lib, Y34, x), _c(lib, W5[:4], x)),
        lambda x: (-(Y34 * np.log(x) + (1 - Y34) * np.log1p(-x)) * W5[:4]).mean(), [((3, 4),)],
        "binary_cross_entropy", low=0.05, high=0.95),
    _nn("bce_with_logits",
        lambda F, lib, x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=_c(lib, W5[:4], x)),
        lambda x, t: ((1 - t) * x + (1 + (W5[:4] - 1) * t) * np.logaddexp(0, -x)).mean(), [((3, 4), (3, 4))],
        "binary_cross_entropy_with_logits", low=-4.0, high=4.0),
    _nn("bce_with_logits_weight", lambda F, lib, x, t: F.binary_cross_entropy_with_logits(
        x, t, _c(lib, W5[:4], x), reduction="none"), lambda x, t: ((1 - t) * x + np.logaddexp(0, -x)) * W5[:4],
        [((3, 4), (3, 4))], "binary_cross_entropy_with_logits", low=-30.0, high=30.0),
    _nn("bce_with_logits_sum", lambda F, lib, x, t: F.binary_cross_entropy_with_logits(x, t, reduction="sum"),
        lambda x, t: ((1 - t) * x + np.logaddexp(0, -x)).sum(), [((2, 5), (2, 5)), ((), ())],
        "binary_cross_entropy_with_logits"),
    _nn("mse_loss", lambda F, lib, x, t: F.mse_loss(x, t), lambda x, t: ((x - t) ** 2).mean(),
        [((3, 4), (3, 4)), ((), ())], "mse_loss"),
    _nn("mse_loss_broadcast", lambda F, lib, x, t: F.mse_loss(x, t, reduction="none"), lambda x, t: (x - t) ** 2,
        [((3, 4), (4,))], "mse_loss"),
    _nn("l1_loss", lambda F, lib, x: F.l1_loss(x, _c(lib, np.zeros((3, 4)), x), reduction="sum"),
        lambda x: np.abs(x).sum(), [((3, 4),)], "abs", avoid=(0.0,)),
    _nn("smooth_l1_loss", lambda F, lib, x: F.smooth_l1_loss(x, _c(lib, np.zeros((3, 4)), x), beta=0.5),
        lambda x: np.where(np.abs(x) < 0.5, x * x, np.abs(x) - 0.25).mean(), [((3, 4),)], "smooth_l1_loss",
        avoid=(-0.5, 0.0, 0.5)),
    _nn("huber_loss", lambda F, lib, x: F.huber_loss(x, _c(lib, np.zeros((3, 4)), x), delta=0.7, reduction="none"),
        lambda x: np.where(np.abs(x) < 0.7, 0.5 * x * x, 0.7 * (np.abs(x) - 0.35)), [((3, 4),)], "huber_loss",
        avoid=(-0.7, 0.0, 0.7)),
    _nn("kl_div", lambda F, lib, x: F.kl_div(x, _c(lib, Q34, x), reduction="batchmean"),
        lambda x: (np.where(Q34 > 0, Q34 * np.log(np.where(Q34 > 0, Q34, 1)), 0) - Q34 * x).sum() / 3, [((3, 4),)],
        "mul"),
    _nn("kl_div_log_target", lambda F, lib, x, t: F.kl_div(x, t, reduction="sum", log_target=True),
        lambda x, t: (np.exp(t) * (t - x)).sum(), [((3, 4), (3, 4))], "exp"),
    _nn("batch_norm", lambda F, lib, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda x, w, b: np_bn(x, w, b, (0,) + tuple(range(2, x.ndim))), [((6, 3), (3,), (3,)), ((4, 3, 5), (3,), (3,))],
        "var"),
    _nn("batch_norm_eval",
        lambda F, lib, x, w, b: F.batch_norm(x, _c(lib, W5[:3], x), _c(lib, W5[2:], x), w, b),
        lambda x, w, b: (x - W5[:3]) / np.sqrt(W5[2:] + 1e-5) * w + b, [((6, 3), (3,), (3,))], "sub"),
]


def _t(torch, a):
    return torch.as_tensor(a)


def _torch():
    return __import__("torch")


def _same(call):
    """A row's fn and torch_fn in one: ``call(lib, *inputs)`` with lib gpugrad or torch."""
    return (lambda *a: call(gpugrad, *a)), (lambda *a: call(_torch(), *a))


def _surface(name, call, ref, shapes, op="", **kw):
    fn, torch_fn = _same(call)
    return OpCase(name, fn, ref, shapes, op=op, torch_fn=torch_fn, **kw)


HALVES = (-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0)
SCATTER_IDX = np.array([[1, 0, 2, 0], [2, 1, 0, 1]], dtype=np.int64)  # no column repeats a row: one write each


def _np_scatter(a, s, idx=SCATTER_IDX, add=False):
    out = a.copy()
    key = (idx, np.arange(idx.shape[1])[None, :])
    part = s[:idx.shape[0], :idx.shape[1]]
    if add:
        np.add.at(out, key, part)
    else:
        out[key] = part
    return out

# The Tensor surface (issue 11): scans, norms, selections along a dim (values by gather: the gradient goes to the
# index returned), shape functions, einsum and the rounding divisions, each against torch's same call.
SURFACE_CASES = [
    _surface("cumsum", lambda t, a: a.cumsum(1), lambda a: np.cumsum(a, 1), [((3, 4),), ((2, 0),)]),
    _surface("cumsum_0d", lambda t, a: t.cumsum(a, dim=0), lambda a: a, [((),)], op="cumsum"),
    _surface("cumprod", lambda t, a: a.cumprod(-1), lambda a: np.cumprod(a, -1), [((3, 4),), ((2, 3, 2),)]),
    _surface("prod", lambda t, a: a.prod(1), lambda a: a.prod(1), [((3, 4),)], op="cumprod"),
    _surface("prod_all", lambda t, a: t.prod(a), np.prod, [((3, 4),), ((),)], op="cumprod"),
    _surface("prod_keepdim", lambda t, a: a.prod(0, keepdim=True), lambda a: a.prod(0, keepdims=True), [((3, 4),)],
             op="cumprod"),
    _surface("norm", lambda t, a: a.norm(), lambda a: np.sqrt((a * a).sum()), [((3, 4),)]),
    _surface("norm_p1", lambda t, a: a.norm(1, dim=1), lambda a: np.abs(a).sum(1), [((3, 4),)], op="norm",
             avoid=(0.0,)),
    _surface("norm_p3", lambda t, a: t.norm(a, 3, dim=(0, 2), keepdim=True),
             lambda a: (np.abs(a) ** 3).sum((0, 2), keepdims=True) ** (1 / 3), [((2, 3, 4),)], op="norm", avoid=(0.0,)),
    _surface("norm_inf", lambda t, a: a.norm(float("inf"), dim=-1), lambda a: np.abs(a).max(-1), [((3, 4),)],
             op="norm", avoid=(0.0,)),
    _surface("median", lambda t, a: a.median(), np.median, [((3, 5),)]),
    _surface("max_dim", lambda t, a: a.max(1).values, lambda a: a.max(1), [((3, 4),)], op="gather"),
    _surface("min_dim_keepdim", lambda t, a: t.min(a, 0, keepdim=True)[0], lambda a: a.min(0, keepdims=True),
             [((3, 4),)], op="gather"),
    _surface("median_dim", lambda t, a: a.median(-1).values, lambda a: np.median(a, -1), [((3, 5),)], op="gather"),
    _surface("kthvalue", lambda t, a: a.kthvalue(2, 0).values, lambda a: np.sort(a, 0)[1], [((3, 4),)], op="gather"),
    _surface("mode", lambda t, a: a.mode(1).values, lambda a: a.min(1), [((3, 4),)], op="gather"),
    _surface("sort", lambda t, a: a.sort(1, descending=True).values, lambda a: -np.sort(-a, 1),
             [((3, 4),), ((2, 3, 2),)], op="gather"),
    _surface("topk", lambda t, a: t.topk(a, 2).values, lambda a: -np.sort(-a, -1)[..., :2], [((3, 4),)], op="gather"),
    _surface("flip", lambda t, a: a.flip(0, 2), lambda a: a[::-1, :, ::-1], [((2, 3, 4),)], op="index"),
    _surface("roll", lambda t, a: a.roll(1, 1), lambda a: np.roll(a, 1, 1), [((3, 4),)], op="cat"),
    _surface("repeat", lambda t, a: a.repeat(2, 1, 3), lambda a: np.tile(a, (2, 1, 3)), [((3, 2),)], op="expand"),
    _surface("repeat_interleave", lambda t, a: a.repeat_interleave(2, dim=0), lambda a: np.repeat(a, 2, 0),
             [((3, 2),)], op="expand"),
    _surface("tril", lambda t, a: a.tril(), np.tril, [((4, 3),), ((2, 3, 3),)], op="where"),
    _surface("triu", lambda t, a: t.triu(a, 1), lambda a: np.triu(a, 1), [((3, 4),)], op="where"),
    _surface("diagonal", lambda t, a: a.diagonal(1, 0, 2), lambda a: np.diagonal(a, 1, 0, 2), [((3, 2, 4),)]),
    _surface("diag", lambda t, a: t.diag(a, -1), lambda a: np.diag(a, -1), [((3,),)], op="index_place"),
    _surface("trace", lambda t, a: a.trace(), np.trace, [((3, 4),)], op="diagonal"),
    _surface("split_chunk", lambda t, a: a.chunk(3, 1)[1] * a.split([1, 3], 1)[0], lambda a: a[:, 2:4] * a[:, :1],
             [((3, 4),)], op="mul"),  # split's pieces are the outputs of one node (ops.movement.Pieces), as torch's
    OpCase("index_select", lambda a: a.index_select(1, gpugrad.tensor(IDX)), lambda a: a[:, IDX], [((2, 3),)],
           op="index", torch_fn=lambda a: a.index_select(1, _t(_torch(), IDX))),
    _surface("scatter", lambda t, a, s: a.scatter(0, t.tensor(SCATTER_IDX), s), lambda a, s: _np_scatter(a, s),
             [((3, 4), (2, 4))]),  # NOTE: torch's backward fails for a src larger than index; gpugrad pads with 0
    _surface("scatter_add", lambda t, a, s: t.scatter_add(a, 0, t.tensor(GATHER_IDX), s),
             lambda a, s: _np_scatter(a, s, GATHER_IDX, True), [((3, 4), (3, 4))], op="scatter"),
    _surface("scatter_value", lambda t, a: a.scatter(1, t.tensor(SCATTER_IDX.T[:3, :2]), 2.5),
             lambda a: _np_scatter(a.T, np.full((2, 3), 2.5), SCATTER_IDX[:, :3]).T, [((3, 4),)], op="scatter"),
    _surface("index_add", lambda t, a, s: a.index_add(0, t.tensor(IDX), s, alpha=2.0),
             lambda a, s: _np_scatter(a, 2 * s, np.broadcast_to(IDX[:, None], s.shape), True), [((3, 4), (3, 4))],
             op="scatter"),
    _surface("nansum", lambda t, a: a.masked_fill(t.tensor(~MASK34), float("nan")).nansum(1),
             lambda a: np.where(MASK34, a, 0).sum(1), [((3, 4),)], op="where"),
    _surface("movedim", lambda t, a: t.movedim(a, 0, -1), lambda a: np.moveaxis(a, 0, -1), [((2, 3, 4),)],
             op="permute"),
    _surface("clamp_tensor", lambda t, a, lo, hi: a.clamp(lo, hi + 1.0),
             lambda a, lo, hi: np.minimum(np.maximum(a, lo), hi + 1.0), [((3, 4), (4,), (3, 1))], op="where"),
    _surface("einsum", lambda t, a, b: t.einsum("ij,jk->ik", a, b), np.matmul, [((3, 4), (4, 2))]),
    _surface("einsum_batch", lambda t, a, b: t.einsum("bij,bkj->bik", a, b),
             lambda a, b: np.einsum("bij,bkj->bik", a, b), [((2, 3, 4), (2, 5, 4))], op="einsum"),
    _surface("einsum_diag", lambda t, a: t.einsum("ii->i", a), np.diagonal, [((3, 3),)], op="einsum"),
    _surface("einsum_trace", lambda t, a: t.einsum("ii", a), np.trace, [((3, 3),)], op="einsum"),
    _surface("einsum_sum", lambda t, a: t.einsum("ij->", a), np.sum, [((3, 4),)], op="einsum"),
    _surface("einsum_ellipsis", lambda t, a, b: t.einsum("...ij,j", a, b), np.matmul, [((2, 3, 4), (4,))],
             op="einsum"),
    _surface("einsum_three", lambda t, a, b, c: t.einsum("ij,jk,kl->il", [a, b, c]),
             lambda a, b, c: a @ b @ c, [((2, 3), (3, 4), (4, 2))], op="einsum"),
    _surface("einsum_broadcast", lambda t, a, b: t.einsum("ij,ij->i", a, b), lambda a, b: (a * b).sum(-1),
             [((3, 1), (3, 4))], op="einsum"),
    _surface("mm", lambda t, a, b: t.mm(a, b), np.matmul, [((3, 4), (4, 2))], op="matmul"),
    _surface("bmm", lambda t, a, b: a.bmm(b), np.matmul, [((2, 3, 4), (2, 4, 5))], op="matmul"),
    _surface("outer", lambda t, a, b: t.outer(a, b), np.outer, [((3,), (4,))], op="mul"),
    _surface("floor_divide", lambda t, a: t.div(a, 0.5, rounding_mode="floor"), lambda a: np.floor_divide(a, 0.5),
             [((3, 4),)], op="rounding_div", avoid=HALVES),
    OpCase("floordiv_op", lambda a: a // 0.5, lambda a: np.floor_divide(a, 0.5), [((3, 4),)], op="rounding_div",
           avoid=HALVES),
    _surface("div_trunc", lambda t, a: a.div(0.5, rounding_mode="trunc"), lambda a: np.trunc(a / 0.5), [((3, 4),)],
             op="rounding_div", avoid=HALVES),
    # a / b stays in (-2, -1): no jump of floor or trunc near the samples
    _surface("remainder", lambda t, a, b: (a - 6.0) % (b + 6.1), lambda a, b: np.remainder(a - 6.0, b + 6.1),
             [((3, 4), (3, 4)), ((3, 4), (4,))], low=-2.0, high=-0.2),
    _surface("remainder_scalar", lambda t, a: a % 1.5, lambda a: np.remainder(a, 1.5), [((3, 4),)], op="remainder",
             avoid=(-1.5, 0.0, 1.5)),
    _surface("fmod", lambda t, a, b: t.fmod(a - 6.0, b + 6.1), lambda a, b: np.fmod(a - 6.0, b + 6.1),
             [((3, 4), (3, 4))], low=-2.0, high=-0.2),
]


# issue 20: products with scaling, pointwise combinations with options
API_CASES = [
    _surface("addmm", lambda t, c, a, b: t.addmm(c, a, b, beta=0.5, alpha=2.0), lambda c, a, b: 0.5 * c + 2 * a @ b,
             [((2, 4), (2, 3), (3, 4)), ((4,), (2, 3), (3, 4))]),
    _surface("addmm_default", lambda t, c, a, b: c.addmm(a, b), lambda c, a, b: c + a @ b, [((1, 4), (2, 3), (3, 4))],
             op="addmm"),
    _surface("addcmul", lambda t, a, b, c: t.addcmul(a, b, c, value=-0.5), lambda a, b, c: a - 0.5 * b * c,
             [((2, 3), (2, 3), (2, 3)), ((2, 1), (3,), (2, 3))]),
    _surface("addcdiv", lambda t, a, b, c: t.addcdiv(a, b, c, value=2.0), lambda a, b, c: a + 2 * b / c,
             [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), (3,))], low=0.5, high=2.0),
    _surface("lerp", lambda t, a, b: t.lerp(a, b, 0.3), lambda a, b: a + 0.3 * (b - a),
             [((2, 3), (2, 3)), ((2, 3), (3,))]),
    _surface("lerp_tensor", lambda t, a, b, w: a.lerp(b, w), lambda a, b, w: a + w * (b - a),
             [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), (2, 1))], op="lerp"),
    _surface("atan2", lambda t, a, b: t.atan2(a, b), np.arctan2, [((3, 4), (3, 4)), ((3, 4), (4,))], avoid=(0.0,)),
    # square matrices kept well conditioned: entries in [-1, 1] plus 4 (or -4) on the diagonal
    _surface("linalg_inv", lambda t, a: t.linalg.inv(_shifted(t, a)), lambda a: np.linalg.inv(_np_shifted(a)),
             [((3, 3),), ((2, 3, 3),)], low=-1.0, high=1.0),
    _surface("inverse", lambda t, a: _shifted(t, a, -4.0).inverse(), lambda a: np.linalg.inv(_np_shifted(a, -4.0)),
             [((2, 2),)], op="linalg_inv", low=-1.0, high=1.0),
    _surface("linalg_solve", lambda t, a, b: t.linalg.solve(_shifted(t, a), b),
             lambda a, b: _np_solve(_np_shifted(a), b),
             [((3, 3), (3, 2)), ((2, 3, 3), (3,)), ((2, 3, 3), (2, 3)), ((2, 1, 3, 3), (4, 3, 2))], low=-1.0, high=1.0),
    _surface("linalg_solve_left", lambda t, a, b: t.linalg.solve(_shifted(t, a), b, left=False),
             lambda a, b: np.swapaxes(_np_solve(np.swapaxes(_np_shifted(a), -1, -2), np.swapaxes(b, -1, -2)), -1, -2),
             [((3, 3), (2, 3))], op="linalg_solve", low=-1.0, high=1.0),
    _surface("linalg_det", lambda t, a: t.linalg.det(_shifted(t, a)), lambda a: np.linalg.det(_np_shifted(a)),
             [((3, 3),), ((2, 3, 3),)], low=-1.0, high=1.0),
    _surface("det_unshifted", lambda t, a: a.det(), np.linalg.det, [((3, 3),), ((2, 2, 2),)], op="linalg_det"),
    _surface("linalg_slogdet", lambda t, a: t.linalg.slogdet(_shifted(t, a, -4.0)).logabsdet,
             lambda a: np.linalg.slogdet(_np_shifted(a, -4.0))[1], [((3, 3),), ((2, 3, 3),)], low=-1.0, high=1.0),
    _surface("logdet", lambda t, a: t.logdet(_shifted(t, a)), lambda a: np.log(np.linalg.det(_np_shifted(a))),
             [((2, 3, 3),)], op="linalg_slogdet", low=-1.0, high=1.0),
    _surface("matrix_norm_1", lambda t, a: t.linalg.matrix_norm(a, 1), lambda a: np.abs(a).sum(-2).max(-1),
             [((3, 4),), ((2, 3, 4),)], op="max", avoid=(0.0,)),
    _surface("matrix_norm_inf", lambda t, a: t.linalg.matrix_norm(a, float("-inf"), dim=(0, 2), keepdim=True),
             lambda a: np.abs(a).sum(2, keepdims=True).min(0, keepdims=True), [((3, 2, 4),)], op="min", avoid=(0.0,)),
    _surface("matrix_norm_fro", lambda t, a: t.linalg.norm(a, dim=(0, 1)), lambda a: np.sqrt((a * a).sum((0, 1))),
             [((3, 4, 2),)], op="norm"),
]


def _shifted(lib, a, by=4.0):
    return a + by * lib.eye(a.shape[-1], dtype=a.dtype)


def _np_shifted(a, by=4.0):
    return a + by * np.eye(a.shape[-1])


def _np_solve(a, b):
    """A⁻¹ B with torch's rule for B: a batch of vectors when 1-D or of A's shape without its last dim."""
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    rhs = b[..., None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    x = np.linalg.solve(np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(rhs, batch + rhs.shape[-2:]))
    return x[..., 0] if vector else x


CASES = [
    # arithmetic, with broadcasting, scalars, empty and 0-d shapes
    OpCase("add", lambda a, b: a + b, np.add, [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (2, 3)), ((0, 4), (4,))],
           torch_fn=lambda a, b: a + b),
    OpCase("add_scalar", lambda a: 2.5 + a, lambda a: 2.5 + a, [((3, 4),)], op="add", torch_fn=lambda a: 2.5 + a),
    OpCase("sub", lambda a, b: a - b, np.subtract, [((3, 4), (4,)), ((2, 1, 3), (4, 1))], torch_fn=lambda a, b: a - b),
    OpCase("rsub", lambda a: 1.0 - a, lambda a: 1.0 - a, [((5,),)], op="sub", torch_fn=lambda a: 1.0 - a),
    OpCase("mul", lambda a, b: a * b, np.multiply, [((3, 4), (3, 4)), ((3, 4), ()), ((2, 3, 1), (3, 5))],
           torch_fn=lambda a, b: a * b),
    OpCase("div", lambda a, b: a / b, np.divide, [((3, 4), (3, 4)), ((4,), (3, 1))], low=0.5, high=2.0,
           torch_fn=lambda a, b: a / b),
    OpCase("rdiv", lambda a: 3.0 / a, lambda a: 3.0 / a, [((2, 3),)], op="reciprocal", low=0.5, torch_fn=lambda a: 3.0 / a),
    OpCase("neg", lambda a: -a, np.negative, [((3, 4),), ((),)], torch_fn=lambda a: -a),
    OpCase("pow", lambda a, b: a ** b, np.power, [((3, 4), (3, 4)), ((3, 4), ())], low=0.5, high=2.0,
           torch_fn=lambda a, b: a ** b),
    OpCase("pow_scalar", lambda a: a ** 3, lambda a: a ** 3, [((3, 4),)], op="pow", torch_fn=lambda a: a ** 3),
    OpCase("maximum", lambda a, b: a.maximum(b), np.maximum, [((3, 4), (3, 4)), ((3, 4), (4,))],
           torch_fn=lambda a, b: a.maximum(b)),
    OpCase("minimum", lambda a, b: a.minimum(b), np.minimum, [((3, 4), (3, 4))], torch_fn=lambda a, b: a.minimum(b)),
    OpCase("where", lambda a, b: gpugrad.where(gpugrad.tensor(MASK34), a, b), lambda a, b: np.where(MASK34, a, b),
           [((3, 4), (3, 4)), ((3, 4), (4,))], torch_fn=lambda a, b: _torch().where(_torch().tensor(MASK34), a, b)),
    OpCase("abs", lambda a: a.abs(), np.abs, [((3, 4),)], avoid=(0.0,), torch_fn=lambda a: a.abs()),
    OpCase("clamp", lambda a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), [((3, 4),)], avoid=(-0.5, 0.7),
           torch_fn=lambda a: a.clamp(-0.5, 0.7)),
    *POINTWISE_CASES,
    OpCase("bias_act", lambda x, b: F.bias_act(x, b, "relu"), lambda x, b: np.maximum(x + b, 0), [((5, 4), (4,))],
           avoid=(0.0,), gpu_kernels=("bias_act_fwd", "bias_act_bwd"), torch_fn=lambda x, b: (x + b).relu()),
    *BIAS_ACT_CASES,
    OpCase("dropout", lambda x: Dropout.apply(x, p=0.3, u=x._backend.asarray(U34, x.dtype)),
           lambda x: x * (U34 >= 0.3) / 0.7, [((3, 4),)], gpu_kernels=("dropout_fwd", "dropout_bwd"),
           torch_fn=lambda x: x * _torch().tensor(U34 >= 0.3) / 0.7),  # torch's dropout with the same mask
    OpCase("dropout_ties", lambda x: Dropout.apply(x, p=0.3, u=x._backend.asarray(U34_TIES, x.dtype)),
           lambda x: x * (U34_TIES >= 0.3) / 0.7, [((3, 4),)], op="dropout",
           torch_fn=lambda x: x * _torch().tensor(U34_TIES >= 0.3) / 0.7),
    OpCase("dropout_p0", lambda x: Dropout.apply(x, p=0.0, u=x._backend.asarray(U34 * 0, x.dtype)), lambda x: x,
           [((3, 4),)], op="dropout", torch_fn=lambda x: _torch_nn_f().dropout(x, 0.0)),
    # reductions
    OpCase("sum", lambda a: a.sum(), np.sum, [((3, 4),), ((),), ((0, 3),)], torch_fn=lambda a: a.sum()),
    OpCase("sum_axis", lambda a: a.sum(axis=1), lambda a: a.sum(axis=1), [((3, 4, 2),)], op="sum",
           torch_fn=lambda a: a.sum(1)),
    OpCase("sum_keepdims", lambda a: a.sum(axis=(0, 2), keepdims=True), lambda a: a.sum(axis=(0, 2), keepdims=True),
           [((3, 4, 2),)], op="sum", torch_fn=lambda a: a.sum((0, 2), keepdim=True)),
    OpCase("mean", lambda a: a.mean(), np.mean, [((3, 4),)], torch_fn=lambda a: a.mean()),
    OpCase("mean_axis", lambda a: a.mean(axis=-1, keepdims=True), lambda a: a.mean(-1, keepdims=True),
           [((3, 4),)], op="mean", torch_fn=lambda a: a.mean(-1, keepdim=True)),
    OpCase("max", lambda a: a.max(), np.max, [((3, 4),)], torch_fn=lambda a: a.max()),
    OpCase("max_axis", lambda a: a.amax(axis=0), lambda a: a.max(0), [((3, 4),)], op="max",
           torch_fn=lambda a: a.amax(0)),
    # every value near -1000: a max starting at 0 (not -inf) gives 0 here
    OpCase("max_shifted", lambda a: a.amax(axis=-1), lambda a: a.max(-1), [((3, 5),), ((4,),)], op="max",
           low=-1.5, high=1.5, shift=-1000.0, torch_fn=lambda a: a.amax(-1)),
    OpCase("min", lambda a: a.amin(axis=1, keepdims=True), lambda a: a.min(1, keepdims=True), [((3, 4),)],
           torch_fn=lambda a: a.amin(1, keepdim=True)),
    OpCase("var", lambda a: a.var(axis=1), lambda a: a.var(1, ddof=1), [((3, 5),)], torch_fn=lambda a: a.var(1)),
    OpCase("var_all", lambda a: a.var(correction=0), lambda a: a.var(), [((3, 5),)], op="var",
           torch_fn=lambda a: a.var(correction=0)),
    OpCase("std", lambda a: a.std(axis=1), lambda a: a.std(1, ddof=1), [((3, 5),)], torch_fn=lambda a: a.std(1)),
    OpCase("std_all", lambda a: a.std(correction=0), lambda a: a.std(), [((3, 5),)], op="std",
           torch_fn=lambda a: a.std(correction=0)),
    *SURFACE_CASES,
    *API_CASES,
    # movement
    OpCase("reshape", lambda a: a.reshape(4, 3), lambda a: a.reshape(4, 3), [((3, 4),)],
           torch_fn=lambda a: a.reshape(4, 3)),
    OpCase("permute", lambda a: a.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1), [((2, 3, 4),)],
           torch_fn=lambda a: a.permute(2, 0, 1)),
    OpCase("transpose_T", lambda a: a.T, lambda a: a.T, [((3, 4),)], op="permute", torch_fn=lambda a: a.T),
    OpCase("expand", lambda a: a.expand(2, 3, 4), lambda a: np.broadcast_to(a, (2, 3, 4)), [((3, 1),)],
           torch_fn=lambda a: a.expand(2, 3, 4)),
    OpCase("squeeze", lambda a: a.squeeze(1), lambda a: a.squeeze(1), [((3, 1, 4),)], torch_fn=lambda a: a.squeeze(1)),
    OpCase("unsqueeze", lambda a: a.unsqueeze(0), lambda a: a[None], [((3, 4),)], torch_fn=lambda a: a.unsqueeze(0)),
    OpCase("index_slice", lambda a: a[1:, ::2], lambda a: a[1:, ::2], [((3, 4),)], op="index",
           torch_fn=lambda a: a[1:, ::2]),
    OpCase("index_repeat", lambda a: a[gpugrad.tensor(IDX)], lambda a: a[IDX], [((3, 4),)], op="index",
           torch_fn=lambda a: a[_t(__import__("torch"), IDX)]),
    OpCase("index_mask", lambda a: a[gpugrad.tensor(MASK34)], lambda a: a[MASK34], [((3, 4),)], op="index",
           torch_fn=lambda a: a[_torch().tensor(MASK34)]),
    OpCase("cat", lambda a, b: gpugrad.cat([a, b], axis=1), lambda a, b: np.concatenate([a, b], 1),
           [((3, 2), (3, 4))], torch_fn=lambda a, b: __import__("torch").cat([a, b], 1)),
    OpCase("stack", lambda a, b: gpugrad.stack([a, b], axis=1), lambda a, b: np.stack([a, b], 1),
           [((3, 4), (3, 4))], torch_fn=lambda a, b: __import__("torch").stack([a, b], 1)),
    OpCase("gather", lambda a: a.gather(0, gpugrad.tensor(GATHER_IDX)),
           lambda a: np.take_along_axis(a, GATHER_IDX, 0), [((3, 4),)],
           torch_fn=lambda a: a.gather(0, _t(__import__("torch"), GATHER_IDX))),
    OpCase("clone", lambda a: a.clone(), np.copy, [((3, 4),)], torch_fn=lambda a: a.clone()),
    OpCase("cast", lambda a: a.to(dtype=np.float32) * 1.0, lambda a: a.astype(np.float32), [((3, 4),)],
           rtol32=1e-6, torch_fn=lambda a: a.to(dtype=_torch().float32) * 1.0),
    # CPU -> CPU exercises the op itself here; test_parity moves between CPU and CUDA when a GPU exists.
    OpCase("to_device", lambda a: ToDevice.apply(a * 1.0, source=a._backend, target=a._backend), lambda a: a, [((3,),)],
           torch_fn=lambda a: (a * 1.0).to("cpu")),
    # a basic key: copy_ into the view out[1] (CopySlices over Overwrite); an index tensor: IndexPlace
    OpCase("setitem", lambda a, v: _setitem(a, v), lambda a, v: _np_setitem(a, v), [((3, 4), (4,))],
           op="copy_slices", torch_fn=lambda a, v: _setitem(a, v)),
    OpCase("index_put", lambda a, v: _setitem(a, v, gpugrad.tensor(IDX[:2])),
           lambda a, v: _np_setitem(a, v, IDX[:2]), [((3, 4), (4,))], op="index_place",
           torch_fn=lambda a, v: _setitem(a, v, _t(_torch(), IDX[:2]))),
    OpCase("copy_slices", lambda a, v: _add_into_row(a, v), lambda a, v: a + np.eye(3)[1][:, None] * v,
           [((3, 4), (4,))], torch_fn=lambda a, v: _add_into_row(a, v)),
    OpCase("as_view", lambda a, v: _stale_view(a, v), lambda a, v: (a * v)[0:2] + 0.0, [((3, 4), (3, 4))],
           torch_fn=lambda a, v: _stale_view(a, v)),
    OpCase("overwrite", lambda a, v: _copy_into(a, v), lambda a, v: v * a, [((3, 4), (4,))],
           torch_fn=lambda a, v: _copy_into(a, v)),
    # matmul family
    OpCase("matmul", lambda a, b: a @ b, np.matmul, [((3, 4), (4, 5)), ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)),
                                                    ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2))],
           torch_fn=lambda a, b: a @ b),
    OpCase("linear", lambda x, w, b: F.linear(x, w, b), lambda x, w, b: x @ w.T + b,
           [((5, 3), (4, 3), (4,)), ((2, 5, 3), (4, 3), (4,))],
           torch_fn=lambda x, w, b: __import__("torch").nn.functional.linear(x, w, b), gpu_kernels=("sum_rows",)),
    OpCase("linear_nobias", lambda x, w: F.linear(x, w), lambda x, w: x @ w.T, [((5, 3), (4, 3))], op="linear",
           torch_fn=lambda x, w: _torch_nn_f().linear(x, w)),
    # softmax family and losses (kernels on CUDA)
    OpCase("softmax", lambda a: a.softmax(-1), np_softmax, [((3, 5),), ((2, 3, 7),)],
           torch_fn=lambda a: a.softmax(-1), gpu_kernels=("softmax_fwd", "softmax_bwd")),
    OpCase("softmax_axis0", lambda a: a.softmax(0), lambda a: np_softmax(a, 0), [((4, 3),)], op="softmax",
           torch_fn=lambda a: a.softmax(0)),
    # rows near -1000: a max shift that starts at 0 instead of -inf gives exp(x - 0) = 0, then 0 / 0 and log(0)
    OpCase("softmax_shifted", lambda a: a.softmax(-1), np_softmax, [((3, 5),), ((2, 33),)], op="softmax",
           low=-1.5, high=1.5, shift=-1000.0, torch_fn=lambda a: a.softmax(-1)),
    OpCase("log_softmax", lambda a: a.log_softmax(-1), lambda a: np.log(np_softmax(a)), [((3, 5),)],
           torch_fn=lambda a: a.log_softmax(-1), gpu_kernels=("log_softmax_fwd", "log_softmax_bwd")),
    OpCase("logsumexp", lambda a: a.logsumexp(-1), np_logsumexp, [((3, 5),), ((2, 3, 4),)],
           torch_fn=lambda a: a.logsumexp(-1), gpu_kernels=("logsumexp_fwd", "logsumexp_bwd")),
    OpCase("logsumexp_keep", lambda a: a.logsumexp(0, keepdims=True), lambda a: np_logsumexp(a, 0, True),
           [((3, 5),)], op="logsumexp", torch_fn=lambda a: a.logsumexp(0, keepdim=True)),
    OpCase("logsumexp_shifted", lambda a: a.logsumexp(-1), np_logsumexp, [((3, 5),), ((2, 33),)], op="logsumexp",
           low=-1.5, high=1.5, shift=-1000.0, torch_fn=lambda a: a.logsumexp(-1)),
    OpCase("cross_entropy", lambda x: F.cross_entropy(x, gpugrad.tensor(T4)), lambda x: np_xent(x, T4).mean(),
           [((4, 5),)], torch_fn=lambda x: __import__("torch").nn.functional.cross_entropy(x, _t(__import__("torch"), T4)),
           gpu_kernels=("softmax_xent_fwd", "softmax_xent_bwd")),
    OpCase("cross_entropy_sum", lambda x: F.cross_entropy(x, gpugrad.tensor(T4), reduction="sum"),
           lambda x: np_xent(x, T4).sum(), [((4, 5),)], op="cross_entropy",
           torch_fn=lambda x: _torch_nn_f().cross_entropy(x, _t(_torch(), T4), reduction="sum")),
    OpCase("cross_entropy_none", lambda x: F.cross_entropy(x, gpugrad.tensor(T4), reduction="none"),
           lambda x: np_xent(x, T4), [((4, 5),)], op="cross_entropy",
           torch_fn=lambda x: _torch_nn_f().cross_entropy(x, _t(_torch(), T4), reduction="none")),
    *NN_CASES,
    OpCase("layer_norm", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5),
           lambda x, w, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b,
           [((4, 6), (6,), (6,)), ((2, 3, 5), (5,), (5,))], gpu_kernels=("layer_norm_fwd", "layer_norm_bwd"),
           torch_fn=lambda x, w, b: __import__("torch").nn.functional.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)),
    OpCase("layer_norm_bias_only", lambda x, b: F.layer_norm(x, x.shape[-1:], None, b),
           lambda x, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) + b,
           [((3, 5), (5,))], op="layer_norm",
           torch_fn=lambda x, b: _torch_nn_f().layer_norm(x, x.shape[-1:], None, b)),
    OpCase("embedding", lambda w: F.embedding(gpugrad.tensor(EMB_IDS), w), lambda w: w[EMB_IDS], [((5, 3),)],
           torch_fn=lambda w: __import__("torch").nn.functional.embedding(_t(__import__("torch"), EMB_IDS), w)),
    OpCase("token_logprob", lambda x: F.token_logprob(x, gpugrad.tensor(T4)), lambda x: -np_xent(x, T4), [((4, 5),)],
           gpu_kernels=("token_logprob_fwd", "token_logprob_bwd"),  # torch has no fused op: -cross_entropy per row
           torch_fn=lambda x: -_torch_nn_f().cross_entropy(x, _t(_torch(), T4), reduction="none")),
]


def _setitem(a, v, key=1):
    out = a * 1.0
    out[key] = v
    return out


def _add_into_row(a, v):
    y = a * 1.0
    y[1].add_(v)  # in place on a view: the base records CopySlices
    return y


def _stale_view(a, v):
    y = a * 1.0
    head = y[0:2]
    y.mul_(v)  # the base changes in place after the view was taken: the view's graph is re-derived
    return head + 0.0


def _copy_into(a, v):
    y = a * 1.0
    y.copy_(v)  # a graph tensor overwritten: zeros to a's old values, gy to v (torch's CopyBackwards)
    return y * a


def _np_setitem(a, v, key=1):
    out = a.copy()
    out[key] = v
    return out


def case_inputs(case, shapes, dtype=np.float64, seed=0, layout="contiguous"):
    """float arrays for one shape combination; ``strided`` gives non-contiguous views of the same values."""
    rng = np.random.default_rng(seed)
    arrays = [case.sample(rng, s, dtype) for s in shapes]
    if layout == "strided":
        arrays = [_strided(a) for a in arrays]
    return arrays


def _strided(a):
    if a.ndim == 0 or a.size == 0:
        return a
    wide = np.zeros(a.shape[:-1] + (a.shape[-1] * 2,), dtype=a.dtype)
    wide[..., ::2] = a
    view = wide[..., ::2]
    assert not view.flags.c_contiguous or a.shape[-1] <= 1
    return view
