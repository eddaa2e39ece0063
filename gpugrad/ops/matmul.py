"""Matrix products (cuBLAS called by gpugrad on CUDA, capturable in a CUDA graph: backend/cublas.py; BLAS through
NumPy on the CPU). Each op's math is written once over a product function ``mm``: ``xp.matmul`` on the CPU and on
Tensors (create_graph), ``cublas.matmul`` on CUDA."""
from __future__ import annotations

import math

import numpy as np

from gpugrad.backend import cublas, kernels, reference as R, threads
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.core.tensor import as_operand
from gpugrad.ops.kernel_op import KernelOp


def _gemm(impl, xp):
    """The product a KernelOp's ``impl`` computes with: gpugrad's cuBLAS path with the CUDA kernels."""
    return cublas.matmul if impl is kernels else matmul_of(xp)


def matmul_of(xp):
    """NumPy's matmul on the CPU (bfloat16 in float32, rounded once: reference.matmul), Tensors' under create_graph."""
    return R.matmul if xp is np else xp.matmul


def _mT(xp, a):
    return xp.swapaxes(a, -1, -2)


@register("matmul")
class Matmul(Op):
    """y = a @ b with NumPy's rules (vectors are promoted, batch dims broadcast).

    VJP: ga = gy @ bᵀ, gb = aᵀ @ gy on the promoted shapes; the engine sums broadcast batch dims.
    Named as torch names the cases: DotBackward0, MvBackward0, MmBackward0, BmmBackward0.
    """
    formula = "ga = gy @ bᵀ, gb = aᵀ @ gy"
    promotes = "same"  # as torch: no promotion, mixed dtypes are an error
    double_backward = batched_jvp = True

    def forward(self, xp, a, b):
        threads.fit(xp, a.size * b.shape[-1])  # BLAS threads for the free cores (backward's products: the same size)
        return self._forward(matmul_of(xp), a, b)

    def forward_cuda(self, xp, a, b):
        return self._forward(cublas.matmul, a, b)

    def backward(self, xp, gy):
        return self._backward(xp, matmul_of(xp), gy)

    def backward_cuda(self, xp, gy):
        return self._backward(xp, cublas.matmul, gy)

    def jvp(self, xp, ins, out, ts):
        return self._jvp(xp, matmul_of(xp), ins, ts)

    def jvp_cuda(self, xp, ins, out, ts):
        return self._jvp(xp, cublas.matmul, ins, ts)

    def _forward(self, mm, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"matmul: both operands need at least one dimension, got shapes {a.shape} and {b.shape}")
        if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned "
                             f"({a.shape[-1]} != {b.shape[-2 if b.ndim > 1 else 0]})")
        self.a_vec, self.b_vec = a.ndim == 1, b.ndim == 1
        self._name = ("DotBackward0" if self.a_vec and self.b_vec else "MvBackward0" if self.b_vec and a.ndim == 2
                      else "MmBackward0" if a.ndim == 2 and b.ndim == 2 else "BmmBackward0")
        ra, rb = self.needs_input_grad[:2]
        self.save_for_backward(a if rb else None, b if ra else None)
        if a.ndim > 2 or b.ndim > 2:
            self.private_saved = _torch_copies(a, b, ra, rb)
        return mm(a, b)

    def _backward(self, xp, mm, gy):
        a, b = self.saved
        if self.b_vec:
            gy = xp.expand_dims(gy, -1)
        if self.a_vec:
            gy = xp.expand_dims(gy, -2)
        ga = gb = None
        if b is not None:
            b2 = xp.expand_dims(b, -1) if self.b_vec else b
            ga = mm(gy, _mT(xp, b2))
            ga = xp.squeeze(ga, -2) if self.a_vec else ga
        if a is not None:
            a2 = xp.expand_dims(a, -2) if self.a_vec else a
            gb = mm(_mT(xp, a2), gy)
            gb = xp.squeeze(gb, -1) if self.b_vec else gb
        return ga, gb

    def _jvp(self, xp, mm, ins, ts):  # the product rule: ta @ b + a @ tb
        (a, b), (ta, tb) = ins, ts
        da = mm(ta, b) if ta is not None else None  # a batch of B tangents (B, *a.shape) broadcasts as is
        db = None
        if tb is not None:
            if self.b_vec and tb.ndim > 1:  # B vector tangents (B, k): matmul would read them as a (B, k) matrix
                db = mm(tb, a) if self.a_vec else xp.squeeze(mm(a, xp.expand_dims(tb, -1)), -1)
            else:
                db = mm(a, tb)
        return db if da is None else da if db is None else da + db

    @staticmethod
    def matmul(input, other):
        return Matmul.apply(input, as_operand(other, input))


def _torch_copies(a, b, ra, rb):
    """The saved operands (0: a, 1: b) that torch's matmul saves as copies of its own, so that changing them in place
    is legal there: a batched operand folded to rows or broadcast to the common batch where the strides do not
    allow a view (at::native::_matmul_impl and should_fold, torch 2.x).  gpugrad computes with the operand as it is
    and copies only if it is then changed in place (Op.private_saved)."""
    (sa, ta), (sb, tb) = (a.shape, a.strides), (b.shape, b.strides)
    if len(sa) == 3 and len(sb) == 3 and sa[0] != sb[0]:  # a batch of 1 that needs a gradient is squeezed first
        if sa[0] == 1 and ra:
            sa, ta = sa[1:], ta[1:]
        elif sb[0] == 1 and rb:
            sb, tb = sb[1:], tb[1:]
    if len(sa) <= 2 or len(sb) <= 2:
        # One operand has >= 3 axes.  If the other one needs a gradient, torch folds the big one (b transposed) into
        # a (rows, k) matrix for mm/mv and saves that; otherwise the big one is not saved at all.  The small one
        # is always saved as a view.
        big_is_a = len(sa) >= len(sb)
        if not (rb if big_is_a else ra):
            return ()
        shape, strides = (list(sa), list(ta)) if big_is_a else (list(sb), list(tb))
        if not big_is_a:  # b.mT
            shape[-2:], strides[-2:] = shape[:-3:-1], strides[:-3:-1]
        return () if _can_view(shape, strides, (math.prod(shape[:-1]), shape[-1])) else (0 if big_is_a else 1,)
    # Both batched: bmm on each operand expanded to the common batch and flattened to (batch, n, m).
    batch = tuple(max(n, m) for n, m in zip((1,) * (len(sb) - len(sa)) + sa[:-2], (1,) * (len(sa) - len(sb)) + sb[:-2]))
    out = []
    for i, (shape, strides, saved) in enumerate(((sa, ta, rb), (sb, tb, ra))):
        if saved:
            lead = len(batch) + 2 - len(shape)
            expanded = [0] * lead + [0 if n == 1 and m != 1 else st for n, m, st in zip(shape[:-2], batch[lead:],
                                                                                       strides[:-2])]
            if not _can_view(list(batch) + list(shape[-2:]), expanded + list(strides[-2:]),
                             (math.prod(batch),) + tuple(shape[-2:])):
                out.append(i)
    return tuple(out)


def _can_view(shape, strides, new_shape):
    """Whether memory laid out as (shape, strides) can be viewed as new_shape without a copy (torch's computeStride;
    strides in any unit)."""
    if math.prod(shape) == 0:
        return True
    view_d, base, tensor_numel, view_numel = len(new_shape) - 1, strides[-1], 1, 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * base):  # the end of a contiguous chunk
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if d > 0:
                base, tensor_numel, view_numel = strides[d - 1], 1, 1
    return view_d == -1


# torch's names of the dtypes in its matmul errors: C++ ("double != float") and short ("Double and Float")
_C_NAMES = {"float64": "double", "float32": "float", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
            "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char", "uint8": "unsigned char"}
_SHORT_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
                "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte"}


def _same_dtypes(x, w, b):
    """As torch, linear's input, weight and bias share one dtype (no promotion): torch's addmm / matmul errors."""
    if x.dtype == w.dtype and (b is None or b.dtype == w.dtype):  # NOTE: not dtype.name, a Python property
        return
    detail = f" (linear: input {x.dtype}, weight {w.dtype}, bias {None if b is None else b.dtype}; convert with .to)"
    if b is None:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_C_NAMES.get(x.dtype.name)} != "
                           f"{_C_NAMES.get(w.dtype.name)}{detail}")
    which, t = ("self", b) if b.dtype != w.dtype else ("mat1", x)  # torch's order: the bias, then the input
    raise RuntimeError(f"{which} and mat2 must have the same dtype, but got {_SHORT_NAMES.get(t.dtype.name)} and "
                       f"{_SHORT_NAMES.get(w.dtype.name)}{detail}")


@register("linear")
class Linear(KernelOp):
    """y = x @ wᵀ + b (b optional, a keyword-less third input).  AddmmBackward0 as in torch.

    VJP: gx = gy @ w, gw = gyᵀ @ x (leading dims folded), gb = Σ gy over the leading axes (the bias-gradient
    kernel on CUDA, a BLAS-friendly sum on the CPU).
    """
    formula = "gx = gy @ w, gw = gyᵀ @ x, gb = Σ gy over the leading axes"
    double_backward = False
    batched_jvp = True

    def _fwd(self, impl, xp, x, w, b=None):
        _same_dtypes(x, w, b)
        if x.shape[-1] != w.shape[-1] or w.ndim != 2 or (b is not None and b.shape != (w.shape[0],)):
            raise ValueError(f"linear: input {x.shape}, weight {w.shape}, bias {None if b is None else b.shape}: "
                             "expected input (..., in), weight (out, in), bias (out,); the input's last axis must "
                             "equal the weight's in_features")
        self._name = "AddmmBackward0" if b is not None else "MmBackward0"
        ng = self.needs_input_grad
        self.save_for_backward(x if ng[1] else None, w if ng[0] else None)
        threads.fit(xp, x.size * w.shape[0])
        mm = _gemm(impl, xp)
        y = R.matmul_nt(x, w) if mm is R.matmul else mm(x, w.T)  # (the CPU's: its faster order)
        if b is not None:
            y += b  # y is a fresh product: adding in place saves a temporary the size of the output
        return y

    def _bwd(self, impl, xp, gy):
        x, w = self.saved
        ng = self.needs_input_grad
        # The row count is explicit: reshape(-1, 0) cannot infer it when in- or out-features are 0 (as torch: empty
        # gx / gw, and gb the column sums of gy).
        rows = math.prod(gy.shape[:-1])
        gy2 = gy.reshape(rows, gy.shape[-1])
        mm = _gemm(impl, xp)
        gx = mm(gy, w) if ng[0] else None
        gw = mm(gy2.T, x.reshape(rows, x.shape[-1])) if ng[1] else None
        gb = impl.sum_rows(xp, gy2) if len(ng) > 2 and ng[2] else None
        return (gx, gw, gb) if len(ng) > 2 else (gx, gw)

    def backward_graph(self, xp, gy):
        return self._bwd(_TensorSums, xp, gy)

    def _jvp(self, impl, xp, ins, out, ts):  # the product rule: tx @ wᵀ + x @ twᵀ + tb
        x, w = ins[:2]
        tx, tw = ts[:2]
        tb = ts[2] if len(ts) > 2 else None
        mm = _gemm(impl, xp)
        dy = mm(tx, xp.swapaxes(w, -1, -2)) if tx is not None else None
        if tw is not None:
            d = mm(x, xp.swapaxes(tw, -1, -2))
            dy = d if dy is None else dy + d
        if tb is not None:
            dy = tb if dy is None else dy + tb
        return dy


class _TensorSums:
    """``sum_rows`` over Tensors, for Linear's VJP under create_graph."""

    @staticmethod
    def sum_rows(xp, g):
        return g.sum(axis=0)
