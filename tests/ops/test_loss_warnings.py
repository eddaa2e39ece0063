"""Losses at their edges are silent, as torch's are (issue #21 item 22): an empty batch's mean is nan, a float16 sum
that overflows is inf, an infinite soft target gives inf and nan gradients, with no NumPy RuntimeWarning reaching the
user. Each case runs forward and backward with warnings as errors, values compared with torch's.

The warnings escaped from gpugrad/ops/loss.py and the reductions under it; the losses now reduce quietly, as torch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpugrad
import gpugrad.nn.functional as F


def _empty(lib):
    return lib.zeros(0, requires_grad=True), lib.zeros(0)


def _f16_big(lib):
    return lib.full((4,), 200.0, dtype=lib.float16, requires_grad=True), lib.zeros(4, dtype=lib.float16)


def _soft_inf(lib):
    return lib.tensor([[1.0, 2.0, 3.0]], requires_grad=True), lib.tensor([[float("inf"), 0.0, 0.0]])


CASES = {
    "mse_loss-empty-mean": (_empty, lambda f, x, y: f.mse_loss(x, y)),
    "binary_cross_entropy-empty-mean": (_empty, lambda f, x, y: f.binary_cross_entropy(x, y)),
    "binary_cross_entropy_with_logits-empty-mean": (_empty, lambda f, x, y: f.binary_cross_entropy_with_logits(x, y)),
    "smooth_l1_loss-empty-mean": (_empty, lambda f, x, y: f.smooth_l1_loss(x, y)),
    "mse_loss-float16-sum-overflows": (_f16_big, lambda f, x, y: f.mse_loss(x, y, reduction="sum")),
    "cross_entropy-inf-soft-target": (_soft_inf, lambda f, x, y: f.cross_entropy(x, y)),
}


def _run(lib, functional, case):
    make, loss = CASES[case]
    x, y = make(lib)
    out = loss(functional, x, y)
    out.backward()
    return out.detach().numpy().astype(np.float64), x.grad.detach().numpy().astype(np.float64)


@pytest.mark.parametrize("case", list(CASES))
def test_losses_at_their_edges_are_silent_and_match_torch(torch, case):
    want = _run(torch, torch.nn.functional, case)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning is a failure, as the user would see it
        got = _run(gpugrad, F, case)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # nan where torch's is nan, inf where it is inf
