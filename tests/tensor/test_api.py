"""The user-facing Tensor API: creation, dtypes, conversion, comparisons, seeding."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad


def test_tensor_dtype_defaults_follow_torch():
    assert gpugrad.tensor(1.5).dtype == np.float32
    assert gpugrad.tensor([1, 2]).dtype == np.int64
    assert gpugrad.tensor([True]).dtype == np.bool_
    assert gpugrad.tensor(np.zeros(2)).dtype == np.float64  # a float64 array keeps its dtype
    assert gpugrad.tensor([1.0], dtype=gpugrad.float64).dtype == np.float64
    with pytest.raises(TypeError, match="cannot make a tensor"):
        gpugrad.tensor([object()])


def test_tensor_copies_its_input():
    a = np.ones(3, np.float32)
    t = gpugrad.tensor(a)
    a[0] = 5
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_factories():
    assert gpugrad.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert gpugrad.ones((2,), dtype=gpugrad.int64).tolist() == [1, 1]
    assert gpugrad.full((2, 2), 7).dtype == np.int64 and gpugrad.full((1,), 7.0).dtype == np.float32
    assert gpugrad.empty(4).shape == (4,)
    assert gpugrad.arange(5).tolist() == [0, 1, 2, 3, 4] and gpugrad.arange(0, 1, 0.25).dtype == np.float32
    x = gpugrad.randn(3, 4, dtype=gpugrad.float64)
    assert gpugrad.zeros_like(x).dtype == np.float64 and gpugrad.ones_like(x).shape == (3, 4)
    r = gpugrad.rand(1000)
    assert 0.0 <= r.min().item() and r.max().item() < 1.0
    assert gpugrad.zeros(2, requires_grad=True).requires_grad


def test_manual_seed_reproduces():
    gpugrad.manual_seed(123)
    a = gpugrad.randn(5).tolist()
    gpugrad.manual_seed(123)
    assert gpugrad.randn(5).tolist() == a
    assert gpugrad.randn(5).tolist() != a


def test_conversions():
    t = gpugrad.tensor([[1.0, 2.0]], requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        t.numpy()
    assert t.detach().numpy().tolist() == [[1.0, 2.0]]
    assert t.sum().item() == 3.0 and float(t.sum()) == 3.0
    with pytest.raises(RuntimeError, match="2 elements cannot be converted"):  # as torch
        t.item()
    with pytest.raises(ValueError, match="one element"):  # float() and int() raise ValueError, as torch
        float(t)
    assert t.to(dtype=np.float64).dtype == np.float64 and t.double().grad_fn.name() == "ToCopyBackward0"
    assert t.long().dtype == np.int64 and not t.long().requires_grad
    assert t.cpu() is t and t.to("cpu") is t
    assert np.asarray(t.detach()).shape == (1, 2)
    assert len(t) == 1 and t.ndim == 2 and t.numel() == 2 and t.size(1) == 2


def test_comparisons_carry_no_gradient():
    x = gpugrad.tensor([1.0, -2.0], requires_grad=True)
    m = x > 0
    assert m.dtype == np.bool_ and not m.requires_grad and m.tolist() == [True, False]
    assert (x == x).tolist() == [True, True] and {x: 1}[x] == 1


def test_numpy_arrays_defer_to_tensors():
    x = gpugrad.tensor([1.0, 2.0], requires_grad=True)
    y = np.array([10.0, 20.0], dtype=np.float32) + x
    assert isinstance(y, gpugrad.Tensor) and y.grad_fn.name() == "AddBackward0"


def test_requires_grad_rules():
    y = gpugrad.tensor([1.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)
    d = y.detach().requires_grad_()
    assert d.is_leaf and d.requires_grad
    y.detach_()
    assert y.grad_fn is None and not y.requires_grad


def test_grad_setter_validates():
    x = gpugrad.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="shape"):
        x.grad = gpugrad.tensor([1.0])
    x.grad = gpugrad.tensor([1.0, 1.0])
    (x * 1).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_bad_shapes_give_clear_errors():
    a, b = gpugrad.randn(3, 4), gpugrad.randn(5, 6)
    with pytest.raises(ValueError, match=r"matmul: shapes \(3, 4\) and \(5, 6\) are not aligned"):
        a @ b
    with pytest.raises(ValueError, match="cannot reshape a tensor of shape"):
        a.reshape(5)
    with pytest.raises(ValueError, match="permutation"):
        a.permute(0, 0)
    with pytest.raises(IndexError, match=r"target ids must lie in \[0, 4\)"):
        gpugrad.nn.functional.cross_entropy(a, gpugrad.tensor([0, 1, 9]))
    with pytest.raises(ValueError, match="reduction"):
        gpugrad.nn.functional.cross_entropy(a, gpugrad.tensor([0, 1, 2]), reduction="avg")


def test_pickle_round_trip():
    import pickle

    x = gpugrad.tensor([[1.0, 2.0]], requires_grad=True)
    y = pickle.loads(pickle.dumps(x))
    assert y.tolist() == x.tolist() and y.requires_grad and y.dtype == x.dtype and y is not x
    p = gpugrad.nn.Parameter(gpugrad.zeros(2))
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, gpugrad.nn.Parameter) and q.requires_grad


def test_as_tensor_and_from_numpy_share_memory():
    a = np.arange(4.0)
    t = gpugrad.from_numpy(a)
    a[0] = 9.0
    assert t.tolist()[0] == 9.0 and str(t.device) == "cpu"
    assert gpugrad.as_tensor(a, dtype=np.float32).dtype == np.float32  # a converted copy
    assert gpugrad.as_tensor(t) is t
    with pytest.raises(TypeError, match="numpy.ndarray"):
        gpugrad.from_numpy([1.0])
