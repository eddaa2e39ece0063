"""What is measured: kernel, op, matmul, MLP and engine workloads, with their byte and flop counts.

Every workload comes in up to three implementations, run side by side in one process so that each figure has its
reference measured under the same load on a shared machine:

- ``kernel``: the launcher the device's backend runs (``backend.kernels``: the NumPy reference on the CPU, the
  hand-written CUDA kernel on CUDA); at op level ``gpugrad``, the autograd op;
- ``baseline``: the same math written by hand against ``xp`` (NumPy on the CPU, CuPy on CUDA), as one would
  write it without gpugrad;
- ``torch``: PyTorch eager, when installed (and built with CUDA, for the cuda device; never on the simulated one).

``gpugrad bench`` (``gpugrad/cli/bench.py``) and the pytest-benchmark suites in ``benchmarks/`` both build their
workloads here, so both time the same thing.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import zlib
from typing import Callable

import numpy as np

from gpugrad.backend import cublas, get_backend, reference
from gpugrad.bench.timing import Timing, timer_for

IMPLS = ("kernel", "baseline", "torch")
OP_IMPLS = ("gpugrad", "baseline", "torch")


# ---- inputs ---------------------------------------------------------------------------------------------------
class Inputs:
    """Seeded random arrays of one (rows, cols) shape and dtype on one device, generated on the host once and
    reused by every case; cases derive the rest (forward outputs a backward needs) on the device with ``xp``.

    Arrays handed out are shared between cases: a case that writes in place must copy (``.copy()``).
    """

    def __init__(self, backend, rows, cols, dtype=np.float32, seed=0):
        self.backend, self.xp = backend, backend.xp
        self.rows, self.cols, self.dtype, self.seed = int(rows), int(cols), np.dtype(dtype), seed
        self._cache = {}

    @property
    def shape(self):
        return (self.rows, self.cols)

    def _get(self, key, make):
        if key not in self._cache:
            rng = np.random.default_rng([self.seed, zlib.crc32(repr(key).encode())])  # order-independent
            self._cache[key] = self.backend.asarray(make(rng))
        return self._cache[key]

    def normal(self, i=0, shape=None):
        shape = self.shape if shape is None else tuple(shape)
        return self._get(("normal", i, shape), lambda rng: rng.standard_normal(shape, dtype=self.dtype))

    def uniform(self):
        return self._get("uniform", lambda rng: rng.random(self.shape, dtype=self.dtype))

    def vector(self, i=0):
        """(cols,): a bias, a LayerNorm weight."""
        return self.normal(i, (self.cols,))

    def row_vector(self, i=0):
        """(rows,): per-row upstream gradients."""
        return self.normal(i, (self.rows,))

    def targets(self):
        """(rows,) int64 class ids in [0, cols)."""
        return self._get("targets", lambda rng: rng.integers(0, self.cols, self.rows, dtype=np.int64))


def _arrays(values):
    return [v for v in values if hasattr(v, "nbytes") and hasattr(v, "shape")]


def _unique(arrays):
    seen, out = set(), []
    for a in arrays:
        if id(a) not in seen:
            seen.add(id(a))
            out.append(a)
    return out


def _flatten(out):
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flatten(o)]
    return [out]


def bytes_moved(args, out, inplace=()):
    """The minimal traffic of one launch: every array argument read once, every in-place argument written once
    more, every distinct new output written once (a kernel that returns one buffer twice wrote it once)."""
    inputs = _unique(_arrays(args))
    fresh = [a for a in _unique(_arrays(_flatten(out))) if all(a is not b for b in inputs)]  # acc_ returns acc
    return sum(a.nbytes for a in inputs) + sum(args[i].nbytes for i in inplace) + sum(a.nbytes for a in fresh)


# ---- kernel cases -------------------------------------------------------------------------------------------------
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


def _x(xp, s):
    return (s.normal(0),)


def _fwd_then(fwd):
    """Arguments of an elementwise backward that takes the forward's output y: (y, gy)."""
    return lambda xp, s: (getattr(reference, fwd)(xp, s.normal(0)), s.normal(1))


def _ref(name):
    """The NumPy baseline of a pointwise kernel is its reference (backend/reference.py): the formula is written
    once (ops/declarations.py), and the ratio then measures only what gpugrad adds around it."""
    return lambda xp, *args: getattr(reference, name)(xp, *args)


def _relu_bias_bwd_base(xp, y, gy, act):
    return reference.bias_act_bwd(xp, y, gy, act)


def _lse_base(xp, x):
    m = x.max(axis=1, keepdims=True)
    return (m + xp.log(xp.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def _softmax_base(xp, x):
    e = xp.exp(x - x.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def _softmax_bwd_base(xp, y, gy):
    gx = gy * y
    gx -= y * gx.sum(axis=1, keepdims=True)
    return gx


def _log_softmax_base(xp, x):
    z = x - x.max(axis=1, keepdims=True)
    z -= xp.log(xp.exp(z).sum(axis=1, keepdims=True))
    return z


def _xent_fwd_base(xp, x, t):
    lse = _lse_base(xp, x)
    return lse - x[xp.arange(x.shape[0]), t], lse


def _xent_bwd_base(xp, x, t, lse, gloss):
    g = xp.exp(x - lse[:, None])
    g[xp.arange(x.shape[0]), t] -= 1
    g *= gloss[:, None]
    return g


def _xent_bwd_torch(th, x, t, lse, gloss):
    g = th.exp(x - lse[:, None])
    g[th.arange(x.shape[0], device=x.device), t] -= 1
    return g.mul_(gloss[:, None])


def _ln_make(xp, s):
    return s.normal(0), s.vector(0), s.vector(1), 1e-5


def _ln_base(xp, x, w, b, eps):
    mean = x.mean(axis=1)
    xc = x - mean[:, None]
    rstd = 1 / xp.sqrt((xc * xc).mean(axis=1) + eps)
    y = xc * rstd[:, None]
    y *= w
    y += b
    return y, mean, rstd


def _ln_bwd_make(xp, s):
    x, w, b, eps = _ln_make(xp, s)
    _, mean, rstd = reference.layer_norm_fwd(xp, x, w, b, eps)
    return x, w, mean, rstd, s.normal(1)


def _ln_bwd_base(xp, x, w, mean, rstd, gy):
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = gy * w
    gx = g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True)
    gx *= rstd[:, None]
    return gx, (gy * xhat).sum(axis=0), gy.sum(axis=0)


def _ln_bwd_torch(th, x, w, mean, rstd, gy):
    return th.ops.aten.native_layer_norm_backward(gy, x, [x.shape[1]], mean[:, None], rstd[:, None], w, None,
                                                  [True, True, False])


# SGD with momentum 0.9 (no dampening, weight decay or Nesterov) and Adam at step 10: the common settings.
def _sgd_make(xp, s):
    return (s.normal(0).ravel().copy(), s.normal(1).ravel(), s.normal(2).ravel().copy(),
            0.01, 0.9, 0.0, 0.0, False, False)


def _sgd_base(xp, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    # NOTE: written for the benchmarked setting only (dampening 0, no weight decay, not Nesterov, not step 1)
    buf *= momentum
    buf += g
    p -= lr * buf


def _sgd_torch(th, p, g, buf, lr, momentum, *_):
    buf.mul_(momentum).add_(g)
    p.add_(buf, alpha=-lr)


def _adam_make(xp, s):
    v = s.normal(3).ravel() ** 2
    return (s.normal(0).ravel().copy(), s.normal(1).ravel(), s.normal(2).ravel() * 0.1, v,
            10, 1e-3, 0.9, 0.999, 1e-8, 0.0, False)


def _adam_base(xp, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    # NOTE: written for the benchmarked setting only (no weight decay)
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
    denom = xp.sqrt(v)
    denom /= math.sqrt(1 - beta2**step)
    denom += eps
    p -= (lr / (1 - beta1**step)) * m / denom


def _adam_torch(th, p, g, m, v, step, lr, beta1, beta2, eps, *_):
    # torch.optim.Adam's single-tensor update, in place
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1**step))


KERNELS = (
    KernelCase("relu_fwd", "elementwise", _x, _ref("relu_fwd"), lambda th, x: th.relu(x)),
    KernelCase("relu_bwd", "elementwise", _fwd_then("relu_fwd"), _ref("relu_bwd"),
               lambda th, y, gy: th.ops.aten.threshold_backward(gy, y, 0)),
    KernelCase("gelu_fwd", "elementwise", _x, _ref("gelu_fwd"),
               lambda th, x: th.nn.functional.gelu(x, approximate="tanh")),
    KernelCase("gelu_bwd", "elementwise", lambda xp, s: (s.normal(0), s.normal(1)), _ref("gelu_bwd"),
               lambda th, x, gy: th.ops.aten.gelu_backward(gy, x, approximate="tanh")),
    KernelCase("sigmoid_fwd", "elementwise", _x, _ref("sigmoid_fwd"), lambda th, x: th.sigmoid(x)),
    KernelCase("sigmoid_bwd", "elementwise", _fwd_then("sigmoid_fwd"), _ref("sigmoid_bwd"),
               lambda th, y, gy: th.ops.aten.sigmoid_backward(gy, y)),
    KernelCase("tanh_fwd", "elementwise", _x, _ref("tanh_fwd"), lambda th, x: th.tanh(x)),
    KernelCase("tanh_bwd", "elementwise", _fwd_then("tanh_fwd"), _ref("tanh_bwd"),
               lambda th, y, gy: th.ops.aten.tanh_backward(gy, y)),
    KernelCase("bias_act_fwd", "elementwise", lambda xp, s: (s.normal(0), s.vector(0), "relu"),
               lambda xp, x, b, act: xp.maximum(x + b, 0), lambda th, x, b, act: th.relu(x + b),
               label="bias_act_fwd[relu]"),
    KernelCase("bias_act_bwd", "elementwise",
               lambda xp, s: (xp.maximum(s.normal(0) + s.vector(0), 0), s.normal(1), "relu"), _relu_bias_bwd_base,
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
    KernelCase("softmax_fwd", "reduce", _x, _softmax_base, lambda th, x: th.softmax(x, -1)),
    KernelCase("softmax_bwd", "reduce", _fwd_then("softmax_fwd"), _softmax_bwd_base,
               lambda th, y, gy: th.ops.aten._softmax_backward_data(gy, y, -1, y.dtype)),
    KernelCase("log_softmax_fwd", "reduce", _x, _log_softmax_base, lambda th, x: th.log_softmax(x, -1)),
    KernelCase("log_softmax_bwd", "reduce", _fwd_then("log_softmax_fwd"),
               lambda xp, y, gy: gy - xp.exp(y) * gy.sum(axis=1, keepdims=True),
               lambda th, y, gy: th.ops.aten._log_softmax_backward_data(gy, y, -1, y.dtype)),
    KernelCase("logsumexp_fwd", "reduce", _x, _lse_base, lambda th, x: th.logsumexp(x, -1)),
    KernelCase("logsumexp_bwd", "reduce",
               lambda xp, s: (s.normal(0), reference.logsumexp_fwd(xp, s.normal(0)), s.row_vector(1)),
               lambda xp, x, lse, glse: xp.multiply(xp.exp(x - lse[:, None]), glse[:, None]),
               lambda th, x, lse, glse: th.exp(x - lse[:, None]).mul_(glse[:, None])),
    KernelCase("sum_rows", "reduce", _x, lambda xp, g: g.sum(axis=0), lambda th, g: g.sum(0)),
    KernelCase("softmax_xent_fwd", "loss", lambda xp, s: (s.normal(0), s.targets()), _xent_fwd_base,
               lambda th, x, t: th.nn.functional.cross_entropy(x, t, reduction="none")),
    KernelCase("softmax_xent_bwd", "loss",
               lambda xp, s: (s.normal(0), s.targets(), reference.logsumexp_fwd(xp, s.normal(0)), s.row_vector(1)),
               _xent_bwd_base, _xent_bwd_torch),
    KernelCase("layer_norm_fwd", "norm", _ln_make, _ln_base,
               lambda th, x, w, b, eps: th.ops.aten.native_layer_norm(x, [x.shape[1]], w, b, eps)),
    KernelCase("layer_norm_bwd", "norm", _ln_bwd_make, _ln_bwd_base, _ln_bwd_torch),
    KernelCase("sgd_update_", "optim", _sgd_make, _sgd_base, _sgd_torch, inplace=(0, 2), label="sgd_update_[momentum]"),
    KernelCase("adam_update_", "optim", _adam_make, _adam_base, _adam_torch, inplace=(0, 2, 3)),
)
KERNEL_BY_ID = {c.id: c for c in KERNELS}


def kernels(*families):
    """The kernel cases of the given families (all when none is given)."""
    return [c for c in KERNELS if not families or c.family in families]


# ---- torch ----------------------------------------------------------------------------------------------------------
@functools.cache
def _torch_module():
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def torch_unavailable_reason(device_name):
    """None when PyTorch can run on this device, else why not."""
    th = _torch_module()
    if th is None:
        return "PyTorch is not installed (pip install 'gpugrad[oracle]')"
    if device_name == "cuda" and not th.cuda.is_available():
        return f"PyTorch {th.__version__} has no usable CUDA device"
    if device_name == "cuda" and get_backend("cuda").simulated:
        return "the CUDA device is simulated (GPUGRAD_CUDA_SIM): PyTorch cannot run on it"
    return None


def torch_for(backend):
    """(torch module, torch device) for a gpugrad backend, or (None, reason)."""
    reason = torch_unavailable_reason(backend.name)
    if reason:
        return None, reason
    th = _torch_module()
    return th, th.device("cuda", backend.device.index) if backend.name == "cuda" else th.device("cpu")


def _to_torch(th, dev, a):
    if not (hasattr(a, "shape") and hasattr(a, "nbytes")):
        return a
    if dev.type == "cpu":
        return th.from_numpy(a)  # shares memory (and strides): in-place peers update this array
    return th.from_dlpack(a)  # CuPy -> torch without a copy


def synced(fn, backend):
    """fn, finishing its GPU work (CuPy's and PyTorch's, on any stream) before returning: for host-clock timers
    such as pytest-benchmark's. The identity on the CPU."""
    if backend.name != "cuda":
        return fn
    device = backend.xp.cuda.Device(backend.device.index)

    def run():
        out = fn()
        device.synchronize()
        return out

    return run


# ---- kernel workloads ------------------------------------------------------------------------------------------------
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


# ---- matmul ----------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MatmulCase:
    """``a @ b``, a (m, k) and b (k, n), laid out as gpugrad's Linear has them: ``ta`` / ``tb`` make the operand
    a transposed view (of a C-contiguous (k, m) / (n, k) array), as ``x @ w.T`` and ``gy.T @ x`` pass it to BLAS."""

    name: str
    m: int
    n: int
    k: int
    ta: bool = False
    tb: bool = False

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def operands(self, inputs):
        a = inputs.normal(10, (self.k, self.m)).T if self.ta else inputs.normal(10, (self.m, self.k))
        b = inputs.normal(11, (self.n, self.k)).T if self.tb else inputs.normal(11, (self.k, self.n))
        return a, b


def mlp_matmuls(batch, width=1024):
    """The three GEMMs of the MLP's hidden Linear(width, width) at a batch: forward, grad input, grad weight."""
    return (MatmulCase(f"linear fwd x@Wᵀ b{batch}", batch, width, width, tb=True),
            MatmulCase(f"linear bwd gy@W b{batch}", batch, width, width),
            MatmulCase(f"linear bwd gyᵀ@x b{batch}", width, width, batch, ta=True))


def matmul_workload(case, impl, inputs):
    be, xp = inputs.backend, inputs.xp
    a, b = case.operands(inputs)
    if impl == "kernel" and be.name == "cuda":  # gpugrad's own cuBLAS calls (capturable); the baseline is CuPy's
        return lambda: cublas.matmul(a, b)
    if impl in ("kernel", "baseline"):  # on the CPU gpugrad's matmul *is* xp.matmul (BLAS)
        return lambda: xp.matmul(a, b)
    th, dev = torch_for(be)
    if th is None:
        raise LookupError(dev)
    ta, tb = _to_torch(th, dev, a), _to_torch(th, dev, b)  # NOTE: .T views stay views; torch sees the strides
    return lambda: th.matmul(ta, tb)


def run_matmuls(inputs, timer, peak_n, batches, tick=None):
    """{"peak": the square peak_n GEMM, "cases": the MLP GEMMs with GFLOP/s and the fraction of that peak}; the
    peak GEMM is sampled interleaved with every case, as the copy is with the kernels."""
    peak_case = MatmulCase(f"peak {peak_n}^3", peak_n, peak_n, peak_n)
    peak_fn = matmul_workload(peak_case, "kernel", inputs)
    rows, peak_samples = [], []
    for case in (c for b in batches for c in mlp_matmuls(b)):
        t = timer.many({"gemm": matmul_workload(case, "kernel", inputs), "peak": peak_fn})
        peak_samples += t["peak"].samples
        rows.append({"name": case.name, "m": case.m, "n": case.n, "k": case.k, "flops": case.flops,
                     **t["gemm"].as_dict(), "gflops": case.flops / t["gemm"].median / 1e9})
        if tick:
            tick(case.name)
    peak_t = Timing(tuple(peak_samples))
    peak = {"name": peak_case.name, "m": peak_n, "n": peak_n, "k": peak_n, "flops": peak_case.flops,
            **peak_t.as_dict(), "gflops": peak_case.flops / peak_t.median / 1e9}
    for r in rows:
        r["fraction_of_peak"] = r["gflops"] / peak["gflops"]
    return {"peak": peak, "cases": rows}


# ---- op-level (autograd) workloads ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OpCase:
    """An autograd op: ``make(xp, inputs)`` -> arguments (arrays, then non-array ones); ``grad`` the indices of
    arrays that require grad; ``gg(*tensors)`` / ``torch(th, *tensors)`` the forward; ``baseline(xp, *args, gy)``
    the hand-written forward and, when gy is not None, backward: returns (y, grads)."""

    name: str
    family: str
    make: Callable
    gg: Callable
    torch: Callable
    baseline: Callable
    grad: tuple = (0,)


def _unary_base(fwd, bwd_from_y):
    def base(xp, x, gy):
        y = fwd(xp, x)
        return y, (None if gy is None else (bwd_from_y(xp, x, y, gy),))
    return base


def _ce_base(xp, x, t, gy):
    n = x.shape[0]
    lse = _lse_base(xp, x)
    loss = (lse - x[xp.arange(n), t]).mean()
    if gy is None:
        return loss, None
    return loss, (_xent_bwd_base(xp, x, t, lse, xp.full((n,), gy / n, dtype=x.dtype)),)


def _ln_op_base(xp, x, w, b, gy):
    y, mean, rstd = _ln_base(xp, x, w, b, 1e-5)
    return y, (None if gy is None else _ln_bwd_base(xp, x, w, mean, rstd, gy))


def _matmul_base(xp, a, b, gy):
    y = a @ b
    return y, (None if gy is None else (gy @ b.T, a.T @ gy))


def _linear_base(xp, x, w, b, gy):
    y = x @ w.T
    y += b
    return y, (None if gy is None else (gy @ w, gy.T @ x, gy.sum(axis=0)))


def _F():
    import gpugrad.nn.functional as F

    return F


OPS = (
    OpCase("relu", "elementwise", _x, lambda x: x.relu(), lambda th, x: th.relu(x),
           _unary_base(_ref("relu_fwd"), lambda xp, x, y, gy: reference.relu_bwd(xp, y, gy))),
    OpCase("gelu", "elementwise", _x, lambda x: x.gelu(approximate="tanh"),
           lambda th, x: th.nn.functional.gelu(x, approximate="tanh"),
           _unary_base(_ref("gelu_fwd"), lambda xp, x, y, gy: reference.gelu_bwd(xp, x, gy))),
    OpCase("sigmoid", "elementwise", _x, lambda x: x.sigmoid(), lambda th, x: th.sigmoid(x),
           _unary_base(_ref("sigmoid_fwd"), lambda xp, x, y, gy: reference.sigmoid_bwd(xp, y, gy))),
    OpCase("tanh", "elementwise", _x, lambda x: x.tanh(), lambda th, x: th.tanh(x),
           _unary_base(_ref("tanh_fwd"), lambda xp, x, y, gy: reference.tanh_bwd(xp, y, gy))),
    OpCase("bias_act[relu]", "elementwise", lambda xp, s: (s.normal(0), s.vector(0)),
           lambda x, b: _F().bias_act(x, b, "relu"), lambda th, x, b: th.relu(x + b),
           lambda xp, x, b, gy: (lambda y: (y, None if gy is None else _relu_bias_bwd_base(xp, y, gy, "relu")))(
               xp.maximum(x + b, 0)), grad=(0, 1)),
    OpCase("softmax", "reduce", _x, lambda x: x.softmax(-1), lambda th, x: th.softmax(x, -1),
           _unary_base(_softmax_base, lambda xp, x, y, gy: _softmax_bwd_base(xp, y, gy))),
    OpCase("log_softmax", "reduce", _x, lambda x: x.log_softmax(-1), lambda th, x: th.log_softmax(x, -1),
           _unary_base(_log_softmax_base,
                       lambda xp, x, y, gy: gy - xp.exp(y) * gy.sum(axis=1, keepdims=True))),
    OpCase("logsumexp", "reduce", _x, lambda x: x.logsumexp(-1), lambda th, x: th.logsumexp(x, -1),
           _unary_base(_lse_base, lambda xp, x, y, gy: xp.exp(x - y[:, None]) * gy[:, None])),
    OpCase("sum(axis=0)", "reduce", _x, lambda x: x.sum(axis=0), lambda th, x: x.sum(0),
           _unary_base(lambda xp, x: x.sum(axis=0), lambda xp, x, y, gy: xp.broadcast_to(gy, x.shape))),
    OpCase("layer_norm", "norm", lambda xp, s: _ln_make(xp, s)[:3],
           lambda x, w, b: _F().layer_norm(x, x.shape[-1], w, b),
           lambda th, x, w, b: th.nn.functional.layer_norm(x, (x.shape[-1],), w, b), _ln_op_base, grad=(0, 1, 2)),
    OpCase("cross_entropy", "loss", lambda xp, s: (s.normal(0), s.targets()),
           lambda x, t: _F().cross_entropy(x, t), lambda th, x, t: th.nn.functional.cross_entropy(x, t), _ce_base),
    OpCase("matmul", "matmul", lambda xp, s: (s.normal(0), s.normal(1, (s.cols, s.cols))),
           lambda a, b: a @ b, lambda th, a, b: a @ b, _matmul_base, grad=(0, 1)),
    OpCase("linear", "matmul", lambda xp, s: (s.normal(0), s.normal(1, (s.cols, s.cols)), s.vector(2)),
           lambda x, w, b: _F().linear(x, w, b), lambda th, x, w, b: th.nn.functional.linear(x, w, b),
           _linear_base, grad=(0, 1, 2)),
)
OP_BY_NAME = {c.name: c for c in OPS}


def ops(*families):
    return [c for c in OPS if not families or c.family in families]


def op_workload(case, impl, inputs):
    """fn() running the op forward, then backward with a ones upstream gradient, building the graph from leaves
    that require grad each call as a training step does; raises LookupError when unavailable here."""
    import gpugrad

    be, xp = inputs.backend, inputs.xp
    args = case.make(xp, inputs)
    if impl == "baseline":
        y, _ = case.baseline(xp, *args, None)
        gy = xp.ones_like(y) if y.ndim else 1.0
        return lambda: case.baseline(xp, *args, gy)
    if impl == "gpugrad":
        ts = [gpugrad.tensor(a, device=be.device, requires_grad=i in case.grad) if hasattr(a, "shape") else a
              for i, a in enumerate(args)]
        leaves = [ts[i] for i in case.grad]
        y = case.gg(*ts)
        gy = gpugrad.tensor(xp.ones_like(y.detach()._data), device=be.device) if y.ndim else None

        def run():
            y = case.gg(*ts)
            y.backward(gy)
            for t in leaves:
                t.grad = None
            return y

        return run
    if impl == "torch":
        th, dev = torch_for(be)
        if th is None:
            raise LookupError(dev)
        ts = [_to_torch(th, dev, a) for a in args]
        for i in case.grad:
            ts[i] = ts[i].detach().clone().requires_grad_(True)
        leaves = [ts[i] for i in case.grad]
        y = case.torch(th, *ts)
        gy = th.ones_like(y) if y.ndim else None

        def run_torch():
            y = case.torch(th, *ts)
            y.backward(gy)
            for t in leaves:
                t.grad = None
            return y

        return run_torch
    raise ValueError(f"unknown implementation {impl!r}; expected one of {OP_IMPLS}")


# ---- MLP training step -----------------------------------------------------------------------------------------------
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


def mlp_steps(backend, batch, sizes=MLP_SIZES, lr=0.01, seed=0, impls=MLP_IMPLS):
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


def _gpugrad_mlp_step(backend, host, sizes, x, t, lr, set_to_none=True):
    """(step, parameters) of a gpugrad model of its own, loaded with ``host``."""
    import gpugrad
    from gpugrad import nn
    from gpugrad.optim import SGD

    F, layers = _F(), []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(fan_in, fan_out, device=backend.device)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    model = nn.Sequential(*layers)
    params = list(model.parameters())
    _load_host_params(params, host)
    xt, tt = gpugrad.tensor(x, device=backend.device), gpugrad.tensor(t, device=backend.device)
    opt = SGD(params, lr=lr)

    def step():
        opt.zero_grad(set_to_none)
        loss = F.cross_entropy(model(xt), tt)
        loss.backward()
        opt.step()
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


def run_mlp(backend, timer, batches, repeats=None, tick=None):
    """Per batch: samples/s of each implementation and its step time relative to the hand-written baseline and to
    PyTorch (None without it)."""
    out = []
    for batch in batches:
        steps = mlp_steps(backend, batch)
        entry = {"batch": batch, "sizes": list(MLP_SIZES), "impls": {},
                 "unavailable": {k: v for k, v in steps.items() if isinstance(v, str)}}
        kw = {} if repeats is None else {"repeats": repeats}
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


# ---- engine overhead -------------------------------------------------------------------------------------------------
def tiny_chain(impl, backend, n_ops):
    """fn() running ``n_ops`` multiplies of a 4-element tensor forward, then backward: the per-op engine cost."""
    if impl == "gpugrad":
        import gpugrad

        x = gpugrad.tensor(np.ones(4, np.float32), device=backend.device, requires_grad=True)
    else:
        th, dev = torch_for(backend)
        if th is None:
            raise LookupError(dev)
        x = th.ones(4, device=dev, requires_grad=True)

    def run():
        y = x
        for _ in range(n_ops):
            y = y * 1.0001
        y.sum().backward()
        x.grad = None

    return run


def run_engine(backend, timer, n_ops, tick=None):
    out = {"n_ops": n_ops, "us_per_op": {}, "unavailable": {}}
    fns = {}
    for impl in ("gpugrad", "torch"):
        try:
            fns[impl] = tiny_chain(impl, backend, n_ops)
        except LookupError as e:
            out["unavailable"][impl] = str(e)
    for impl, t in timer.many(fns).items():
        out["us_per_op"][impl] = t.median / n_ops * 1e6
    if tick:
        for impl in ("gpugrad", "torch"):
            tick(f"engine {impl}")
    us = out["us_per_op"]
    out["gpugrad_vs_torch"] = us["gpugrad"] / us["torch"] if "torch" in us else None
    return out


# ---- optimizer step over a model's parameters ------------------------------------------------------------------------
OPTIMIZERS = ("sgd", "adam")
OPTIM_IMPLS = ("gpugrad", "baseline", "torch")


def optimizer_workload(kind, impl, backend, sizes=MLP_SIZES, seed=0):
    """fn() running one optimizer step over the MLP's parameters with fixed gradients: "sgd" (momentum 0.9, lr
    0.01) or "adam" (lr 1e-3); gpugrad's optimizer (one multi-tensor launch), the hand-written per-tensor update, or torch.optim. Raises LookupError when the implementation is unavailable."""
    rng = np.random.default_rng(seed)
    shapes = [s for fan_in, fan_out in zip(sizes[:-1], sizes[1:]) for s in ((fan_out, fan_in), (fan_out,))]
    host = [(rng.standard_normal(s, dtype=np.float32), rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    if impl.startswith("gpugrad"):
        import gpugrad

        try:
            from gpugrad import optim
        except ImportError as e:
            raise LookupError(f"gpugrad.optim is not importable: {e}") from None
        params = []
        for p, g in host:
            t = gpugrad.tensor(p, device=backend.device, requires_grad=True)
            t.grad = gpugrad.tensor(g, device=backend.device)
            params.append(t)
        opt = optim.SGD(params, lr=0.01, momentum=0.9) if kind == "sgd" else optim.Adam(params, lr=1e-3)
        return opt.step
    if impl == "baseline":
        xp = backend.xp
        ps = [(backend.asarray(p), backend.asarray(g)) for p, g in host]
        if kind == "sgd":
            bufs = [xp.zeros_like(p) for p, _ in ps]
            return lambda: [_sgd_base(xp, p, g, b, 0.01, 0.9, 0.0, 0.0, False, False) for (p, g), b in zip(ps, bufs)]
        ms, vs, step = [xp.zeros_like(p) for p, _ in ps], [xp.zeros_like(p) for p, _ in ps], [0]

        def adam():
            step[0] += 1
            for (p, g), m, v in zip(ps, ms, vs):
                _adam_base(xp, p, g, m, v, step[0], 1e-3, 0.9, 0.999, 1e-8, 0.0, False)
        return adam
    if impl == "torch":
        th, dev = torch_for(backend)
        if th is None:
            raise LookupError(dev)
        params = []
        for p, g in host:
            t = th.tensor(p, device=dev, requires_grad=True)
            t.grad = th.tensor(g, device=dev)
            params.append(t)
        opt = th.optim.SGD(params, lr=0.01, momentum=0.9) if kind == "sgd" else th.optim.Adam(params, lr=1e-3)
        return opt.step
    raise ValueError(f"unknown implementation {impl!r}; expected one of {OPTIM_IMPLS}")


# ---- benchmarks/ helpers ---------------------------------------------------------------------------------------------
def bench_shape(device_name, enabled):
    """(rows, cols) of kernel and op inputs in benchmarks/: modest under --benchmark-disable (CI runs each once)."""
    if not enabled:
        return (64, 256)
    return (8192, 8192) if device_name == "cuda" else (2048, 4096)


@functools.lru_cache(maxsize=1)
def shared_inputs(device_name, rows, cols):
    """One Inputs per (device, shape), reused by consecutive benchmarks (cases copy what they write)."""
    return Inputs(get_backend(device_name), rows, cols)


# ---- one device, end to end ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and repeats for one device. ``shape``: (rows, cols) of the float32 kernel inputs; the peak copy moves
    a buffer of the same size (``copy_bytes``), so kernels and peak see the same level of the memory hierarchy;
    ``matmul_peak_n``: the square GEMM giving the matmul peak; ``tiny_ops``: the engine chain length;
    ``mlp_repeats``: samples per MLP implementation (a step is long: fewer are needed)."""

    shape: tuple
    repeats: int
    batches: tuple
    matmul_peak_n: int
    tiny_ops: int
    min_sample_s: float
    mlp_repeats: int

    @property
    def copy_bytes(self):
        return self.shape[0] * self.shape[1] * 4

    @property
    def steps(self):
        """Progress ticks a run of this config makes."""
        return len(KERNELS) + 3 * len(self.batches) + len(MLP_IMPLS) * len(self.batches) + 2


def config_for(device_name, quick=False, shape=None):
    """Defaults: full runs use 64 MiB (CPU: past the per-core caches and most of a typical L3) and 256 MiB (GPU:
    past an H100/H200's 50-60 MB L2) arrays; ``--quick`` keeps a whole CPU run under ~30 s on 2 cores. A simulated
    CUDA device (which computes on the CPU) gets the CPU's sizes."""
    if device_name == "cuda" and not get_backend("cuda").simulated:
        cfg = Config(shape=(8192, 4096), repeats=10, batches=(64, 512, 4096), matmul_peak_n=4096, tiny_ops=200,
                     min_sample_s=0.002, mlp_repeats=10)
        if not quick:
            cfg = dataclasses.replace(cfg, shape=(8192, 8192), repeats=30, matmul_peak_n=8192, tiny_ops=1000,
                                      min_sample_s=0.01, mlp_repeats=30)
    else:
        cfg = Config(shape=(1024, 2048), repeats=5, batches=(512,), matmul_peak_n=1024, tiny_ops=200,
                     min_sample_s=0.004, mlp_repeats=5)
        if not quick:
            cfg = dataclasses.replace(cfg, shape=(4096, 4096), repeats=9, matmul_peak_n=2048, tiny_ops=1000,
                                      min_sample_s=0.02, mlp_repeats=9)
    return dataclasses.replace(cfg, shape=tuple(shape)) if shape else cfg


SECTIONS = ("kernels", "matmul", "mlp", "engine")  # in the order run_device runs them
SIMULATED_NOTE = "simulated CUDA device (GPUGRAD_CUDA_SIM, computing on the CPU): its timings are not GPU figures"


def run_device(device_name, config, tick=None, sections=SECTIONS, on_update=None):
    """Every figure of ``sections`` for one device as a JSON-ready dict. ``on_update(result)`` is called with the
    dict so far before the first section and after each (``gpugrad bench`` rewrites its --json there, so a run cut
    short keeps what finished)."""
    be = get_backend(device_name)
    timer = timer_for(be, repeats=config.repeats, min_sample_s=config.min_sample_s)
    run = {  # each section's inputs live only while it runs: the kernels' are freed before the MLP allocates
        "kernels": lambda: dict(zip(("kernels", "peak_bandwidth"), run_kernels(
            Inputs(be, *config.shape), timer, peak_copy(be, config.copy_bytes), tick=tick,
            vector_copy=peak_vector_copy(be, config.copy_bytes)))),
        # (matmul operands are shaped per case, so their Inputs' own shape is unused)
        "matmul": lambda: {"matmul": run_matmuls(Inputs(be, 1, 1, seed=2), timer, config.matmul_peak_n,
                                                 config.batches, tick=tick)},
        "mlp": lambda: {"mlp": run_mlp(be, timer, config.batches, config.mlp_repeats, tick=tick)},
        "engine": lambda: {"engine": run_engine(be, timer, config.tiny_ops, tick=tick)},
    }
    result = {"device": device_name, "simulated": be.simulated,
              "config": {**dataclasses.asdict(config), "copy_bytes": config.copy_bytes}}
    if be.simulated:
        result["note"] = SIMULATED_NOTE
    on_update = on_update or (lambda result: None)
    on_update(result)
    for section in sections:
        result.update(run[section]())
        on_update(result)
    return result


__all__ = ["Timing", "Inputs", "KernelCase", "KERNELS", "OpCase", "OPS", "MatmulCase", "Config", "bytes_moved",
           "kernel_workload", "op_workload", "matmul_workload", "baseline_mlp_step", "mlp_steps", "config_for",
           "run_device", "kernels", "ops", "mlp_matmuls", "tiny_chain", "torch_for", "optimizer_workload", "synced",
           "bench_shape", "shared_inputs", "SECTIONS", "MLP_IMPLS"]
