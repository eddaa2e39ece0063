"""Square matrices, batched over leading dims: ``inv``, ``solve``, ``det`` and ``slogdet`` with their VJPs, JVPs and
second derivatives (``gpugrad.linalg`` and ``torch.inverse`` / ``det`` / ``slogdet`` / ``logdet``).

NumPy's and CuPy's ``linalg`` compute (LAPACK on the CPU, cuSOLVER on CUDA).  Each VJP is written once against
``xp``; on Tensors (create_graph) its inverse and solves are these ops again, so every order is differentiable.
A singular matrix raises torch's ``LinAlgError`` where an inverse or a solve needs one: at once on the CPU; on CUDA,
where CuPy raises nothing (it checks cuSOLVER's status only under ``cupyx.errstate(linalg='raise')``), a device-side
check of the result records it and the next read from the device raises it (``backend/deferred.py``: no sync).
"""
from __future__ import annotations

import numpy as np

from gpugrad import return_types
from gpugrad.backend.deferred import check_range
from gpugrad.core import tensor_xp
from gpugrad.core.names import type_name
from gpugrad.core.op import Op
from gpugrad.core.registry import composite, register
from gpugrad.core.tensor import make


class LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: a matrix is singular (not invertible) where the op needs it to be."""


def check_matrices(op, *tensors):
    """torch's checks of ``linalg.<op>``'s inputs: floating (not half precision), at least 2-D, square."""
    for a in tensors:
        if a.dtype.kind not in "fcV":  # bfloat16 (kind "V") is floating, and refused below as torch does
            raise RuntimeError(f"linalg.{op}: Expected a floating point or complex tensor as input. Got "
                               f"{type_name(a.dtype)}")
        if a.dtype.itemsize < 4:
            raise RuntimeError(f"linalg.{op}: Low precision dtypes not supported. Got {type_name(a.dtype)}")
    a = tensors[0]
    if a.ndim < 2:
        raise RuntimeError(f"linalg.{op}: The input tensor A must have at least 2 dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{op}: A must be batches of square matrices, but they are {a.shape[-2]} by "
                           f"{a.shape[-1]} matrices")


def _mT(xp, a):
    return xp.swapaxes(a, -1, -2)


def _zero_pivot(m):
    """The 1-based column where LU with partial pivoting (LAPACK's getrf) meets an exact zero pivot, or None."""
    m = np.array(m, copy=True)
    for k in range(m.shape[0]):
        p = k + int(np.argmax(np.abs(m[k:, k])))
        if m[p, k] == 0:
            return k + 1
        m[[k, p]] = m[[p, k]]
        m[k + 1:, k:] -= np.outer(m[k + 1:, k] / m[k, k], m[k, k:])
    return None


def _singular_error(op, a):
    """torch's LinAlgError for the first singular matrix of the batch ``a`` (host data)."""
    flat = a.reshape((-1,) + a.shape[-2:])
    for i, m in enumerate(flat):
        pivot = _zero_pivot(m)
        try:
            if pivot is None:
                np.linalg.inv(m)
                continue
        except np.linalg.LinAlgError:
            pass
        where = f"(Batch element {i}): " if a.ndim > 2 else ""
        if op == "inv" and pivot is not None:
            return LinAlgError(f"linalg.inv: {where}The diagonal element {pivot} is zero, the inversion could not be "
                               "completed because the input matrix is singular.")
        if op == "inv":
            return LinAlgError(f"linalg.inv: {where}The input matrix is singular, the inversion could not be "
                               "completed.")
        return LinAlgError(f"torch.linalg.solve: {where}The solver failed because the input matrix is singular.")
    return LinAlgError(f"linalg.{op}: the input matrix is singular")


def _checked(be, op, a, compute):
    """``compute()`` (an inverse or a solve of the matrices ``a``), with torch's LinAlgError for a singular one."""
    if be.name == "cpu":
        try:
            return compute()
        except np.linalg.LinAlgError:
            raise _singular_error(op, a) from None
    xp = be.xp
    out = compute()
    if a.size:  # CuPy returns non-finite values for a singular matrix: flagged on the device (NaN inputs excluded)
        bad = ~xp.all(xp.isfinite(out.reshape(out.shape[:a.ndim - 2] + (-1,))), axis=-1) & xp.all(
            xp.isfinite(a.reshape(a.shape[:-2] + (-1,))), axis=-1)
        message = ("linalg.inv: The input matrix is singular, the inversion could not be completed." if op == "inv"
                   else "torch.linalg.solve: The solver failed because the input matrix is singular.")
        check_range(bad.reshape(-1).astype(np.int64), 1, LinAlgError, message)
    return out


def _inv(xp, be, a):
    if xp is tensor_xp:
        return LinalgInv.apply(a)
    return _checked(be, "inv", a, lambda: xp.linalg.inv(a))


def _solve(xp, be, a, b, vector):
    """A⁻¹ b with A's and b's batch dims broadcast (CuPy's solve does not broadcast them); b a batch of vectors
    (..., n) when ``vector``, else of matrices (..., n, k)."""
    if xp is tensor_xp:
        return LinalgSolve.apply(a, b, vector=vector, left=True)
    rhs = b[..., None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    n = a.shape[-1]
    a2 = xp.broadcast_to(a, batch + (n, n))
    b2 = xp.broadcast_to(rhs, batch + rhs.shape[-2:])
    x = _checked(be, "solve", a2, lambda: xp.linalg.solve(a2, b2))
    return x[..., 0] if vector else x


def _svd_cofactors(xp, a):
    """The cofactor matrices of ``a`` (batched, any rank): det(U) det(V) U diag(prod of the other s_j) Vᵀ for
    a = U diag(s) Vᵀ, which is det(a) a⁻ᵀ where a is invertible and stays exact where it is not."""
    if a.shape[-1] == 0:
        return xp.zeros(a.shape, dtype=a.dtype)
    u, s, vh = xp.linalg.svd(a)
    ones = xp.ones(s.shape[:-1] + (1,), dtype=s.dtype)
    before = xp.cumprod(xp.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(s, -1)[..., :-1]], axis=-1), axis=-1), -1)
    sign = xp.linalg.det(u) * xp.linalg.det(vh)
    return (u * (before * after)[..., None, :]) @ vh * xp.asarray(sign)[..., None, None]


def _svd_inverse_t(xp, a):
    """a⁻ᵀ = U diag(1/s) Vᵀ (infinite where a is singular, as torch's slogdet gradient there)."""
    u, s, vh = xp.linalg.svd(a)
    positive = s > 0
    return (u * xp.where(positive, 1 / xp.where(positive, s, 1), xp.inf)[..., None, :]) @ vh


def _matrix_dims(xp, g):
    return xp.expand_dims(xp.expand_dims(g, -1), -1)


@register("linalg_inv", method=False, function=False, node="LinalgInvExBackward0")
class LinalgInv(Op):
    """Y = A⁻¹.  VJP: gA = -Yᵀ gY Yᵀ.  JVP: dY = -Y dA Y."""
    double_backward = batched_jvp = True
    formula = "gA = -Yᵀ @ gY @ Yᵀ"

    def forward(self, xp, a):
        y = _inv(xp, self._be, a)
        self.save_for_backward(y)
        return y

    def backward(self, xp, gy):
        (y,) = self.saved
        yt = _mT(xp, y)
        return -xp.matmul(xp.matmul(yt, gy), yt)

    def jvp(self, xp, ins, out, ts):
        return -xp.matmul(xp.matmul(out, ts[0]), out)

    @staticmethod
    def inv(A):
        check_matrices("inv", A)
        return LinalgInv.apply(A)


@register("linalg_solve", method=False, function=False, node="LinalgSolveExBackward0")
class LinalgSolve(Op):
    """X = A⁻¹ B (B a batch of vectors when ``vector``), batch dims broadcast.

    VJP: gB = A⁻ᵀ gX (a solve with Aᵀ), gA = -gB Xᵀ.  JVP: dX = A⁻¹ (dB - dA X).
    """
    double_backward = True
    formula = "gB = solve(Aᵀ, gX); gA = -gB @ Xᵀ"

    left = True

    def _side(self, xp, m):
        """X A = B (``left=False``) is Aᵀ Xᵀ = Bᵀ: its matrices transposed (an involution) give the left problem."""
        return m if self.left or m is None else _mT(xp, m)

    def forward(self, xp, a, b):
        x = self._side(xp, _solve(xp, self._be, self._side(xp, a), self._side(xp, b), self.vector))
        self.save_for_backward(a, x)
        return x

    def backward(self, xp, gx):
        a, x = (self._side(xp, m) for m in self.saved)
        gb = _solve(xp, self._be, _mT(xp, a), self._side(xp, gx), self.vector)
        ga = None
        if self.needs_input_grad[0]:
            ga = -(xp.expand_dims(gb, -1) * xp.expand_dims(x, -2) if self.vector else xp.matmul(gb, _mT(xp, x)))
        return self._side(xp, ga), self._side(xp, gb)

    def jvp(self, xp, ins, out, ts):
        a, x, ta, tb = (self._side(xp, m) for m in (ins[0], out, *ts))
        rhs = tb
        if ta is not None:
            dax = xp.squeeze(xp.matmul(ta, xp.expand_dims(x, -1)), -1) if self.vector else xp.matmul(ta, x)
            rhs = -dax if rhs is None else rhs - dax
        return self._side(xp, _solve(xp, self._be, a, rhs, self.vector))

    @staticmethod
    def solve(A, B, *, left=True):
        """X with A X = B (``left=False``: X A = B); B a batch of vectors (..., n) or matrices (..., n, k)."""
        check_matrices("solve", A, B)
        if B.ndim < 1:
            raise RuntimeError("linalg.solve: The input tensor B must have at least 1 dimensions.")
        if A.dtype != B.dtype:
            raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
                               f"{type_name(A.dtype)} and B of type {type_name(B.dtype)} instead")
        n = A.shape[-1]
        vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
        rows, cols = (B.shape[-1], 1) if vector else tuple(B.shape[-2:])
        if (rows if left else cols) != n or (not left and vector and n != 1):
            raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                               f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {rows}x{cols})")
        try:
            np.broadcast_shapes(A.shape[:-2], B.shape[:-1] if vector else B.shape[:-2])
        except ValueError:
            raise RuntimeError(f"linalg.solve: the batch dims of A {list(A.shape[:-2])} and B "
                               f"{list(B.shape[:-1 if vector else -2])} do not broadcast") from None
        return LinalgSolve.apply(A, B, vector=vector and left, left=left)


@register("linalg_det", method=False, function=False, node="LinalgDetBackward0")
class LinalgDet(Op):
    """d = det(A).  VJP: gA = gd * cof(A), cof(A) = det(A) A⁻ᵀ (from an SVD on arrays, so singular matrices get
    the exact cofactors).  JVP: dd = Σ cof(A) ∘ dA.  On Tensors (create_graph): gd * d * inv(A)ᵀ."""
    double_backward = False
    batched_jvp = True
    formula = "gA = gd * det(A) * A⁻ᵀ (the cofactor matrix)"

    def forward(self, xp, a):
        d = xp.linalg.det(a)
        self.save_for_backward(a, d)
        return d

    def backward(self, xp, gd):
        a, _ = self.saved
        return _matrix_dims(xp, gd) * _svd_cofactors(xp, a)

    def backward_graph(self, xp, gd):
        a, d = self.saved
        return _matrix_dims(xp, gd * d) * _mT(xp, LinalgInv.apply(a))

    def jvp(self, xp, ins, out, ts):
        if xp is tensor_xp:
            return out * xp.sum(_mT(xp, LinalgInv.apply(ins[0])) * ts[0], axis=(-2, -1))
        return xp.sum(_svd_cofactors(xp, ins[0]) * ts[0], axis=(-2, -1))

    @staticmethod
    def det(A):
        check_matrices("det", A)
        return LinalgDet.apply(A)


@register("linalg_slogdet", method=False, function=False, node="LinalgSlogdetBackward0")
class LinalgSlogdet(Op):
    """log |det(A)| (the sign, which has no derivative, goes to ``signs``).  VJP: gA = g A⁻ᵀ.  JVP: Σ A⁻ᵀ ∘ dA."""
    batched_jvp = True
    formula = "gA = g * A⁻ᵀ"

    def forward(self, xp, a):
        sign, logabs = xp.linalg.slogdet(a)
        self.signs.append(sign)
        self.save_for_backward(a)
        return logabs

    def backward(self, xp, g):
        (a,) = self.saved
        return _matrix_dims(xp, g) * _svd_inverse_t(xp, a)

    def backward_graph(self, xp, g):
        return _matrix_dims(xp, g) * _mT(xp, LinalgInv.apply(self.saved[0]))

    def jvp(self, xp, ins, out, ts):
        inv_t = _mT(xp, LinalgInv.apply(ins[0])) if xp is tensor_xp else _svd_inverse_t(xp, ins[0])
        return xp.sum(inv_t * ts[0], axis=(-2, -1))

    @staticmethod
    def slogdet(A):
        """(sign, log |det A|); the sign records a node too (its derivative is 0), as torch's."""
        check_matrices("slogdet", A)
        signs = []
        logabs = LinalgSlogdet.apply(A, signs=signs)
        sign = make(logabs._backend.as_array(signs[0]), logabs._backend)
        if logabs.requires_grad:
            # through the node that computed it, as torch's, whose formula ignores the sign's gradient: a gradient
            # of the sign alone reaches A as none at all (A.grad stays None)
            sign = tensor_xp.depends(sign, logabs, undefined=True)
            if sign._grad_fn is not None:  # None where a transform (func.grad's per-sample run) keeps no graph here
                sign._grad_fn._name = "LinalgSlogdetBackward0"
        return sign, logabs


@composite("inverse")
def inverse(input):
    """The inverse of each square matrix (torch.inverse, torch.linalg.inv)."""
    return LinalgInv.inv(input)


@composite("det")
def det(input):
    """The determinant of each square matrix (torch.det, torch.linalg.det)."""
    return LinalgDet.det(input)


@composite("slogdet")
def slogdet(input):
    """(sign, log |det|) of each square matrix, as ``return_types.slogdet`` (torch.slogdet)."""
    return return_types.slogdet(LinalgSlogdet.slogdet(input))


@composite("logdet")
def logdet(input):
    """log det of each square matrix: NaN where the determinant is negative, -inf where it is 0."""
    sign, logabs = LinalgSlogdet.slogdet(input)
    return tensor_xp.where(sign < 0, np.nan, logabs)
