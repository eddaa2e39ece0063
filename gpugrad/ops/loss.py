"""Fused softmax cross-entropy and the sequence log-prob (log_softmax + gather of chosen ids) pattern."""
from __future__ import annotations

from gpugrad.ops import register
from gpugrad.ops.kernel_op import KernelOp


class _ChosenLogProb(KernelOp):
    """Shared shape checks and reduction for ops over (N, C) logits and N integer class ids ``target``."""

    def _check(self, xp, x):
        t = self.target
        if x.ndim != 2 or t.ndim != 1 or t.shape[0] != x.shape[0]:
            raise ValueError(f"{self.op_name}: logits must be (N, C) and target (N,), got logits {x.shape} and "
                             f"target {t.shape}")
        if t.dtype.kind not in "iu":
            raise TypeError(f"{self.op_name}: target must hold integer class ids, got dtype {t.dtype}")
        # One host sync per call, so an out-of-range id is an error instead of a NaN or an out-of-bounds read.
        if t.size and (int(t.min()) < 0 or int(t.max()) >= x.shape[1]):
            raise IndexError(f"{self.op_name}: target ids must lie in [0, {x.shape[1]}) for logits {x.shape}, "
                             f"got min {int(t.min())} and max {int(t.max())}")


@register("cross_entropy")
class CrossEntropy(_ChosenLogProb):
    """loss_i = logsumexp(x_i) - x_i[t_i], reduced by mean (default), sum or none.

    VJP (one fused kernel on CUDA): gx_i = g_i * (softmax(x_i) - onehot(t_i)), g_i the upstream gradient of row i.
    """
    _name = "NllLossBackward0"

    def _fwd(self, impl, xp, x):
        self._check(xp, x)
        loss, lse = impl.softmax_xent_fwd(xp, x, self.target)
        self.save_for_backward(x, lse)
        if self.reduction == "none":
            return loss
        total = loss.sum()
        if self.reduction == "mean":  # the mean of no rows is NaN, as torch (0 / 0, without NumPy's warning)
            return total / x.shape[0] if x.shape[0] else xp.full_like(total, xp.nan)
        return total

    def _bwd(self, impl, xp, gy):
        x, lse = self.saved
        n = x.shape[0]
        if self.reduction == "none":
            g = gy
        else:
            scale = gy / max(n, 1) if self.reduction == "mean" else gy  # n == 0: an empty gradient either way
            g = xp.broadcast_to(scale, (n,)).astype(x.dtype)
        return impl.softmax_xent_bwd(xp, x, self.target, lse, xp.ascontiguousarray(g))


@register("token_logprob")
class TokenLogProb(_ChosenLogProb):
    """logp_i = log_softmax(x_i)[t_i]: the sequence-score pattern in one pass (no (N, C) log-softmax kept).

    VJP: gx_i = g_i * (onehot(t_i) - softmax(x_i)).
    """

    def _fwd(self, impl, xp, x):
        self._check(xp, x)
        logp, lse = impl.token_logprob_fwd(xp, x, self.target)
        self.save_for_backward(x, lse)
        return logp

    def _bwd(self, impl, xp, gy):
        x, lse = self.saved
        return impl.token_logprob_bwd(xp, x, self.target, lse, xp.ascontiguousarray(gy))
