"""BLAS-style products with scaling and an added term: ``addmm`` (beta * input + alpha * mat1 @ mat2), on cuBLAS
on CUDA (``backend/cublas.py``), as ``Matmul`` is."""
from __future__ import annotations

from gpugrad.backend import cublas
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.core.tensor import TensorBase
from gpugrad.ops.matmul import matmul_of


@register("addmm", inplace=True)
class Addmm(Op):
    """y = beta * input + alpha * (mat1 @ mat2), input broadcast to the product's (n, p); beta = 0 ignores input
    (NaNs in it do not propagate), as torch.

    VJP: g_input = beta * gy (the engine sums broadcast dims), g_mat1 = alpha * gy @ mat2ᵀ,
    g_mat2 = alpha * mat1ᵀ @ gy.  JVP: beta * t_input + alpha * (t_mat1 @ mat2 + mat1 @ t_mat2).
    """
    promotes = "same"  # as torch: mixed dtypes are an error
    double_backward = True
    formula = "g_input = beta * gy; g_mat1 = alpha * gy @ mat2ᵀ; g_mat2 = alpha * mat1ᵀ @ gy"

    def forward(self, xp, c, a, b):
        return self._forward(xp, matmul_of(xp), c, a, b)

    def forward_cuda(self, xp, c, a, b):
        return self._forward(xp, cublas.matmul, c, a, b)

    def backward(self, xp, gy):
        return self._backward(xp, matmul_of(xp), gy)

    def backward_cuda(self, xp, gy):
        return self._backward(xp, cublas.matmul, gy)

    def _forward(self, xp, mm, c, a, b):
        ng = self.needs_input_grad
        self.save_for_backward(a if ng[2] else None, b if ng[1] else None)
        y = mm(a, b)
        if self.alpha != 1:
            y = y * self.alpha
        if self.beta == 0:
            return y
        return y + (c * self.beta if self.beta != 1 else c)

    def _backward(self, xp, mm, gy):
        a, b = self.saved
        ng = self.needs_input_grad
        gc = (gy * self.beta if self.beta != 1 else gy) if ng[0] else None
        ga = mm(gy, xp.swapaxes(b, -1, -2)) * self.alpha if ng[1] else None
        gb = mm(xp.swapaxes(a, -1, -2), gy) * self.alpha if ng[2] else None
        return gc, ga, gb

    def jvp(self, xp, ins, out, ts):
        (_, a, b), (tc, ta, tb) = ins, ts
        parts = [xp.matmul(ta, b) * self.alpha if ta is not None else None,
                 xp.matmul(a, tb) * self.alpha if tb is not None else None,
                 tc * self.beta if tc is not None else None]
        parts = [p for p in parts if p is not None]
        return sum(parts[1:], parts[0])

    @staticmethod
    def addmm(input, mat1, mat2, *, beta=1, alpha=1):
        """beta * input + alpha * (mat1 @ mat2) for matrices mat1 (n, m) and mat2 (m, p); input broadcasts to (n, p).
        """
        for name, m in (("mat1", mat1), ("mat2", mat2)):
            if not isinstance(m, TensorBase):
                raise TypeError(f"addmm(): argument '{name}' must be Tensor, not {type(m).__name__}")
            if m.ndim != 2:
                raise RuntimeError(f"{name} must be a matrix, got {m.ndim}-D tensor")
        if mat1.shape[1] != mat2.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                               f"{mat2.shape[0]}x{mat2.shape[1]})")
        out = (mat1.shape[0], mat2.shape[1])
        if input.ndim > 2 or any(n not in (1, m) for n, m in zip(input.shape[::-1], out[::-1])):
            raise RuntimeError(f"addmm: the input of shape {list(input.shape)} cannot be broadcast to the product's "
                               f"shape {list(out)}")
        if all(t.dtype.kind in "biu" for t in (input, mat1, mat2)):
            beta, alpha = int(beta), int(alpha)  # as torch: integer products take the scales as integers
        return Addmm.apply(input, mat1, mat2, beta=beta, alpha=alpha)
