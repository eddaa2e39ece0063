"""Shared checks of gpugrad.func against torch.func: one snippet run with both libraries, results compared by
nesting, shape, dtype and value; errors by type and first sentence."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.func as gf


def both(torch, run):
    """``run(lib, func)`` with gpugrad and gpugrad.func, then with torch and torch.func."""
    return run(gpugrad, gf), run(torch, torch.func)


def assert_same(ours, theirs):
    """Same nesting (tuples, lists, dicts), same shapes, dtypes' names and values."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for k in theirs:
            assert_same(ours[k], theirs[k])
    elif isinstance(theirs, (tuple, list)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same(a, b)
    elif hasattr(theirs, "detach"):
        assert isinstance(ours, gpugrad.Tensor), type(ours)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)
    else:
        assert ours == theirs


def first_sentence(message):
    return message.split("\n")[0].split(". ")[0]


def same_error(torch, call):
    """``call(lib, func)`` raises the same exception type with the same first sentence in both libraries."""
    with pytest.raises(Exception) as theirs:
        call(torch, torch.func)
    with pytest.raises(type(theirs.value)) as ours:
        call(gpugrad, gf)
    assert first_sentence(str(ours.value)) == first_sentence(str(theirs.value))
