"""Forward mode over the whole op table, with no rows of its own: every case's JVP against float64 central finite
differences, the transpose identity <u, J t> = <J^T u, t> against its VJP, torch.autograd.forward_ad when torch is
installed, reverse over forward (Hessian-vector products), and the same JVPs on the (simulated) CUDA device."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.autograd import forward_ad as fwAD
from tests.op_cases import CASES, case_inputs

PARAMS = [(c, i) for c in CASES if c.grad for i in range(len(c.shapes))]
IDS = [f"{c.name}-{i}" for c, i in PARAMS]


def _tangents(arrays, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.shape).astype(a.dtype) for a in arrays]


def jvp(case, arrays, tangents, device="cpu"):
    """(output, J t) by forward mode, as host arrays (a missing tangent is zero)."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(gpugrad.tensor(a, device=device), gpugrad.tensor(t, device=device))
                 for a, t in zip(arrays, tangents)]
        primal, tangent = fwAD.unpack_dual(case.fn(*duals))
        out = primal.detach().cpu().numpy()
        return out, (np.zeros_like(out) if tangent is None else tangent.cpu().numpy())


def _value(case, arrays):
    with gpugrad.no_grad():
        return case.fn(*[gpugrad.tensor(a) for a in arrays]).numpy().astype(np.float64)


@pytest.mark.parametrize("case,k", PARAMS, ids=IDS)
def test_jvp_matches_finite_differences(case, k):
    arrays = case_inputs(case, case.shapes[k], seed=4)
    ts = _tangents(arrays)
    out, got = jvp(case, arrays, ts)
    np.testing.assert_allclose(out, _value(case, arrays), rtol=1e-12, atol=1e-12)  # the primal is untouched
    if case.op == "cast":
        return  # a float32 output: its JVP is the tangent, rounded (checked by the transpose identity)
    eps = 1e-6
    plus = _value(case, [a + eps * t for a, t in zip(arrays, ts)])
    minus = _value(case, [a - eps * t for a, t in zip(arrays, ts)])
    np.testing.assert_allclose(got, (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case,k", PARAMS, ids=IDS)
def test_transpose_identity(case, k):
    """<u, J t> (forward mode) == <J^T u, t> (reverse mode): the JVP and the VJP are the same linear map."""
    arrays = case_inputs(case, case.shapes[k], seed=6)
    ts = _tangents(arrays, seed=2)
    out, jt = jvp(case, arrays, ts)
    u = np.random.default_rng(3).standard_normal(out.shape)
    ins = [gpugrad.tensor(a, requires_grad=True) for a in arrays]
    y = case.fn(*ins)
    grads = gpugrad.autograd.grad((y.double() * gpugrad.tensor(u)).sum(), ins, allow_unused=True)
    rhs = sum(float((g.numpy() * t).sum()) for g, t in zip(grads, ts) if g is not None)
    assert float((u * jt).sum()) == pytest.approx(rhs, rel=1e-5 if case.op == "cast" else 1e-9, abs=1e-6)


TORCH = [(c, i) for c, i in PARAMS if c.torch_fn is not None]


@pytest.mark.parametrize("case,k", TORCH, ids=[f"{c.name}-{i}" for c, i in TORCH])
def test_jvp_matches_torch_forward_ad(case, k):
    torch = pytest.importorskip("torch")
    import torch.autograd.forward_ad as tfw

    arrays = case_inputs(case, case.shapes[k], seed=8)
    ts = _tangents(arrays, seed=9)
    _, got = jvp(case, arrays, ts)
    with tfw.dual_level():
        duals = [tfw.make_dual(torch.as_tensor(a), torch.as_tensor(t)) for a, t in zip(arrays, ts)]
        want = tfw.unpack_dual(case.torch_fn(*duals)).tangent
    want = np.zeros_like(got) if want is None else want.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


def test_reverse_over_forward_gives_hessian_vector_products():
    """d/dx <1, J(x) v> = H v for f = sum(tanh(x) * softplus(x)) / its torch Hessian."""
    torch = pytest.importorskip("torch")
    x0, v0 = np.array([0.3, -1.2, 2.0]), np.array([1.0, -0.5, 0.25])
    x = gpugrad.tensor(x0, requires_grad=True)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, gpugrad.tensor(v0))
        jv = fwAD.unpack_dual((d.tanh() * d.softplus()).sum()).tangent
    hv, = gpugrad.autograd.grad(jv, x)
    f = lambda t: (t.tanh() * torch.nn.functional.softplus(t)).sum()  # noqa: E731
    _, want = torch.autograd.functional.hvp(f, torch.as_tensor(x0), torch.as_tensor(v0))
    np.testing.assert_allclose(hv.numpy(), want.numpy(), rtol=1e-10)


def test_tangents_follow_in_place_ops_and_views():
    torch = pytest.importorskip("torch")
    import torch.autograd.forward_ad as tfw

    x0, t0 = np.arange(6.0).reshape(2, 3) / 4, np.linspace(-1, 1, 6).reshape(2, 3)
    results = []
    for lib, fw in ((gpugrad, fwAD), (torch, tfw)):
        with fw.dual_level():
            x = fw.make_dual(lib.tensor(x0) * 1, lib.tensor(t0))
            y = x * 2
            y.mul_(x)  # in place on a dual: its tangent changes too
            v = y[0]  # a view's tangent is the view of the tangent
            z = v.exp().sum() + y.sin().sum()
            results.append([np.asarray(fw.unpack_dual(t).tangent) for t in (y, v, z)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_dual_level_errors_and_cleanup():
    x = gpugrad.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="dual_level"):
        fwAD.make_dual(x, x)
    with fwAD.dual_level():
        with pytest.raises(ValueError, match=r"tangent must match the primal: primal \(2,\)"):
            fwAD.make_dual(x, gpugrad.tensor([1.0, 2.0, 3.0]))
        with pytest.raises(RuntimeError, match="^Nested forward mode AD is not supported at the moment"):
            with fwAD.dual_level():
                pass
        d = fwAD.make_dual(x, gpugrad.tensor([1.0, 0.0]))
        y = d.exp()
    assert fwAD.unpack_dual(y).tangent is None  # tangents end with their level


def test_batched_tangents_give_every_direction_in_one_pass():
    x0 = np.array([[0.5, -1.0, 2.0], [0.1, 0.2, -0.3]])
    w0 = np.random.default_rng(0).standard_normal((4, 3))
    basis = np.eye(6).reshape(6, 2, 3)
    f = lambda x: (x @ gpugrad.tensor(w0).T).tanh().softmax(-1).sum(0)  # noqa: E731
    with fwAD.dual_level():
        batched = fwAD.unpack_dual(f(fwAD.make_batched_dual(gpugrad.tensor(x0), gpugrad.tensor(basis)))).tangent
    for i in range(6):
        _, one = jvp(type("C", (), {"fn": staticmethod(f)}), [x0], [basis[i]])
        np.testing.assert_allclose(batched.numpy()[i], one, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case,k", PARAMS, ids=IDS)
def test_batched_tangents_match_one_direction_at_a_time(case, k):
    """make_batched_dual over the op table: B = 3 directions in one pass equal three single-direction passes
    (ops whose JVP broadcasts over the batch axis, and the per-direction fallback of the others)."""
    arrays = case_inputs(case, case.shapes[k], seed=5)
    directions = [_tangents(arrays, seed=s) for s in (20, 21, 22)]
    with fwAD.dual_level():
        duals = [fwAD.make_batched_dual(gpugrad.tensor(a), gpugrad.tensor(np.stack([d[i] for d in directions])))
                 for i, a in enumerate(arrays)]
        tangent = fwAD.unpack_dual(case.fn(*duals)).tangent
    for b, ts in enumerate(directions):
        _, one = jvp(case, arrays, ts)
        got = np.zeros_like(one) if tangent is None else tangent.numpy()[b]
        np.testing.assert_allclose(got, one, rtol=1e-12, atol=1e-13)


@pytest.mark.gpu
@pytest.mark.parametrize("case,k", PARAMS, ids=IDS)
def test_cuda_jvp_matches_cpu(case, k, monkeypatch):
    arrays = case_inputs(case, case.shapes[k], seed=4)
    ts = _tangents(arrays)
    monkeypatch.setenv("GPUGRAD_DEVICE", "cpu")
    want = jvp(case, arrays, ts)
    monkeypatch.setenv("GPUGRAD_DEVICE", "cuda")  # side inputs (targets, masks) on the device too
    got = jvp(case, arrays, ts, device="cuda")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11)
