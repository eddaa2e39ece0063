"""``torch.linalg`` as torch users call it: norms, inverses, solves, determinants and their gradients, batched,
with torch's result types and errors (tests/compat/harness.py).  Second derivatives and forward mode of the ops are
checked over the op table (tests/op_cases.py); here the habits."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from tests.compat.harness import check, compat

A = [[4.0, 1.0, -1.0], [2.0, 5.0, 0.5], [0.0, -1.0, 3.0]]
B = [[1.0, 2.0], [0.0, -1.0], [3.0, 0.5]]


def _with_grads(torch, f, *data):
    xs = [torch.tensor(d, dtype=torch.float64, requires_grad=True) for d in data]
    y = f(*xs)
    out = y if isinstance(y, torch.Tensor) else y[-1]
    out.backward(torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape))
    return y, [x.grad for x in xs]


@compat
def test_import_torch_linalg_as_a_module(torch):
    return torch.linalg.__name__.split(".")[-1], callable(torch.linalg.solve), issubclass(torch.linalg.LinAlgError,
                                                                                          RuntimeError)


@compat
def test_inv_and_inverse_with_gradients(torch):
    return _with_grads(torch, lambda a: torch.linalg.inv(a) + torch.inverse(a * 2) + a.inverse(), A)


@compat
def test_inv_of_a_batch_and_of_empty_matrices(torch):
    a = torch.tensor([A, np.eye(3).tolist()])
    return torch.linalg.inv(a), torch.linalg.inv(torch.ones(2, 0, 0)), torch.linalg.inv(a).grad_fn


@compat
def test_solve_vector_and_matrix_right_hand_sides_with_gradients(torch):
    return (_with_grads(torch, torch.linalg.solve, A, B), _with_grads(torch, torch.linalg.solve, A, [1.0, 2.0, 3.0]),
            _with_grads(torch, lambda a, b: torch.linalg.solve(a, b, left=False), A, np.transpose(B).tolist()))


@compat
def test_solve_broadcasts_batch_dims(torch):
    a = torch.tensor([A, np.eye(3).tolist()])  # (2, 3, 3)
    return (torch.linalg.solve(a, torch.tensor([1.0, 2.0, 3.0])), torch.linalg.solve(a, torch.ones(2, 3)),
            torch.linalg.solve(a.unsqueeze(1), torch.ones(4, 3, 2)).shape, torch.linalg.solve(a, torch.ones(3, 1)))


@compat
def test_det_slogdet_logdet_with_gradients(torch):
    neg = (-np.array(A)).tolist()
    return (_with_grads(torch, lambda a: torch.linalg.det(a) + torch.det(a.T) + a.det(), A),
            _with_grads(torch, torch.linalg.slogdet, neg), _with_grads(torch, torch.slogdet, A),
            _with_grads(torch, torch.logdet, A), torch.logdet(torch.tensor(neg)),
            torch.logdet(torch.zeros(2, 2)), torch.linalg.det(torch.ones(0, 0)))


@compat
def test_slogdet_result_types_and_a_singular_matrix(torch):
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    return (type(torch.linalg.slogdet(a)).__name__, type(torch.slogdet(a)).__name__, torch.linalg.slogdet(a),
            torch.linalg.slogdet(torch.tensor(A, requires_grad=True)).sign.requires_grad)


@compat
def test_matrix_norms_with_gradients(torch):
    ords = ["fro", 1, -1, float("inf"), float("-inf")]
    return [_with_grads(torch, lambda a, o=o: torch.linalg.matrix_norm(a, o), A) for o in ords]


@compat
def test_matrix_norm_dims_keepdim_and_dtype(torch):
    x = torch.arange(24.0).reshape(2, 3, 4) - 10
    return (torch.linalg.matrix_norm(x, 1, dim=(0, 2)), torch.linalg.matrix_norm(x, float("inf"), dim=(2, 0)),
            torch.linalg.matrix_norm(x, keepdim=True), torch.linalg.matrix_norm(x, -1, dim=(-1, 0), keepdim=True),
            torch.linalg.matrix_norm(x, dtype=torch.float64))


@compat
def test_nuclear_and_spectral_norms_without_gradients(torch):
    x = torch.tensor([A, B[:1] * 3])
    return torch.linalg.matrix_norm(x, "nuc"), torch.linalg.matrix_norm(x, 2), torch.linalg.matrix_norm(x, -2,
                                                                                                        keepdim=True)


@compat
def test_vector_norm(torch):
    x = torch.tensor([[3.0, -4.0, 0.0], [1.0, 2.0, -2.0]])
    return (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, dim=1), torch.linalg.vector_norm(x, 0),
            torch.linalg.vector_norm(x, float("inf"), dim=(0, 1), keepdim=True), torch.linalg.vector_norm(x, 3.5, 0),
            torch.linalg.vector_norm(x, dtype=torch.float64))


@compat
def test_linalg_norm_picks_vector_or_matrix_norms(torch):
    x = torch.tensor(A)
    return (torch.linalg.norm(x), torch.linalg.norm(x, "fro"), torch.linalg.norm(x, 1), torch.linalg.norm(x[0], 1),
            torch.linalg.norm(x, dim=1), torch.linalg.norm(x, float("inf"), dim=(0, 1)),
            torch.linalg.norm(x.reshape(1, 3, 3), dim=(1, 2), keepdim=True), torch.linalg.norm(x, 3, dim=0))


@pytest.mark.parametrize("call", [
    lambda t: t.linalg.inv(t.ones(2, 2, dtype=t.int64)),
    lambda t: t.linalg.inv(t.ones(2, 2, dtype=t.float16)),
    lambda t: t.linalg.inv(t.ones(2, 3)),
    lambda t: t.linalg.inv(t.ones(3)),
    lambda t: t.linalg.solve(t.eye(3), t.ones(2)),
    lambda t: t.linalg.solve(t.eye(3).expand(2, 3, 3), t.ones(4, 3)),
    lambda t: t.linalg.solve(t.eye(2), t.ones(2, dtype=t.float64)),
    lambda t: t.linalg.solve(t.eye(2), t.ones(2), left=False),
    lambda t: t.linalg.det(t.ones(2, 3)),
    lambda t: t.linalg.det(t.ones(2, 2, dtype=t.int64)),
    lambda t: t.linalg.slogdet(t.ones(3)),
    lambda t: t.linalg.matrix_norm(t.ones(2, 2), 3),
    lambda t: t.linalg.matrix_norm(t.ones(2)),
    lambda t: t.linalg.matrix_norm(t.ones(2, 2, 3), dim=(0, 0)),
    lambda t: t.linalg.vector_norm(t.ones(2, 2), "fro"),
    lambda t: t.linalg.vector_norm(t.ones(2, dtype=t.int64)),
    lambda t: t.linalg.norm(t.ones(2, 2, 2), 2),
    lambda t: t.linalg.norm(t.ones(3), "fro"),
    lambda t: t.linalg.norm(t.ones(3, 3), "nuc", dim=0),
], ids=["inv_int", "inv_half", "inv_not_square", "inv_vector", "solve_shapes", "solve_rhs", "solve_dtypes",
        "solve_left_vector", "det_not_square", "det_int", "slogdet_vector",
        "norm_order", "norm_vector", "norm_dims", "vector_norm_fro", "vector_norm_int", "norm_3d_with_ord", "norm_fro_of_a_vector",
        "norm_nuc_one_dim"])
def test_linalg_refuses_as_torch(call):
    """(Singular matrices raise torch.linalg.LinAlgError, which the harness cannot compare: see below.)"""
    check(call)


def test_singular_matrices_raise_linalg_errors_with_torchs_messages(torch):
    # row 2 = 2 x row 1: partial pivoting's LU reaches U[2, 2] = 0 exactly (multipliers 1/2, small integers), on any
    # LAPACK; [[1, 2, 3], [4, 5, 6], [7, 8, 9]] leaves a rounding residue there that one build treats as singular
    # and another (torch's MKL on an AVX-512 machine) inverts
    singular = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 1.0, 1.0]]
    batch = [np.eye(3).tolist(), singular]
    for lib in (torch, gpugrad):
        with pytest.raises(lib.linalg.LinAlgError, match="linalg.inv: The diagonal element 3 is zero, the inversion "
                                                         "could not be completed because the input matrix is singular"):
            lib.linalg.inv(lib.tensor(singular))
        with pytest.raises(lib.linalg.LinAlgError, match=r"\(Batch element 1\): The diagonal element 3 is zero"):
            lib.linalg.inv(lib.tensor(batch))
        with pytest.raises(lib.linalg.LinAlgError, match="linalg.solve: The solver failed because the input matrix "
                                                         "is singular"):
            lib.linalg.solve(lib.tensor(singular), lib.ones(3))


def test_gradient_of_dets_tangent_is_the_closed_forms(torch):
    """Reverse over forward through det: the gradient of w * (the tangent of det(A) along T) = w * det(A) tr(A^-1 T)
    equals float64 finite differences and torch's autograd of that closed form. A deliberate difference: torch 2.13's
    backward through its own det tangent gives another matrix (found by the fuzzer, tests/fuzz/known_differences.py)."""
    rng = np.random.default_rng(3)
    a, t, w = rng.standard_normal((3, 3)), rng.standard_normal((3, 3)), 0.7

    def closed(m):
        return w * np.linalg.det(m) * np.trace(np.linalg.solve(m, t))

    eps, fd = 1e-6, np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            e = np.zeros((3, 3))
            e[i, j] = eps
            fd[i, j] = (closed(a + e) - closed(a - e)) / (2 * eps)
    x = gpugrad.tensor(a, requires_grad=True)
    fa = gpugrad.autograd.forward_ad
    with fa.dual_level():
        tangent = fa.unpack_dual(gpugrad.linalg.det(fa.make_dual(x, gpugrad.tensor(t)))).tangent
        (tangent * w).backward()
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    ta = torch.tensor(a, requires_grad=True)
    (w * torch.linalg.det(ta) * torch.trace(torch.linalg.solve(ta, torch.tensor(t)))).backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_gradient_of_logdets_tangent_is_the_closed_form(torch):
    """Reverse over forward through logdet: the tangent along T is tr(A^-1 T), whose gradient is -(A^-1 T A^-1)^T
    (checked by float64 finite differences too), which is also the tangent of the gradient A^-T (forward over
    reverse). A deliberate difference: torch 2.13's tangent of logdet has no graph back to A, so its backward raises
    (found by the fuzzer inside gelu(logdet(A))), and the tangent of its gradient is None."""
    rng = np.random.default_rng(4)
    a, t = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    a = a @ a.T + 3 * np.eye(3)
    inv = np.linalg.inv(a)
    want = -(inv @ t @ inv).T
    eps, fd = 1e-6, np.zeros((3, 3))
    for i, j in np.ndindex(3, 3):
        e = np.zeros((3, 3))
        e[i, j] = eps
        fd[i, j] = (np.trace(np.linalg.solve(a + e, t)) - np.trace(np.linalg.solve(a - e, t))) / (2 * eps)
    np.testing.assert_allclose(fd, want, rtol=1e-6, atol=1e-8)
    x = gpugrad.tensor(a, requires_grad=True)
    fa = gpugrad.autograd.forward_ad
    with fa.dual_level():
        fa.unpack_dual(gpugrad.logdet(fa.make_dual(x, gpugrad.tensor(t)))).tangent.backward()
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-10, atol=1e-12)
    ta = torch.tensor(a, requires_grad=True)
    with torch.autograd.forward_ad.dual_level(), pytest.raises(RuntimeError, match="does not require grad"):
        fwd = torch.autograd.forward_ad
        fwd.unpack_dual(torch.logdet(fwd.make_dual(ta, torch.tensor(t)))).tangent.backward()
    # forward over reverse: the tangent of the gradient A^-T along T is the same matrix (torch's is None)
    for logabs in (gpugrad.logdet, lambda m: gpugrad.linalg.slogdet(m)[1]):
        with fa.dual_level():
            d = fa.make_dual(gpugrad.tensor(a, requires_grad=True), gpugrad.tensor(t))
            (g,) = gpugrad.autograd.grad(logabs(d), [d])
            np.testing.assert_allclose(g.numpy(), inv.T, rtol=1e-12)
            np.testing.assert_allclose(fa.unpack_dual(g).tangent.numpy(), want, rtol=1e-10, atol=1e-12)


def test_det_gradient_at_a_singular_matrix_is_its_cofactor_matrix():
    """A deliberate difference: torch 2.13 returns 0 at an exactly singular matrix; the derivative of det is the
    cofactor matrix there too (rank n - 1: not 0), which gpugrad returns (checked by finite differences)."""
    a = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 1.0, 3.0]])
    x = gpugrad.tensor(a, requires_grad=True)
    gpugrad.linalg.det(x).backward()
    cof = np.array([[12.0, -6.0, 2.0], [-6.0, 3.0, -1.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(x.grad.numpy(), cof, atol=1e-12)
    eps, fd = 1e-6, np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            e = np.zeros((3, 3))
            e[i, j] = eps
            fd[i, j] = (np.linalg.det(a + e) - np.linalg.det(a - e)) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), fd, atol=1e-8)


def test_nuclear_norm_refuses_inputs_that_need_a_gradient():
    x = gpugrad.tensor(A, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no differentiable SVD"):
        gpugrad.linalg.matrix_norm(x, "nuc")
    with gpugrad.no_grad():
        assert abs(gpugrad.linalg.matrix_norm(x, 2).item() - np.linalg.norm(np.array(A), 2)) < 1e-5


@pytest.mark.gpu
def test_linalg_on_the_gpu_matches_the_cpu():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 3)) + 4 * np.eye(3)
    b = rng.standard_normal((2, 3, 2))
    calls = [lambda d: gpugrad.linalg.inv(gpugrad.tensor(a, device=d)),
             lambda d: gpugrad.linalg.solve(gpugrad.tensor(a, device=d), gpugrad.tensor(b, device=d)),
             lambda d: gpugrad.linalg.solve(gpugrad.tensor(a, device=d), gpugrad.tensor(b[0, :, 0], device=d)),
             lambda d: gpugrad.linalg.det(gpugrad.tensor(a, device=d)),
             lambda d: gpugrad.linalg.slogdet(gpugrad.tensor(-a, device=d)).sign,
             lambda d: gpugrad.linalg.matrix_norm(gpugrad.tensor(a, device=d), "nuc"),
             lambda d: gpugrad.linalg.matrix_norm(gpugrad.tensor(a, device=d), -1)]
    for call in calls:
        np.testing.assert_allclose(call("cuda").cpu().numpy(), call("cpu").numpy(), rtol=1e-10)


@pytest.mark.gpu
def test_a_singular_matrix_on_the_gpu_raises_at_the_next_read():
    """CuPy raises nothing for a singular matrix (its default errstate): gpugrad flags the non-finite result on
    the device, without a sync, and the next read from the device raises torch's error."""
    x = gpugrad.linalg.inv(gpugrad.tensor([[1.0, 2.0], [2.0, 4.0]], device="cuda"))
    with pytest.raises(gpugrad.linalg.LinAlgError, match="singular"):
        x.cpu()
    y = gpugrad.linalg.solve(gpugrad.zeros(2, 2, device="cuda"), gpugrad.ones(2, device="cuda"))
    with pytest.raises(gpugrad.linalg.LinAlgError, match="The solver failed because the input matrix is singular"):
        y.tolist()
    nan = gpugrad.linalg.inv(gpugrad.tensor([[float("nan"), 1.0], [1.0, 1.0]], device="cuda"))
    assert np.isnan(nan.cpu().numpy()).all()  # NaN in, NaN out (as torch): not reported as singular
