"""Kernel workloads: one case per kernel launcher, its hand-written baseline and its PyTorch peer; run against
the device's peak copy bandwidth."""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from gpugrad.backend import reference
from gpugrad.bench.timing import Timing
from gpugrad.bench.workloads import baselines as B
from gpugrad.bench.workloads.inputs import bytes_moved
from gpugrad.bench.workloads.torch_peer import _to_torch, torch_for

IMPLS = ("kernel", "baseline", "torch")


@dataclasses.dataclass(frozen=True)
class KernelCase:
    """One kernel launcher: ``make(xp, inputs)`` -> the launcher's arguments after ``xp`` (arrays in launcher
    order, then parameters); ``baseline(xp, *args)`` hand-written array code with the same result;
    ``torch(th, *args)`` the PyTorch eager equivalent on torch tensors; ``inplace`` argument indices written."""

    name: str
    family: str
    make: Callable
    baseline: Callable
    torch: Callable | None = None
    inplace: tuple = ()
    label: str | None = None

    @property
    def id(self):
        return self.label or self.name


_P_DROP = 0.1


def one_input(xp, s):
    return (s.normal(0),)


def _fwd_then(fwd):
    """Arguments of an elementwise backward that takes the forward's output y: (y, gy)."""
    return lambda xp, s: (getattr(reference, fwd)(xp, s.normal(0)), s.normal(1))


def _xent_bwd_torch(th, x, t, lse, gloss):
    g = th.exp(x - lse[:, None])
    g[th.arange(x.shape[0], device=x.device), t] -= 1
    return g.mul_(gloss[:, None])


def layer_norm_inputs(xp, s):
    return s.normal(0), s.vector(0), s.vector(1), 1e-5


def _ln_bwd_make(xp, s):
    x, w, b, eps = layer_norm_inputs(xp, s)
    _, mean, rstd = reference.layer_norm_fwd(xp, x, w, b, eps)
    return x, w, mean, rstd, s.normal(1)


def _ln_bwd_torch(th, x, w, mean, rstd, gy):
    return th.ops.aten.native_layer_norm_backward(gy, x, [x.shape[1]], mean[:, None], rstd[:, None], w, None,
                                                  [True, True, False])


# SGD with momentum 0.9 (no dampening, weight decay or Nesterov) and Adam at step 10: the common settings.
def _sgd_make(xp, s):
    return (s.normal(0).ravel().copy(), s.normal(1).ravel(), s.normal(2).ravel().copy(),
            0.01, 0.9, 0.0, 0.0, False, False)


def _sgd_torch(th, p, g, buf, lr, momentum, *_):
    buf.mul_(momentum).add_(g)
    p.add_(buf, alpha=-lr)


def _adam_make(xp, s):
    v = s.normal(3).ravel() ** 2
    return (s.normal(0).ravel().copy(), s.normal(1).ravel(), s.normal(2).ravel() * 0.1, v,
            10, 1e-3, 0.9, 0.999, 1e-8, 0.0, False)


def _adam_torch(th, p, g, m, v, step, lr, beta1, beta2, eps, *_):
    # torch.optim.Adam's single-tensor update, in place
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1**step))


KERNELS = (
    KernelCase("relu_fwd", "elementwise", one_input, B.reference_of("relu_fwd"), lambda th, x: th.relu(x)),
    KernelCase("relu_bwd", "elementwise", _fwd_then("relu_fwd"), B.reference_of("relu_bwd"),
               lambda th, y, gy: th.ops.aten.threshold_backward(gy, y, 0)),
    KernelCase("gelu_fwd", "elementwise", one_input, B.reference_of("gelu_fwd"),
               lambda th, x: th.nn.functional.gelu(x, approximate="tanh")),
    KernelCase("gelu_bwd", "elementwise", lambda xp, s: (s.normal(0), s.normal(1)), B.reference_of("gelu_bwd"),
               lambda th, x, gy: th.ops.aten.gelu_backward(gy, x, approximate="tanh")),
    KernelCase("sigmoid_fwd", "elementwise", one_input, B.reference_of("sigmoid_fwd"), lambda th, x: th.sigmoid(x)),
    KernelCase("sigmoid_bwd", "elementwise", _fwd_then("sigmoid_fwd"), B.reference_of("sigmoid_bwd"),
               lambda th, y, gy: th.ops.aten.sigmoid_backward(gy, y)),
    KernelCase("tanh_fwd", "elementwise", one_input, B.reference_of("tanh_fwd"), lambda th, x: th.tanh(x)),
    KernelCase("tanh_bwd", "elementwise", _fwd_then("tanh_fwd"), B.reference_of("tanh_bwd"),
               lambda th, y, gy: th.ops.aten.tanh_backward(gy, y)),
    KernelCase("bias_act_fwd", "elementwise", lambda xp, s: (s.normal(0), s.vector(0), "relu"),
               lambda xp, x, b, act: xp.maximum(x + b, 0), lambda th, x, b, act: th.relu(x + b),
               label="bias_act_fwd[relu]"),
    KernelCase("bias_act_bwd", "elementwise",
               lambda xp, s: (xp.maximum(s.normal(0) + s.vector(0), 0), s.normal(1), "relu"), B.bias_relu_bwd,
               lambda th, y, gy, act: (lambda gz: (gz, gz.sum(0)))(th.ops.aten.threshold_backward(gy, y, 0)),
               label="bias_act_bwd[relu]"),
    KernelCase("dropout_fwd", "elementwise", lambda xp, s: (s.normal(0), _P_DROP, s.uniform()),
               lambda xp, x, p, u: (lambda mask: (x * mask * (1 / (1 - p)), mask))(u >= p),
               lambda th, x, p, u: (lambda mask: (x * mask * (1 / (1 - p)), mask))(u >= p)),
    KernelCase("dropout_bwd", "elementwise", lambda xp, s: (s.normal(1), s.uniform() >= _P_DROP, _P_DROP),
               lambda xp, gy, mask, p: gy * mask * (1 / (1 - p)),
               lambda th, gy, mask, p: th.ops.aten.native_dropout_backward(gy, mask, 1 / (1 - p))),
    KernelCase("accumulate_", "elementwise", lambda xp, s: (s.normal(0).copy(), s.normal(1)),
               lambda xp, acc, g: xp.add(acc, g, out=acc), lambda th, acc, g: acc.add_(g), inplace=(0,)),
    KernelCase("softmax_fwd", "reduce", one_input, B.softmax, lambda th, x: th.softmax(x, -1)),
    KernelCase("softmax_bwd", "reduce", _fwd_then("softmax_fwd"), B.softmax_bwd,
               lambda th, y, gy: th.ops.aten._softmax_backward_data(gy, y, -1, y.dtype)),
    KernelCase("log_softmax_fwd", "reduce", one_input, B.log_softmax, lambda th, x: th.log_softmax(x, -1)),
    KernelCase("log_softmax_bwd", "reduce", _fwd_then("log_softmax_fwd"),
               lambda xp, y, gy: gy - xp.exp(y) * gy.sum(axis=1, keepdims=True),
               lambda th, y, gy: th.ops.aten._log_softmax_backward_data(gy, y, -1, y.dtype)),
    KernelCase("logsumexp_fwd", "reduce", one_input, B.logsumexp, lambda th, x: th.logsumexp(x, -1)),
    KernelCase("logsumexp_bwd", "reduce",
               lambda xp, s: (s.normal(0), reference.logsumexp_fwd(xp, s.normal(0)), s.row_vector(1)),
               lambda xp, x, lse, glse: xp.multiply(xp.exp(x - lse[:, None]), glse[:, None]),
               lambda th, x, lse, glse: th.exp(x - lse[:, None]).mul_(glse[:, None])),
    KernelCase("sum_rows", "reduce", one_input, lambda xp, g: g.sum(axis=0), lambda th, g: g.sum(0)),
    KernelCase("softmax_xent_fwd", "loss", lambda xp, s: (s.normal(0), s.targets()), B.xent_fwd,
               lambda th, x, t: th.nn.functional.cross_entropy(x, t, reduction="none")),
    KernelCase("softmax_xent_bwd", "loss",
               lambda xp, s: (s.normal(0), s.targets(), reference.logsumexp_fwd(xp, s.normal(0)), s.row_vector(1)),
               B.xent_bwd, _xent_bwd_torch),
    KernelCase("layer_norm_fwd", "norm", layer_norm_inputs, B.layer_norm,
               lambda th, x, w, b, eps: th.ops.aten.native_layer_norm(x, [x.shape[1]], w, b, eps)),
    KernelCase("layer_norm_bwd", "norm", _ln_bwd_make, B.layer_norm_bwd, _ln_bwd_torch),
    KernelCase("sgd_update_", "optim", _sgd_make, B.sgd_momentum, _sgd_torch, inplace=(0, 2), label="sgd_update_[momentum]"),
    KernelCase("adam_update_", "optim", _adam_make, B.adam, _adam_torch, inplace=(0, 2, 3)),
)
KERNEL_BY_ID = {c.id: c for c in KERNELS}


def kernels(*families):
    """The kernel cases of the given families (all when none is given)."""
    return [c for c in KERNELS if not families or c.family in families]


def kernel_workload(case, impl, inputs):
    """(fn, args) for one implementation of a kernel case on ``inputs``' device; fn() runs one launch.
    Raises LookupError (with the reason) when the implementation is unavailable here."""
    be, xp = inputs.backend, inputs.xp
    args = case.make(xp, inputs)
    if impl == "kernel":
        launch = getattr(be.kernels, case.name)
        return (lambda: launch(xp, *args)), args
    if impl == "baseline":
        return (lambda: case.baseline(xp, *args)), args
    if impl == "torch":
        th, dev = torch_for(be)
        if th is None:
            raise LookupError(dev)
        if case.torch is None:
            raise LookupError(f"no PyTorch peer for {case.id}")
        targs = [_to_torch(th, dev, a) for a in args]
        return (lambda: case.torch(th, *targs)), args
    raise ValueError(f"unknown implementation {impl!r}; expected one of {IMPLS}")


def peak_copy(backend, nbytes):
    """(fn, bytes moved) of a device-to-device copy of nbytes: the bandwidth peak (read nbytes + write nbytes)."""
    xp = backend.xp
    src = xp.ones(max(1, nbytes // 4), dtype=np.float32)  # ones, not empty: every page is really backed
    dst = xp.zeros_like(src)
    return (lambda: xp.copyto(dst, src)), 2 * src.nbytes


def peak_vector_copy(backend, nbytes):
    """(fn, bytes moved) of the same copy through gpugrad's float4 copy kernel (``kernels.copy_``: the vectorized
    pointwise kernel with the identity op), or None on the CPU. A cudaMemcpy does not always reach what a kernel's
    16-byte loads and stores do, and a kernel cannot beat a copy that moves the same bytes the same way, so on a
    GPU the kernels are held to the larger of the two peaks."""
    if backend.name == "cpu":
        return None
    xp = backend.xp
    src = xp.ones(max(1, nbytes // 4), dtype=np.float32)
    dst = xp.zeros_like(src)
    copy_ = backend.kernels.copy_
    return (lambda: copy_(xp, dst, src)), 2 * src.nbytes


def run_kernels(inputs, timer, copy, cases=KERNELS, tick=None, vector_copy=None):
    """(rows, peak): per kernel case the bytes moved, median time and IQR, GB/s and the fraction of the peak.

    ``copy`` = (fn, bytes) of the peak copy, sampled interleaved with every kernel, so the peak (the median of all
    those samples) and the kernels see the same machine; on a shared CPU their ratio is what holds.
    ``vector_copy`` (GPU: :func:`peak_vector_copy`) is sampled the same way; then ``peak`` also has "memcpy" and
    "vector_copy" entries, and its "gbs" (the fractions' reference) and timing are the faster of the two."""
    peaks = {"copy": copy, **({"vector_copy": vector_copy} if vector_copy else {})}
    rows, samples = [], {k: [] for k in peaks}
    for case in cases:
        fn, args = kernel_workload(case, "kernel", inputs)
        out = fn()  # also the first warm-up; its outputs give the bytes written
        nbytes = bytes_moved(args, out, case.inplace)
        del out
        t = timer.many({"kernel": fn, **{k: f for k, (f, _) in peaks.items()}})
        for k in peaks:
            samples[k] += t[k].samples
        k = t["kernel"]
        rows.append({"name": case.id, "family": case.family, "shape": list(inputs.shape),
                     "dtype": inputs.dtype.name, "bytes": nbytes, **k.as_dict(), "gbs": nbytes / k.median / 1e9})
        if tick:
            tick(case.id)
    found = {}
    for k, (_, moved) in peaks.items():
        pt = Timing(tuple(samples[k]))
        found[k] = {"gbs": moved / pt.median / 1e9, **pt.as_dict()}
    peak = {"copy_bytes": copy[1] // 2, **found["copy"]}
    if vector_copy:
        best = max(found, key=lambda k: found[k]["gbs"])
        peak = {"copy_bytes": copy[1] // 2, **found[best], "source": "memcpy" if best == "copy" else best,
                "memcpy": found["copy"], "vector_copy": found["vector_copy"]}
    for r in rows:
        r["fraction_of_peak"] = r["gbs"] / peak["gbs"]
    return rows, peak
