"""Counting: ``bincount`` (occurrences of each non-negative integer), ``histc`` (a histogram of equal bins, as a
tensor) and ``histogram`` (counts and bin edges, as ``return_types.histogram``), as torch's functions and Tensor
methods.  None of them is differentiable (torch records no usable gradient for them either).

Bins are assigned as torch assigns them, in the input's dtype: ``(x - lo) * bins / (hi - lo)`` truncated, an element
equal to the last edge in the last bin, elements outside [lo, hi] left out; ``histogram``'s edges are torch's
``linspace`` of the range in the input's dtype, and each element goes to the edge interval it falls in.
Counting needs the data's extremes (the output's length, a range from the data): like torch, that reads them on the
host (a sync on CUDA).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from gpugrad import return_types
from gpugrad.backend import on, ranges
from gpugrad.core.names import type_name
from gpugrad.core.registry import composite
from gpugrad.core.tensor import TensorBase, make


def _host(be, *values):
    """Device scalars as Python numbers (one copy to the host)."""
    return be.to_host(be.xp.stack([be.xp.asarray(v, dtype=np.float64) for v in values])).tolist()


@composite("bincount")
def bincount(input, weights=None, minlength=0):
    """How often each value 0, 1, ..., max(input) occurs in the 1-D non-negative integer tensor ``input`` (at
    least ``minlength`` counts); with ``weights``, their sums instead (float32 weights give float32 sums, others
    float64, as torch)."""
    if input.dtype.kind not in "iu":
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{type_name(input.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if input.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    be, xp = input._backend, input._backend.xp
    with on(be):
        ids = input._data.astype(np.int64, copy=False)
        lo, hi = _host(be, ids.min(), ids.max()) if ids.size else (0, -1)
        if lo < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        n = max(int(hi) + 1, int(minlength))
        if weights is None or not ids.size:  # torch: an empty input counts in int64, weights or not
            out = xp.bincount(ids, minlength=n) if ids.size else xp.zeros(n, dtype=np.int64)
            return make(be.as_array(out.astype(np.int64, copy=False)), be)
        w = weights.to(device=input.device).detach()._data
        dtype = np.float32 if w.dtype == np.float32 else np.float64
        w = w.astype(np.float64, copy=False)
        out = xp.bincount(ids, weights=w, minlength=n) if ids.size else xp.zeros(n, dtype=np.float64)
        return make(be.as_array(out.astype(dtype, copy=False)), be)


def _bin_counts(xp, x, lo, hi, bins, weight=None, edges=None):
    """Counts (or weight sums) of the elements of ``x`` (any shape, float) in ``bins`` bins over [lo, hi]: by
    interval search in ``edges`` when given, else by torch's division."""
    x = x.reshape(-1)
    inside = (x >= lo) & (x <= hi)
    if edges is None:
        t = x.dtype.type
        pos = ((x - t(lo)) * t(bins) / (t(hi) - t(lo)))
        pos = xp.where(inside, pos, 0).astype(np.int64)
    else:
        pos = xp.searchsorted(edges, x, side="right") - 1
    pos = xp.where(pos >= bins, bins - 1, pos)  # the last edge belongs to the last bin
    pos = xp.where(inside, pos, bins)  # outside the range: a bin past the end, dropped below
    w = None if weight is None else xp.where(inside, weight.reshape(-1), 0).astype(np.float64)
    counts = xp.bincount(pos, weights=w, minlength=bins + 1)[:bins]
    return counts.astype(x.dtype)


def _floating(input, kernel):
    if input.dtype.kind not in "fV":  # bfloat16 is ml_dtypes' kind "V"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{type_name(input.dtype)}'")


def _check_bins(bins):
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")


@composite("histc")
def histc(input, bins=100, min=0, max=0):
    """Counts of ``input``'s elements in ``bins`` equal bins over [min, max] (float, input's dtype); min = max = 0
    takes the data's range, and an empty range is widened by 1 each side; elements outside are not counted."""
    _floating(input, "histogram_cpu")
    _check_bins(bins)
    be = input._backend
    with on(be):
        x = input._data
        lo, hi = float(min), float(max)
        if lo == hi == 0 and x.size:
            lo, hi = _host(be, x.min(), x.max())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
        if lo > hi:
            raise RuntimeError("torch.histc: max must be larger than min")
        return make(be.as_array(_bin_counts(be.xp, x, lo, hi, int(bins))), be)


@composite("histogram")
def histogram(input, bins=100, *, range=None, weight=None, density=False):
    """``(hist, bin_edges)``: counts (or ``weight`` sums) of ``input``'s elements in ``bins`` equal bins over
    ``range`` (default: the data's; widened by 1/2 each side when empty), or in the intervals of a 1-D tensor of
    increasing edges; ``density`` divides by the total and the bin widths."""
    _floating(input, "histogramdd")
    be, xp = input._backend, input._backend.xp
    with on(be):
        x = input._data
        w = None if weight is None else weight.to(device=input.device).detach()._data
        if w is not None and w.shape != x.shape:
            raise RuntimeError(f"torch.histogramdd: expected weight to be the same shape as the input, got "
                               f"{list(w.shape)} and {list(x.shape)}")
        if isinstance(bins, TensorBase):
            edges = bins.to(device=input.device).detach()._data
            if edges.ndim != 1 or edges.shape[0] < 1:
                raise RuntimeError("torch.histogramdd: bins tensor should have one dimension and at least 1 element")
            if edges.dtype != x.dtype:
                raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, "
                                   f"but got input {input.dtype} and bins {bins.dtype}")
            n = edges.shape[0] - 1
            lo, hi = _host(be, edges[0], edges[-1])
        else:
            if not isinstance(bins, numbers.Integral):
                raise TypeError(f"histogram(): bins must be an int or a 1-D Tensor of edges, got {type(bins).__name__}")
            _check_bins(bins)
            n = int(bins)
            if range is not None:
                lo, hi = float(range[0]), float(range[1])
                if lo > hi:
                    raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo:g} max {hi:g} "
                                       "for dimension 0")
            else:
                lo, hi = _host(be, x.min(), x.max()) if x.size else (0.0, 1.0)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise RuntimeError(f"torch.histogramdd: dimension 0's range [{lo:g}, {hi:g}] is not finite")
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            edges = xp.asarray(ranges.linspace(lo, hi, n + 1, x.dtype))  # torch's edges, bit for bit
        hist = _bin_counts(xp, x, lo, hi, n, w, edges)
        if density:
            hist = hist / (hist.sum() * xp.diff(edges))
        hist = make(be.as_array(hist.astype(x.dtype, copy=False)), be)
        return return_types.histogram((hist, make(be.as_array(edges.copy()), be)))
