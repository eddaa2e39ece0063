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
from gpugrad.ops.declarations import ACTIVATIONS, POINTWISE
from gpugrad.ops.convert import ToDevice


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
        return getattr(torch.nn.functional if d.functional and not d.top else torch, d.name)(a, *params)
    return run


def _pointwise_rows():
    rows = []
    for d in POINTWISE.values():
        for params in (d.defaults,) + ((NON_DEFAULT[d.name],) if d.name in NON_DEFAULT else ()):
            kinks = PARAM_KINKS[d.name](*params) if d.name in PARAM_KINKS else d.kinks
            ref = (lambda x, d=d, p=params: (getattr(R, f"{d.name}_fwd")(np, x, *p)) if d.kernel else d.f(np, x, *p))
            rows.append(OpCase(d.name if params == d.defaults else f"{d.name}{params}",
                               lambda a, d=d, p=params: getattr(a, d.name)(*p), ref,
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
                           op="bias_act", low=d.low / 2, high=d.high / 2, avoid=d.kinks))
    return rows


POINTWISE_CASES, BIAS_ACT_CASES = _pointwise_rows(), _bias_act_rows()


def _t(torch, a):
    return torch.as_tensor(a)


CASES = [
    # arithmetic, with broadcasting, scalars, empty and 0-d shapes
    OpCase("add", lambda a, b: a + b, np.add, [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (2, 3)), ((0, 4), (4,))],
           torch_fn=lambda a, b: a + b),
    OpCase("add_scalar", lambda a: 2.5 + a, lambda a: 2.5 + a, [((3, 4),)], op="add"),
    OpCase("sub", lambda a, b: a - b, np.subtract, [((3, 4), (4,)), ((2, 1, 3), (4, 1))], torch_fn=lambda a, b: a - b),
    OpCase("rsub", lambda a: 1.0 - a, lambda a: 1.0 - a, [((5,),)], op="sub"),
    OpCase("mul", lambda a, b: a * b, np.multiply, [((3, 4), (3, 4)), ((3, 4), ()), ((2, 3, 1), (3, 5))],
           torch_fn=lambda a, b: a * b),
    OpCase("div", lambda a, b: a / b, np.divide, [((3, 4), (3, 4)), ((4,), (3, 1))], low=0.5, high=2.0,
           torch_fn=lambda a, b: a / b),
    OpCase("rdiv", lambda a: 3.0 / a, lambda a: 3.0 / a, [((2, 3),)], op="div", low=0.5),
    OpCase("neg", lambda a: -a, np.negative, [((3, 4),), ((),)], torch_fn=lambda a: -a),
    OpCase("pow", lambda a, b: a ** b, np.power, [((3, 4), (3, 4)), ((3, 4), ())], low=0.5, high=2.0,
           torch_fn=lambda a, b: a ** b),
    OpCase("pow_scalar", lambda a: a ** 3, lambda a: a ** 3, [((3, 4),)], op="pow", torch_fn=lambda a: a ** 3),
    OpCase("maximum", lambda a, b: a.maximum(b), np.maximum, [((3, 4), (3, 4)), ((3, 4), (4,))],
           torch_fn=lambda a, b: a.maximum(b)),
    OpCase("minimum", lambda a, b: a.minimum(b), np.minimum, [((3, 4), (3, 4))], torch_fn=lambda a, b: a.minimum(b)),
    OpCase("where", lambda a, b: gpugrad.where(gpugrad.tensor(MASK34), a, b), lambda a, b: np.where(MASK34, a, b),
           [((3, 4), (3, 4)), ((3, 4), (4,))]),
    OpCase("abs", lambda a: a.abs(), np.abs, [((3, 4),)], avoid=(0.0,), torch_fn=lambda a: a.abs()),
    OpCase("clamp", lambda a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), [((3, 4),)], avoid=(-0.5, 0.7),
           torch_fn=lambda a: a.clamp(-0.5, 0.7)),
    *POINTWISE_CASES,
    OpCase("bias_act", lambda x, b: F.bias_act(x, b, "relu"), lambda x, b: np.maximum(x + b, 0), [((5, 4), (4,))],
           avoid=(0.0,), gpu_kernels=("bias_act_fwd", "bias_act_bwd")),
    *BIAS_ACT_CASES,
    OpCase("dropout", lambda x: Dropout.apply(x, p=0.3, u=x._backend.asarray(U34, x.dtype)),
           lambda x: x * (U34 >= 0.3) / 0.7, [((3, 4),)], gpu_kernels=("dropout_fwd", "dropout_bwd")),
    OpCase("dropout_ties", lambda x: Dropout.apply(x, p=0.3, u=x._backend.asarray(U34_TIES, x.dtype)),
           lambda x: x * (U34_TIES >= 0.3) / 0.7, [((3, 4),)], op="dropout"),
    OpCase("dropout_p0", lambda x: Dropout.apply(x, p=0.0, u=x._backend.asarray(U34 * 0, x.dtype)), lambda x: x,
           [((3, 4),)], op="dropout"),
    # reductions
    OpCase("sum", lambda a: a.sum(), np.sum, [((3, 4),), ((),), ((0, 3),)], torch_fn=lambda a: a.sum()),
    OpCase("sum_axis", lambda a: a.sum(axis=1), lambda a: a.sum(axis=1), [((3, 4, 2),)], op="sum",
           torch_fn=lambda a: a.sum(1)),
    OpCase("sum_keepdims", lambda a: a.sum(axis=(0, 2), keepdims=True), lambda a: a.sum(axis=(0, 2), keepdims=True),
           [((3, 4, 2),)], op="sum"),
    OpCase("mean", lambda a: a.mean(), np.mean, [((3, 4),)], torch_fn=lambda a: a.mean()),
    OpCase("mean_axis", lambda a: a.mean(axis=-1, keepdims=True), lambda a: a.mean(-1, keepdims=True),
           [((3, 4),)], op="mean"),
    OpCase("max", lambda a: a.max(), np.max, [((3, 4),)], torch_fn=lambda a: a.max()),
    OpCase("max_axis", lambda a: a.max(axis=0), lambda a: a.max(0), [((3, 4),)], op="max",
           torch_fn=lambda a: a.amax(0)),
    # every value near -1000: a max starting at 0 (not -inf) gives 0 here
    OpCase("max_shifted", lambda a: a.max(axis=-1), lambda a: a.max(-1), [((3, 5),), ((4,),)], op="max",
           low=-1.5, high=1.5, shift=-1000.0, torch_fn=lambda a: a.amax(-1)),
    OpCase("min", lambda a: a.min(axis=1, keepdims=True), lambda a: a.min(1, keepdims=True), [((3, 4),)],
           torch_fn=lambda a: a.amin(1, keepdim=True)),
    OpCase("var", lambda a: a.var(axis=1), lambda a: a.var(1, ddof=1), [((3, 5),)], torch_fn=lambda a: a.var(1)),
    OpCase("var_all", lambda a: a.var(correction=0), lambda a: a.var(), [((3, 5),)], op="var"),
    OpCase("std", lambda a: a.std(axis=1), lambda a: a.std(1, ddof=1), [((3, 5),)], torch_fn=lambda a: a.std(1)),
    OpCase("std_all", lambda a: a.std(correction=0), lambda a: a.std(), [((3, 5),)], op="std"),
    # movement
    OpCase("reshape", lambda a: a.reshape(4, 3), lambda a: a.reshape(4, 3), [((3, 4),)],
           torch_fn=lambda a: a.reshape(4, 3)),
    OpCase("permute", lambda a: a.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1), [((2, 3, 4),)],
           torch_fn=lambda a: a.permute(2, 0, 1)),
    OpCase("transpose_T", lambda a: a.T, lambda a: a.T, [((3, 4),)], op="permute"),
    OpCase("expand", lambda a: a.expand(2, 3, 4), lambda a: np.broadcast_to(a, (2, 3, 4)), [((3, 1),)],
           torch_fn=lambda a: a.expand(2, 3, 4)),
    OpCase("squeeze", lambda a: a.squeeze(1), lambda a: a.squeeze(1), [((3, 1, 4),)], torch_fn=lambda a: a.squeeze(1)),
    OpCase("unsqueeze", lambda a: a.unsqueeze(0), lambda a: a[None], [((3, 4),)], torch_fn=lambda a: a.unsqueeze(0)),
    OpCase("index_slice", lambda a: a[1:, ::2], lambda a: a[1:, ::2], [((3, 4),)], op="index",
           torch_fn=lambda a: a[1:, ::2]),
    OpCase("index_repeat", lambda a: a[gpugrad.tensor(IDX)], lambda a: a[IDX], [((3, 4),)], op="index",
           torch_fn=lambda a: a[_t(__import__("torch"), IDX)]),
    OpCase("index_mask", lambda a: a[gpugrad.tensor(MASK34)], lambda a: a[MASK34], [((3, 4),)], op="index"),
    OpCase("cat", lambda a, b: gpugrad.cat([a, b], axis=1), lambda a, b: np.concatenate([a, b], 1),
           [((3, 2), (3, 4))], torch_fn=lambda a, b: __import__("torch").cat([a, b], 1)),
    OpCase("stack", lambda a, b: gpugrad.stack([a, b], axis=1), lambda a, b: np.stack([a, b], 1),
           [((3, 4), (3, 4))], torch_fn=lambda a, b: __import__("torch").stack([a, b], 1)),
    OpCase("gather", lambda a: a.gather(0, gpugrad.tensor(GATHER_IDX)),
           lambda a: np.take_along_axis(a, GATHER_IDX, 0), [((3, 4),)],
           torch_fn=lambda a: a.gather(0, _t(__import__("torch"), GATHER_IDX))),
    OpCase("clone", lambda a: a.clone(), np.copy, [((3, 4),)]),
    OpCase("cast", lambda a: a.to(dtype=np.float32) * 1.0, lambda a: a.astype(np.float32), [((3, 4),)],
           rtol32=1e-6),
    # CPU -> CPU exercises the op itself here; test_parity moves between CPU and CUDA when a GPU exists.
    OpCase("to_device", lambda a: ToDevice.apply(a * 1.0, source=a._backend, target=a._backend), lambda a: a, [((3,),)]),
    OpCase("index_place", lambda a, v: _setitem(a, v), lambda a, v: _np_setitem(a, v), [((3, 4), (4,))]),
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
    OpCase("linear_nobias", lambda x, w: F.linear(x, w), lambda x, w: x @ w.T, [((5, 3), (4, 3))], op="linear"),
    # softmax family and losses (kernels on CUDA)
    OpCase("softmax", lambda a: a.softmax(-1), np_softmax, [((3, 5),), ((2, 3, 7),)],
           torch_fn=lambda a: a.softmax(-1), gpu_kernels=("softmax_fwd", "softmax_bwd")),
    OpCase("softmax_axis0", lambda a: a.softmax(0), lambda a: np_softmax(a, 0), [((4, 3),)], op="softmax"),
    # rows near -1000: a max shift that starts at 0 instead of -inf gives exp(x - 0) = 0, then 0 / 0 and log(0)
    OpCase("softmax_shifted", lambda a: a.softmax(-1), np_softmax, [((3, 5),), ((2, 33),)], op="softmax",
           low=-1.5, high=1.5, shift=-1000.0, torch_fn=lambda a: a.softmax(-1)),
    OpCase("log_softmax", lambda a: a.log_softmax(-1), lambda a: np.log(np_softmax(a)), [((3, 5),)],
           torch_fn=lambda a: a.log_softmax(-1), gpu_kernels=("log_softmax_fwd", "log_softmax_bwd")),
    OpCase("logsumexp", lambda a: a.logsumexp(-1), np_logsumexp, [((3, 5),), ((2, 3, 4),)],
           torch_fn=lambda a: a.logsumexp(-1), gpu_kernels=("logsumexp_fwd", "logsumexp_bwd")),
    OpCase("logsumexp_keep", lambda a: a.logsumexp(0, keepdims=True), lambda a: np_logsumexp(a, 0, True),
           [((3, 5),)], op="logsumexp"),
    OpCase("logsumexp_shifted", lambda a: a.logsumexp(-1), np_logsumexp, [((3, 5),), ((2, 33),)], op="logsumexp",
           low=-1.5, high=1.5, shift=-1000.0, torch_fn=lambda a: a.logsumexp(-1)),
    OpCase("cross_entropy", lambda x: F.cross_entropy(x, gpugrad.tensor(T4)), lambda x: np_xent(x, T4).mean(),
           [((4, 5),)], torch_fn=lambda x: __import__("torch").nn.functional.cross_entropy(x, _t(__import__("torch"), T4)),
           gpu_kernels=("softmax_xent_fwd", "softmax_xent_bwd")),
    OpCase("cross_entropy_sum", lambda x: F.cross_entropy(x, gpugrad.tensor(T4), reduction="sum"),
           lambda x: np_xent(x, T4).sum(), [((4, 5),)], op="cross_entropy"),
    OpCase("cross_entropy_none", lambda x: F.cross_entropy(x, gpugrad.tensor(T4), reduction="none"),
           lambda x: np_xent(x, T4), [((4, 5),)], op="cross_entropy"),
    OpCase("layer_norm", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5),
           lambda x, w, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b,
           [((4, 6), (6,), (6,)), ((2, 3, 5), (5,), (5,))], gpu_kernels=("layer_norm_fwd", "layer_norm_bwd"),
           torch_fn=lambda x, w, b: __import__("torch").nn.functional.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)),
    OpCase("layer_norm_bias_only", lambda x, b: F.layer_norm(x, x.shape[-1:], None, b),
           lambda x, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) + b,
           [((3, 5), (5,))], op="layer_norm"),
    OpCase("embedding", lambda w: F.embedding(gpugrad.tensor(EMB_IDS), w), lambda w: w[EMB_IDS], [((5, 3),)],
           torch_fn=lambda w: __import__("torch").nn.functional.embedding(_t(__import__("torch"), EMB_IDS), w)),
    OpCase("token_logprob", lambda x: F.token_logprob(x, gpugrad.tensor(T4)), lambda x: -np_xent(x, T4), [((4, 5),)],
           gpu_kernels=("token_logprob_fwd", "token_logprob_bwd")),
]


def _setitem(a, v):
    out = a * 1.0
    out[1] = v
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


def _np_setitem(a, v):
    out = a.copy()
    out[1] = v
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
