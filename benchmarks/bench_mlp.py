"""MLP training step (784-1024-1024-10, ReLU, cross-entropy, float32): gpugrad next to hand-written NumPy.

Run: pytest benchmarks/bench_mlp.py --benchmark-enable --benchmark-group-by=param:batch
Targets (issue 2/5): gpugrad within 1.10x of the NumPy step at batch 512; the ratio at batch 64 is reported.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F
from mlp_reference import batch, init_params, numpy_step


def gpugrad_step_fn(device="cpu", sizes=None, seed=0):
    """A training step on raw leaf tensors (no nn/optim): forward, backward, in-place SGD, zeroed grads."""
    kw = {} if sizes is None else {"sizes": sizes}
    params = [gpugrad.tensor(p, device=device, requires_grad=True) for p in init_params(seed=seed, **kw)]

    def step(x, t, lr=0.01):
        h = x
        for i in range(0, len(params) - 2, 2):
            h = F.linear(h, params[i], params[i + 1]).relu()
        loss = F.cross_entropy(F.linear(h, params[-2], params[-1]), t)
        loss.backward()
        with gpugrad.no_grad():
            for p in params:
                xp = p._backend.xp
                p.data -= lr * p.grad.data  # in place: p keeps its buffer
                p.grad.data.fill(0)  # and so does p.grad
        return loss

    return step, params


@pytest.mark.parametrize("batch_size", [64, 512])
@pytest.mark.parametrize("impl", ["numpy", "gpugrad"])
def test_mlp_step(benchmark, impl, batch_size):
    x, t = batch(batch_size)
    if impl == "numpy":
        params = init_params()
        benchmark.group = f"mlp-step-b{batch_size}"
        benchmark(numpy_step, params, x, t)
    else:
        step, _ = gpugrad_step_fn()
        xt, tt = gpugrad.tensor(x, device="cpu"), gpugrad.tensor(t, device="cpu")
        benchmark.group = f"mlp-step-b{batch_size}"
        benchmark(step, xt, tt)


def test_gpugrad_step_matches_numpy_step():
    """The benchmark compares like with like: both steps give the same losses and parameters."""
    x, t = batch(64)
    ref = init_params()
    step, params = gpugrad_step_fn()
    xt, tt = gpugrad.tensor(x, device="cpu"), gpugrad.tensor(t, device="cpu")
    for _ in range(3):
        a, b = numpy_step(ref, x, t), step(xt, tt).item()
        assert abs(a - b) < 1e-5
    for p, r in zip(params, ref):
        np.testing.assert_allclose(p.detach().numpy(), r, rtol=1e-4, atol=1e-6)
