"""Fused softmax cross-entropy and the sequence log-prob (log_softmax + gather of chosen ids) pattern."""
from __future__ import annotations

from gpugrad.autograd import tensor_xp
from gpugrad.backend import deferred
from gpugrad.ops import register
from gpugrad.ops.kernel_op import KernelOp


class _ChosenLogProb(KernelOp):
    sign = 1.0  # loss = sign * (lse - x[t]): cross-entropy +1, the log-prob -1

    """Shared shape checks for ops over (N, C) logits and N integer class ids ``target``.

    The VJP reads the logits (saved[0]) with the log-sum-exp, but torch's log_softmax-based ops save the
    log-softmax, not the logits: the logits are kept privately, so changing them in place afterwards is legal."""

    private_saved = (0,)

    def _check(self, x):
        """(status, site) for the forward kernel, which checks the ids on the device (backend/deferred.py): an
        out-of-range id is an IndexError at once on the CPU and at the next read on CUDA, never a silent NaN."""
        t = self.target
        if x.ndim != 2 or t.ndim != 1 or t.shape[0] != x.shape[0]:
            raise ValueError(f"{self.op_name}: logits must be (N, C) and target (N,), got logits {x.shape} and "
                             f"target {t.shape}")
        if t.dtype.kind not in "iu":
            raise TypeError(f"{self.op_name}: target must hold integer class ids, got dtype {t.dtype}")
        return deferred.fused_check(t, x.shape[1], IndexError, f"{self.op_name}: target ids must lie in "
                                    f"[0, {x.shape[1]}) for logits {x.shape}, got min {{lo}} and max {{hi}}")

    def _softmax_minus_onehot(self, xp, x):
        """softmax(x) - onehot(t), from the saved lse on arrays; with recorded ops on Tensors (differentiable in x)."""
        rows = self._be.xp.arange(x.shape[0])
        if xp is tensor_xp:
            onehot = self._be.xp.zeros(x.shape, dtype=x.dtype)
            onehot[rows, self.target] = 1
            return x.softmax(-1) - tensor_xp._const(onehot, x)
        p = xp.exp(x - self.saved[1].astype(x.dtype)[:, None])
        p[rows, self.target] -= 1
        return p

    def _reduce(self, per_row):
        reduction = getattr(self, "reduction", "none")
        return per_row if reduction == "none" else per_row.sum() if reduction == "sum" else per_row.mean()

    def _jvp(self, impl, xp, ins, out, ts):  # per row: Σ_c (softmax - onehot)_c t_c, times sign, reduced
        d = xp.sum(self._softmax_minus_onehot(xp, ins[0]) * ts[0], axis=-1)
        return self._reduce(d if self.sign > 0 else -d)

    def backward_graph(self, xp, gy):  # the VJP on Tensors: g_i * sign * (softmax(x_i) - onehot(t_i))
        x = self.saved[0]
        reduction = getattr(self, "reduction", "none")
        g = gy.reshape((-1, 1)) if reduction == "none" else gy / x.shape[0] if reduction == "mean" else gy
        return g * self._softmax_minus_onehot(xp, x) * self.sign


@register("cross_entropy")
class CrossEntropy(_ChosenLogProb):
    """loss_i = logsumexp(x_i) - x_i[t_i], reduced by mean (default), sum or none.

    VJP (one fused kernel on CUDA): gx_i = g_i * (softmax(x_i) - onehot(t_i)), g_i the upstream gradient of row i
    (gy / N for the mean, gy for the sum). Forward and backward are one launch each on CUDA, the reduction included.
    """
    node_name = "NllLossBackward0"

    def _fwd(self, impl, xp, x):
        loss, lse = impl.softmax_xent_fwd(xp, x, self.target, self.reduction, *self._check(x))
        self.save_for_backward(x, lse)
        return loss

    def _bwd(self, impl, xp, gy):
        x, lse = self.saved
        # NOTE: the seed is already x's dtype (no launch); a gradient of another dtype is cast, as torch does
        return impl.softmax_xent_bwd(xp, x, self.target, lse, gy.astype(x.dtype, copy=False), self.reduction)


@register("token_logprob")
class TokenLogProb(_ChosenLogProb):
    """logp_i = log_softmax(x_i)[t_i]: the sequence-score pattern in one pass (no (N, C) log-softmax kept).

    VJP: gx_i = g_i * (onehot(t_i) - softmax(x_i)).
    """
    sign = -1.0

    def _fwd(self, impl, xp, x):
        logp, lse = impl.token_logprob_fwd(xp, x, self.target, *self._check(x))
        self.save_for_backward(x, lse)
        return logp

    def _bwd(self, impl, xp, gy):
        x, lse = self.saved
        return impl.token_logprob_bwd(xp, x, self.target, lse, gy.astype(x.dtype, copy=False))
