"""grad, grad_and_value, vjp, jvp, jacrev, jacfwd and hessian against torch.func on the same float64 inputs: values
and the nesting of the results (argnums as an int or a tuple, has_aux, pytree inputs and outputs), compositions
(grad of grad, jacfwd of jacrev, transforms inside and around vmap), requires_grad of the results, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.func as gf
from tests.func.helpers import assert_same, both, same_error

RNG = np.random.default_rng(1)
X, Y = RNG.standard_normal(4), RNG.standard_normal(4)
W = RNG.standard_normal((3, 4))
XS = RNG.standard_normal((5, 4))
TARGETS = RNG.standard_normal((5, 3))


def scalar(lib):
    return lambda x, y: (lib.sin(x) * y).sum() + (x * x).sum() * y[0]


def vector(lib):
    return lambda x: lib.stack([x[0] * x[1], lib.sin(x[2]), (x ** 2).sum()])


def layer(lib):
    return lambda w, x: lib.tanh(w @ x)


def params_loss(lib):
    """A loss of a dict of parameters and a tuple of data."""
    return lambda p, data: ((lib.tanh(data[0] @ p["w"].T + p["b"]) - data[1]) ** 2).mean()


def _args(lib):
    return lib.tensor(X), lib.tensor(Y)


def _params(lib):
    return {"w": lib.tensor(W), "b": lib.tensor(Y[:3])}, (lib.tensor(XS), lib.tensor(TARGETS))


@pytest.mark.parametrize("argnums", [0, 1, -1, (0, 1), (1, 0)])
def test_grad_with_argnums(torch, argnums):
    assert_same(*both(torch, lambda lib, fn: fn.grad(scalar(lib), argnums=argnums)(*_args(lib))))


def test_grad_of_a_dict_of_parameters_and_grad_and_value(torch):
    def run(lib, fn):
        p, d = _params(lib)
        return fn.grad(params_loss(lib))(p, d), fn.grad_and_value(params_loss(lib), argnums=(0, 1))(p, d)
    assert_same(*both(torch, run))


def test_has_aux(torch):
    def run(lib, fn):
        def f(x, y):
            return (x * y).sum(), {"double": 2 * x, "pair": (x.sum(), y)}
        x, y = _args(lib)
        return fn.grad(f, has_aux=True)(x, y), fn.grad_and_value(f, has_aux=True)(x, y), \
            fn.vjp(lambda a: (a.sin(), a.cos()), x, has_aux=True)[::2], \
            fn.jvp(lambda a: (a.sin(), a.cos()), (x,), (y,), has_aux=True), \
            fn.jacrev(lambda a: (a.sin(), a.cos()), has_aux=True)(x), \
            fn.jacfwd(lambda a: (a.sin(), a.cos()), has_aux=True)(x)
    assert_same(*both(torch, run))


def test_vjp_with_pytree_outputs_called_twice(torch):
    def run(lib, fn):
        w, x = lib.tensor(W), lib.tensor(X)
        out, vjp_fn = fn.vjp(lambda a, b: {"y": layer(lib)(a, b), "s": (a * a).sum()}, w, x)
        cot = {"y": lib.tensor(Y[:3]), "s": lib.tensor(2.0, dtype=lib.float64)}
        return out, vjp_fn(cot), vjp_fn(cot)
    assert_same(*both(torch, run))


def test_jvp_with_pytrees(torch):
    def run(lib, fn):
        p, d = _params(lib)
        t = {"w": lib.ones_like(p["w"]), "b": lib.tensor(X[:3])}
        return fn.jvp(lambda q: params_loss(lib)(q, d), (p,), (t,)), fn.jvp(scalar(lib), _args(lib), _args(lib)[::-1])
    assert_same(*both(torch, run))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, (0, 1), 1])
def test_jacobians_with_argnums(torch, transform, argnums):
    def run(lib, fn):
        w, x = lib.tensor(W), lib.tensor(X)
        return (getattr(fn, transform)(layer(lib), argnums=argnums)(w, x),
                getattr(fn, transform)(lambda a, b: (layer(lib)(a, b), (a * a).sum()), argnums=argnums)(w, x))
    assert_same(*both(torch, run))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_jacobians_of_a_dict(torch, transform):
    def run(lib, fn):
        p, d = _params(lib)
        return getattr(fn, transform)(params_loss(lib))(p, d)
    assert_same(*both(torch, run))


def test_jacrev_chunk_size(torch):
    def run(lib, fn):
        return [fn.jacrev(layer(lib), chunk_size=c)(lib.tensor(W), lib.tensor(X)) for c in (None, 1, 2)]
    assert_same(*both(torch, run))


@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_hessian(torch, argnums):
    assert_same(*both(torch, lambda lib, fn: fn.hessian(scalar(lib), argnums=argnums)(*_args(lib))))


@pytest.mark.parametrize("name", ["grad_of_grad", "jacfwd_of_jacrev", "jacfwd_of_jacfwd", "jacrev_of_jacfwd",
                                  "jvp_of_grad", "grad_of_jvp", "vjp_of_jacfwd", "jvp_of_jvp"])
def test_compositions(torch, name):
    def run(lib, fn):
        x, y = _args(lib)
        f = scalar(lib)
        return {
            "grad_of_grad": lambda: fn.grad(lambda a: fn.grad(f)(a, y).sum())(x),
            "jacfwd_of_jacrev": lambda: fn.jacfwd(fn.jacrev(f))(x, y),
            "jacfwd_of_jacfwd": lambda: fn.jacfwd(fn.jacfwd(f, argnums=1))(x, y),
            "jacrev_of_jacfwd": lambda: fn.jacrev(fn.jacfwd(vector(lib)))(x),
            "jvp_of_grad": lambda: fn.jvp(fn.grad(f), (x, y), (y, x)),
            "grad_of_jvp": lambda: fn.grad(lambda a: fn.jvp(vector(lib), (a,), (y,))[1].sum())(x),
            "vjp_of_jacfwd": lambda: fn.vjp(fn.jacfwd(vector(lib)), x)[1](lib.ones(3, 4, dtype=lib.float64)),
            "jvp_of_jvp": lambda: fn.jvp(lambda a: fn.jvp(vector(lib), (a,), (y,))[1], (x,), (y,)),
        }[name]()
    assert_same(*both(torch, run))


@pytest.mark.parametrize("name", ["vmap_grad", "grad_vmap", "vmap_jacrev", "vmap_jacfwd", "vmap_hessian", "vmap_jvp",
                                  "vmap_vjp", "jacrev_vmap", "vmap_vmap_grad"])
def test_transforms_with_vmap(torch, name):
    def run(lib, fn):
        x, y = _args(lib)
        xs = lib.tensor(XS)
        f = scalar(lib)
        return {
            "vmap_grad": lambda: fn.vmap(fn.grad(f), in_dims=(0, None))(xs, y),
            "grad_vmap": lambda: fn.grad(lambda a: fn.vmap(f, in_dims=(0, None))(xs, a).sum())(y),
            "vmap_jacrev": lambda: fn.vmap(fn.jacrev(vector(lib)))(xs),
            "vmap_jacfwd": lambda: fn.vmap(fn.jacfwd(layer(lib), argnums=1), in_dims=(None, 0))(lib.tensor(W), xs),
            "vmap_hessian": lambda: fn.vmap(fn.hessian(f), in_dims=(None, 0))(x, xs),
            "vmap_jvp": lambda: fn.vmap(lambda a, t: fn.jvp(vector(lib), (a,), (t,)))(xs, xs.cos()),
            "vmap_vjp": lambda: fn.vmap(lambda a, c: fn.vjp(vector(lib), a)[1](c))(xs, lib.tensor(XS[:, :3])),
            "jacrev_vmap": lambda: fn.jacrev(lambda a: fn.vmap(f, in_dims=(0, None))(xs, a))(y),
            "vmap_vmap_grad": lambda: fn.vmap(fn.vmap(fn.grad(f), in_dims=(0, None)), in_dims=(None, 0))(xs, xs[:2]),
        }[name]()
    assert_same(*both(torch, run))


def test_results_carry_a_graph_only_to_tensors_outside(torch):
    """As torch: a transform's results do not require grad, unless the function reads a tensor that does (a
    parameter it closes over), and then the caller's backward reaches it."""
    def run(lib, fn):
        x, y = _args(lib)
        p = lib.tensor(W[0], requires_grad=True)
        plain = [fn.grad(scalar(lib))(x, y), fn.jacrev(vector(lib))(x), fn.jacfwd(vector(lib))(x),
                 fn.hessian(scalar(lib))(x, y), fn.vjp(vector(lib), x)[0],
                 fn.vmap(fn.grad(scalar(lib)))(x[None], y[None])]
        g = fn.grad(lambda a: (a.sin() * p).sum())(x)
        g.pow(2).sum().backward()
        return [t.requires_grad for t in plain], g.requires_grad, p.grad
    ours, theirs = both(torch, run)
    assert ours[:2] == theirs[:2] == ([False] * 6, True)
    assert_same(ours[2], theirs[2])


def test_transforms_ignore_an_outer_no_grad(torch):
    def run(lib, fn):
        with lib.no_grad():
            return fn.grad(scalar(lib))(*_args(lib)), fn.jacrev(vector(lib))(lib.tensor(X))
    assert_same(*both(torch, run))


def test_grad_through_a_vmapped_loss_matches_finite_differences():
    xs = gpugrad.tensor(XS)

    def loss(w):
        return gf.vmap(lambda row: gpugrad.tanh(w @ row).pow(2).sum())(xs).mean()
    w = gpugrad.tensor(W)
    g = gf.grad(loss)(w).numpy()
    eps, fd = 1e-6, np.zeros_like(W)
    for idx in np.ndindex(*W.shape):
        d = np.zeros_like(W)
        d[idx] = eps
        fd[idx] = (loss(gpugrad.tensor(W + d)).item() - loss(gpugrad.tensor(W - d)).item()) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("call", [
    lambda lib, fn: fn.grad(lambda a: a * 2)(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: 3.0)(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: a.sum(), argnums=2)(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a, b: a.sum(), argnums=(0, 0))(lib.tensor(X), lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: a.sum(), argnums=())(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: a.sum(), argnums=[0])(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: a.sum(), has_aux=True)(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: (a.sum(), 3), has_aux=True)(lib.tensor(X)),
    lambda lib, fn: fn.grad(lambda a: a.sum())(3.0),
    lambda lib, fn: fn.vjp(lambda a: a.sin(), lib.tensor(X))[1]((lib.tensor(X),)),
    lambda lib, fn: fn.vjp(lambda a: 1, lib.tensor(X)),
    lambda lib, fn: fn.jvp(lambda a: a.sin(), lib.tensor(X), (lib.tensor(X),)),
    lambda lib, fn: fn.jvp(lambda a: a.sin(), (lib.tensor(X),), [lib.tensor(X)]),
    lambda lib, fn: fn.jvp(lambda a: a.sin(), (lib.tensor(X),), (lib.tensor(W),)),
    lambda lib, fn: fn.jvp(lambda a: lib.tensor(Y), (lib.tensor(X),), (lib.tensor(X),), strict=True),
    lambda lib, fn: fn.jacrev(lambda a: a.sin(), chunk_size=0),
], ids=["non_scalar", "non_tensor", "argnum_range", "argnums_repeat", "argnums_empty", "argnums_list", "aux_shape",
        "aux_type",
        "non_tensor_input", "cotangent_structure", "vjp_non_tensor", "primals_not_tuple", "tangent_structure",
        "tangent_shape", "strict", "chunk_size"])
def test_errors_match_torch(torch, call):
    same_error(torch, call)
