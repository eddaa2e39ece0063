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

from tests.fuzz.phases import fd_tangent_confirms

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


def _tiny(t, bound=1e-12):
    """Whether gpugrad's tensor ``t`` is floating point and below ``bound`` everywhere."""
    a = np.asarray(t.detach())
    return a.dtype.kind == "f" and bool(np.all(np.abs(a) < bound))


def _nonfinite_where_differ(m):
    """Whether every element where the two values differ is inf or NaN in both."""
    got, want = m.got, m.want
    if not (isinstance(got, np.ndarray) and isinstance(want, np.ndarray)) or got.shape != want.shape:
        return False
    with np.errstate(invalid="ignore"):
        differ = ~np.isclose(got, want, equal_nan=True)
    return bool(differ.any() and (~np.isfinite(got[differ])).all() and (~np.isfinite(want[differ])).all())


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


SELECTIONS = ("kthvalue", "topk", "sort", "argsort", "median", "mode", "max_dim", "min_dim")
POINTWISE_NAMES = ("elu", "leaky_relu", "silu", "softplus", "gelu", "gelu_erf", "frac", "sign", "erf", "elu_",
                   "leaky_relu_", "silu_", "softplus_", "frac_")
LOSSES = ("mse_loss", "smooth_l1_loss", "huber_loss", "l1_loss", "kl_div", "binary_cross_entropy",
          "binary_cross_entropy_with_logits", "cross_entropy", "nll_loss")


def _torch_nan_only(m):
    """torch's array is NaN wherever the two differ, and gpugrad's is not NaN there: torch's extra NaN."""
    if m.kind not in ("value", "tangent") or not isinstance(m.got, np.ndarray) or m.got.dtype.kind != "f":
        return False
    a, b = m.got, m.want
    with np.errstate(invalid="ignore"):
        differ = ~(np.isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=True) | (a == b))
    return bool(differ.any()) and bool(np.isnan(b[differ]).all()) and not np.isnan(a[differ]).any()


def _zeros(t):
    """A torch tensor of zeros (or None)."""
    return t is None or not bool(t.detach().numpy(force=True).any())


def _fd(m, check):
    """The finite-difference oracle of tests/fuzz/phases.py (``check(program)``): True only where it confirms
    gpugrad's derivative."""
    p = getattr(m, "program", None)
    return p is not None and bool(check(p))


KNOWN = [
    # -- deliberate -------------------------------------------------------------------------------------------------
    Known("torch's clamp backward when a tensor bound broadcasts the input",
          "torch 2.13 raises 'output with shape [0] doesn't match the broadcast shape [1, 0]' in the backward of "
          "x.clamp(min=t) where t broadcasts x to a larger shape (its VJP writes into x's shape); gpugrad undoes the "
          "broadcast and returns x's gradient",
          lambda f, m: "clamp_tensor" in f and _only("torch", m, text="doesn't match the broadcast shape")),
    Known("vectorized Jacobians over empty tensors",
          "torch 2.13's vmap fallback refuses dims of size 0 ('Batching rule not implemented ... does not support vmap "
          "over dims of size 0'), so its vectorized jacobian / hessian of a function of an empty tensor raises; "
          "gpugrad's batched tangents take them and give the empty Jacobian",
          lambda f, m: "empty" in f and _only("torch", m, text="does not support vmap over dims of size 0")),
    Known("exact gelu of +inf",
          "torch 2.13's CPU gelu (approximate='none') gives NaN at +inf, where x * Phi(x) -> inf; gpugrad's kernel and "
          "reference give inf, the limit (tests/compat checks gelu at finite values against torch)",
          lambda f, m: m.where in ("gelu_erf", "gelu_erf_", "gelu") and m.kind == "value" and _torch_nan_only(m)
          and bool(np.isposinf(m.got[np.isnan(m.want) & ~np.isnan(m.got)]).all())),
    Known("complex values of a tensor with a graph",
          "deliberate (README, differences from torch): gpugrad has no complex autograd, so a cast or promotion into "
          "a complex dtype of a tensor that requires grad (or carries a tangent) is refused with a clear error, "
          "where torch differentiates it (Wirtinger calculus)",
          lambda f, m: _only("gpugrad", m, exc=RuntimeError, text="no complex autograd")),
    Known("integer inputs of nn activations",
          "gpugrad computes elu, leaky_relu, silu, softplus, gelu and frac of an integer tensor in the default float "
          "dtype (as exp and sin, in both libraries); torch's CPU kernels of these are not implemented for integers "
          "(NotImplementedError)",
          lambda f, m: _only("torch", m, exc=NotImplementedError, text="not implemented for")),
    Known("a Python number where torch wants a Tensor",
          "gpugrad's maximum, minimum and the like take a Python number as the other operand (as its arithmetic "
          "does); torch's bindings accept only a Tensor there (TypeError)",
          lambda f, m: _only("torch", m, exc=TypeError, text="must be Tensor, not")),
    Known("mixed float dtypes in losses",
          "gpugrad promotes a loss's input and target as arithmetic does; torch's loss kernels do not agree with each "
          "other (binary_cross_entropy refuses float32 with float64, binary_cross_entropy_with_logits returns the "
          "target's dtype, huber_loss the input's, mse_loss the promoted one)",
          lambda f, m: "float32" in f and (m.where in LOSSES and (
              m.kind == "dtype" or _only("torch", m, text="Found dtype") or _only("torch", m, text="expected scalar")
              or _only("torch", m, text="dtype")) or _in_backward(m) and _any(f, *LOSSES)
              and _only("torch", m, text="Found dtype"))),
    Known("floor_divide's derivative",
          "torch's a // b (floor_divide) has no derivative (its backward raises 'the derivative for floor_divide is "
          "not implemented'); gpugrad's is 0, as torch's div(rounding_mode='floor') (tests/ops/test_torch_oracle.py "
          "NO_TORCH says the same)",
          lambda f, m: (_in_backward(m) or m.where.startswith("functional:")) and _any(f, "floor_divide",
                                                                                       "floor_divide_")
          and _only("torch", m, text="floor_divide")),
    Known("a tangent in the written tensor's dtype",
          "after x.copy_(d) (or x.fmod_(d)) of a float64 dual into a float32 x, torch keeps the float64 tangent "
          "(and, where x had no tangent or is empty, a float32 dual's float32 tangent in a float64 x); gpugrad casts "
          "it to x's dtype, as the values are (the tangent of a float32 value is float32)",
          lambda f, m: m.kind == "dtype" and "the tangent of" in m.detail and (
              "dtype float32, torch float64" in m.detail or "dtype float64, torch float32" in m.detail)),
    # -- torch's quirks -------------------------------------------------------------------------------------------
    Known("torch's take_along_dim reads outside the dim",
          "torch 2.13's CPU take_along_dim does not check its ids: [2.0].take_along_dim([1, 5], -1) reads past the "
          "tensor (values of whatever memory follows); gpugrad raises gather's IndexError-style RuntimeError",
          lambda f, m: m.where == "take_along_dim" and "bad_index" in f
          and _only("gpugrad", m, text="gather(): index")),
    Known("torch's linalg.solve backward without create_graph carries no tangent",
          "in a dual level, torch's gradient through linalg.solve has no tangent unless create_graph=True (its VJP "
          "solves with the saved LU factors, which carry none); gpugrad's has the tangent torch gives with "
          "create_graph=True (checked against it: equal to 1e-15)",
          lambda f, m: m.kind == "tangent-none" and _in_backward(m) and "linalg_solve" in f
          and not _any(f, *CREATE_GRAPH)),
    Known("a tangent that is rounding where torch knows it is none",
          "where torch's backward formula has no path from a tangent (det of 1x1 matrices: its VJP is the constant 1), "
          "gpugrad's computes det(A) A^-T on duals and gets rounding (|t| ~ 1e-17); excused only for tangents below "
          "1e-12",
          lambda f, m: m.kind == "tangent-none" and m.got is not None and _tiny(m.got)),
    Known("torch's vmap refuses random ops",
          "jacobian / hessian(vectorize=True) of a program that draws (dropout): torch's vmap raises 'We do not yet "
          "support calling random operations inside of vmap'; gpugrad's forward-over-reverse Jacobian reads the "
          "draws the forward made, as its unvectorized one does",
          lambda f, m: m.where.startswith("functional:") and _only(
              "torch", m, text="We do not yet support calling random operations inside of vmap")),
    Known("torch's embedding of an empty row",
          "an id out of range for a table of width 0: torch's kernel for empty rows raises RuntimeError ('INDICES "
          "element is out of DATA bounds'), its others IndexError ('index out of range in self'), as gpugrad always",
          lambda f, m: m.where == "embedding" and m.kind == "error-type" and "empty" in f
          and isinstance(m.want, RuntimeError) and "INDICES element is out of DATA bounds" in str(m.want)),
    Known("torch has no derivative of scatter with reduce",
          "scatter(..., reduce='add') is scatter_add's sum; torch 2.13 has no derivative for that overload "
          "('derivative for aten::scatter is not implemented'), gpugrad's is scatter_add's",
          lambda f, m: "scatter" in f and _only("torch", m, text="derivative for aten::scatter is not implemented")),
    Known("torch's index_select of integers",
          "torch's index_select raises IndexError ('index out of range in self') for an id out of range, as gpugrad "
          "does, but its kernel for integer tensors raises RuntimeError ('INDICES element is out of DATA bounds')",
          lambda f, m: m.where == "index_select" and m.kind == "error-type" and isinstance(m.got, IndexError)
          and "out of DATA bounds" in str(m.want)),
    Known("mode with NaN",
          "torch's mode sorts each line with a comparison that NaN breaks, so which value it reports for a line "
          "holding NaN is unspecified; gpugrad counts NaNs as one value (as NumPy's unique)",
          lambda f, m: m.where == "mode" and _any(f, "nan_values", "nonfinite") and m.kind == "value"),
    Known("torch's scatter backward with a larger src",
          "torch's scatter/scatter_add backward returns a gradient of the index's shape for a src larger than the "
          "index, which its engine then refuses ('returned an invalid gradient'); gpugrad's is src's shape, 0 where "
          "src was not read (tests/op_cases.py scatter row)",
          lambda f, m: _any(f, "scatter", "scatter_", "scatter_add", "scatter_add_")
          and (_in_backward(m) or m.where.startswith("functional:"))
          and _only("torch", m, text="returned an invalid gradient")),
    Known("torch's backward through a tangent after an in-place write",
          "some of torch's forward-mode formulas save an intermediate that the program, or torch's own in-place "
          "formulas (its log_softmax and exp tangents update their results in place), later overwrite, so the "
          "backward through that tangent raises a version error in torch only (gpugrad's JVPs of in-place ops keep "
          "private copies: core/forward.py _before_the_write)",
          lambda f, m: m.where.endswith(":tangent") and _only("torch", m, text="modified by an inplace operation")),
    Known("torch's binary_cross_entropy JVP at 0 and 1",
          "torch's forward-mode formula of binary_cross_entropy divides by x (1 - x) without the eps its backward "
          "clamps it to, so its tangent is NaN where x is exactly 0 or 1; gpugrad's JVP is its VJP (torch's backward "
          "formula). Only elements NaN in torch may differ",
          lambda f, m: m.where == "binary_cross_entropy" and m.kind == "tangent" and _torch_nan_only(m)),
    Known("torch's tangent of an in-place op on its own operand",
          "x.mul_(x), x.pow_(x): torch's in-place forward formula updates x's tangent before reading it as the "
          "operand's tangent, so its tangent is off; gpugrad's JVP reads copies of the old values and tangent "
          "(core/forward.py _before_the_write) and must equal the float64 finite differences (checked)",
          lambda f, m: "inplace_self_operand" in f and m.kind == "tangent"
          and _fd(m, lambda p: fd_tangent_confirms(p, m, float32=True))),
    Known("einsum's views in torch",
          "torch's einsum of one operand that only permutes its axes (or takes a diagonal) returns a view of it, "
          "gpugrad's a copy: in-place writes through either are then seen in torch only (a view of a leaf that "
          "requires grad refuses them there)",
          lambda f, m: "alias_differs_einsum" in f and (m.kind == "value" and "after the in-place step" in m.detail
                                                       or _only("torch", m, text="view of a leaf Variable"))),
    Known("torch's ZeroTensor gradients",
          "torch's backward passes some undefined gradients as ZeroTensors, and its own in-place VJP code then "
          "refuses to write into them ('ZeroTensors are immutable'): an error of torch's engine",
          lambda f, m: _only("torch", m, text="ZeroTensors are immutable")),
    Known("in-place ops on operands that overlap the written tensor",
          "x.mul_(x[0:, 1:2]): torch reads an operand while writing the memory it shares with x, so its result "
          "depends on the order of its loop (gpugrad reads every operand, then writes)",
          lambda f, m: "inplace_self_operand" in f and m.kind == "value" and "after the in-place step" in m.detail),
    Known("torch has no forward-mode formula",
          "torch raises NotImplementedError ('Trying to use forward AD with ...') for ops it has no forward "
          "formula for (unique, floor_divide_); gpugrad gives their non-differentiable outputs no tangent (or raises "
          "its own error first)",
          lambda f, m: _only("torch", m, exc=NotImplementedError, text="Trying to use forward AD with")
          or m.kind == "error-type" and "Trying to use forward AD with" in str(m.want)),
    Known("the fuzzer's torch spelling of in-place ops torch lacks",
          "torch has no gelu_, silu_, softplus_ (...) methods: the fuzzer writes them x.copy_(f(x)), and f saved x, "
          "so torch's backward raises a version error that gpugrad's true in-place op (which copies what its node "
          "saved: clone-on-write) does not",
          lambda f, m: "torch_inplace_by_copy" in f and _only("torch", m, text="modified by an inplace operation")),
    Known("torch's tangents of in-place results require grad",
          "torch computes the tangent of an in-place op on a tensor that requires grad from that tensor, so the "
          "tangent requires grad even where it does not depend on it (its gradient is zero, or reaches leaves as "
          "zeros, as its materialized zero tangents also do); gpugrad's does not: a backward through it raises "
          "'does not require grad' in gpugrad only, or a leaf gets None where torch's gets zeros",
          lambda f, m: m.where.endswith(":tangent") and (
              "inplace" in f and _only("gpugrad", m, text="does not require grad and does not have a grad_fn")
              or m.kind == "grad-none" and m.got is None and _zeros(m.want))),
    Known("kl_div's JVP at a zero target",
          "torch's forward-mode formula of kl_div (xlogy's: t_t * (log t + 1) + ... / t) is NaN where the target is "
          "exactly 0; its VJP there, and gpugrad's derivative, are 0 (0 log 0 = 0 is constant). Only elements NaN "
          "in torch may differ",
          lambda f, m: m.where == "kl_div" and m.kind == "tangent" and _torch_nan_only(m)),
    Known("logsumexp's tangent over an empty dim",
          "the logsumexp of no elements is the constant -inf: gpugrad's tangent is 0, torch's NaN",
          lambda f, m: m.where == "logsumexp" and "empty" in f and m.kind == "tangent" and _torch_nan_only(m)),
    Known("indices among equal values",
          "which of several equal values kthvalue, topk, sort, median, mode and max/min(dim) report is unspecified "
          "in torch (its CPU kernels use unstable partial sorts); gpugrad picks the first (stable). The values "
          "themselves are compared strictly (their tangents, the picked element's, may differ too, as where the value "
          "picked is NaN: which NaN is unspecified); excused only for programs whose selection input held ties",
          lambda f, m: m.where in SELECTIONS and "nan_values" in f and m.kind == "tangent"
          or "input_ties" in f and m.where in SELECTIONS and (
              m.kind == "value" and isinstance(m.got, np.ndarray) and m.got.dtype.kind in "iu" or m.kind == "tangent")),
    Known("var_mean's mean of infinities",
          "torch's var_mean and std_mean compute the mean with Welford's update, so a line holding inf gets a NaN "
          "mean (inf - inf), where torch.mean and gpugrad give inf. Only elements NaN in torch may differ",
          lambda f, m: m.where in ("var_mean", "std_mean") and m.kind == "value" and _torch_nan_only(m)),
    Known("unique's values require grad in torch",
          "torch's unique of a tensor that requires grad returns values that require grad but have no derivative "
          "(backward through them raises 'the derivative for _unique2 is not implemented'); gpugrad's unique is not "
          "differentiable and its values do not require grad",
          lambda f, m: "unique" in f and (m.kind == "requires-grad" and m.where == "unique"
                                          or _only("torch", m, text="_unique2")
                                          or _in_backward(m) and m.kind in ("grad-none", "tangent-none"))),
    Known("torch's materialized zero tangents",
          "torch's JVP formulas multiply a zero tangent it makes up for an input without one (mm: ta @ b + a @ tb "
          "with ta = 0; mse_loss: 2 (x - t) (tx - tt) with tt = 0), so inf or NaN values of that input give NaN "
          "(0 * inf); gpugrad skips the term. Only elements NaN in torch (and not in gpugrad) may differ",
          lambda f, m: "forward" in f and m.kind == "tangent" and _torch_nan_only(m)
          and _any(f, "matmul", "bmm", "linear", "mm", "mv", "dot", "einsum", "outer", "ger", "bias_act",
                   "layer_norm", "mse_loss", "soft_margin_loss")),
    Known("torch's tangents require grad through zero tangents it makes up",
          "torch's JVP formulas multiply a zero tangent it makes up for an operand without one by the other operands "
          "(mul: self_t * other + other_t * self, self_t = 0), so a tangent requires grad when an operand does even "
          "where it does not depend on it; gpugrad's tangent records only the terms it has. A backward through it "
          "gives that leaf zeros in torch and raises 'does not require grad' in gpugrad: excused only where every "
          "leaf gradient torch computed is zero",
          lambda f, m: m.where.endswith(":tangent") and "dual" in f
          and _only("gpugrad", m, text="does not require grad and does not have a grad_fn")
          and _fd(m, lambda p: all(_zeros(v.t.grad) for v in p.vars if v.leaf))),
    Known("prod's tangent at an infinite factor",
          "where a factor of prod or cumprod is infinite (x / 0, a power overflowing) and so is its tangent, torch's "
          "JVP formula (the product over each factor) gives NaN; gpugrad's sum of t_i times the other factors gives "
          "the infinity of its largest term. Only elements NaN in torch and infinite in gpugrad may differ",
          lambda f, m: m.where in ("prod", "cumprod") and m.kind == "tangent" and _torch_nan_only(m)
          and not np.isfinite(m.got[np.isnan(m.want)]).any()),
    Known("torch's gradient of det's tangent",
          "torch 2.13's backward through the tangent of linalg.det is wrong: it differs from float64 finite "
          "differences of w det(A) tr(A^-1 T) and from torch's own autograd of that closed form, which gpugrad's "
          "equals (tests/compat/test_linalg.py test_gradient_of_dets_tangent_is_the_closed_forms)",
          lambda f, m: _any(f, "linalg_det", "det") and (m.where.endswith(":tangent") and m.kind == "value"
                                                         or _in_backward(m) and m.kind == "tangent")),
    Known("torch's gradient of logdet's tangent",
          "torch 2.13's tangent of logdet carries no graph back to A (its backward raises 'does not require grad'; "
          "inside gelu(logdet(A)) only gelu's factor is differentiated), where gpugrad's gradient of the tangent "
          "tr(A^-1 T) is -(A^-1 T A^-1)^T, as float64 finite differences say (tests/compat/test_linalg.py "
          "test_gradient_of_logdets_tangent_is_the_closed_form); the same for forward over reverse: the tangent of "
          "logdet's gradient A^-T is -(A^-1 T A^-1)^T, gpugrad's to 0 in a 3x3 case, torch's None (through "
          "log(det(A)), torch's is off by 0.05)",
          lambda f, m: _any(f, "logdet") and m.where.endswith(":tangent") and (
              m.kind == "value" or _only("torch", m, text="does not require grad"))
          or _any(f, "logdet", "linalg_slogdet") and _in_backward(m) and m.kind in ("tangent", "tangent-none")),
    Known("torch's gradient of layer_norm's tangent",
          "torch 2.13's backward through the tangent of layer_norm differs from float64 finite differences of the "
          "tangent's closed form (also with one normalized element, where x-hat is identically 0); gpugrad's equals "
          "them (tests/autograd/test_reliability_autograd.py test_gradient_of_layer_norms_tangent_is_the_finite_"
          "differences)",
          lambda f, m: m.where.endswith(":tangent") and m.kind == "value" and "layer_norm" in f),
    Known("torch's remainder tangent is its input's",
          "torch's forward formula of remainder returns the input's tangent itself (x % c: t), so an in-place op on "
          "the input afterwards changes the result's tangent too (y = x % 1.5; x.mul_(3): y's tangent triples); "
          "gpugrad's result has its own. Where the finite differences apply they must confirm gpugrad's",
          lambda f, m: "remainder" in f and m.kind == "tangent" and "after the in-place step" in m.detail
          and _fd(m, lambda p: fd_tangent_confirms(p, m) is not False)),
    Known("remainder of a number by a tensor",
          "torch has no derivative for remainder(Scalar, Tensor) (its backward raises 'derivative for "
          "aten::remainder is not implemented'); gpugrad's is -floor(x / y), as for two tensors (op_cases.py: "
          "remainder, checked against torch and finite differences)",
          lambda f, m: "remainder" in f and _in_backward(m)
          and _only("torch", m, text="derivative for aten::remainder is not implemented")),
    Known("in-place changes to empty saved tensors",
          "an empty tensor holds no memory, so gpugrad cannot tell a saved empty array from the tensor an in-place op "
          "changed afterwards, and its backward runs where torch's raises 'modified by an inplace operation'; the "
          "gradients of an empty tensor are empty either way",
          lambda f, m: "empty" in f and _in_backward(m) and _only("torch", m, text="modified by an inplace operation")),
    Known("the tangent of .grad after backward in a dual level",
          "torch's AccumulateGrad stores a gradient it holds the only reference to as is, detached (its tangent is "
          "dropped), and one that is shared as a clone (the tangent kept), so whether a leaf's .grad has a tangent "
          "after backward() in a dual level depends on reference counts; gpugrad's .grad always carries it (H v, "
          "tests/autograd/test_reliability_autograd.py checks it against the closed form, and autograd.grad's "
          "tangents, which torch keeps, are compared strictly)",
          lambda f, m: "forward" in f and m.kind in ("tangent", "tangent-none") and ".grad" in m.detail
          and "autograd.grad" not in m.detail),
    Known("autograd.functional.jvp by forward mode",
          "deliberate (autograd/functional.py): gpugrad's functional.jvp runs forward mode, torch's is the transpose "
          "of its VJP (a double backward). Where the VJP is not the derivative (embedding's padding row gets no "
          "gradient; values computed under no_grad or detached, which forward mode differentiates as torch.func.jvp "
          "does) torch's J v drops that part, and where an op has no double backward (scatter) torch raises: "
          "gpugrad's J v must equal the float64 finite differences of the function (checked), or torch's must be "
          "zero after a no_grad or detach",
          lambda f, m: m.where == "functional:jvp" and (
              (m.kind == "value" or _only("torch", m, text="not implemented")
               or _only("torch", m, text="is a view and is being modified inplace")
               or _only("torch", m, text="modified by an inplace operation"))
              and _fd(m, lambda p: getattr(p, "fd_functional", lambda: None)())
              or m.kind == "value" and _any(f, "no_grad", "detach") and not np.asarray(m.want).any()
              # a tangent carried only by an empty input: 0, but made by recorded ops of values that require grad
              or m.kind == "requires-grad" and "empty" in f and "functional_create_graph" in f
              and "requires_grad True, torch False" in m.detail)),
    Known("torch's vectorized functional",
          "torch's vectorize=True runs its vmap, which cannot batch some ops and programs (an in-place write into a "
          "tensor that is not batched, a select on an empty batch) and raises; gpugrad's result must equal torch's "
          "without vectorize (checked)",
          lambda f, m: m.where.startswith("functional:") and "functional_vectorize" in f and _only("torch", m)
          and _fd(m, lambda p: getattr(p, "torch_unvectorized", lambda: None)())),
    Known("counting ops have no graph",
          "deliberate (README, differences from torch): bincount with weights that require grad and histogram of an "
          "input that requires grad give results without a graph; torch's require grad through a node whose backward "
          "raises 'derivative ... is not implemented'",
          lambda f, m: _any(f, "bincount", "histogram") and m.kind in ("requires-grad", "is-leaf")),
    Known("random draws of a dual tensor have no tangent",
          "deliberate (README, differences from torch): bernoulli's and multinomial's draws from a tensor with a "
          "tangent have none (None), where torch gives them a tangent of zeros; both say the draws do not change "
          "with the input",
          lambda f, m: m.where in ("bernoulli", "bernoulli_", "multinomial") and m.kind == "tangent-none"
          and "zero_tangent_only_torch" in f),
    Known("torch's functional over an empty output",
          "torch's jacobian and hessian of a function with an empty output stack no rows: without vectorize torch "
          "raises 'stack expects a non-empty TensorList' (as gpugrad does), with vectorize its vmap indexes row 0 of "
          "nothing (IndexError); gpugrad's vectorized result is the empty Jacobian of shape (0, n)",
          lambda f, m: m.where.startswith("functional:") and "functional_vectorize" in f and "empty" in f
          and _only("torch", m, exc=IndexError, text="out of bounds for dimension 0 with size 0")),
    Known("mixed float dtypes in matmul, linear, layer_norm",
          "gpugrad promotes float32 with float64 operands as NumPy does (the result is float64); torch refuses to mix "
          "them in matmul, linear and layer_norm (and gives float32 for empty operands, where it does not check; so "
          "do mm, bmm, mv, dot and einsum there, which gpugrad then refuses as torch does for non-empty ones)",
          lambda f, m: m.where in ("matmul", "linear", "layer_norm", "mm", "bmm", "mv", "dot", "outer", "ger", "einsum")
          and (_only("torch", m, text="dtype") or _only("torch", m, text="scalar type") or m.kind == "dtype"
               or "empty" in f and _only("gpugrad", m, text="expected both operands to have the same dtype"))),
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
    Known("einsum's saved operands",
          "torch's einsum saves operands it rearranged for bmm, copies or views depending on their layout, so an "
          "in-place change of an operand afterwards is a version error in torch only sometimes; gpugrad's einsum "
          "node copies what it saved before such a change (Op.private_saved), and its gradient stays right",
          lambda f, m: "einsum" in f and _only("torch", m, text="modified by an inplace operation")),
    Known("in-place ops on their own operand",
          "x.mul_(x) (or an operand sharing x's memory): gpugrad's in-place op copies what its own node saved from "
          "x before writing (clone-on-write), so the gradient is right; torch saved x itself and raises a version "
          "error at backward",
          lambda f, m: "inplace_self_operand" in f and _only("torch", m, text="modified by an inplace operation")),
    Known("torch saves inputs gpugrad does not need",
          "torch's mse_loss saves input and target (gpugrad's composite only their difference), torch's gather "
          "saves its input (gpugrad only the index), torch's layer_norm its bias, even one that needs no "
          "gradient, and torch's cumprod its output (gpugrad's VJP recomputes it from the input): an in-place change "
          "of them afterwards is a version error only in torch, and gpugrad's gradient does not read them",
          lambda f, m: _any(f, "mse_loss", "gather", "layer_norm")
          and _only("torch", m, text="modified by an inplace operation")
          or "cumprod" in f and _only("torch", m, text="which is output 0 of Cumprod")),
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
    Known("kl_div's target gradient at a target <= 0",
          "torch's d/dt of xlogy(t, t) is xlogy(t != 0, t) + t / t: NaN at t = 0 (0 / 0) and t < 0 (log); gpugrad's "
          "t log t is a select there (0, NaN as constants: a NaN made of t would poison every target's gradient), so "
          "its gradient is -input. Only elements NaN in torch (and not in gpugrad) may differ",
          lambda f, m: "kl_div" in f and _in_backward(m) and m.kind == "value" and _torch_nan_only(m)),
    Known("gradients of log |det| at an exactly singular matrix",
          "A^-T there is infinite: [[0.5, 0], [0, -0.0]] gives -inf from 1 / -0.0 (gpugrad's inverse), +inf from "
          "torch's LU solve; excused only where both gradients are non-finite",
          lambda f, m: _any(f, "slogdet", "linalg_slogdet", "logdet") and _in_backward(m) and m.kind == "value"
          and _nonfinite_where_differ(m)),
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
    Known("torch's layer_norm tangent of a row that one element dominates",
          "x = 2 ** v with v spanning hundreds: the row is nearly one element, so its normalization barely moves "
          "along any tangent (mpmath at 400 digits: about 1e-13 in the case measured, where gpugrad gave the same "
          "and torch 0.16-0.47, what is left of its cancellation); excused only where gpugrad's tangent is that small",
          lambda f, m: m.where == "layer_norm" and m.kind == "tangent" and isinstance(m.got, np.ndarray)
          and m.got.size > 0 and np.all(np.abs(m.got) < 1e-9)),
    Known("layer_norm of rows whose square overflows",
          "both are wrong where (x - mean)^2 overflows (|x| > 1e154): gpugrad's rstd becomes 0 (the row 0), torch's "
          "NaN (torch's CPU kernel then also gives NaN rows for the batch's finite rows)",
          lambda f, m: m.where == "layer_norm" and m.kind == "value"
          and np.isnan(m.want).sum() > np.isnan(m.got).sum()),
    Known("NaN spreads further in torch",
          "a NaN (in the forward, or inf - inf in a backward) reaches more gradient elements in torch: its VJPs of "
          "abs, clamp multiply (sgn(x) * gy, mask * gy: NaN * 0 = NaN) where gpugrad's select (0 there). "
          "Only elements NaN in torch may differ; a NaN only in gpugrad is still a mismatch",
          lambda f, m: (_in_backward(m) or m.where.startswith("functional:")) and _any(f, "abs", "clamp", "where")
          and _nan_spread(m)),
    Known("view of a result laid out otherwise",
          "an op's result may be C-contiguous in gpugrad and strided in torch (torch's inverse and solve return "
          "column-major matrices): view() then works in gpugrad, where torch asks for reshape",
          lambda f, m: "layout_differs_view" in f and m.where == "view" and _only(
              "torch", m, text="view size is not compatible with input tensor's size and stride")),
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
    Known("torch's layer_norm double backward without a weight",
          "torch 2.13 raises 'Expected a proper Tensor but got None ... argument #1 other' in the second-order pass of "
          "a layer_norm with a bias and no weight (its double backward multiplies by the missing weight); gpugrad's "
          "second derivatives there are checked against finite differences (op_cases.py: layer_norm_bias_only)",
          lambda f, m: "layer_norm" in f and (_any(f, *CREATE_GRAPH) or "functional_create_graph" in f) and _only(
              "torch", m, text="Expected a proper Tensor but got None")),
    Known("torch's layer_norm second derivative through a bias without a weight",
          "where torch 2.13 does not raise (autograd.functional's vhp / hvp / hessian), its second derivative "
          "through a layer_norm with a bias and no weight is 0: vhp of sum(w * softmax(layer_norm(x, None, b))) in b "
          "gave torch 0 where gpugrad and float64 finite differences agree on (0.119, 0.078, -0.197); excused only "
          "where torch's values are all 0",
          lambda f, m: "layer_norm" in f and m.where.startswith("functional:") and m.kind == "value"
          and _any(f, "functional_vhp", "functional_hvp", "functional_hessian")
          and isinstance(m.want, np.ndarray) and m.want.size > 0 and not m.want.any()),

    Known("slogdet's sign of a numerically singular matrix",
          "deliberate (README, differences from torch): on a matrix singular to working precision (a product of "
          "rank-deficient factors) torch 2.13's CPU det can be exactly 0 (sign 0, log|det| -inf) where NumPy's LAPACK "
          "(OpenBLAS) leaves a value of rounding size (sign ±1, log|det| about -20 to -70 in float32), or the reverse: "
          "rounding noise either way (a 2x2 case: exact det 1.7e-9, NumPy's LU 1.7e-9, torch's det 0 while its own "
          "lu_factor keeps a pivot of -7.5e-9)",
          lambda f, m: m.where in ("slogdet", "linalg_slogdet") and m.kind == "value"
          and isinstance(m.want, np.ndarray) and isinstance(m.got, np.ndarray)
          and ((m.want == 0) | np.isinf(m.want) | (m.got == 0) | np.isinf(m.got)).any()),

    # -- open bugs the fuzzer found in this session (issue 21's closing note lists them; each entry goes with its fix) --
    Known("NaN in second-order and tangent passes over non-finite values",
          "NEW bug, open: a create_graph gradient, a tangent's backward or autograd.functional's jvp / hvp / vhp of "
          "a program over NaN or inf values (min/max, softmax, std with correction >= n, pow overflowing) gives NaN "
          "where torch gives 0 or inf; and the reverse in a tangent of a create_graph gradient through amin / amax of "
          "a NaN row (gpugrad 0 from its constant NaN share, torch NaN from gy / 0: a NaN share made of gy would "
          "give NaN second derivatives through the select)",
          lambda f, m: m.kind == "tangent" and m.where.startswith("pass") and "grad_create" in f
          and _any(f, "amin", "amax", "min", "max") and "nan_values" in f and _torch_nan_only(m)
          or m.kind == "value" and (
              m.where.startswith("pass") and _any(f, *CREATE_GRAPH, "tangent")
              or m.where in ("functional:jvp", "functional:hvp", "functional:vhp"))
          and _any(f, "nonfinite", "nan_values", "logsumexp", "std", "var", "maximum", "amax", "min", "max", "pow")
          and isinstance(m.got, np.ndarray) and m.got.dtype.kind == "f" and np.isnan(m.got).any()
          and not np.isnan(m.want).all(), temporary=True),
]


def explain(features, mismatch):
    """The entry that excuses ``mismatch`` in a program with ``features``, or None."""
    for k in KNOWN:
        if k.applies(features, mismatch):
            return k
    return None
