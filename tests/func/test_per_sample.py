"""Per-sample gradients of a small MLP, the classic ``vmap(grad(loss), in_dims=(None, 0, 0))``: against a loop of
one-sample gradients and against torch.func on the same float64 parameters and data; the same through
functional_call with a dict of parameters, and with cross-entropy and a per-sample tanh-MLP Hessian."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.func as gf
from tests.func.helpers import assert_same, both

RNG = np.random.default_rng(2)
W1, B1 = RNG.standard_normal((8, 5)) * 0.5, RNG.standard_normal(8) * 0.1
W2, B2 = RNG.standard_normal((3, 8)) * 0.5, RNG.standard_normal(3) * 0.1
X, Y = RNG.standard_normal((6, 5)), RNG.standard_normal((6, 3))
LABELS = np.array([0, 2, 1, 1, 0, 2])


def params(lib):
    return {"w1": lib.tensor(W1), "b1": lib.tensor(B1), "w2": lib.tensor(W2), "b2": lib.tensor(B2)}


def mlp(lib, p, x):
    return lib.tanh(x @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"]


def mse(lib):
    return lambda p, x, y: ((mlp(lib, p, x) - y) ** 2).mean()


def test_per_sample_gradients_match_a_loop():
    p, x, y = params(gpugrad), gpugrad.tensor(X), gpugrad.tensor(Y)
    per_sample = gf.vmap(gf.grad(mse(gpugrad)), in_dims=(None, 0, 0))(p, x, y)
    for i in range(len(X)):
        leaves = {k: v.detach().requires_grad_() for k, v in p.items()}
        mse(gpugrad)(leaves, x[i], y[i]).backward()
        for k in p:
            np.testing.assert_allclose(per_sample[k][i].numpy(), leaves[k].grad.numpy(), rtol=1e-12, atol=1e-14)
    # their mean is the gradient of the batch's mean loss
    batch = gf.grad(lambda q: gf.vmap(mse(gpugrad), in_dims=(None, 0, 0))(q, x, y).mean())(p)
    for k in p:
        np.testing.assert_allclose(per_sample[k].mean(0).numpy(), batch[k].numpy(), rtol=1e-12, atol=1e-14)


def test_per_sample_gradients_match_torch(torch):
    def run(lib, fn):
        return fn.vmap(fn.grad(mse(lib)), in_dims=(None, 0, 0))(params(lib), lib.tensor(X), lib.tensor(Y))
    assert_same(*both(torch, run))


def test_per_sample_gradients_of_a_module_through_functional_call(torch):
    def run(lib, fn):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(5, 8), lib.nn.Tanh(), lib.nn.Linear(8, 3)).double()
        with lib.no_grad():
            for (_, t), a in zip(model.named_parameters(), (W1, B1, W2, B2)):
                t.copy_(lib.tensor(a))
        theta = {k: v.detach() for k, v in model.named_parameters()}

        def loss(q, x, label):
            logits = fn.functional_call(model, q, (x.unsqueeze(0),))
            return lib.nn.functional.cross_entropy(logits, label.unsqueeze(0))
        return fn.vmap(fn.grad(loss), in_dims=(None, 0, 0))(theta, lib.tensor(X), lib.tensor(LABELS))
    assert_same(*both(torch, run))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_per_sample_jacobians_of_the_mlp_match_torch(torch, transform):
    def run(lib, fn):
        p = params(lib)
        f = (lambda x: mlp(lib, p, x)) if transform != "hessian" else (lambda x: mlp(lib, p, x).sum())
        return fn.vmap(getattr(fn, transform)(f))(lib.tensor(X))
    assert_same(*both(torch, run))
