"""The MLP training step (784-1024-1024-10 ReLU, cross-entropy, SGD): hand-written, gpugrad eager, gpugrad as a
replayed CUDA graph, and PyTorch, all from the same parameters on the same batch."""
from __future__ import annotations

import math

import numpy as np

from gpugrad.bench.workloads.torch_peer import _to_torch, torch_for

MLP_SIZES = (784, 1024, 1024, 10)


def baseline_mlp_step(xp, params, x, t, lr=0.01):
    """A hand-written training step on ``xp`` (the baseline of benchmarks/bench_mlp.py): forward, mean softmax
    cross-entropy, backward and an in-place SGD update of params [W1, b1, W2, b2, ...] (W as (out, in)).
    Returns the loss as a 0-d array (no host synchronization on the GPU)."""
    n, layers = x.shape[0], len(params) // 2
    acts, pre, h = [x], [], x
    for i in range(layers):
        z = h @ params[2 * i].T
        z += params[2 * i + 1]
        if i < layers - 1:
            pre.append(z)
            h = xp.maximum(z, 0)
            acts.append(h)
        else:
            h = z
    m = h.max(axis=1, keepdims=True)
    e = xp.exp(h - m)
    s = e.sum(axis=1, keepdims=True)
    rows = xp.arange(n)
    loss = (xp.log(s[:, 0]) + m[:, 0] - h[rows, t]).mean()
    g = e / s
    g[rows, t] -= 1
    g /= n
    for i in reversed(range(layers)):
        w, b = params[2 * i], params[2 * i + 1]
        gw, gb = g.T @ acts[i], g.sum(axis=0)
        if i > 0:
            g = g @ w
            g *= pre[i - 1] > 0
        w -= lr * gw
        b -= lr * gb
    return loss


def mlp_batch(backend, batch, sizes=MLP_SIZES, seed=1):
    rng = np.random.default_rng(seed)
    return (backend.asarray(rng.standard_normal((batch, sizes[0]), dtype=np.float32)),
            backend.asarray(rng.integers(0, sizes[-1], batch, dtype=np.int64)))


MLP_IMPLS = ("baseline", "gpugrad", "gpugrad_graph", "torch")
SETTLE_S = 0.2  # CPU: each implementation runs this long before each of its samples (timing.measure_many)


def mlp_steps(backend, batch, sizes=MLP_SIZES, lr=0.01, seed=0, impls=MLP_IMPLS, amp=None):
    """{impl: step()} for the ReLU MLP's SGD training step at ``batch``, all from the same initial parameters
    (torch's Linear init, drawn from ``seed``) and on the same fixed batch; each step() returns the loss (an array
    or tensor, unsynchronized). "gpugrad_graph" is gpugrad's step captured once as a CUDA graph and replayed.
    Unavailable implementations map to the reason (a str)."""
    rng = np.random.default_rng(seed)
    host = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1 / math.sqrt(fan_in)
        host += [rng.uniform(-bound, bound, shape).astype(np.float32) for shape in ((fan_out, fan_in), (fan_out,))]
    x, t = mlp_batch(backend, batch, sizes)
    steps = {}
    if "baseline" in impls:
        bparams = [backend.asarray(h) for h in host]
        steps["baseline"] = lambda: baseline_mlp_step(backend.xp, bparams, x, t, lr)
    if "gpugrad" in impls:
        steps["gpugrad"] = _gpugrad_mlp_step(backend, host, sizes, x, t, lr)[0]
    if amp:  # gpugrad's step under autocast (float16: with a GradScaler), in the same run as the float32 one
        steps[f"gpugrad_{amp}"] = _gpugrad_mlp_step(backend, host, sizes, x, t, lr, amp=amp)[0]
    if "gpugrad_graph" in impls:
        steps["gpugrad_graph"] = (_graphed_mlp_step(backend, host, sizes, x, t, lr) if backend.name == "cuda" else
                                  f"CUDA graphs need a CUDA device, not {backend.name}")
    if "torch" in impls:
        th, dev = torch_for(backend)
        steps["torch"] = dev if th is None else _torch_mlp_step(th, dev, host, sizes, x, t, lr)
    return steps


def _load_host_params(params, host):
    import gpugrad

    with gpugrad.no_grad():
        for p, h in zip(params, host):
            p.copy_(gpugrad.tensor(h, device=p.device))


def _gpugrad_mlp_step(backend, host, sizes, x, t, lr, set_to_none=True, amp=None):
    """(step, parameters) of a gpugrad model of its own, loaded with ``host``; ``amp`` ("bf16", "fp16"): its forward
    under autocast, float16's loss scaled by a GradScaler."""
    import contextlib

    import gpugrad
    from gpugrad import nn
    from gpugrad.nn import functional as F
    from gpugrad.optim import SGD

    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(fan_in, fan_out, device=backend.device)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    model = nn.Sequential(*layers)
    params = list(model.parameters())
    _load_host_params(params, host)
    xt, tt = gpugrad.tensor(x, device=backend.device), gpugrad.tensor(t, device=backend.device)
    opt = SGD(params, lr=lr)
    low = {"bf16": gpugrad.bfloat16, "fp16": gpugrad.float16}.get(amp)
    scaler = gpugrad.amp.GradScaler(backend.name) if amp == "fp16" else None

    def step():
        opt.zero_grad(set_to_none)
        with gpugrad.autocast(backend.name, dtype=low) if low else contextlib.nullcontext():
            loss = F.cross_entropy(model(xt), tt)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step, params


def _graphed_mlp_step(backend, host, sizes, x, t, lr):
    """gpugrad's step captured after one eager warm-up step; each call replays the graph (on the same fixed batch,
    like the other implementations) and returns the captured loss tensor, which the replay rewrites."""
    import gpugrad

    step, params = _gpugrad_mlp_step(backend, host, sizes, x, t, lr, set_to_none=False)  # same gradient buffers
    step()  # warm-up: gradient buffers and optimizer state exist before capture
    g = gpugrad.cuda.CUDAGraph()
    with gpugrad.cuda.graph(g):
        loss = step()  # recorded, not run
    _load_host_params(params, host)  # undo the warm-up: every implementation starts from the same parameters

    def replay():
        g.replay()
        return loss

    # NOTE: the graph reads and writes the model's parameters, gradients and the batch, made before the capture
    # outside the graph's pool: they must outlive it (freed, their memory would go to other tensors while replays
    # still write there), so the replay holds them
    replay.keeps = (step, params)
    return replay


def _torch_mlp_step(th, dev, host, sizes, x, t, lr):
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [th.nn.Linear(fan_in, fan_out)] + ([th.nn.ReLU()] if i < len(sizes) - 2 else [])
    model = th.nn.Sequential(*layers).to(dev)
    with th.no_grad():
        for p, h in zip(model.parameters(), host):
            p.copy_(th.from_numpy(h))
    opt = th.optim.SGD(model.parameters(), lr=lr)
    tx, tt = _to_torch(th, dev, x), _to_torch(th, dev, t)

    def step():
        opt.zero_grad()
        loss = th.nn.functional.cross_entropy(model(tx), tt)
        loss.backward()
        opt.step()
        return loss
    return step


def run_mlp(backend, timer, batches, repeats=None, tick=None, amp=None):
    """Per batch: samples/s of each implementation and its step time relative to the hand-written baseline and to
    PyTorch (None without it)."""
    out = []
    for batch in batches:
        steps = mlp_steps(backend, batch, amp=amp)
        entry = {"batch": batch, "sizes": list(MLP_SIZES), "impls": {},
                 "unavailable": {k: v for k, v in steps.items() if isinstance(v, str)}}
        kw = {} if repeats is None else {"repeats": repeats}
        if backend.name == "cpu":  # torch's OpenMP pool and NumPy's OpenBLAS pool take turns: see measure_many
            kw["settle_s"] = SETTLE_S
        for impl, t in timer.many({k: v for k, v in steps.items() if not isinstance(v, str)}, **kw).items():
            entry["impls"][impl] = {**t.as_dict(), "samples_per_s": batch / t.median}
        if tick:
            for impl in steps:
                tick(f"mlp b{batch} {impl}")
        base, th = entry["impls"]["baseline"]["median_s"], entry["impls"].get("torch", {}).get("median_s")
        for impl, r in entry["impls"].items():
            r["time_vs_baseline"], r["time_vs_torch"] = r["median_s"] / base, r["median_s"] / th if th else None
        out.append(entry)
    return out
