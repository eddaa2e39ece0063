"""Matrix products (cuBLAS through CuPy on CUDA; BLAS through NumPy on the CPU)."""
from __future__ import annotations

from gpugrad.autograd.function import Op
from gpugrad.ops import register
from gpugrad.ops.kernel_op import KernelOp


def _mT(xp, a):
    return xp.swapaxes(a, -1, -2)


@register("matmul")
class Matmul(Op):
    """y = a @ b with NumPy's rules (vectors are promoted, batch dims broadcast).

    VJP: ga = gy @ bᵀ, gb = aᵀ @ gy on the promoted shapes; the engine sums broadcast batch dims.
    Named as torch names the cases: DotBackward0, MvBackward0, MmBackward0, BmmBackward0.
    """
    double_backward = True

    def forward(self, xp, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"matmul: both operands need at least one dimension, got shapes {a.shape} and {b.shape}")
        if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned "
                             f"({a.shape[-1]} != {b.shape[-2 if b.ndim > 1 else 0]})")
        self.a_vec, self.b_vec = a.ndim == 1, b.ndim == 1
        self._name = ("DotBackward0" if self.a_vec and self.b_vec else "MvBackward0" if self.b_vec and a.ndim == 2
                      else "MmBackward0" if a.ndim == 2 and b.ndim == 2 else "BmmBackward0")
        self.save_for_backward(a if self.needs_input_grad[1] else None, b if self.needs_input_grad[0] else None)
        return xp.matmul(a, b)

    def backward(self, xp, gy):
        a, b = self.saved
        if self.b_vec:
            gy = xp.expand_dims(gy, -1)
        if self.a_vec:
            gy = xp.expand_dims(gy, -2)
        ga = gb = None
        if b is not None:
            b2 = xp.expand_dims(b, -1) if self.b_vec else b
            ga = xp.matmul(gy, _mT(xp, b2))
            ga = xp.squeeze(ga, -2) if self.a_vec else ga
        if a is not None:
            a2 = xp.expand_dims(a, -2) if self.a_vec else a
            gb = xp.matmul(_mT(xp, a2), gy)
            gb = xp.squeeze(gb, -1) if self.b_vec else gb
        return ga, gb


@register("linear")
class Linear(KernelOp):
    """y = x @ wᵀ + b (b optional, a keyword-less third input).  AddmmBackward0 as in torch.

    VJP: gx = gy @ w, gw = gyᵀ @ x (leading dims folded), gb = Σ gy over the leading axes (the bias-gradient
    kernel on CUDA, a BLAS-friendly sum on the CPU).
    """
    double_backward = False

    def _fwd(self, impl, xp, x, w, b=None):
        if x.shape[-1] != w.shape[-1] or w.ndim != 2 or (b is not None and b.shape != (w.shape[0],)):
            raise ValueError(f"linear: input {x.shape}, weight {w.shape}, bias {None if b is None else b.shape}: "
                             "expected input (..., in), weight (out, in), bias (out,); the input's last axis must "
                             "equal the weight's in_features")
        self._name = "AddmmBackward0" if b is not None else "MmBackward0"
        ng = self.needs_input_grad
        self.save_for_backward(x if ng[1] else None, w if ng[0] else None)
        y = xp.matmul(x, w.T)
        if b is not None:
            y += b  # y is a fresh product: adding in place saves a temporary the size of the output
        return y

    def _bwd(self, impl, xp, gy):
        x, w = self.saved
        ng = self.needs_input_grad
        gy2 = gy.reshape(-1, gy.shape[-1])
        gx = xp.matmul(gy, w) if ng[0] else None
        gw = xp.matmul(gy2.T, x.reshape(-1, x.shape[-1])) if ng[1] else None
        gb = impl.sum_rows(xp, gy2) if len(ng) > 2 and ng[2] else None
        return (gx, gw, gb) if len(ng) > 2 else (gx, gw)

    def backward_graph(self, xp, gy):
        return self._bwd(_TensorSums, xp, gy)


class _TensorSums:
    """``sum_rows`` over Tensors, for Linear's VJP under create_graph."""

    @staticmethod
    def sum_rows(xp, g):
        return g.sum(axis=0)
