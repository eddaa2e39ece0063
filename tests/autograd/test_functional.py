"""``gpugrad.autograd.functional`` against ``torch.autograd.functional`` on the same float64 inputs (values and the
tuple nesting of the results), and against central finite differences, which need no torch.

Every Jacobian strategy (reverse mode per output element, reverse mode vectorized = forward over reverse, forward
mode vectorized) must give the same numbers on MLP-shaped functions: linear layers, bias, tanh/relu/sigmoid/softplus,
and sum/mean/softmax/cross-entropy heads.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.autograd import functional as F
from gpugrad.core.op import Op

RNG = np.random.default_rng(7)
P = {k: RNG.standard_normal(s) for k, s in {"W1": (5, 3), "b1": (5,), "W2": (4, 5), "b2": (4,), "W": (4, 3)}.items()}
TARGET = np.array([1, 3])
MODES = {"reverse": {}, "reverse-vectorized": {"vectorize": True},
         "forward": {"vectorize": True, "strategy": "forward-mode"}}


def _t(lib, a):
    return tuple(_t(lib, x) for x in a) if isinstance(a, tuple) else lib.tensor(a)


def _params(lib):
    return {k: lib.tensor(v) for k, v in P.items()}


# ---- functions: each takes the library (gpugrad or torch) and returns f, written the same way for both ------------
def mlp(act, head):
    """x (2, 3) -> a two-layer MLP's logits (2, 4), through ``head``."""
    def build(lib):
        p, nnf = _params(lib), lib.nn.functional
        heads = {"none": lambda y: y, "sum": lambda y: y.sum(), "mean": lambda y: y.mean(),
                 "softmax": lambda y: y.softmax(-1),
                 "xent": lambda y: nnf.cross_entropy(y, lib.tensor(TARGET))}
        return lambda x: heads[head](getattr(nnf, act)(x @ p["W1"].T + p["b1"]) @ p["W2"].T + p["b2"])
    return build


def pointwise(lib):
    return lambda x: x.tanh() * x.sin() + x.exp() * x.sigmoid()


def two_in_two_out(lib):  # a tuple of inputs and a tuple of outputs, one of them 0-d
    p = _params(lib)
    return lambda x, y: ((p["W"] @ x + p["b2"]).tanh() * y, (x.sigmoid() * x).sum())


def matrix_in(lib):  # a 2-D input: J has shape out.shape + in.shape = (3, 2, 3)
    return lambda x: (x.softmax(-1) * x).sum(0)


CASES = {  # name: (function, inputs)
    "pointwise": (pointwise, RNG.standard_normal(4)),
    "two_in_two_out": (two_in_two_out, (RNG.standard_normal(3), RNG.standard_normal(4))),
    "matrix_in": (matrix_in, RNG.standard_normal((2, 3))),
    **{f"mlp_{a}_{h}": (mlp(a, h), RNG.standard_normal((2, 3)))
       for a in ("tanh", "relu", "sigmoid", "softplus") for h in ("none", "sum", "mean", "softmax", "xent")},
}
SCALAR_CASES = {  # scalar functions for hessian / hvp / vhp
    "sin": (lambda lib: lambda x: (x.sin() * x).sum(), RNG.standard_normal(4)),
    "two_inputs": (lambda lib: lambda x, y: (x.sin() * (y * y).sum() + x * x * x).sum(),
                   (RNG.standard_normal(3), RNG.standard_normal(2))),
    "tanh": (lambda lib: lambda x: (x.tanh() * x).sum(), RNG.standard_normal(4)),
    "mlp_xent": (mlp("tanh", "xent"), RNG.standard_normal((2, 3))),
}


def _same(ours, theirs, rtol=1e-9, atol=1e-11):
    """Same nesting (a Tensor where torch gives a Tensor, tuples of the same length), shapes and values.
    NOTE: torch's forward-mode jacobian nests lists where its reverse mode nests tuples; gpugrad's gives tuples."""
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), (type(ours), len(theirs))
        for a, b in zip(ours, theirs):
            _same(a, b, rtol, atol)
        return
    assert isinstance(ours, gpugrad.Tensor) and tuple(ours.shape) == tuple(theirs.shape), (ours, theirs.shape)
    np.testing.assert_allclose(ours.detach().cpu().numpy(), theirs.detach().cpu().numpy(), rtol=rtol, atol=atol)


def _flat(x):
    return np.concatenate([np.ravel(a) for a in x]) if isinstance(x, tuple) else np.ravel(x)


def _fd_jacobian(f, x, eps=1e-6):
    """Central differences of f on NumPy inputs, as a (out elements, in elements) matrix."""
    xs = x if isinstance(x, tuple) else (x,)
    sizes = [a.size for a in xs]

    def g(flat):
        parts = np.split(flat, np.cumsum(sizes)[:-1])
        with gpugrad.no_grad():
            out = f(*(gpugrad.tensor(p.reshape(a.shape)) for p, a in zip(parts, xs)))
        return _flat(tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy())

    x0 = _flat(xs)
    cols = [(g(x0 + eps * e) - g(x0 - eps * e)) / (2 * eps) for e in np.eye(x0.size)]
    return np.stack(cols, axis=1)


def _as_matrix(jac, ins, outs):
    """A nested ``jacobian`` result as one (out elements, in elements) matrix."""
    jac = jac if isinstance(outs, tuple) else (jac,)
    rows = [r if isinstance(ins, tuple) else (r,) for r in jac]
    return np.block([[b.detach().numpy().reshape(o.numel(), -1) for b in r]
                     for r, o in zip(rows, outs if isinstance(outs, tuple) else (outs,))])


# ---- jacobian ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES)
def test_jacobian_matches_torch(case, mode, torch):
    build, x = CASES[case]
    _same(F.jacobian(build(gpugrad), _t(gpugrad, x), **MODES[mode]),
          torch.autograd.functional.jacobian(build(torch), _t(torch, x), **MODES[mode]))


@pytest.mark.parametrize("case", CASES)
def test_every_strategy_matches_finite_differences(case):
    build, x = CASES[case]
    f = build(gpugrad)
    out = f(*_t(gpugrad, x)) if isinstance(x, tuple) else f(_t(gpugrad, x))
    expected = _fd_jacobian(f, x)
    for mode, kw in MODES.items():
        got = _as_matrix(F.jacobian(f, _t(gpugrad, x), **kw), x, out)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7, err_msg=mode)


def test_a_single_tensor_gives_a_tensor_and_tuples_give_tuples_of_tuples():
    x = gpugrad.tensor(RNG.standard_normal(3))
    assert isinstance(F.jacobian(lambda x: x.exp(), x), gpugrad.Tensor)
    j = F.jacobian(lambda x: (x.exp(), x.sum()), (x,))
    assert isinstance(j, tuple) and len(j) == 2 and all(isinstance(r, tuple) and len(r) == 1 for r in j)
    np.testing.assert_allclose(j[0][0].numpy(), np.diag(np.exp(x.numpy())))
    np.testing.assert_allclose(j[1][0].numpy(), np.ones(3))


class _Cube(Op):
    """x**3 with a first derivative only: no double backward, no JVP."""

    def forward(self, xp, x):
        self.save_for_backward(x)
        return x ** 3

    def backward(self, xp, gy):
        return 3 * self.saved[0] ** 2 * gy


def test_an_op_without_double_backward_or_jvp_says_so_and_the_loop_still_works():
    x = gpugrad.tensor(RNG.standard_normal(3))
    with pytest.raises(NotImplementedError, match="_Cube.*vectorize=False"):
        F.jacobian(_Cube.apply, x, vectorize=True)
    with pytest.raises(NotImplementedError, match="_Cube"):
        F.jacobian(_Cube.apply, x, vectorize=True, strategy="forward-mode")
    np.testing.assert_allclose(F.jacobian(_Cube.apply, x).numpy(), np.diag(3 * x.numpy() ** 2))


# ---- vjp / jvp -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["vjp", "jvp"])
@pytest.mark.parametrize("case", ["pointwise", "two_in_two_out", "matrix_in", "mlp_tanh_softmax", "mlp_relu_xent"])
def test_vjp_and_jvp_match_torch(case, fn, torch):
    build, x = CASES[case]
    with torch.no_grad():
        out = build(torch)(*_t(torch, x)) if isinstance(x, tuple) else build(torch)(_t(torch, x))
    like = out if fn == "vjp" else _t(torch, x)  # v has the outputs' structure for vjp, the inputs' for jvp
    v = tuple(RNG.standard_normal(o.shape) for o in like) if isinstance(like, tuple) else \
        RNG.standard_normal(tuple(like.shape))
    _same(getattr(F, fn)(build(gpugrad), _t(gpugrad, x), _t(gpugrad, v)),
          getattr(torch.autograd.functional, fn)(build(torch), _t(torch, x), _t(torch, v)))


def test_jvp_and_vjp_are_products_with_the_jacobian():
    build, (x, y) = CASES["two_in_two_out"]
    f, ins = build(gpugrad), _t(gpugrad, (x, y))
    jac = _as_matrix(F.jacobian(f, ins), (x, y), f(*ins))
    t, u = RNG.standard_normal(7), RNG.standard_normal(5)
    _, jv = F.jvp(f, ins, (gpugrad.tensor(t[:3]), gpugrad.tensor(t[3:])))
    _, vj = F.vjp(f, ins, (gpugrad.tensor(u[:4]), gpugrad.tensor(u[4])))
    np.testing.assert_allclose(_flat(tuple(a.numpy() for a in jv)), jac @ t, rtol=1e-12)
    np.testing.assert_allclose(_flat(tuple(a.numpy() for a in vj)), u @ jac, rtol=1e-12)


# ---- hessian / hvp / vhp -------------------------------------------------------------------------------------------
HESSIAN_MODES = {"reverse": {}, "reverse-vectorized": {"vectorize": True},
                 "forward": {"vectorize": True, "outer_jacobian_strategy": "forward-mode"}}


@pytest.mark.parametrize("mode", HESSIAN_MODES)
@pytest.mark.parametrize("case", SCALAR_CASES)
def test_hessian_matches_torch(case, mode, torch, request):
    build, x = SCALAR_CASES[case]
    _same(F.hessian(build(gpugrad), _t(gpugrad, x), **HESSIAN_MODES[mode]),
          torch.autograd.functional.hessian(build(torch), _t(torch, x), **HESSIAN_MODES[mode]))


@pytest.mark.parametrize("fn", ["hvp", "vhp"])
@pytest.mark.parametrize("case", SCALAR_CASES)
def test_hvp_and_vhp_match_torch_and_the_hessian(case, fn, torch):
    build, x = SCALAR_CASES[case]
    v = tuple(RNG.standard_normal(a.shape) for a in x) if isinstance(x, tuple) else RNG.standard_normal(x.shape)
    ours = getattr(F, fn)(build(gpugrad), _t(gpugrad, x), _t(gpugrad, v))
    _same(ours, getattr(torch.autograd.functional, fn)(build(torch), _t(torch, x), _t(torch, v)))
    f, ins = build(gpugrad), _t(gpugrad, x)
    hess = _as_matrix(F.hessian(f, ins), x, tuple(ins) if isinstance(x, tuple) else ins)
    got = _flat(tuple(a.numpy() for a in ours[1])) if isinstance(x, tuple) else ours[1].numpy().ravel()
    np.testing.assert_allclose(got, hess @ _flat(v), rtol=1e-10, atol=1e-12)


# ---- create_graph: the results are differentiable ------------------------------------------------------------------
CREATE_GRAPH = {  # fn(module, f, x, v) with x a leaf that requires grad
    "vjp": lambda M, f, x, v: M.vjp(f, x, v, create_graph=True)[1],
    "jvp": lambda M, f, x, v: M.jvp(f, x, v, create_graph=True)[1],
    "jacobian": lambda M, f, x, v: M.jacobian(f, x, create_graph=True),
    "jacobian_vectorized": lambda M, f, x, v: M.jacobian(f, x, create_graph=True, vectorize=True),
    "hessian": lambda M, f, x, v: M.hessian(lambda x: f(x).sum(), x, create_graph=True),
    "hvp": lambda M, f, x, v: M.hvp(lambda x: f(x).sum(), x, v, create_graph=True)[1],
    "vhp": lambda M, f, x, v: M.vhp(lambda x: f(x).sum(), x, v, create_graph=True)[1],
}


@pytest.mark.parametrize("fn", CREATE_GRAPH)
def test_create_graph_lets_gradients_flow_to_the_inputs_and_v(fn, torch):
    x0, v0 = RNG.standard_normal(4), RNG.standard_normal(4)
    grads = []
    for lib, M in ((gpugrad, F), (torch, torch.autograd.functional)):
        x, v = lib.tensor(x0, requires_grad=True), lib.tensor(v0, requires_grad=True)
        out = CREATE_GRAPH[fn](M, lambda x: x.sin() * x.tanh(), x, v)
        (out * out).sum().backward()
        grads.append((x.grad, v.grad))
    _same(grads[0][0], grads[1][0])
    if grads[1][1] is not None:
        _same(grads[0][1], grads[1][1])


# ---- strict mode and argument errors: raised where torch raises, of the same type --------------------------------
def _ignores_y(lib):
    return lambda x, y: x.exp()


def _linear(lib):
    return lambda x: (x * 3.0).sum()


STRICT = {
    "vjp": lambda M, lib, s: M.vjp(_ignores_y(lib), _t(lib, (np.ones(2), np.ones(2))), _t(lib, np.ones(2)), strict=s),
    "jvp": lambda M, lib, s: M.jvp(_ignores_y(lib), _t(lib, (np.ones(2), np.ones(2))),
                                   _t(lib, (np.ones(2), np.ones(2))), strict=s),
    "jacobian": lambda M, lib, s: M.jacobian(_ignores_y(lib), _t(lib, (np.ones(2), np.ones(2))), strict=s),
    "hessian": lambda M, lib, s: M.hessian(_linear(lib), _t(lib, np.ones(2)), strict=s),
    "hvp": lambda M, lib, s: M.hvp(_linear(lib), _t(lib, np.ones(2)), _t(lib, np.ones(2)), strict=s),
    "vhp": lambda M, lib, s: M.vhp(_linear(lib), _t(lib, np.ones(2)), _t(lib, np.ones(2)), strict=s),
    "constant_output": lambda M, lib, s: M.vjp(lambda x: lib.tensor(np.ones(2)), _t(lib, np.ones(2)),
                                               _t(lib, np.ones(2)), strict=s),
}


@pytest.mark.parametrize("case", STRICT)
def test_strict_raises_where_torch_raises_and_otherwise_gives_zeros(case, torch):
    for lib, M in ((gpugrad, F), (torch, torch.autograd.functional)):
        with pytest.raises(RuntimeError, match="strict mode"):
            STRICT[case](M, lib, True)
    _same(STRICT[case](F, gpugrad, False), STRICT[case](torch.autograd.functional, torch, False))


BAD_CALLS = {
    "unknown strategy": lambda M, lib: M.jacobian(lambda x: x, lib.ones(2), strategy="sideways"),
    "forward mode, not vectorized": lambda M, lib: M.jacobian(lambda x: x, lib.ones(2), strategy="forward-mode"),
    "forward mode, strict": lambda M, lib: M.jacobian(lambda x: x, lib.ones(2), strict=True, vectorize=True,
                                                      strategy="forward-mode"),
    "forward mode, create_graph": lambda M, lib: M.jacobian(lambda x: x, lib.ones(2), create_graph=True,
                                                            vectorize=True, strategy="forward-mode"),
    "vectorized, strict": lambda M, lib: M.jacobian(lambda x: x * 2, lib.ones(2), strict=True, vectorize=True),
    "v of the wrong shape": lambda M, lib: M.vjp(lambda x: x * 2, lib.ones(2), lib.ones(3)),
    "v of the wrong length": lambda M, lib: M.jvp(lambda x, y: x * y, (lib.ones(2), lib.ones(2)), (lib.ones(2),)),
    "no v for a vector": lambda M, lib: M.jvp(lambda x: x * 2, lib.ones(2)),
    "inputs not tensors": lambda M, lib: M.vjp(lambda x: x * 2, [lib.ones(2)]),
    "hessian of a vector": lambda M, lib: M.hessian(lambda x: x * x, lib.ones(2)),
    "hvp of a tuple": lambda M, lib: M.hvp(lambda x: (x.sum(),), lib.ones(2), lib.ones(2)),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_calls_raise_what_torch_raises(case, torch):
    try:
        BAD_CALLS[case](torch.autograd.functional, torch)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        expected = type(e)
    else:
        pytest.fail("torch accepted it")
    with pytest.raises(expected):
        BAD_CALLS[case](F, gpugrad)


def test_v_may_be_omitted_for_one_element():
    x = gpugrad.tensor([0.5])
    np.testing.assert_allclose(F.jvp(lambda x: x.exp(), x)[1].numpy(), np.exp([0.5]))
    np.testing.assert_allclose(F.vjp(lambda x: x.sin().sum(), x)[1].numpy(), np.cos([0.5]))
    np.testing.assert_allclose(F.hvp(lambda x: x.sin().sum(), x)[1].numpy(), -np.sin([0.5]))


def _cpu(r):
    if isinstance(r, tuple):
        return tuple(_cpu(a) for a in r)
    assert r.device.type == "cuda"  # results stay on the inputs' device
    return r.cpu()


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["two_in_two_out", "mlp_tanh_xent"])
def test_every_strategy_on_cuda_matches_the_cpu(case):
    """The basis vectors are made on the inputs' device (CuPy's eye), results stay there."""
    build, x = CASES[case]
    on_gpu = tuple(gpugrad.tensor(a, device="cuda") for a in x) if isinstance(x, tuple) else \
        gpugrad.tensor(x, device="cuda")
    for kw in MODES.values():
        _same(_cpu(F.jacobian(build(gpugrad), on_gpu, **kw)), F.jacobian(build(gpugrad), _t(gpugrad, x)))
    f, x0, v = (lambda x: (x.tanh() * x).sum()), RNG.standard_normal(3), RNG.standard_normal(3)
    _same(_cpu(F.hvp(f, gpugrad.tensor(x0, device="cuda"), gpugrad.tensor(v, device="cuda"))),
          F.hvp(f, gpugrad.tensor(x0), gpugrad.tensor(v)))
