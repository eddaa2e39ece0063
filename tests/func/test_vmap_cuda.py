"""vmap and the transforms on CUDA (the simulated device in CI) against the same calls on the CPU: the rules that
run the CUDA kernels (softmax, cross-entropy, layer norm, linear, dropout's mask) and per-sample gradients."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from gpugrad.func import grad, jacrev, vmap

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(4)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)
W, B = RNG.standard_normal((6, 5)).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
T = np.array([1, 0, 3, 4])


def on(device):
    return lambda a: gpugrad.tensor(a, device=device)


FUNCTIONS = {
    "softmax": lambda t, x: x.softmax(-1) * x.log_softmax(0),
    "logsumexp": lambda t, x: x.logsumexp(-1),
    "cross_entropy": lambda t, x: F.cross_entropy(x, t(T)) + F.cross_entropy(x, t(T), reduction="none").sum(),
    "linear_relu": lambda t, x: F.linear(x, t(W), t(B)).relu(),
    "layer_norm": lambda t, x: F.layer_norm(x, (5,), t(W[0]), t(B[:5])),
    "bias_act": lambda t, x: F.bias_act(x, t(B[:5]), "gelu"),
    "matmul": lambda t, x: x @ t(W).T @ t(W),
    "reductions": lambda t, x: x.sum(0) + x.mean(-1, keepdim=True) + x.amax(1, keepdim=True) + x.var(0),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vmap_on_cuda_matches_the_cpu(name):
    outs = []
    for d in ("cpu", "cuda"):
        t = on(d)
        outs.append(vmap(lambda x, t=t: FUNCTIONS[name](t, x))(t(X)))
    assert outs[1].device.type == "cuda"
    np.testing.assert_allclose(outs[1].cpu().numpy(), outs[0].numpy(), rtol=2e-5, atol=1e-5)


def test_dropout_with_randomness_same_on_cuda():
    out = vmap(lambda x: F.dropout(x, 0.5), randomness="same")(gpugrad.ones(3, 64, device="cuda"))
    host = out.cpu().numpy()
    assert np.array_equal(host[0], host[1]) and set(np.unique(host)) <= {0.0, 2.0}


def test_per_sample_gradients_and_jacobians_on_cuda():
    def loss(w, x):
        return F.linear(x, w).tanh().pow(2).mean()

    outs = []
    for d in ("cpu", "cuda"):
        w, x = on(d)(W), on(d)(X[0])
        outs.append((vmap(grad(loss), in_dims=(None, 0))(w, x), vmap(jacrev(lambda r, w=w: F.linear(r, w).tanh()))(x)))
    for cpu, cuda in zip(*outs):
        assert cuda.device.type == "cuda"
        np.testing.assert_allclose(cuda.cpu().numpy(), cpu.numpy(), rtol=2e-5, atol=1e-6)
