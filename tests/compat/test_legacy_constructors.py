"""torch's legacy constructors: ``torch.Tensor(...)`` (the default float dtype, whatever the data) and the typed
``FloatTensor``, ``LongTensor``, ... (from a size: uninitialized; from data: cast), their ``isinstance`` checks and
errors, against ``torch.tensor``'s inference (tests/compat/harness.py)."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from tests.compat.harness import check, compat


@compat
def test_tensor_of_ints_is_float32_where_tensor_infers_int64(torch):
    return torch.Tensor([1, 2]), torch.tensor([1, 2]), torch.Tensor([[1, 2], [3, 4]]), torch.Tensor([True, False])


@compat
def test_tensor_from_a_size_is_uninitialized_float(torch):
    a, b, c = torch.Tensor(2, 3), torch.Tensor(torch.Size([4])), torch.Tensor(size=(2, 1))
    return a.shape, a.dtype, b.shape, c.shape, torch.Tensor(0).shape


@compat
def test_tensor_of_nothing_is_empty(torch):
    return torch.Tensor(), torch.Tensor([]), torch.Tensor(())


@compat
def test_a_tuple_is_data_not_a_size(torch):
    return torch.Tensor((2, 3))


@compat
def test_tensor_of_numpy_arrays_takes_the_default_dtype(torch):
    return torch.Tensor(np.array([1, 2], np.int64)), torch.Tensor(np.array([1.5, 2.5])), torch.Tensor(np.array(3.0))


@compat
def test_tensor_follows_the_default_dtype(torch):
    torch.set_default_dtype(torch.float64)
    try:
        return torch.Tensor([1, 2]).dtype, torch.Tensor(2).dtype, torch.FloatTensor([1]).dtype
    finally:
        torch.set_default_dtype(torch.float32)


@compat
def test_tensor_of_a_tensor_shares_its_memory(torch):
    x = torch.tensor([1, 2])
    y = torch.Tensor(x)
    y.add_(10)
    return x, y.dtype, x._version


@compat
def test_tensor_of_a_tensor_that_requires_grad_is_a_differentiable_alias(torch):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = torch.Tensor(x)
    (y * 3).sum().backward()
    return y, y.grad_fn.name(), x.grad


@compat
def test_typed_constructors_from_data_cast_it(torch):
    return (torch.FloatTensor([1, 2]), torch.LongTensor([1.7, -2.2]), torch.DoubleTensor([1]),
            torch.BoolTensor([1, 0, 2]), torch.IntTensor([3]), torch.HalfTensor([0.5]), torch.ByteTensor([1, 255, -1]),
            torch.ShortTensor([2]), torch.CharTensor([-3]))


@compat
def test_typed_constructors_from_a_size(torch):
    out = [t(2, 3) for t in (torch.FloatTensor, torch.LongTensor, torch.DoubleTensor, torch.BoolTensor)]
    return [(o.shape, o.dtype) for o in out], torch.LongTensor().shape, torch.FloatTensor(torch.Size([2])).shape


@compat
def test_typed_constructors_of_a_tensor_of_their_dtype_alias_it(torch):
    x = torch.tensor([1.5, 2.5])
    y = torch.FloatTensor(x)
    y.mul_(2)
    return x


@compat
def test_isinstance_with_a_typed_constructor_checks_dtype_and_device(torch):
    f, i = torch.tensor([1.0]), torch.tensor([1])
    return (isinstance(f, torch.FloatTensor), isinstance(i, torch.FloatTensor), isinstance(i, torch.LongTensor),
            isinstance(f.double(), torch.DoubleTensor), isinstance(f, torch.cuda.FloatTensor),
            isinstance(3.0, torch.FloatTensor), type(torch.FloatTensor([1])) is torch.Tensor,
            issubclass(torch.FloatTensor, torch.Tensor), torch.FloatTensor.dtype, torch.LongTensor.dtype)


@pytest.mark.parametrize("call", [
    lambda t: t.Tensor(3.5),
    lambda t: t.Tensor(-1),
    lambda t: t.Tensor(2, -1),
    lambda t: t.Tensor([1, 2], requires_grad=True),
    lambda t: t.Tensor([1, 2], dtype=t.float64),
    lambda t: t.Tensor("ab"),
    lambda t: t.Tensor(2, 3.0),
    lambda t: t.Tensor([[1, 2], [3]]),
    lambda t: t.Tensor(x for x in [1, 2]),
    lambda t: t.FloatTensor(t.tensor([1.0], dtype=t.float64)),
    lambda t: t.LongTensor(t.tensor([1.5])),
], ids=["number", "negative", "negative_second", "requires_grad", "dtype", "string", "float_size", "ragged",
        "generator", "float_of_double", "long_of_float"])
def test_legacy_constructors_refuse_as_torch(call):
    check(call)


def test_tensor_of_complex_data_refuses():
    with pytest.raises(TypeError):
        gpugrad.Tensor([1j])


@pytest.mark.gpu
def test_cuda_typed_constructors_make_cuda_tensors():
    x = gpugrad.cuda.FloatTensor([1, 2])
    assert x.device.type == "cuda" and x.dtype == gpugrad.float32 and x.tolist() == [1.0, 2.0]
    assert isinstance(x, gpugrad.cuda.FloatTensor) and not isinstance(x, gpugrad.FloatTensor)
    assert gpugrad.cuda.LongTensor(3).shape == (3,) and gpugrad.Tensor([1], device="cuda").device.type == "cuda"
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cuda"):
        gpugrad.cuda.FloatTensor([1.0], device="cpu")
