"""The MLP training step written by hand in NumPy: the baseline gpugrad's step is measured against."""
from __future__ import annotations

import numpy as np

SIZES = (784, 1024, 1024, 10)


def init_params(sizes=SIZES, seed=0, dtype=np.float32):
    """PyTorch Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights (out, in) and biases."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(dtype))
        params.append(rng.uniform(-bound, bound, fan_out).astype(dtype))
    return params


def batch(n, sizes=SIZES, seed=1, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, sizes[0])).astype(dtype), rng.integers(0, sizes[-1], n)


def numpy_step(params, x, t, lr=0.01):
    """Forward, softmax cross-entropy (mean), backward and an in-place SGD update; returns the loss."""
    n = x.shape[0]
    acts, pre = [x], []
    h = x
    layers = len(params) // 2
    for i in range(layers):
        w, b = params[2 * i], params[2 * i + 1]
        z = h @ w.T
        z += b
        if i < layers - 1:
            pre.append(z)
            h = np.maximum(z, 0)
            acts.append(h)
        else:
            h = z
    m = h.max(axis=1, keepdims=True)
    e = np.exp(h - m)
    s = e.sum(axis=1, keepdims=True)
    loss = float(np.mean(np.log(s[:, 0]) + m[:, 0] - h[np.arange(n), t]))
    g = e / s
    g[np.arange(n), t] -= 1
    g /= n
    for i in reversed(range(layers)):
        w, b = params[2 * i], params[2 * i + 1]
        gw = g.T @ acts[i]
        gb = g.sum(axis=0)
        if i > 0:
            g = g @ w
            g *= pre[i - 1] > 0
        w -= lr * gw
        b -= lr * gb
    return loss
