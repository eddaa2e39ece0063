"""The compatibility harness: one snippet, run once with ``torch`` and once with ``gpugrad`` as its argument, and the
two results compared: values, dtypes, shapes, returned types (named tuples, Size, Tensor, Python numbers) and, when
the snippet raises, the exception type.

    @compat
    def test_sum_with_dim_and_keepdim(torch):
        return torch.arange(6.0).reshape(2, 3).sum(dim=1, keepdim=True)

A snippet returns anything built of Tensors, numbers, strings, None, dtypes, devices and (named) tuples/lists/dicts
of those. ``compat`` makes it a test; torch missing skips it with a reason. Tolerances are per dtype.
``check_raises_as_torch`` is for errors whose wording matters: the type, and torch's first sentence first.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import gpugrad

TOL = {"float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2), "float32": (1e-5, 1e-6), "float64": (1e-10, 1e-12)}


def _torch():
    return pytest.importorskip("torch", reason="the compatibility suite compares against PyTorch: pip install torch")


def _kind(x, lib):
    """What a value is, in terms both libraries share."""
    if isinstance(x, lib.Tensor):
        return "Tensor"
    if isinstance(x, BaseException):
        return "exception"
    if x is None or isinstance(x, (bool, int, float, complex, str)):
        return type(x).__name__
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return "namedtuple"
    return type(x).__name__


def _dtype_name(d):
    return str(d).rsplit(".", 1)[-1]


def compare(ours, theirs, torch, path="result"):
    """Assert that gpugrad's result ``ours`` matches torch's ``theirs``."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, gpugrad.Tensor), f"{path}: torch gives a Tensor, gpugrad a {type(ours).__name__}"
        assert tuple(ours.shape) == tuple(theirs.shape), f"{path}: shape {tuple(ours.shape)} != {tuple(theirs.shape)}"
        assert _dtype_name(ours.dtype) == _dtype_name(theirs.dtype), \
            f"{path}: dtype {ours.dtype} != {theirs.dtype}"
        assert ours.requires_grad == theirs.requires_grad, f"{path}: requires_grad {ours.requires_grad} != " \
                                                          f"{theirs.requires_grad}"
        want = theirs.detach().cpu().numpy(force=True) if theirs.dtype != torch.bfloat16 else \
            theirs.detach().float().numpy()
        got = ours.detach().cpu().numpy()
        if want.dtype.kind in "fc":
            rtol, atol = TOL.get(_dtype_name(theirs.dtype), (1e-6, 1e-7))
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=path)
        else:
            np.testing.assert_array_equal(got, want, err_msg=path)
        return
    if isinstance(theirs, torch.Size):
        assert isinstance(ours, gpugrad.Size), f"{path}: torch gives a Size, gpugrad a {type(ours).__name__}"
        assert tuple(ours) == tuple(theirs), f"{path}: {tuple(ours)} != {tuple(theirs)}"
        return
    if isinstance(theirs, torch.dtype):
        assert str(ours).replace("gpugrad.", "torch.") == str(theirs), f"{path}: dtype {ours} != {theirs}"
        return
    if isinstance(theirs, torch.device):
        assert (ours.type, ours.index) == (theirs.type, theirs.index), f"{path}: device {ours} != {theirs}"
        return
    assert _kind(ours, gpugrad) == _kind(theirs, torch), \
        f"{path}: torch gives {_kind(theirs, torch)} ({theirs!r}), gpugrad {_kind(ours, gpugrad)} ({ours!r})"
    if isinstance(theirs, tuple) and hasattr(theirs, "_fields"):
        assert tuple(ours._fields) == tuple(theirs._fields), f"{path}: fields {ours._fields} != {theirs._fields}"
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs), f"{path}: length {len(ours)} != {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            compare(a, b, torch, f"{path}[{i}]")
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), f"{path}: keys {list(ours)} != {list(theirs)}"
        for k in theirs:
            compare(ours[k], theirs[k], torch, f"{path}[{k!r}]")
    elif isinstance(theirs, float):
        assert math.isclose(ours, theirs, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(ours) and math.isnan(theirs)), \
            f"{path}: {ours} != {theirs}"
    else:
        assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


def run(snippet, lib):
    try:
        return snippet(lib)
    except Exception as e:  # noqa: BLE001 - the exception is the result to compare
        return e


def check(snippet):
    torch = _torch()
    theirs, ours = run(snippet, torch), run(snippet, gpugrad)
    if isinstance(theirs, Exception) or isinstance(ours, Exception):
        if not isinstance(theirs, Exception):
            raise AssertionError(f"gpugrad raised where torch did not: {ours!r}") from ours
        if not isinstance(ours, Exception):
            raise AssertionError(f"torch raised {type(theirs).__name__}: {theirs} but gpugrad returned {ours!r}")
        assert isinstance(ours, type(theirs)), \
            f"error types differ: torch {type(theirs).__name__} ({theirs}), gpugrad {type(ours).__name__} ({ours})"
        return
    compare(ours, theirs, torch)


def first_sentence(message):
    """A message up to its first ". " (all of it when it has none), as torch's tests match it."""
    head, dot, _ = message.partition(". ")
    return head + dot.strip()


def check_raises_as_torch(snippet):
    """``snippet`` raises with torch and with gpugrad: the same exception type, and gpugrad's message starts with
    torch's first sentence (``torch.`` read as ``gpugrad.``); gpugrad may add its detail after it."""
    torch = _torch()
    theirs, ours = run(snippet, torch), run(snippet, gpugrad)
    assert isinstance(theirs, Exception), f"torch did not raise: it returned {theirs!r}"
    assert isinstance(ours, Exception), f"gpugrad did not raise: it returned {ours!r} (torch: {theirs})"
    assert isinstance(ours, type(theirs)), \
        f"error types differ: torch {type(theirs).__name__} ({theirs}), gpugrad {type(ours).__name__} ({ours})"
    want = first_sentence(str(theirs)).replace("torch.", "gpugrad.")
    assert str(ours).startswith(want), f"gpugrad's message does not start with torch's first sentence:\n  torch:   " \
                                       f"{theirs}\n  gpugrad: {ours}"


def compat(snippet):
    """A snippet ``test_<habit>(torch)`` as a test of its own."""
    @functools.wraps(snippet)
    def test():
        check(snippet)

    del test.__wrapped__  # pytest would otherwise read the snippet's `torch` argument as a fixture
    return test
