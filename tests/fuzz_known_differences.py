"""Where gpugrad and PyTorch are known to differ: the only place the fuzzer (tests/test_fuzz.py) may excuse a mismatch.

Each entry names a class of mismatches, says why it is excused, and matches it as narrowly as the fuzzer's facts
allow: the program's ``features`` (the ops it ran, e.g. "relu", "copy_", and what it did, e.g. "0d", "empty",
"inplace_on_view", "grad_create", "nan_values": see test_fuzz.py) and the mismatch itself (``kind``: value, dtype,
shape, error, error-type, grad-none, requires-grad, is-leaf, hook, warning; ``where``: the op, or the backward pass
"pass<k>:<mode>"; ``detail``; ``got``/``want``: gpugrad's and torch's exception or array). The first entry that
matches names the class (python tests/test_fuzz.py N counts them).

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
          "(tests/test_gradgradcheck.py::test_unsupported_ops_refuse_create_graph)",
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
          "torch's mse_loss saves input and target (gpugrad's composite only their difference) and torch's gather "
          "saves its input (gpugrad only the index): an in-place change of them afterwards is a version error only "
          "in torch, and gpugrad's gradient does not read them",
          lambda f, m: _any(f, "mse_loss", "gather") and _only("torch", m, text="modified by an inplace operation")),
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
          "abs, max/min, clamp multiply (sgn(x) * gy, mask * gy: NaN * 0 = NaN) where gpugrad's select (0 there). "
          "Only elements NaN in torch may differ; a NaN only in gpugrad is still a mismatch",
          lambda f, m: _in_backward(m) and _any(f, "abs", "amax", "amin", "maximum", "minimum", "clamp", "where")
          and _nan_spread(m)),
    Known("reshape: a view or a copy",
          "reshape may return a view or a copy (torch's documentation: do not rely on either), and the layouts "
          "differ (gpugrad's softmax over a non-last axis returns a non-contiguous array, torch's a contiguous "
          "one): in-place changes are then seen through the result in one library only",
          lambda f, m: _any(f, "alias_differs_reshape", "alias_differs_flatten") and m.kind == "value"
          and "after the in-place step" in m.detail),
    Known("torch's leaf check on an empty view",
          "seen once and not reproduced outside the fuzzer: torch called a 0-element view a leaf that requires "
          "grad after v[-1] = w and refused zero_(); excused for empty tensors only",
          lambda f, m: "empty" in f and _only("torch", m, text="leaf Variable that requires grad")),
    Known("dropout masks instead of multiplying",
          "gpugrad's dropout selects (0 where dropped, even for inf/NaN inputs or gradients: backend/reference.py); "
          "torch multiplies by the mask, so inf/NaN times 0 is NaN",
          lambda f, m: "dropout" in f and m.kind == "value" and _nan(m)),

    # -- bugs being fixed ----------------------------------------------------------------------------------------------
    Known("0-d results as NumPy scalars",
          "bug being fixed in the ops/engine: 0-d tensors become NumPy scalars under create_graph and when a 0-d "
          "value is used twice (accumulating into a scalar fails or gradients are lost); a 0-d output saved for "
          "backward is a copy, so an in-place change of it is not caught as torch catches it",
          lambda f, m: "0d" in f and _in_backward(m) and ("double_use" in f or _any(f, *CREATE_GRAPH)
                                                          or _only("torch", m, text="modified by an inplace operation")
                                                          or _only("gpugrad", m, text="got float64")
                                                          or _only("gpugrad", m, text="of ArrayType")
                                                          or m.kind == "error-type" and any(
                                                              t in str(m.got) for t in ("got float64", "ArrayType"))),
          temporary=True),
    Known("view of a non-contiguous tensor",
          "bug being fixed in Tensor.view: gpugrad copies where torch raises (view needs compatible strides) or "
          "where torch's input was contiguous and gpugrad's was not, and in-place changes then miss the copy",
          lambda f, m: m.where == "view" and "view_noncontiguous" in f and _only("torch", m)
          or "alias_differs_view" in f and m.kind == "value" and "after the in-place step" in m.detail,
          temporary=True),
    Known("relu with a NaN upstream gradient",
          "bug being fixed in relu's VJP: gy * (y > 0) turns a NaN gy into NaN where torch gives 0",
          lambda f, m: "relu" in f and "nan_values" in f and _in_backward(m) and _nan(m), temporary=True),
    Known("logsumexp under create_graph on a middle axis",
          "bug being fixed in LogSumExp.backward_graph: on a middle axis (or a layout whose rows are a copy) the "
          "saved rows are not its input ('saved value 0 is not one of its inputs')",
          lambda f, m: "logsumexp_moved_axis" in f and _any(f, *CREATE_GRAPH) and _in_backward(m), temporary=True),
    Known("autograd.grad runs the graph below its inputs",
          "bug being fixed in the engine: autograd.grad (and backward(inputs=)) w.r.t. an intermediate h runs and "
          "frees h's grad_fn, which torch leaves alone: a later backward through h then fails, and tensors below h "
          "get retained grads and hook calls torch does not give them",
          lambda f, m: _any(f, "grad_wrt_intermediate", "backward_inputs_nonleaf") and _in_backward(m),
          temporary=True),
    Known("autograd.grad ignores the inputs' hooks",
          "bug being fixed in the engine: torch runs a tensor's hooks before autograd.grad captures its gradient",
          lambda f, m: "grad_of_hooked_input" in f and _in_backward(m), temporary=True),
    Known("retain_grad then in place",
          "bug being fixed in retain_grad: after an in-place op the retained grad is the old version's",
          lambda f, m: "retain_grad_then_inplace" in f and _in_backward(m), temporary=True),
    Known("over-saving: false in-place errors",
          "bug being fixed in the ops: x ** c, a / b, cross-entropy (and token_logprob) logits and bmm save values "
          "torch does not, so an in-place change of them raises where torch does not (and a create_graph pass "
          "through them after retain_graph=False finds them freed); a / b saves y where torch saves a, so an "
          "in-place change of a raises only in torch",
          lambda f, m: (_only("gpugrad", m, text="modified by an in-place operation")
                        or _only("gpugrad", m, text="backward through the graph a second time"))
          and any(n in str(m.got) for n in ("PowBackward", "DivBackward", "NllLossBackward", "BmmBackward",
                                            "TokenLogProbBackward"))
          or "div" in f and _only("torch", m, text="modified by an inplace operation"),
          temporary=True),
    Known("in place on expand views",
          "bug being fixed in Tensor in-place ops: writes into (views of) expand() results fail even where torch "
          "allows them (no element repeated), with NumPy's ValueError where torch raises RuntimeError, and an "
          "expand view whose base changed in place cannot be used any more",
          lambda f, m: ("inplace_on_expand" in f and (_only("gpugrad", m) or m.kind == "error-type"))
          or "inplace_on_expand" in f and _only("torch", m, text="more than one element of the written-to tensor")
          or (_only("gpugrad", m, text="a view made by expand() was used after its base was changed in place")
              or m.kind == "error-type" and "a view made by expand() was used" in str(m.got)),
          temporary=True),

    # -- new: found by the fuzzer, reported, not yet owned -----------------------------------------------------------
    Known("integer operands of recorded ops",
          "NEW bug (reported by the fuzzer's author, not yet owned): Op.apply raises TypeError when an op records a "
          "graph and one input is an integer tensor (float_leaf * int_tensor); torch promotes the integer operand",
          lambda f, m: "int" in f and _only("gpugrad", m, exc=TypeError, text="need floating-point inputs"),
          temporary=True),
    Known("NumPy type promotion",
          "NEW (reported, not yet decided): gpugrad promotes as NumPy 2, torch differently: an int64 tensor with a "
          "Python float or true division of ints gives float64 (torch: float32, the default dtype), and a 0-d "
          "float64 tensor with a float32 tensor gives float64 (torch: 0-d tensors are weak, like scalars)",
          lambda f, m: m.kind == "dtype" and _any(f, "int", "0d") and "dtype float64, torch float32" in m.detail,
          temporary=True),
    Known("in-place result larger than the tensor",
          "NEW bug (reported): x.op_(y) where x op y broadcasts to more dimensions than x (size-1 leading axes: "
          "(2, 3) with (1, 2, 3), () with (1,)) is written into x (NumPy's copyto drops them); torch raises",
          lambda f, m: _only("torch", m, text="doesn't match the broadcast shape"), temporary=True),
    Known("copy_ replaces the graph",
          "NEW bug (reported): y.copy_(src) on a tensor with a graph drops y's old graph instead of recording that "
          "the old values get a zero gradient (torch's CopyBackwards): leaves behind it get None instead of zeros, "
          "and when src needs no grad y turns into a leaf that requires grad (views of it then refuse in-place ops); "
          "the old graph is not reached, so torch's version check on it (a saved logsumexp output) has no match",
          lambda f, m: "copy_" in f and (m.kind in ("grad-none", "is-leaf") and _in_backward(m)
                                         or _only("gpugrad", m, text="leaf tensor that requires grad")
                                         or _only("torch", m, text="modified by an inplace operation")),
          temporary=True),
    Known("std's gradient where all values are equal",
          "NEW bug (reported): std is var().sqrt(), whose VJP at 0 is inf * 0 = NaN; torch's std_backward gives 0 "
          "there (masked), so a constant row (or a single element) has a NaN gradient in gpugrad",
          lambda f, m: "std" in f and (_in_backward(m) and _nan(m) or m.kind == "warning"), temporary=True),
    Known("logsumexp of +inf",
          "NEW bug (reported): logsumexp of a row holding +inf is NaN (the max shift computes inf - inf); torch "
          "gives inf (it shifts by 0 when the max is infinite)",
          lambda f, m: m.where == "logsumexp" and m.kind == "value" and np.isnan(m.got).any()
          and np.isinf(m.want).any(), temporary=True),
    Known("hooks outside backward(inputs=) and autograd.grad's inputs",
          "NEW bug (reported): backward(inputs=[a]) and autograd.grad(y, [a]) still run the hooks and retain_grad "
          "of other tensors that the gradient passes (a leaf b not among the inputs: its hook runs); torch runs "
          "only the part of the graph that leads to the inputs",
          lambda f, m: "hooks_outside_inputs" in f and m.kind in ("hook", "grad-none", "value") and _in_backward(m),
          temporary=True),
    Known("reshape(-1, 0) of an empty axis",
          "NEW bug (reported): layer_norm's forward with normalized_shape (0,) and linear's backward with 0 input "
          "features call x.reshape(-1, 0), which NumPy cannot infer; torch returns the empty results",
          lambda f, m: _any(f, "layer_norm", "linear") and (_only("gpugrad", m, text="cannot reshape array of size 0")
                                                           or _only("gpugrad", m, text="into (-1, 0)")),
          temporary=True),
    Known("leaf .grad from backward(create_graph=True) is read-only",
          "NEW bug (reported): after backward(create_graph=True) a leaf's .grad can be the VJP's broadcast view "
          "(x.mean(): broadcast_to), read-only and without a graph; the next backward adds into it in place and "
          "fails with NumPy's 'output array is read-only' (torch: x.grad accumulates)",
          lambda f, m: "backward_create" in f and (_only("gpugrad", m, text="array is read-only")
                                                  or _only("gpugrad", m, text="destination is read-only")),
          temporary=True),
    Known("softmax over a non-last axis is not contiguous",
          "NEW (reported, minor): gpugrad's softmax / log_softmax over a non-last axis return the moved-back rows, "
          "a non-contiguous array, where torch's results are contiguous: .view() of them then fails only in gpugrad "
          "(reshape copies instead of viewing)",
          lambda f, m: "layout_differs_view" in f and _only("gpugrad", m, text="view size is not compatible"),
          temporary=True),
    Known("views keep stale autograd state",
          "NEW bug (reported): after an in-place op on a base, views of it taken before keep their old "
          "requires_grad / grad_fn until they are used in an op: x.add_(w) (w requiring grad) leaves them "
          "requires_grad False, and register_hook / retain_grad on them attach to the old grad_fn, so the hook "
          "never runs; torch re-derives the view's grad_fn at once",
          lambda f, m: "inplace" in f and (m.kind == "requires-grad" and "after the in-place step" in m.detail
                                           or _only("gpugrad", m, text="on a tensor that does not require grad")
                                           or "hook_on_stale_view" in f and _in_backward(m)),
          temporary=True),
    Known("max/min backward with NaN",
          "NEW (reported): amax/amin route gy to the extreme elements with a select, so a NaN gy leaves 0 "
          "elsewhere (torch multiplies by the mask: NaN everywhere); maximum/minimum with a NaN operand give its "
          "gradient to the other operand (torch: to self)",
          lambda f, m: _any(f, "amax", "amin", "maximum", "minimum") and _in_backward(m) and m.kind == "value"
          and (_nan(m) or "nan_values" in f), temporary=True),
    Known("log_softmax of large logits",
          "NEW bug (reported): log_softmax (and token_logprob, cross_entropy) compute x - lse with lse = max + "
          "log(sum), which rounds log(sum) away "
          "when |max| is large (float32 logits ~1e3 lose ~3e-5; float64 ~1e16 lose it all); torch computes "
          "(x - max) - log(sum)",
          lambda f, m: m.where in ("log_softmax", "token_logprob", "cross_entropy") and m.kind == "value"
          and np.nanmax(np.abs(m.got - m.want), initial=0) < 6, temporary=True),
    Known("gelu overflows on the way",
          "NEW (reported): gelu computes x * x * x, which overflows for |x| > 5e102 (float64) / 7e12 (float32): "
          "the result is right (tanh(inf) = 1) but NumPy warns 'overflow encountered in multiply'",
          lambda f, m: m.kind == "warning" and m.where == "gelu", temporary=True),
    Known("second order after retain_graph=False",
          "NEW (reported, minor): gpugrad's create_graph gradients keep edges into the first-order graph where "
          "torch's are cut (the backward of fill_/zero_ is a constant zero in torch, a where() on gy in gpugrad), "
          "so after autograd.grad/backward(create_graph=True, retain_graph=False) a second-order pass reaches freed "
          "nodes in gpugrad only",
          lambda f, m: m.where.endswith(":second_order") and "retain_graph" not in f
          and _only("gpugrad", m, text="backward through the graph a second time"), temporary=True),
    Known("create_graph gradients that are constant",
          "NEW (reported): under create_graph, a gradient that does not depend on any input (through abs, relu, "
          "where, max: piecewise-linear paths) carries no graph in gpugrad; torch's requires grad (its derivative "
          "is 0), so backward() on it raises only in gpugrad",
          lambda f, m: _in_backward(m) and (m.kind == "requires-grad" or _only(
              "gpugrad", m, text="does not require grad and does not have a grad_fn")), temporary=True),
]


def explain(features, mismatch):
    """The entry that excuses ``mismatch`` in a program with ``features``, or None."""
    for k in KNOWN:
        if k.applies(features, mismatch):
            return k
    return None
