"""Batching rules: each op over a whole batch at once, given its call (``dispatch.Call``) with k leading batch dims.

Most ops get theirs from what they already declare:

- pointwise and elementwise ops (``elementwise``, the ``ops/declarations.py`` rows, linear ops whose forward-mode JVP
  takes a leading batch axis as it is: add, where, cast, ...) broadcast: a batched input's sample dims are padded to
  the call's sample rank, so the batch dims lead and plain inputs broadcast against the samples as before;
- linear ops that declare ``jvp_batched`` (their JVP for B tangents at once, i.e. themselves on a leading batch axis)
  run it on the batch, after one sample's forward has worked out their axes and shapes.

Ops with axis or shape parameters give theirs below (``@rule``): reductions, softmax and scans shift their axes by
k, movement ops prepend the batch to their shapes and keys, matmul and einsum treat the batch as broadcast dims,
losses reduce each sample's rows. ``batched_params`` names the keyword parameters a rule can take batched (arrays a
frontend read from a batched tensor); an op called with any other batched parameter runs once per sample.
"""
from __future__ import annotations

import math
import string

import numpy as np

from gpugrad.core.args import basic_key, canonical_axis
from gpugrad.core.op import Op, Transposed
from gpugrad.core.registry import REGISTRY
from gpugrad.core.tensor import TensorBase, make
from gpugrad.func.batched import SampleArray, padded
from gpugrad.ops.activation import PointwiseOp
from gpugrad.ops.declarations import POINTWISE

RULES: dict = {}
_CACHE: dict = {}
# keyword parameters of broadcasting ops that broadcast with their inputs (and may be batched)
ELEMENTWISE_PARAMS = {"where": ("cond",), "binary_cross_entropy": ("weight",), "mse_loss": ("weight",),
                      "binary_cross_entropy_with_logits": ("weight", "pos_weight"), "smooth_l1_loss": ("weight",),
                      "huber_loss": ("weight",)}


def rule(*names, params=()):
    """Register a batching rule for the ops ``names`` (registry names, or op classes)."""
    def deco(fn):
        fn.batched_params = params
        for n in names:
            RULES[n] = fn
        return fn

    return deco


def rule_for(cls):
    """The batching rule of op class ``cls``, or None (the op then runs once per sample)."""
    if cls not in _CACHE:
        found = RULES.get(cls.op_name) or RULES.get(cls)
        if found is None and (cls.elementwise or issubclass(cls, PointwiseOp) or cls.linear and cls.batched_jvp):
            found = broadcast
        elif found is None and cls.linear and cls.jvp_batched is not Op.jvp_batched:
            found = linear_batched
        _CACHE[cls] = found
    return _CACHE[cls]


def pad(v, k, ndim):
    """A batched value with its sample dims padded with leading 1s to ``ndim``."""
    n = v.ndim - k
    return v if n >= ndim else v.reshape(*v.shape[:k], *(1,) * (ndim - n), *v.shape[k:])


def _rank(v):
    return 0 if v is None or not hasattr(v, "ndim") else v.ndim  # a SampleArray's ndim is the sample's


@rule("overwrite", params=("cond", "weight", "pos_weight"))
def broadcast(call, **overrides):
    """The op on batched values whose sample dims are padded to the call's sample rank."""
    k, names = call.k, ELEMENTWISE_PARAMS.get(call.cls.op_name, ())
    ndim = max([_rank(a) for a in call.args] + [_rank(call.params.get(n)) for n in names], default=0)
    args = [pad(call.value(i), k, ndim) if call.is_batched(i) else a for i, a in enumerate(call.args)]
    params = {n: padded(call.param(n), k, ndim) for n in call.batched_params}
    return call.wrap(call.apply(*args, **params, **overrides))


@rule("dropout")
def dropout(call):
    x = call.value(0)
    u = call.params["u"]
    xp = x._backend.xp
    return call.wrap(call.apply(x, u=xp.ascontiguousarray(xp.broadcast_to(u, tuple(x.shape)))))


@rule("mse_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss",
      params=("weight", "pos_weight"))
def pointwise_loss(call):
    """Each sample's elementwise loss, then its reduction over the sample."""
    reduction = call.params.get("reduction", call.cls.reduction)
    out = broadcast(call, reduction="none")
    return out if reduction == "none" else out.sum() if reduction == "sum" else out.mean()


def _axes(call, axis):
    k, n = call.k, call.args[0].ndim
    if not n:
        return ()
    if axis is None:
        return tuple(range(k, k + n))
    return tuple(k + canonical_axis(a, n, call.name) for a in (axis if isinstance(axis, tuple) else (axis,)))


@rule("sum", "mean", "max", "min", "var", "std", "norm")
def reduce(call):
    return call.wrap(call.apply(call.value(0), axis=_axes(call, call.params.get("axis"))))


@rule("softmax", "log_softmax", "logsumexp", "cumprod")
def along_axis(call):
    """Ops over one axis; a 0-d sample is one element along it."""
    x, k = call.value(0), call.k
    if not call.args[0].ndim:
        out = call.apply(x.unsqueeze(-1), axis=-1)
        return call.wrap(out.reshape(*out.shape[:k]))
    return call.wrap(call.apply(x, axis=_axes(call, call.params["axis"])[0]))


@rule(params=())
def linear_batched(call):
    """A linear op's ``jvp_batched`` on the batch (flattened to one dim), configured by one sample's forward."""
    if call.batched_params or not math.prod(call.sizes):
        return None
    be, k, n = call.args[0]._backend, call.k, math.prod(call.sizes)
    values = [call.full(i) for i in range(len(call.args))]
    first = [v[(0,) * k]._data if isinstance(a, TensorBase) else v for a, v in zip(call.args, values)]
    op = object.__new__(call.cls)
    op.__dict__.update(call.params)
    op._params, op.needs_input_grad, op._be = call.params, (False,) * len(first), be
    out = make(be.as_array(op._run_forward(be, first)), be)
    ts = [v.reshape(n, *v.shape[k:]) if isinstance(a, TensorBase) else v for a, v in zip(call.args, values)]
    res = op.jvp_batched(ts, out, n)
    return None if res is None else call.wrap(res.reshape(*call.sizes, *res.shape[1:]))


# -- movement: the batch dims lead every shape, axis list and key --------------------------------------------------
@rule("reshape")
def reshape(call):
    x = call.value(0)
    return call.wrap(x.reshape(*x.shape[:call.k], *call.params["shape"]))


@rule("permute")
def permute(call):
    k, n = call.k, call.args[0].ndim
    return call.wrap(call.value(0).permute(*range(k), *(k + a % max(n, 1) for a in call.params["axes"])))


@rule("expand")
def expand(call):
    x, k, shape = call.value(0), call.k, call.params["shape"]
    n = call.args[0].ndim
    if len(shape) < n or -1 in shape[:len(shape) - n]:
        raise ValueError(f"expand: shape {tuple(call.args[0].shape)} cannot be expanded to {shape}")
    x = pad(x, k, len(shape))
    return call.wrap(x.expand(*x.shape[:k], *shape))


@rule("squeeze")
def squeeze(call):
    x, k, axis = call.value(0), call.k, call.params["axis"]
    shape = tuple(call.args[0].shape)
    axes = tuple(k + i for i, s in enumerate(shape) if s == 1) if axis is None else _axes(call, axis)
    axes = tuple(a for a in axes if x.shape[a] == 1)
    return call.wrap(x.squeeze(axes) if axes else x.reshape(x.shape))


@rule("unsqueeze")
def unsqueeze(call):
    return call.wrap(call.value(0).unsqueeze(
        call.k + canonical_axis(call.params["axis"], call.args[0].ndim, "unsqueeze", new=1)))


def _advanced(e):
    return hasattr(e, "ndim") or isinstance(e, (int, bool, np.integer))


@rule("index")
def index(call):
    """Basic keys behind k full slices; advanced ones too, with the batch moved back in front where NumPy puts
    the indexed dims first (advanced indices separated by a slice)."""
    key = call.params["key"]
    keys, k, x = (key if isinstance(key, tuple) else (key,)), call.k, call.value(0)
    full_key = (slice(None),) * k + keys
    if basic_key(key):
        return call.wrap(x[full_key])
    if any(type(e) is SampleArray for e in keys):
        return None
    out = call.apply(x, key=full_key)
    where = [i for i, e in enumerate(keys) if _advanced(e) and not isinstance(e, slice)]
    if where == list(range(where[0], where[-1] + 1)):
        return call.wrap(out)
    r = max((1 if getattr(e, "dtype", None) == np.bool_ else getattr(e, "ndim", 0)) for e in keys if _advanced(e))
    return call.wrap(out.permute(*range(r, r + k), *range(r), *range(r + k, out.ndim)))


@rule("cat", "stack")
def join(call):
    k, n = call.k, max(a.ndim for a in call.args)
    axis = k + canonical_axis(call.params["axis"], n, call.name, new=call.cls.op_name == "stack")
    return call.wrap(call.apply(*(call.full(i) for i in range(len(call.args))), axis=axis))


def _full_index(call, name):
    """An index parameter with the batch dims in front at full size."""
    idx = call.param(name)
    if name not in call.batched_params:
        idx = idx.reshape((1,) * call.k + idx.shape)
    xp = call.args[0]._backend.xp
    return xp.broadcast_to(idx, call.sizes + idx.shape[call.k:])


@rule("gather", params=("index",))
def gather(call):
    if not call.args[0].ndim:
        return None
    return call.wrap(call.apply(call.full(0), index=_full_index(call, "index"),
                                axis=_axes(call, call.params["axis"])[0]))


@rule("scatter", params=("index",))
def scatter(call):
    if not call.args[0].ndim:
        return None
    return call.wrap(call.apply(call.full(0), call.full(1), index=_full_index(call, "index"),
                                axis=_axes(call, call.params["axis"])[0]))


@rule("embedding", params=("ids",))
def embedding(call):
    if call.is_batched(0):  # a table per sample
        return None
    return call.wrap(call.apply(call.args[0], ids=call.param("ids")))


@rule("index_place")
def index_place(call):
    """t[key] = value's value side: zeros of the batch's shape with the value at the key behind k full slices."""
    key = call.params["key"]
    keys, k = (key if isinstance(key, tuple) else (key,)), call.k
    where = [i for i, e in enumerate(keys) if _advanced(e) and not isinstance(e, slice)]
    if not basic_key(key) and where != list(range(where[0], where[-1] + 1)):
        return None
    shape, xp = tuple(call.params["shape"]), call.args[0]._backend.xp
    target = xp.broadcast_to(xp.zeros((), dtype=bool), shape)[key].ndim  # the sample's indexed region's rank
    return call.wrap(call.apply(pad(call.full(0), k, target), key=(slice(None),) * k + keys,
                                shape=call.sizes + shape))


@rule(Transposed)
def transposed(call):
    """The VJP of a basic index under create_graph (jacrev through x[i]): gy placed into zeros of x's shape."""
    node = call.params["node"]
    if node.op_name != "index" or not basic_key(node.key):
        return None
    gy, k = call.value(0), call.k
    key = (slice(None),) * k + (node.key if isinstance(node.key, tuple) else (node.key,))
    return call.wrap(REGISTRY["index_place"].apply(gy, key=key, shape=tuple(gy.shape[:k]) + tuple(node.in_shape)))


# -- products --------------------------------------------------------------------------------------------------
def _matmul_shape(sa, sb):
    if len(sa) == 1 and len(sb) == 1:
        return ()
    if len(sa) == 1:
        return sb[:-2] + sb[-1:]
    if len(sb) == 1:
        return sa[:-1]
    return tuple(np.broadcast_shapes(sa[:-2], sb[:-2])) + (sa[-2], sb[-1])


@rule("matmul")
def matmul(call):
    """Batched operands as stacks of matrices: a batched vector becomes a row (a) or a column (b), and the matrix
    batch dims of both sides are lined up behind the k batch dims."""
    k, (a, b) = call.k, call.args
    sa, sb = tuple(a.shape), tuple(b.shape)
    if not sa or not sb:
        return None
    va, vb = call.value(0), call.value(1)
    if call.is_batched(0) and len(sa) == 1:
        va = va.unsqueeze(-2)
    if call.is_batched(1) and len(sb) == 1:
        vb = vb.unsqueeze(-1)
    m = max(len(sa), len(sb), 2)
    va = pad(va, k, m) if call.is_batched(0) else va
    vb = pad(vb, k, m) if call.is_batched(1) else vb
    out = call.apply(va, vb)
    return call.wrap(out.reshape(*out.shape[:k], *_matmul_shape(sa, sb)))


@rule("linear")
def linear(call):
    """x's leading dims are rows already; a batched weight or bias is a batched matmul and add."""
    if not any(call.is_batched(i) for i in range(1, len(call.args))):
        return call.wrap(call.apply(call.value(0), *call.args[1:]))
    x, w, *b = call.args
    y = x @ w.transpose(-1, -2)
    return y + b[0] if b and b[0] is not None else y


@rule("addmm")
def addmm(call):
    """beta * input + alpha * mat1 @ mat2 over stacks of matrices: every operand padded to a matrix behind the batch
    dims, so matmul broadcasts them and input broadcasts to each (n, p)."""
    args = [pad(call.value(i), call.k, 2) if call.is_batched(i) else a for i, a in enumerate(call.args)]
    return call.wrap(call.apply(*args))


@rule("linalg_inv", "linalg_det")
def matrix_stack(call):
    """Ops on the last two dims of a stack of square matrices: the batch dims are more stack dims."""
    return call.wrap(call.apply(call.value(0)))


@rule("linalg_solve")
def solve(call):
    """A X = B with the batch in front of the broadcast dims: the side with fewer of them is padded to the other's
    count, so the batch dims line up (``vector``: B's samples are (..., n), one dim fewer than a matrix's)."""
    (a, b), k = call.args, call.k
    rb = 1 if call.params.get("vector") else 2
    dims = max(a.ndim - 2, b.ndim - rb)
    va = pad(call.value(0), k, dims + 2) if call.is_batched(0) else a
    vb = pad(call.value(1), k, dims + rb) if call.is_batched(1) else b
    return call.wrap(call.apply(va, vb))


@rule("einsum")
def einsum(call):
    """Batch letters in front of every batched operand's subscripts and of the output's."""
    eq = call.params["equation"]
    free = [c for c in string.ascii_letters if c not in eq]
    if len(free) < call.k:
        return None
    lhs, out = eq.split("->")
    batch = "".join(free[:call.k])
    subs = [batch + s if call.is_batched(i) else s for i, s in enumerate(lhs.split(","))]
    args = [call.full(i) if call.is_batched(i) else a for i, a in enumerate(call.args)]
    return call.wrap(call.apply(*args, equation=",".join(subs) + "->" + batch + out))


@rule("layer_norm")
def layer_norm(call):
    """The trailing axes are normalized: leading batch dims are rows; a batched weight or bias is applied after."""
    x, *wb = call.args
    if not any(call.is_batched(i) for i in range(1, len(call.args))):
        return call.wrap(call.apply(call.value(0), *wb))
    y = call.cls.apply(x, None, None, **call.params)
    w, b = (wb + [None, None])[:2]
    y = y if w is None else y * w
    return y if b is None else y + b


@rule("bias_act")
def bias_act(call):
    if not call.is_batched(1):
        return call.wrap(call.apply(call.value(0), call.args[1]))
    z = call.args[0] + call.args[1]  # a bias per sample: unfused
    act = call.params["act"]
    if act == "identity":
        return z
    names = [p for p, _ in POINTWISE[act].params]
    return REGISTRY[act].apply(z, **dict(zip(names, call.params["params"])))


# -- losses over rows: the batch's rows stacked into one call ----------------------------------------------------
def _rows(call, name):
    """A (N,) row parameter for every sample, flattened to (batch * N,)."""
    a = call.param(name)
    if name not in call.batched_params:
        a = a.reshape((1,) * call.k + a.shape)
    xp = call.args[0]._backend.xp
    return xp.ascontiguousarray(xp.broadcast_to(a, call.sizes + a.shape[call.k:])).reshape(-1)


def _reduced(call, loss, reduction, den):
    """Per-sample 'none' losses (batch..., N) reduced as the op would: sum, or mean over ``den`` (batch...)."""
    if reduction == "none":
        return call.wrap(loss)
    total = loss.sum(axis=-1)
    if reduction == "sum":
        return call.wrap(total)
    return call.wrap(total / make(call.args[0]._backend.as_array(den).astype(total._data.dtype),
                                  call.args[0]._backend))


@rule("cross_entropy", "token_logprob", params=("target",))
def chosen_logprob(call):
    if call.args[0].ndim != 2:
        return None
    x = call.full(0)
    n, c = call.args[0].shape
    t = _rows(call, "target")
    loss = call.apply(x.reshape(math.prod(call.sizes) * n, c), target=t, reduction="none")
    loss = loss.reshape(*call.sizes, n)
    reduction = call.params.get("reduction", call.cls.reduction)
    den = None
    if reduction == "mean":  # torch's: the summed weights w[t_i] of the rows not ignored
        xp, ignore = x._backend.xp, call.params.get("ignore_index")
        t = t.reshape(call.sizes + (n,))
        keep = t != ignore if ignore is not None else xp.ones(t.shape, dtype=bool)
        w = call.params.get("weight")
        wt = xp.where(keep, 1.0, 0.0) if w is None else xp.where(keep, w[xp.where(keep, t, 0)], 0.0)
        den = wt.sum(axis=-1)
    return _reduced(call, loss, reduction, den)


@rule("nll_loss")
def nll_loss(call):
    if call.args[0].ndim != 2:
        return None
    n, c = call.args[0].shape
    x = call.full(0).reshape(math.prod(call.sizes) * n, c)
    rows = {k: _rows(call, k) for k in ("ids", "rw", "ignored") if call.params.get(k) is not None}
    loss = call.apply(x, **rows, reduction="none").reshape(*call.sizes, n)
    reduction = call.params["reduction"]
    rw = call.params["rw"]
    return _reduced(call, loss, reduction, rw.sum() if reduction == "mean" else None)
