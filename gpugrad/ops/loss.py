"""Fused softmax cross-entropy and the sequence log-prob (log_softmax + gather of chosen ids) pattern."""
from __future__ import annotations

import math

from gpugrad.backend import deferred, reference as R
from gpugrad.backend.reference.float16 import LOW
from gpugrad.core import tensor_xp
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.ops.kernel_op import KernelOp


def _as_dtype_of(g, x):
    """g in x's dtype (no copy when it already is): an array, or a Tensor under create_graph."""
    return g if g.dtype == x.dtype else g.astype(x.dtype)


def _upstream(gy, x):
    """The upstream gradient as the loss kernels take it: in x's dtype (_as_dtype_of), but a float16 / bfloat16 array
    that is not C-contiguous (the broadcast gradient of loss.sum()) widened to float32, which the kernels read it in
    (exactly): beside it reference.opmath would send the whole (N, C) logits through a float32 copy instead."""
    g = _as_dtype_of(gy, x)
    if hasattr(g, "flags") and not g.flags.c_contiguous and g.dtype in LOW:
        return g.astype("float32")
    return g


class _ChosenLogProb(KernelOp):
    """Shared shape checks and derivatives of ops over (N, C) logits and N integer class ids ``target``.

    The VJP reads the logits (saved[0]) with the log-sum-exp, but torch's log_softmax-based ops save the
    log-softmax, not the logits: the logits are kept privately, so changing them in place afterwards is legal."""

    sign = 1.0  # loss = sign * (lse - x[t]): cross-entropy +1, the log-prob -1
    reduction, weight, ignore_index, smoothing = "none", None, None, 0.0  # cross-entropy's options (torch's)
    _t_range = None
    private_saved = (0,)

    def _check(self, xp, x):
        """(status, site) for the forward kernel, which checks the ids on the device (backend/deferred.py): an
        out-of-range id is an IndexError at once on the CPU and at the next read on CUDA, never a silent NaN. On the
        CPU the ids' (min, max) is kept for the reference (``_t_range``), which need not reduce them again."""
        t = self.target
        if x.ndim != 2 or t.ndim != 1 or t.shape[0] != x.shape[0]:
            raise ValueError(f"{self.op_name}: logits must be (N, C) and target (N,), got logits {x.shape} and "
                             f"target {t.shape}")
        if t.dtype.kind not in "iu":
            raise TypeError(f"{self.op_name}: target must hold integer class ids, got dtype {t.dtype}")
        message = (f"{self.op_name}: target ids must lie in [0, {x.shape[1]}) for logits {x.shape}, got min {{lo}} "
                   "and max {hi}")
        if self._be.name != "cpu" or not t.size:  # (CUDA: the kernel checks them)
            return deferred.fused_check(t, x.shape[1], IndexError, message)
        lo, hi = int(t.min()), int(t.max())
        ignore = self.ignore_index
        if ignore is not None and lo <= ignore <= hi:
            ignored = t == ignore  # the ids checked are the others: an ignored id becomes a copy of one
            if ignored.any():
                t = xp.where(ignored, xp.where(ignored.all(), 0, t[xp.argmin(ignored)]), t)
                return deferred.fused_check(t, x.shape[1], IndexError, message)
        deferred.check_bounds(lo, hi, x.shape[1], IndexError, message)
        self._t_range = (lo, hi)
        return None, 0

    def _options(self):
        return dict(w=self.weight, ignore_index=self.ignore_index, smoothing=self.smoothing)

    def _reference_options(self):
        """_options, and on the CPU the target's (min, max) that _check has just found."""
        return self._options() if self._t_range is None else {**self._options(), "t_range": self._t_range}

    def _grad_rows(self, xp, x):
        """G[i, c] = d loss_i / d x[i, c]: the reference VJP (reference._xent_grad) for a unit upstream gradient,
        from the saved lse on arrays, from an lse recomputed with recorded ops on Tensors (differentiable in x)."""
        lse = x.logsumexp(-1) if xp is tensor_xp else self.saved[1].astype(x.dtype)
        aux = getattr(self.saved[2], "_data", self.saved[2]) if len(self.saved) > 2 else None
        unit = self._be.xp.full(x.shape[0], self.sign, dtype=getattr(x.dtype, "dtype", x.dtype))
        return R._xent_grad(xp, x, self.target, lse, unit, **self._options(), aux=aux)

    def _saved_on_tensors(self, xp):
        """x as the input it is, its rows' lse recomputed with recorded ops (the saved lse is an intermediate)."""
        return (self.saved[0], self.saved[0].logsumexp(-1)) + tuple(self.saved[2:])

    def _den(self, xp, like):
        """1 / (the mean's divisor, the summed row weights the forward saved), as an array or a constant Tensor."""
        aux = getattr(self.saved[2], "_data", self.saved[2])  # a Tensor under create_graph
        inv = (1.0 / aux[0]).astype(aux.dtype)
        return tensor_xp._const(inv, like) if xp is tensor_xp else inv

    def _jvp(self, impl, xp, ins, out, ts):  # per row Σ_c G_c t_c, reduced as the forward
        d = xp.sum(self._grad_rows(xp, ins[0]) * ts[0], axis=-1)
        if self.reduction == "none":
            return d
        return d.sum() * (self._den(xp, d) if self.reduction == "mean" else 1.0)

@register("cross_entropy")
class CrossEntropy(_ChosenLogProb):
    """loss_i = (1 - e) w[t_i] (logsumexp(x_i) - x_i[t_i]) + e / C Σ_c w_c (logsumexp(x_i) - x_i[c]), torch's class
    weights w (1 without) and label smoothing e; 0 where t_i == ignore_index; reduced by mean (over the summed
    weights w[t_i] of the rows not ignored, as torch), sum or none.

    VJP (one fused kernel on CUDA): gx_i = g_i * (softmax(x_i) a_i - onehot(t_i) b_i - e / C w) with b_i = (1 - e)
    w[t_i], a_i = b_i + e / C Σ w (0 rows where ignored), g_i the upstream gradient of row i (gy / Σ w[t_i] for the
    mean, gy for the sum). Forward and backward are one launch each on CUDA, the reduction included.
    """
    formula = "gx_i = g_i * (softmax(x_i) - onehot(t_i)) (weights, smoothing and ignore_index applied)"
    node_name = "NllLossBackward0"

    def _fwd(self, impl, xp, x):
        loss, lse, aux = impl.softmax_xent_fwd(xp, x, self.target, self.reduction, *self._check(xp, x),
                                               **self._reference_options())
        self.save_for_backward(x, lse, aux)
        return loss

    def _bwd(self, impl, xp, gy):
        x, lse, aux = self.saved
        # NOTE: the seed is already x's dtype (no launch); a gradient of another dtype is cast, as torch does
        # (not _t_range: the target is the caller's buffer, which may have changed since the forward)
        return impl.softmax_xent_bwd(xp, x, self.target, lse, _upstream(gy, x), self.reduction, aux=aux,
                                     **self._options())


@register("token_logprob")
class TokenLogProb(_ChosenLogProb):
    """logp_i = log_softmax(x_i)[t_i]: the sequence-score pattern in one pass (no (N, C) log-softmax kept).

    VJP: gx_i = g_i * (onehot(t_i) - softmax(x_i)).
    """
    formula = "gx_i = g_i * (onehot(t_i) - softmax(x_i))"
    sign = -1.0

    def _fwd(self, impl, xp, x):
        logp, lse = impl.token_logprob_fwd(xp, x, self.target, *self._check(xp, x))
        self.save_for_backward(x, lse)
        return logp

    def _bwd(self, impl, xp, gy):
        x, lse = self.saved
        return impl.token_logprob_bwd(xp, x, self.target, lse, _upstream(gy, x))


class _PointwiseLoss(Op):
    """A loss of input x and target t per element, times constant weights (broadcast; None: 1), reduced by mean
    (default), sum or none. A subclass gives ``_parts(xp, x, t)`` = (loss, dloss/dx, dloss/dt) per element: the VJP
    is g * d (g = gy / n for the mean), the JVP the reduced Σ d t, and the same formulas on Tensors (autograd's
    tensor_xp) the second derivatives. Weights get no gradient, as in torch."""
    reduction, weight = "mean", None
    double_backward = True

    def _const(self, xp, a, like):
        return a if a is None or xp is not tensor_xp else tensor_xp._const(a, like)

    def _weighted(self, xp, x, t):
        w = self._const(xp, self.weight, x)
        with R._quiet(xp):
            parts = self._parts(xp, x, t)
        return parts if w is None else tuple(p * w for p in parts)

    def forward(self, xp, x, t):
        self._check(xp, x, t)
        self.save_for_backward(x, t)
        with R._quiet(xp):
            return _reduce(xp, self._weighted(xp, x, t)[0], self.reduction)

    def _check(self, xp, x, t):
        pass

    def backward(self, xp, gy):
        _, dx, dt = self._weighted(xp, *self.saved)
        # max(n, 1): an empty batch has no elements to send gy / n to (the division would only warn)
        g = gy / max(math.prod(dx.shape), 1) if self.reduction == "mean" else gy
        return g * dx, g * dt

    def jvp(self, xp, ins, out, ts):
        _, dx, dt = self._weighted(xp, *ins)
        with R._quiet(xp):
            return _reduce(xp, sum(d * v for d, v in zip((dx, dt), ts) if v is not None), self.reduction)


def _reduce(xp, x, reduction):
    """The loss reduced as torch does, quietly: a float16 sum that overflows is inf, the mean of nothing NaN."""
    if reduction == "none":
        return x
    if reduction == "sum" or x.size:
        return x.sum() if reduction == "sum" else x.mean()
    return x.sum() * float("nan")  # the mean of an empty batch (NumPy's mean warns "Mean of empty slice")


@register("binary_cross_entropy")
class BinaryCrossEntropy(_PointwiseLoss):
    """loss = -(t max(log x, -100) + (1 - t) max(log1p(-x), -100)): torch's clamped logs, so x = 0 or 1 is finite.
    Derivatives (torch's): dx = (x - t) / max(x (1 - x), 1e-12), dt = -logit(x) = log1p(-x) - log x (unclamped)."""
    formula = "gx = gy * (x - t) / (x (1 - x)), gt = gy * log((1 - x) / x)"

    def _check(self, xp, x, t):
        # torch's range checks; on CUDA without a sync, raised at the next host read (backend/deferred.py)
        for name, v in (("input", x), ("target", t)):
            if hasattr(v, "shape"):
                deferred.check_within(v, 0, 1, RuntimeError, f"binary_cross_entropy: all elements of {name} should "
                                      "be between 0 and 1")
            elif not 0 <= v <= 1:
                raise RuntimeError(f"binary_cross_entropy: all elements of {name} should be between 0 and 1")

    def _parts(self, xp, x, t):
        log_x, log_1x = xp.log(x), xp.log1p(-x)
        lx, l1x = xp.maximum(log_x, -100.0), xp.maximum(log_1x, -100.0)
        # the target's derivative is torch's -logit(x), unclamped: +-inf at x = 0 or 1 (only the loss is clamped)
        return -(t * lx + (1 - t) * l1x), (x - t) / xp.maximum(x * (1 - x), 1e-12), log_1x - log_x


@register("binary_cross_entropy_with_logits")
class BinaryCrossEntropyWithLogits(_PointwiseLoss):
    """loss = (1 - t) x + (1 + (p - 1) t) softplus(-x), p = pos_weight (a constant broadcast against x, or None):
    BCE of sigmoid(x) from the logits. Derivatives (torch's): dx = (1 + (p - 1) t) sigmoid(x) - p t,
    dt = (p - 1) softplus(-x) - x. softplus(-x) = m + log(e^-m + e^(-x-m)), m = max(-x, 0): both exponents <= 0,
    and no |x|, whose subgradient 0 at x = 0 would give a wrong derivative there."""
    formula = "gx = gy * (sigmoid(x) - t), gt = -gy * x"
    pos_weight = None

    def _parts(self, xp, x, t):
        p = self._const(xp, self.pos_weight, x)
        m = xp.maximum(-x, 0.0)
        softplus = m + xp.log(xp.exp(-m) + xp.exp(-x - m))
        lw = 1.0 if p is None else 1 + (p - 1) * t
        # sigmoid(x) = e^-softplus(-x): no e^-x to overflow (on Tensors NumPy's warning could not be silenced)
        dx = lw * xp.exp(-softplus) - (t if p is None else p * t)
        return (1 - t) * x + lw * softplus, dx, (-x if p is None else (p - 1) * softplus - x)


@register("mse_loss")
class MseLoss(_PointwiseLoss):
    """loss = (x - t)^2; dx = 2 (x - t) = -dt."""
    formula = "gx = gy * 2 (x - t), gt = -gx"

    def _parts(self, xp, x, t):
        d = x - t
        return d * d, 2 * d, -2 * d


@register("smooth_l1_loss")
class SmoothL1Loss(_PointwiseLoss):
    """loss = d^2 / (2 beta) where |d| < beta, else |d| - beta / 2 (d = x - t, beta > 0); dx = d / beta or sign(d)."""
    formula = "gx = gy * clamp((x - t) / beta, -1, 1), gt = -gx"

    def _parts(self, xp, x, t):
        d = x - t
        small = xp.abs(d) < self.beta
        # NaN where d is NaN, as torch's (sign on Tensors is torch's sgn, 0 for NaN)
        dx = xp.where(small, d / self.beta, xp.where(d == d, xp.sign(d), d))
        return xp.where(small, d * d * (0.5 / self.beta), xp.abs(d) - 0.5 * self.beta), dx, -dx


@register("huber_loss")
class HuberLoss(_PointwiseLoss):
    """loss = d^2 / 2 where |d| < delta, else delta (|d| - delta / 2) (d = x - t); dx = d or delta sign(d)."""
    formula = "gx = gy * clamp(x - t, -delta, delta), gt = -gx"

    def _parts(self, xp, x, t):
        d = x - t
        small = xp.abs(d) < self.delta
        dx = xp.where(small, d, xp.where(d == d, xp.sign(d) * self.delta, d))  # NaN stays NaN, as torch's
        return xp.where(small, d * d * 0.5, (xp.abs(d) - 0.5 * self.delta) * self.delta), dx, -dx


@register("nll_loss")
class NllLoss(Op):
    """loss_i = -rw_i x[i, t_i] for log-probabilities x (N, C): rw_i = weight[t_i], 0 where t_i is ignored (``ids``
    and ``rw`` given, ids in range); reduced by mean (over Σ rw, as torch), sum or none. Linear in x.

    VJP: gx[i, t_i] = -g_i rw_i, 0 elsewhere (g_i = gy / Σ rw for the mean)."""
    formula = "gx[i, t_i] = -g_i * w[t_i], 0 elsewhere"
    linear = True
    node_name = "NllLossBackward0"

    ignored = None  # rows whose target is ignore_index: 0, whatever their input holds (NaN too), as torch

    def forward(self, xp, x):
        self.shape = x.shape
        loss = -x[xp.arange(x.shape[0]), self.ids] * self.rw
        if self.ignored is not None:
            loss = xp.where(self.ignored, 0, loss).astype(loss.dtype, copy=False)
        if self.reduction == "none":
            return loss
        with R._quiet(xp):  # every row ignored: 0 / 0, NaN as torch
            return loss.sum() / self.rw.sum() if self.reduction == "mean" else loss.sum()

    def backward(self, xp, gy):
        with R._quiet(xp):
            g = gy / self.rw.sum() if self.reduction == "mean" else gy
        gx = xp.zeros(self.shape, gy.dtype)
        gx[xp.arange(self.shape[0]), self.ids] = -g * self.rw
        return gx
