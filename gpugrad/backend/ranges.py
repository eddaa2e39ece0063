"""torch's range factories on the host, element for element: ``arange``, ``linspace`` and ``logspace`` rounded as
torch 2.13's x86-64 CPU kernels round them (measured against its wheel: tests/tensor/test_ranges.py), with the
exactly rounded fused multiply-add that those kernels compile to.

- linspace: step = (end - start) / (steps - 1) in the dtype; element i is start + step * i in the first half and
  end - step * (steps - 1 - i) in the second, each one fused multiply-add (its x86 build contracts a * b + c into
  one rounding). float16 and bfloat16 round every operation, the index included (c10::Half's arithmetic); integer
  dtypes compute in float64 and truncate.
- arange: start + step * i, fused, in float64 (float32 for float16 and bfloat16), rounded once to the dtype, except
  where torch's vector loop runs: there each 32-byte vector starts from its first element, rounded to the dtype, and
  adds k * step (fused) for its k-th lane. That loop takes two vectors at a time from the start of each thread's
  share of the range (more than 32,768 elements are shared among torch's threads: :func:`arange` takes the count).
- logspace: base ** (start + step * i) (halves as linspace), unfused, in float64, through libm's ``pow``
  (``math.pow``: NumPy's ``power`` gave other last bits on an AVX-512 CPU, where it has SIMD loops of its own).
"""
from __future__ import annotations

import math

import numpy as np

from gpugrad.backend.reference.float16 import LOW

GRAIN = 32768  # at::internal::GRAIN_SIZE: a shorter range runs on one thread
VECTOR_BYTES = 32  # AVX2's registers: the width of torch's x86 CPU vector loops for these kernels


def _two_sum(a, b):
    """(s, e): s = a + b rounded, e its rounding error (s + e = a + b exactly; Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    """a = hi + lo with hi of 26 significant bits (Veltkamp), so that products of halves are exact."""
    c = 134217729.0 * a  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_product(a, b):
    """(p, e): p = a * b rounded, e its rounding error (Dekker)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _nearest(r, delta, rest, dtype):
    """r + delta + rest (exactly) rounded to ``dtype``, where r is the value of ``dtype`` nearest to r + delta and
    |rest| is below half a unit in the last place of delta: r is the answer unless r + delta lies halfway to r's
    neighbour (r won by ties-to-even) and ``rest`` points past that midpoint."""
    t = np.dtype(dtype).type
    toward = np.where(delta > 0, t(np.inf), t(-np.inf)).astype(dtype)
    neighbour = np.nextafter(r.astype(dtype), toward).astype(np.float64)
    tie = (delta != 0) & (2 * np.abs(delta) == np.abs(neighbour - r))
    return np.where(tie & (rest * delta > 0), neighbour, r).astype(dtype)


def fused_multiply_add(a, b, c, dtype):
    """a * b + c rounded once to ``dtype`` (float32 or float64), elementwise: C's ``fma``, which NumPy lacks.
    The operands are values of ``dtype``; infinities and NaNs give the unfused result."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    with np.errstate(all="ignore"):
        if np.dtype(dtype) == np.float64:
            uh, ul = _two_product(a, b)  # a * b + c = uh + ul + c = vh + vl + tl, exactly
            th, tl = _two_sum(c, ul)
            vh, vl = _two_sum(uh, th)
            w, we = _two_sum(vl, tl)
            r, delta = _two_sum(vh, w)
            out = _nearest(r, delta, we, dtype)
        else:  # a float32 product is exact in float64
            s, e = _two_sum(a * b, c)
            r = s.astype(dtype).astype(np.float64)
            out = _nearest(r, s - r, e, dtype)
        plain = a * b + c
    return np.where(np.isfinite(out) & np.isfinite(plain), out, plain.astype(dtype))


def _round(values, dtype):
    """float32 values rounded to a low-precision dtype and back: one c10::Half / BFloat16 operation's result."""
    with np.errstate(over="ignore"):  # beyond float16's range: inf, as c10::Half gives
        return np.asarray(values, np.float32).astype(dtype).astype(np.float32)


def _cast(value, d):
    """A Python number as torch's ``Scalar.to<scalar_t>()`` gives it (integers truncated)."""
    return np.asarray(value).astype(d)


def linspace(start, end, steps, dtype):
    """torch.linspace's values as a host array of ``dtype``."""
    d = np.dtype(dtype)
    if steps <= 1:  # torch fills a single element with start
        return np.full(steps, _cast(start, d), d)
    if d.kind == "c":  # complex: NumPy's (torch's complex kernel is not modelled)
        return np.linspace(start, end, steps).astype(d)
    up, down = _halves(steps)
    if d in LOW:
        s, e, n = _round(start, d), _round(end, d), _round(steps - 1, d)
        step = _round(_round(e - s, d) / n, d)
        halves = _round(s + _round(step * _round(up, d), d), d), _round(e - _round(step * _round(down, d), d), d)
    elif d.kind == "f":
        s, e = d.type(start), d.type(end)
        step = (e - s) / d.type(steps - 1)
        halves = fused_multiply_add(step, up, s, d), fused_multiply_add(-step, down, e, d)
    else:  # integers: float64 steps between the ends (as integers), truncated
        s, e = float(_cast(start, d)), float(_cast(end, d))
        step = (e - s) / (steps - 1)
        halves = np.trunc(fused_multiply_add(step, up, s, np.float64)), \
            np.trunc(fused_multiply_add(-step, down, e, np.float64))
    return np.concatenate(halves).astype(d)


def _halves(steps):
    """How many steps each element is from its end of the range: i for the first half (steps // 2 elements), from
    the start; steps - 1 - i for the rest, from the end (torch's linspace and logspace)."""
    return np.arange(steps // 2), steps - 1 - np.arange(steps // 2, steps)


def _shares(n, threads):
    """[begin, end) of each thread's share of n elements in torch's parallel_for (OpenMP: at most one thread per
    GRAIN elements, shares of equal size, the last one shorter)."""
    if n <= GRAIN or threads <= 1:
        return [(0, n)]
    used = min(threads, -(-n // GRAIN))
    size = -(-n // used)
    return [(b, min(n, b + size)) for b in range(0, n, size)]


def arange(start, step, n, dtype, threads=1):
    """torch.arange's n values of a floating ``dtype`` from ``start`` by ``step``, as a host array; ``threads``:
    torch's intra-op thread count, which decides where its vector loops start (above GRAIN elements)."""
    d = np.dtype(dtype)
    acc = np.dtype(np.float32 if d in LOW else np.float64)  # at::acc_type on the CPU
    first, by = acc.type(start), acc.type(step)
    out = fused_multiply_add(by, np.arange(n), first, acc).astype(d)
    width = VECTOR_BYTES // d.itemsize
    lanes = np.arange(width)
    for begin, end in _shares(n, threads):
        starts = np.arange(begin, end - 2 * width + 1, 2 * width)  # each iteration of the loop stores two vectors
        starts = np.concatenate([starts, starts + width])
        if not starts.size:
            continue
        bases = fused_multiply_add(by, starts, first, acc).astype(d).astype(acc)  # each vector's rounded base
        at = starts[:, None] + lanes
        out[at] = fused_multiply_add(by, lanes[None, :], bases[:, None], acc).astype(d)
    return out


def logspace(start, end, steps, base, dtype):
    """torch.logspace's values as a host array of a floating or integer ``dtype``: the exponents in float64 (unfused)
    from the ends in the dtype (their difference rounded in it), libm's pow, rounded to the dtype."""
    d = np.dtype(dtype)
    if steps <= 1:  # torch fills it with base ** start, start not rounded to the dtype
        return _from_float64(np.full(steps, math.pow(base, float(start))), d)
    s, e = _cast(start, d), _cast(end, d)
    # the ends' difference as C++ takes it: in the dtype for floats, in int (no wrap-around) for integers
    step = float(_round(e - s, d) if d in LOW else e - s if d.kind == "f" else int(e) - int(s)) / (steps - 1)
    up, down = _halves(steps)
    exponents = np.concatenate([float(s) + step * up, float(e) - step * down])
    return _from_float64(np.array([math.pow(base, x) for x in exponents.tolist()], np.float64), d)


def _from_float64(values, d):
    """float64 values stored into ``d`` as C++ stores a double: c10::Half and BFloat16 are made from a float."""
    return (values.astype(np.float32) if d in LOW else values).astype(d)
