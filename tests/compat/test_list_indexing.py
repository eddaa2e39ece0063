"""Indexing with a list of lists as torch 2.13 reads it: a list shorter than 32 that holds a sequence, a tensor, a
slice, None or Ellipsis is a tuple of indices (``t[[[0, 4], [2, 2]]]`` is ``t[[0, 4], [2, 2]]``, two elements, where
NumPy's newer rule reads one (2, 2, 6) index array), with torch's deprecation warning; other lists are one index
array.  Reads and writes alike (tests/compat/harness.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gpugrad
from tests.compat.harness import check

KEYS = {
    "list_of_two_lists": lambda t: [[0, 4], [2, 2]],
    "list_of_one_list": lambda t: [[0, 4]],
    "flat_list": lambda t: [0, 4],
    "list_and_slice": lambda t: [[0, 4], slice(None)],
    "slice_and_list": lambda t: [slice(None), [0, 1]],
    "int_and_slice": lambda t: [0, slice(None)],
    "none_and_int": lambda t: [None, 0],
    "ellipsis_and_int": lambda t: [Ellipsis, 0],
    "int_and_list": lambda t: [1, [0, 2]],
    "nested_lists": lambda t: [[[0, 1]], [[1, 2]]],
    "tuples": lambda t: [(0, 1), (2, 3)],
    "tensors": lambda t: [t.tensor([0, 1]), t.tensor([1, 2])],
    "one_tensor": lambda t: [t.tensor([0, 1])],
    "arrays": lambda t: [np.array([0, 1]), np.array([1, 2])],
    "list_of_a_mask": lambda t: [[True, False, True, False, True]],
    "flat_mask": lambda t: [True, False, True, False, True],
    "too_many_lists": lambda t: [[0, 1], [1, 2], [2, 3]],
    "long_flat_list": lambda t: [0, 1, 2] * 11,
    "long_list_of_pairs": lambda t: [[0, 1]] * 33,  # 32 or more: one index array, as NumPy
}


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
@pytest.mark.parametrize("name", KEYS)
def test_reading_with_a_list_index(name):
    check(lambda t: t.arange(30).reshape(5, 6)[KEYS[name](t)])


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
@pytest.mark.parametrize("name", ["list_of_two_lists", "list_and_slice", "int_and_list", "tensors", "flat_list",
                                  "list_of_a_mask", "nested_lists"])
def test_writing_with_a_list_index(name):
    def write(t):
        x = t.zeros(5, 6)
        x[KEYS[name](t)] = 7.0
        return x
    check(write)


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
def test_gradients_through_a_list_of_lists_index():
    def run(t):
        x = t.arange(30.0).reshape(5, 6).requires_grad_()
        x[[[0, 4], [2, 2]]].sum().backward()
        return x.grad
    check(run)


def test_a_list_read_as_a_tuple_warns_as_torch_does(torch):
    for lib in (torch, gpugrad):
        x = lib.arange(30).reshape(5, 6)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            x[[[0, 4], [2, 2]]]
            x[[0, 4]]  # one index array: no warning
        assert [issubclass(w.category, UserWarning) for w in seen] == [True], lib.__name__
        assert "non-tuple sequence for multidimensional indexing is deprecated" in str(seen[0].message)
