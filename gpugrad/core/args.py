"""torch's argument conventions, parsed once for every frontend: dims and keepdim, var/std's correction, sizes,
and index arguments."""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from gpugrad.core.tensor import TensorBase


def canonical_axis(axis, ndim, op, new=0):
    """``axis`` in [0, n) from torch's range [-n, n), n = ndim + new (new axes, as unsqueeze adds).
    A 0-d tensor takes 0 or -1, as in torch."""
    n = max(ndim + new, 1)
    if not -n <= axis < n:
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions "
                         f"(expected one in [{-n}, {n - 1}])")
    return axis % n


def dims(dim, keepdim, kw, op):
    """torch's (dim, keepdim) as an op's (axis, keepdims): dim an int, a tuple or list, or None / () for all axes;
    NumPy's names axis= and keepdims= are aliases (torch accepts them too)."""
    for k in kw:
        if k not in ("axis", "keepdims"):
            raise TypeError(f"{op}() got an unexpected keyword argument '{k}'")
        if k == "axis" and not (dim is None or dim == ()):
            raise TypeError(f"{op}(): give dim or its alias axis, not both")
    dim = kw.get("axis", dim)
    dim = tuple(dim) if isinstance(dim, list) else dim
    if not (dim is None or isinstance(dim, numbers.Integral) or isinstance(dim, tuple) and all(
            isinstance(d, numbers.Integral) for d in dim)):
        raise TypeError(f"{op}(): dim must be an int or a tuple of ints, got {type(dim).__name__} {dim!r}")
    return {"axis": None if dim == () else dim, "keepdims": bool(kw.get("keepdims", keepdim))}


def moment(dim, unbiased, keepdim, correction, kw, op):
    """var/std's arguments as torch takes them: (dim, unbiased, keepdim), a lone bool meaning unbiased, or
    correction= (1: Bessel's, the default; 0: the population statistic)."""
    if isinstance(dim, bool):  # x.var(False): torch's var(unbiased) overload
        dim, unbiased = None, dim
    if correction is not None and unbiased is not None:
        raise TypeError(f"{op}(): give unbiased or correction, not both")
    return dict(dims(dim, keepdim, kw, op), correction=(1 if unbiased is None or unbiased else 0)
                if correction is None else correction)


def sizes(args):
    """``f(2, 3)`` or ``f((2, 3))``, as torch's size and dims arguments."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


def _basic(k):
    return k is None or k is Ellipsis or isinstance(k, (int, slice))


def basic_key(key):
    keys = key if isinstance(key, tuple) else (key,)
    return all(_basic(k) for k in keys)


def one_mask_key(key):
    """Whether the only advanced index of ``key`` (after index_key) is one boolean mask: torch then fills a single
    value through masked_fill, which casts it, where index_put refuses another dtype."""
    advanced = [k for k in (key if isinstance(key, tuple) else (key,)) if not _basic(k)]
    return len(advanced) == 1 and getattr(advanced[0], "dtype", None) == bool


def check_index_shapes(key):
    """torch's first check of an advanced index (after index_key): its index arrays broadcast together, a boolean
    mask counting as one index of its True count per axis it spans. Checked before the value's dtype, as torch."""
    advanced = [k for k in (key if isinstance(key, tuple) else (key,)) if not _basic(k)]
    if len(advanced) < 2:  # one index (a mask's axes agree): nothing to compare, and no count of a CUDA mask to read
        return
    shapes = []
    for k in advanced:
        k = k if hasattr(k, "dtype") else np.asarray(k)  # a sequence inside a tuple key: torch reads it as an index
        shapes += [(int(k.sum()),)] * k.ndim if k.dtype == bool else [k.shape]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        listed = ", ".join(str(list(shape)) for shape in shapes)
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {listed}") \
            from None


def index_array(idx, like, op):
    """An index argument (a Tensor, list or array) as an array of ``like``'s backend."""
    if isinstance(idx, TensorBase):
        if idx._backend is not like._backend:
            raise RuntimeError(f"{op}: index is on {idx.device} but the tensor is on {like.device}; "
                               "move it with .to(device)")
        return idx._data
    array = like._backend.asarray(idx)
    return array.astype(np.int64) if array.size == 0 and array.dtype.kind in "fV" else array  # x[[]]


def _list_as_tuple(key):
    """Whether torch reads the list ``key`` as a tuple of indices (x[[[0, 4], [2, 2]]] is x[[0, 4], [2, 2]]) rather
    than as one index array: NumPy's old rule, which torch 2.x keeps (python_variable_indexing.cpp,
    treatSequenceAsTuple): a list shorter than 32 holding a sequence, a tensor, a slice, Ellipsis or None."""
    return len(key) < 32 and any(isinstance(k, (list, tuple, range, np.ndarray, TensorBase, slice)) or k is None
                                 or k is Ellipsis for k in key)


def index_key(key, like):
    """Tensor and list indices become arrays of the tensor's backend; the rest passes through.  A list that holds
    sequences, slices, None or Ellipsis is read as a tuple, as torch reads it (with torch's deprecation warning)."""
    if type(key) is list and _list_as_tuple(key):
        warnings.warn("Using a non-tuple sequence for multidimensional indexing is deprecated; use x[tuple(seq)] "
                      "instead of x[seq]: gpugrad, as torch 2.x, reads the list as a tuple of indices, where NumPy and "
                      "future torch read it as one index array", UserWarning, stacklevel=3)
        key = tuple(key)
    keys = key if isinstance(key, tuple) else (key,)
    out = tuple(index_array(k, like, "index") if isinstance(k, (TensorBase, list, np.ndarray)) else
                int(k) if isinstance(k, np.integer) else k for k in keys)
    return out if isinstance(key, tuple) else out[0]


def with_dtype(t, dtype):
    """``dtype=`` of a reduction or scan: the input cast first (differentiably), as torch."""
    return t if dtype is None else t.to(dtype=dtype)
