"""Sampling from distributions given by a tensor: ``multinomial`` (indices drawn with the rows' weights) and
``bernoulli`` (0/1 draws with the elements' probabilities), as torch's functions and Tensor methods.

The draws come from ``generator=`` or the device's default generator (``gpugrad.random``): other streams than
torch's for the same seed, with the same distributions.  Invalid probabilities raise torch's errors; on CUDA the
check runs on the device and raises at the next read from it (``backend/deferred.py``), so sampling never waits for
the GPU.
"""
from __future__ import annotations

import numpy as np

from gpugrad.backend import on
from gpugrad.backend.deferred import check_range
from gpugrad.core.names import type_name
from gpugrad.core.registry import composite
from gpugrad.core.tensor import TensorBase, make
from gpugrad.core.tensor_xp import depends
from gpugrad.random import generator as generator_of


def _flag(xp, bad):
    """``bad`` (a boolean array) as ids for ``check_range(ids, 1, ...)``: a True is the out-of-range id 1."""
    return bad.reshape(-1).astype(np.int64) if bad.size else xp.zeros(1, dtype=np.int64)


def _check_weights(xp, p):
    """torch's checks of a multinomial's rows: finite, non-negative, and a positive sum each."""
    check_range(_flag(xp, ~(p >= 0) | xp.isinf(p)), 1, RuntimeError,
                "probability tensor contains either `inf`, `nan` or element < 0")
    check_range(_flag(xp, ~(p.sum(axis=1) > 0)), 1, RuntimeError,
                "invalid multinomial distribution (sum of probabilities <= 0)")


def _with_replacement(xp, rng, p, n):
    """Each draw: the first category whose cumulative weight passes u * (row total), u ~ U[0, 1).  The rows are
    searched as one sorted array, row r's normalized cumulative weights shifted by r."""
    rows, k = p.shape
    cdf = xp.cumsum(p, axis=1, dtype=np.float64)
    total = cdf[:, -1:]
    cdf = cdf / xp.where(total > 0, total, 1.0)  # a zero row is an error already (raised now, or on CUDA later)
    shift = xp.arange(rows, dtype=np.float64)[:, None]
    u = rng.random((rows, n), dtype=np.float64)
    idx = xp.searchsorted((cdf + shift).reshape(-1), (u + shift).reshape(-1), side="right").reshape(rows, n)
    idx = idx - xp.arange(rows)[:, None] * k
    # NOTE: r + u rounds up to r + 1 for u within 2^-53 of 1: that lands past the row, so cap at its last category
    # with a positive weight (never a zero-weight one, which the right-sided search already skips)
    last = k - 1 - xp.argmax(xp.flip(p > 0, axis=1), axis=1)
    return xp.minimum(idx, last[:, None])


def _without_replacement(xp, rng, p, n):
    """Sampling without replacement, one category after another with the weights left, is ranking the categories by
    w / E with E ~ Exp(1) drawn once each (Efraimidis and Spirakis, 2006): the n largest keys, in order."""
    e = -xp.log1p(-rng.random(p.shape, dtype=np.float64))
    keys = xp.where(e > 0, p / xp.where(e > 0, e, 1.0), np.inf)  # e = 0 (u = 0): drawn first
    keys = xp.where(p > 0, keys, 0.0)
    order = xp.argsort(-keys, axis=1, kind="stable")  # zero weights last, in index order (torch draws them then too)
    return order[:, :n]


@composite("multinomial")
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``num_samples`` category indices per row of ``input`` (1-D: one distribution; 2-D: one per row), drawn with
    probabilities proportional to the row's non-negative weights; int64.  Without replacement a row's categories
    are drawn at most once each (its weights renormalized after each draw)."""
    if not isinstance(input, TensorBase) or input.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if input.dtype.kind not in "fV":  # bfloat16 is ml_dtypes' kind "V"
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {type_name(input.dtype)}")
    n, k = int(num_samples), input.shape[-1]
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and n > k:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    be = input._backend
    xp = be.xp
    with on(be):
        p = input._data.reshape(-1, k)
        p = p.astype(np.float32) if p.dtype.itemsize < 4 else p
        if p.shape[0]:
            _check_weights(xp, p)
        rng = generator_of(be, generator)
        if not p.shape[0]:
            idx = xp.zeros((0, n), dtype=np.int64)
        elif replacement or n == 1:
            idx = _with_replacement(xp, rng, p, n)
        else:
            idx = _without_replacement(xp, rng, p, n)
        idx = be.as_array(idx.astype(np.int64, copy=False).reshape(input.shape[:-1] + (n,)))
    return make(idx, be)


def _check_probabilities(xp, p, message):
    check_range(_flag(xp, ~((p >= 0) & (p <= 1))), 1, RuntimeError, message)


_P_RANGE = "Expected p_in >= 0 && p_in <= 1 to be true, but got false."


def _draw_below(be, generator, shape, p):
    """1 where u < p, u ~ U[0, 1) elementwise: a Bernoulli(p) draw (p broadcast to ``shape``)."""
    u = generator_of(be, generator).random(shape, dtype=np.float64)
    return u < p


@composite("bernoulli")
def bernoulli(input, p=None, *, generator=None):
    """0/1 draws, 1 with probability ``input``'s element (in [0, 1]), in ``input``'s dtype; with ``p`` (a number):
    every element 1 with probability p.  As torch's, the result depends on ``input`` with derivative 0."""
    be = input._backend
    if p is None and input.dtype.kind not in "fV":
        raise NotImplementedError(f"\"bernoulli_tensor_cpu_p_\" not implemented for '{type_name(input.dtype)}'")
    if p is not None and not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    with on(be):
        probs = input._data if p is None else p
        if p is None:
            _check_probabilities(be.xp, probs, _P_RANGE)
        y = make(be.as_array(_draw_below(be, generator, input.shape, probs).astype(input._data.dtype)), be)
    if input.requires_grad and y.dtype.kind in "fV":
        y = depends(y, input)
        y._grad_fn._name = "BernoulliBackward0"
    return y


@composite("bernoulli_", function=False)
def bernoulli_(input, p=0.5, *, generator=None):
    """Fill ``input`` in place with 0/1 draws, 1 with probability ``p`` (a number, or a Tensor broadcast to
    ``input``'s shape); ``input``'s values are not read."""
    be = input._backend
    with on(be):
        if isinstance(p, TensorBase):
            probs = p.to(device=input.device)._data
            _check_probabilities(be.xp, probs, _P_RANGE)
        else:
            if not 0 <= p <= 1:
                raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
            probs = p
        # the draws as input's dtype (copy_ would refuse bool values for a tensor in a graph)
        y = make(be.as_array(_draw_below(be, generator, input.shape, probs)).astype(input._data.dtype), be)
    return input.copy_(y)

