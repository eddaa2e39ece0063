"""Where gpugrad and PyTorch are known to differ: the only place the fuzzer (tests/fuzz/test_fuzz.py) may excuse a mismatch.

Each entry names a class of mismatches, says why it is excused, and matches it as narrowly as the fuzzer's facts
allow: the program's ``features`` (the ops it ran, e.g. "relu", "copy_", and what it did, e.g. "0d", "empty",
"inplace_on_view", "grad_create", "nan_values": see test_fuzz.py) and the mismatch itself (``kind``: value, dtype,
shape, error, error-type, grad-none, requires-grad, is-leaf, hook, warning; ``where``: the op, or the backward pass
"pass<k>:<mode>"; ``detail``; ``got``/``want``: gpugrad's and torch's exception or array). The first entry that
matches names the class (python -m tests.fuzz.test_fuzz N counts them).

``temporary=True`` marks a bug, not a choice: the reason says where it is being fixed, and the entry goes when the
fix lands (the fuzzer then covers the fixed behaviour at once). Deliberate entries stay, with their reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

CREATE_GRAPH = ("backward_create", "grad_create")


@dataclass(frozen=True)
class Known:
    name: str
    reason: str
    applies: Callable  # (features, mismatch) -> bool
    temporary: bool = False


def _only(who, m, *, text=(), exc=None):
    """Only ``who`` ("gpugrad" or "torch") raised, with all of ``text`` in its message (and of type ``exc``)."""
    if m.kind != "error":
        return False
    e = m.got if who == "gpugrad" else m.want
    other = m.want if who == "gpugrad" else m.got
    if e is None or other is not None:
        return False
    return (exc is None or isinstance(e, exc)) and all(t in str(e) for t in ((text,) if isinstance(text, str) else text))


def _in_backward(m):
    return m.where.startswith("pass")


def _nan(m):
    return any(isinstance(a, np.ndarray) and a.dtype.kind == "f" and np.isnan(a).any() for a in (m.got, m.want))


def _nan_spread(m):
    """torch's gradient is NaN at every element where gpugrad's is, and the arrays agree where torch's is not."""
    if m.kind != "value" or not _nan(m):
        return False
    a, b = m.got, m.want
    if (np.isnan(a) & ~np.isnan(b)).any():
        return False
    nan = np.isnan(b)
    return np.allclose(a[~nan], b[~nan], rtol=1e-3, atol=1e-6)


def _roughly(m, rtol=1e-2, atol=1e-6):
    """The finite elements agree to ``rtol`` (rounding amplified by an ill-conditioned step); infinities may differ
    in sign (1 / x of a value that is +-0 in either library)."""
    if m.kind != "value":
        return False
    a, b = m.got, m.want
    finite = np.isfinite(a) & np.isfinite(b)
    if (np.isnan(a) != np.isnan(b)).any():
        return False
    scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0
    return np.allclose(a[finite], b[finite], rtol=rtol, atol=atol * max(scale, 1.0))


def _any(features, *names):
    return any(n in features for n in names)


KNOWN = [
    # -- deliberate -------------------------------------------------------------------------------------------------
    Known("mixed float dtypes in matmul, linear, layer_norm",
          "gpugrad promotes float32 with float64 operands as NumPy does (the result is float64); torch refuses to mix "
          "them in matmul, linear and layer_norm (and gives float32 for empty operands, where it does not check)",
          lambda f, m: m.where in ("matmul", "linear", "layer_norm")
          and (_only("torch", m, text="dtype") or _only("torch", m, text="scalar type") or m.kind == "dtype")),
    Known("mean, var and std of integers",
          "gpugrad follows NumPy (the mean of int64 values is float64); torch refuses integer inputs",
          lambda f, m: m.where in ("mean", "var", "std") and "int_reduce" in f
          and (_only("torch", m) or m.kind == "error-type")),
    Known("ops without double backward refuse create_graph",
          "documented limitation: an op whose VJP is not written with Tensor ops raises a clear error under "
          "create_graph=True instead of returning a wrong higher-order gradient "
          "(tests/autograd/test_gradgradcheck.py::test_unsupported_ops_refuse_create_graph)",
          lambda f, m: _only("gpugrad", m, text="does not support create_graph=True")),
    Known("shape errors are ValueError",
          "gpugrad raises ValueError for operands whose shapes do not fit (NumPy's convention), torch RuntimeError "
          "(which may report another fault of the same step first, e.g. overlapping memory)",
          lambda f, m: m.kind == "error-type" and isinstance(m.got, ValueError) and isinstance(m.want, RuntimeError)
          and any(w in str(m.got) + str(m.want) for w in ("shape", "size", "broadcast"))),
    Known("a second backward through freed nodes that saved nothing",
          "both raise only at a node whose saved tensors were freed, and the ops save different things: torch's "
          "index saves its indices and where its condition as tensors, gpugrad keeps them as attributes (which "
          "a first backward does not free), so gpugrad's second backward is right where torch's refuses",
          lambda f, m: _only("torch", m, text="backward through the graph a second time")),
    Known("advanced index into an empty tensor",
          "torch does not bounds-check integer indices into a tensor with no elements; gpugrad (NumPy) does",
          lambda f, m: m.where == "index" and "empty" in f and _only("gpugrad", m, exc=IndexError)),
    Known("torch returns the input itself",
          "some torch ops return their input object (flatten of a 1-D tensor): hooks, retain_grad and "
          "autograd.grad on that result then act on the input too; gpugrad always returns a new tensor",
          lambda f, m: "torch_returns_input" in f and _in_backward(m)
          and (m.kind == "is-leaf" or _any(f, "hook", "retain_grad", "grad_wrt_intermediate",
                                           "backward_inputs_nonleaf"))),
    Known("in-place ops on overlapping operands",
          "gpugrad computes x.op_(y) out of place and then writes x, so y may overlap x (x.T.mul_(x)); torch "
          "refuses partially overlapping operands",
          lambda f, m: _only("torch", m, text="some elements of the input tensor and the written-to tensor")),
    Known("in-place ops on their own operand",
          "x.mul_(x) (or an operand sharing x's memory): gpugrad's in-place op copies what its own node saved from "
          "x before writing (clone-on-write), so the gradient is right; torch saved x itself and raises a version "
          "error at backward",
          lambda f, m: "inplace_self_operand" in f and _only("torch", m, text="modified by an inplace operation")),
    Known("torch saves inputs gpugrad does not need",
          "torch's mse_loss saves input and target (gpugrad's composite only their difference), torch's gather "
          "saves its input (gpugrad only the index) and torch's layer_norm its bias, even one that needs no "
          "gradient: an in-place change of them afterwards is a version error only in torch, and gpugrad's "
          "gradient does not read them",
          lambda f, m: _any(f, "mse_loss", "gather", "layer_norm")
          and _only("torch", m, text="modified by an inplace operation")),
    Known("x / x under huge upstream gradients",
          "for a / a, gpugrad's VJPs gy / a and -gy * (a / a) / a cancel exactly; torch's second one, "
          "-gy * ((a / a) / a), rounds differently from gy / a, and upstream gradients near 1e120 (pow of large "
          "values) make that noise visible in the leaves' gradients",
          lambda f, m: "div" in f and "double_use" in f and _in_backward(m) and m.kind == "value"),
    Known("results that are views only in torch",
          "torch's linear of a 1-D input squeezes a 2-D result, and the fuzzer's torch token_logprob ends in "
          "[:, 0]: their results are views in torch only, so after an in-place op through a view of the same "
          "base, torch's graph bypasses the result's regenerated grad_fn (autograd.grad w.r.t. it is None); "
          "gpugrad's result is a tensor of its own, which the gradient passes",
          lambda f, m: _any(f, "linear", "token_logprob") and "grad_wrt_intermediate" in f and "inplace" in f
          and m.kind == "grad-none" and "gpugrad a tensor, torch None" in m.detail),
    Known("backward(inputs=) at a batched matmul after its graph was freed",
          "backward(inputs=[y]) runs y's grad_fn, in both; for a batched y = a @ b (and linear of a batch) torch's "
          "grad_fn is a view over mm/mv that saved nothing, gpugrad's is the one matmul node, so only gpugrad "
          "finds its saved tensors freed (retain_graph=False) or changed in place",
          lambda f, m: "backward_inputs_nonleaf" in f and (_only("gpugrad", m, text="backward through the graph a "
                                                                                "second time")
                                                           or _only("gpugrad", m, text="modified by an inplace"))
          and any(n in str(m.got) for n in ("BmmBackward0", "AddmmBackward0", "MmBackward0"))),
    Known("hooks on a view modified in place",
          "torch drops the hooks of a view that is then modified in place (they never fire; on a tensor that is not "
          "a view they see the old version's gradient); gpugrad runs them with the old version's gradient in both "
          "cases",
          lambda f, m: "inplace_on_hooked_view" in f and _in_backward(m) and m.kind in ("hook", "value")),
    Known("ill-conditioned gradients",
          "where the forward values agree only to their tolerance (values near 0 compared absolutely, or a result "
          "that matches torch's op applied to gpugrad's inputs), 1/x-like VJPs (std, division, log) amplify the "
          "rounding: the gradients then agree only roughly",
          lambda f, m: _any(f, "drift", "near_zero") and _in_backward(m) and _roughly(m)),
    Known("layer_norm gradients of large values",
          "torch's layer_norm backward loses digits for large |x| with a small spread (it forms x * rstd - "
          "mean * rstd; in float32 the error reaches the gradient's size, in float64 ~1e-6); gpugrad centres first",
          lambda f, m: "layer_norm" in f and _in_backward(m) and m.kind == "value"
          and ("float32" in f or _roughly(m, atol=1e-4))),
    Known("layer_norm of rows whose square overflows",
          "both are wrong where (x - mean)^2 overflows (|x| > 1e154): gpugrad's rstd becomes 0 (the row 0), torch's "
          "NaN (torch's CPU kernel then also gives NaN rows for the batch's finite rows)",
          lambda f, m: m.where == "layer_norm" and m.kind == "value"
          and np.isnan(m.want).sum() > np.isnan(m.got).sum()),
    Known("NaN spreads further in torch",
          "a NaN (in the forward, or inf - inf in a backward) reaches more gradient elements in torch: its VJPs of "
          "abs, clamp multiply (sgn(x) * gy, mask * gy: NaN * 0 = NaN) where gpugrad's select (0 there). "
          "Only elements NaN in torch may differ; a NaN only in gpugrad is still a mismatch",
          lambda f, m: _in_backward(m) and _any(f, "abs", "clamp", "where") and _nan_spread(m)),
    Known("reshape: a view or a copy",
          "reshape may return a view or a copy (torch's documentation: do not rely on either), and the layouts "
          "may differ: in-place changes are then seen through the result in one library only",
          lambda f, m: _any(f, "alias_differs_reshape", "alias_differs_flatten") and m.kind == "value"
          and "after the in-place step" in m.detail),
    Known("torch's leaf check on an empty view",
          "seen once and not reproduced outside the fuzzer: torch called a 0-element view a leaf that requires "
          "grad after v[-1] = w and refused zero_(); excused for empty tensors only",
          lambda f, m: "empty" in f and _only("torch", m, text="leaf Variable that requires grad")),
    Known("dropout masks instead of multiplying",
          "gpugrad's dropout selects (0 where dropped, even for inf/NaN inputs or gradients: backend/reference/elementwise.py); "
          "torch multiplies by the mask, so inf/NaN times 0 is NaN",
          lambda f, m: "dropout" in f and m.kind == "value" and _nan(m)),
    Known("integer operands of recorded ops",
          "deliberate until the PyTorch-surface issue: gpugrad follows NumPy promotion today (README): Op.apply "
          "refuses an integer tensor operand of an op that records a graph (float_leaf * int_tensor: TypeError) "
          "where torch promotes it",
          lambda f, m: "int" in f and _only("gpugrad", m, exc=TypeError, text="need floating-point inputs")),
    Known("NumPy type promotion",
          "deliberate until the PyTorch-surface issue: gpugrad follows NumPy promotion today (README): an int64 "
          "tensor with a Python float, or true division of ints, gives float64 (torch: float32, the default dtype), "
          "and a 0-d float64 tensor with a float32 tensor gives float64 (torch: 0-d tensors are weak, like scalars)",
          lambda f, m: m.kind == "dtype" and _any(f, "int", "0d") and "dtype float64, torch float32" in m.detail),

    # -- new: found by the fuzzer, reported, not yet owned -----------------------------------------------------------
    Known("x ** 0 with a NaN or inf upstream gradient",
          "NEW bug (reported to the owner of ops/arith.py): the VJP of x ** 0 is gy * 0, NaN where gy is NaN or "
          "inf; torch's pow_backward returns zeros_like(x) for a zero exponent",
          lambda f, m: "pow" in f and _in_backward(m) and m.kind == "value" and np.isnan(m.got).any()
          and not np.isnan(m.want).any() and bool(np.all(m.want[np.isnan(m.got)] == 0)), temporary=True),
    Known("torch's layer_norm double backward without a weight",
          "torch 2.13 raises 'Expected a proper Tensor but got None ... argument #1 other' in the second-order pass of "
          "a layer_norm with a bias and no weight (its double backward multiplies by the missing weight); gpugrad's "
          "second derivatives there are checked against finite differences (op_cases.py: layer_norm_bias_only)",
          lambda f, m: "layer_norm" in f and _any(f, *CREATE_GRAPH) and _only(
              "torch", m, text="Expected a proper Tensor but got None")),
    Known("0-d softmax family under create_graph",
          "NEW (reported to the owner of ops/softmax.py): softmax, log_softmax and logsumexp of a 0-d tensor return "
          "a constant create_graph gradient (gy * 0.0, gy * 1.0); torch's depends on the output or input, so it "
          "requires grad (a second backward through it raises only in gpugrad) and logsumexp's is NaN for NaN x",
          lambda f, m: "0d" in f and _any(f, "softmax", "log_softmax", "logsumexp") and _any(f, *CREATE_GRAPH)
          and _in_backward(m) and (m.kind == "requires-grad" or m.kind == "value" and _nan(m) or _only(
              "gpugrad", m, text="does not require grad and does not have a grad_fn")), temporary=True),
]


def explain(features, mismatch):
    """The entry that excuses ``mismatch`` in a program with ``features``, or None."""
    for k in KNOWN:
        if k.applies(features, mismatch):
            return k
    return None
