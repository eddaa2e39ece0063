"""``gpugrad.linalg``: torch.linalg's norms, inverses, solves and determinants, batched over leading dims.

    x = gpugrad.linalg.solve(A, b)            # A x = b, with gradients for A and b (any order)
    gpugrad.linalg.matrix_norm(A, ord=1)      # max column sum of |A|

Supported matrix norms: 'fro', 1, -1, inf, -inf, with gradients; 'nuc', 2 and -2 (from singular values) only without
gradients, since gpugrad has no differentiable SVD: under grad mode, for an input that requires grad, they raise.
"""
from __future__ import annotations

import math
import numbers

from gpugrad import return_types
from gpugrad.backend import on
from gpugrad.core.args import canonical_axis, dims, with_dtype
from gpugrad.core.grad_mode import STATE
from gpugrad.core.names import type_name
from gpugrad.core.tensor import make
from gpugrad.ops.linalg import LinalgVectorNorm
from gpugrad.ops.linalg_solve import LinalgDet, LinAlgError, LinalgInv, LinalgSlogdet, LinalgSolve

__all__ = ["LinAlgError", "det", "inv", "matrix_norm", "norm", "slogdet", "solve", "vector_norm"]


def inv(A):
    """A⁻¹ for each square matrix of ``A`` (..., n, n); a singular one raises LinAlgError."""
    return LinalgInv.inv(A)


def solve(A, B, *, left=True):
    """X with A X = B (``left=False``: X A = B), for A (..., n, n) and B (..., n) or (..., n, k), batch dims
    broadcast; a singular A raises LinAlgError."""
    return LinalgSolve.solve(A, B, left=left)


def det(A):
    """The determinant of each square matrix of ``A``."""
    return LinalgDet.det(A)


def slogdet(A):
    """(sign, log |det A|) as ``return_types.linalg_slogdet``: sign 0 and -inf for a singular matrix."""
    return return_types.linalg_slogdet(LinalgSlogdet.slogdet(A))


def _floating(op, A):
    if A.dtype.kind not in "fcV":  # bfloat16 is ml_dtypes' kind "V"
        raise RuntimeError(f"linalg.{op}: Expected a floating point or complex tensor as input. Got "
                           f"{type_name(A.dtype)}")


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """(Σ |x|^ord)^(1/ord) over all elements or ``dim`` (int or tuple): ord any number, inf (max |x|), -inf (min),
    0 (the count of non-zeros)."""
    if not isinstance(ord, numbers.Number) or isinstance(ord, bool):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not {type(ord).__name__}")
    _floating("vector_norm", x)
    return LinalgVectorNorm.apply(with_dtype(x, dtype), ord=float(ord), **dims(dim, keepdim, {}, "linalg.vector_norm"))


def _singular_values(A, d0, d1):
    """The singular values of the (d0, d1) planes (no gradient: see the module's docstring)."""
    if STATE.enabled and (A.requires_grad or A._fw_grad is not None):
        raise NotImplementedError("linalg.matrix_norm: ord='nuc', 2 and -2 need the singular values' derivatives, "
                                  "which gpugrad does not have (no differentiable SVD); compute it under "
                                  "gpugrad.no_grad() or on A.detach(), or use ord='fro', 1 or inf")
    be = A._backend
    with on(be):
        moved = be.xp.moveaxis(A._data, (d0, d1), (-2, -1))
        return make(be.as_array(be.xp.linalg.svd(moved, compute_uv=False)), be)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """A matrix norm of the planes ``dim`` of A: 'fro' (Frobenius), 1 / -1 (max / min column sum of |A|), inf / -inf
    (max / min row sum), 'nuc' (sum of singular values), 2 / -2 (largest / smallest singular value)."""
    _floating("matrix_norm", A)
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    dim = tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {', '.join(map(str, dim))}")
    d0, d1 = (canonical_axis(d, A.ndim, "linalg.matrix_norm") for d in dim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    A = with_dtype(A, dtype)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        s = _singular_values(A, d0, d1)
        out = s.sum(-1) if ord == "nuc" else s.amax(-1) if ord == 2 else s.amin(-1)
        return out.reshape([1 if i in (d0, d1) else n for i, n in enumerate(A.shape)]) if keepdim else out
    if not isinstance(ord, numbers.Number) or abs(ord) not in (1, math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if abs(ord) == math.inf:  # row sums: the roles of the two dims swap
        d0, d1 = d1, d0
    sums = A.abs().sum(d0, keepdim=keepdim)
    d1 -= not keepdim and d0 < d1  # the summed dim is gone
    out = sums.amax(d1, keepdim=keepdim) if ord > 0 else sums.amin(d1, keepdim=keepdim)
    if out.grad_fn is not None:  # torch's node: amax / amin over the sums
        out.grad_fn._name = "AmaxBackward0" if ord > 0 else "AminBackward0"
    return out


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """A vector norm or a matrix norm, as torch.linalg.norm decides: ``dim`` an int (or ord None with dim None: the
    2-norm of all elements) gives vector_norm, ``dim`` a 2-tuple (or ord given for a 2-D A) matrix_norm."""
    if isinstance(dim, numbers.Integral):
        dim = (dim,)
    if dim is None and ord is not None:
        if A.ndim not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                               f"{A.ndim}D.")
        dim = tuple(range(A.ndim))
    if dim is not None and len(dim) == 2 or isinstance(ord, str):  # a named order is a matrix norm's
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)

