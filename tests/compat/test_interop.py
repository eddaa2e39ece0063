"""Moving data in and out of tensors as torch users do: NumPy (``numpy()``, ``np.asarray``, ``from_numpy``), DLPack
(``__dlpack__``, ``from_dlpack``) between gpugrad, NumPy, torch and CuPy, Python scalars and lists, pickling.
The compat snippets run with torch and with gpugrad and are compared (tests/compat/harness.py); the tests below them
exchange memory across the libraries (gpugrad <-> torch, gpugrad <-> CuPy on the simulated device)."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import gpugrad
from tests.compat.harness import compat

# --- NumPy ---------------------------------------------------------------------------------------------------------

@compat
def test_numpy_shares_memory(torch):
    t = torch.ones(3)
    a = t.numpy()
    a[0] = 5
    return t


@compat
def test_np_asarray_of_a_tensor(torch):
    a = np.asarray(torch.arange(3.0))
    return type(a).__name__, str(a.dtype), a.tolist()


@compat
def test_np_asarray_with_dtype(torch):
    return str(np.asarray(torch.ones(2), dtype=np.float64).dtype)


@compat
def test_numpy_of_requires_grad_raises(torch):
    return torch.ones(2, requires_grad=True).numpy()


@compat
def test_np_asarray_of_requires_grad_raises(torch):
    return np.asarray(torch.ones(2, requires_grad=True))


@compat
def test_detach_cpu_numpy(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    return (w * 2).detach().cpu().numpy().tolist()


@compat
def test_numpy_force(torch):
    return torch.ones(2, requires_grad=True).numpy(force=True).tolist()


@compat
def test_from_numpy_dtypes(torch):
    return [torch.from_numpy(np.zeros(2, dtype=d)).dtype for d in (np.float16, np.float64, np.int32, np.uint8,
                                                                    np.int8, np.int16, np.bool_, np.complex64)]


@compat
def test_from_numpy_of_a_list_raises(torch):
    return torch.from_numpy([1, 2])


@compat
def test_as_tensor_with_another_dtype_copies(torch):
    a = np.zeros(2)
    t = torch.as_tensor(a, dtype=torch.float32)
    a[0] = 1
    return t


@compat
def test_tensor_times_numpy_scalar(torch):
    return torch.ones(2) * np.float32(2), (torch.ones(2) * np.float64(2)).dtype


# --- Python numbers and lists ----------------------------------------------------------------------------------------

@compat
def test_item_and_python_conversions(torch):
    t = torch.tensor(2.5)
    return t.item(), float(t), int(t), bool(t), torch.tensor(3).item(), torch.tensor([7]).item()


@compat
def test_item_of_many_elements_raises(torch):
    return torch.ones(2).item()


@compat
def test_float_of_many_elements_raises(torch):
    return float(torch.ones(2))


@compat
def test_bool_of_many_elements_raises(torch):
    return bool(torch.ones(2))


@compat
def test_tolist(torch):
    return torch.tensor([[1, 2], [3, 4]]).tolist(), torch.tensor(1.5).tolist()


@compat
def test_tensor_as_an_index(torch):
    xs = [10, 20, 30]
    return xs[torch.tensor(1)], list(range(torch.tensor(3)))


@compat
def test_float_tensor_as_an_index_raises(torch):
    return [1, 2][torch.tensor(1.0)]


@compat
def test_iterating_gives_0d_tensors(torch):
    return list(torch.arange(3))


@compat
def test_len_of_tensor(torch):
    return len(torch.zeros(4, 2))


@compat
def test_len_of_a_0d_tensor_raises(torch):
    return len(torch.tensor(1.0))


# --- DLPack ----------------------------------------------------------------------------------------------------------------

@compat
def test_from_dlpack_of_a_numpy_array_shares_memory(torch):
    a = np.arange(3.0)
    t = torch.from_dlpack(a)
    a[0] = 9
    return t


@compat
def test_np_from_dlpack_of_a_tensor_shares_memory(torch):
    t = torch.zeros(3)
    a = np.from_dlpack(t)
    a[1] = 4
    return t, str(a.dtype)


@compat
def test_dlpack_device_of_a_cpu_tensor(torch):
    return tuple(int(v) for v in torch.ones(1).__dlpack_device__())


@compat
def test_dlpack_export_of_requires_grad_raises(torch):
    return np.from_dlpack(torch.ones(2, requires_grad=True))


@compat
def test_from_dlpack_of_a_tensor_shares_memory(torch):
    t = torch.ones(2)
    u = torch.from_dlpack(t)
    u[0] = 3
    return t


# --- copies and pickles ---------------------------------------------------------------------------------------------------

@compat
def test_pickle_round_trip_of_a_tensor(torch):
    t = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    return pickle.loads(pickle.dumps(t))


@compat
def test_deepcopy_keeps_requires_grad(torch):
    w = torch.ones(2, requires_grad=True)
    c = copy.deepcopy(w)
    return c, c is w


@compat
def test_pickled_dtype_device_and_size_are_equal(torch):
    return (pickle.loads(pickle.dumps(torch.float16)) is torch.float16,
            pickle.loads(pickle.dumps(torch.device("cuda:1"))) == torch.device("cuda:1"),
            pickle.loads(pickle.dumps(torch.zeros(2, 3).shape)))


# --- across libraries (not snippets: each exchanges memory between gpugrad and another library) ---------------------

def test_numpy_takes_gpugrad_dtypes():
    assert np.dtype(gpugrad.float32) == np.float32 and gpugrad.float32 == np.float32 and gpugrad.int64 == np.int64
    assert np.zeros(2, dtype=gpugrad.float16).dtype == np.float16
    assert gpugrad.float32 != gpugrad.float64 and gpugrad.float32 != "float32" and gpugrad.float64 != float
    assert str(gpugrad.tensor([1.0]).dtype) == "gpugrad.float32" and gpugrad.tensor([1]).dtype.kind == "i"


def test_torch_reads_a_gpugrad_tensor_without_copying():
    torch = pytest.importorskip("torch")
    t = gpugrad.arange(4.0)
    u = torch.from_dlpack(t)
    u[0] = 7.0
    assert t.tolist() == [7.0, 1.0, 2.0, 3.0] and u.dtype == torch.float32


def test_gpugrad_reads_a_torch_tensor_without_copying():
    torch = pytest.importorskip("torch")
    u = torch.arange(3, dtype=torch.int32)
    t = gpugrad.from_dlpack(u)
    u[2] = 9
    assert t.tolist() == [0, 1, 9] and t.dtype == gpugrad.int32 and t.device == gpugrad.device("cpu")


def test_from_dlpack_refuses_other_objects():
    with pytest.raises(TypeError, match="from_dlpack"):
        gpugrad.from_dlpack([1, 2])


@pytest.mark.gpu
def test_cuda_tensor_refuses_implicit_numpy():
    t = gpugrad.ones(2, device="cuda")
    with pytest.raises(TypeError, match=r"\.cpu\(\)"):
        np.asarray(t)
    with pytest.raises(TypeError, match=r"\.cpu\(\)"):
        t.numpy()
    assert t.numpy(force=True).tolist() == [1.0, 1.0] and t.cpu().numpy().tolist() == [1.0, 1.0]


@pytest.mark.gpu
def test_cupy_and_gpugrad_share_cuda_memory_through_dlpack():
    xp = gpugrad.ones(1, device="cuda")._backend.xp  # CuPy, or the simulated CuPy
    t = gpugrad.zeros(3, device="cuda")
    assert t.__dlpack_device__() == (2, 0)
    a = xp.from_dlpack(t)
    a[1] = 5.0
    assert t.tolist() == [0.0, 5.0, 0.0]
    b = xp.arange(3, dtype=xp.float64)
    u = gpugrad.from_dlpack(b)
    b[0] = -1.0
    assert u.device == gpugrad.device("cuda:0") and u.dtype == gpugrad.float64 and u.tolist() == [-1.0, 1.0, 2.0]


@pytest.mark.gpu
def test_cuda_device_of_tensors():
    t = gpugrad.ones(2, device="cuda")
    assert t.device == gpugrad.device("cuda", 0) and t.device.index == 0 and t.get_device() == 0 and t.is_cuda
    assert gpugrad.zeros(1, device=gpugrad.device("cuda")).device == gpugrad.device("cuda:0")
    with gpugrad.device("cuda"):
        assert gpugrad.randn(2).device.type == "cuda" and gpugrad.tensor([1.0]).device.type == "cuda"
    g = gpugrad.Generator(device="cuda").manual_seed(0)
    a = gpugrad.rand(3, device="cuda", generator=g)
    g.manual_seed(0)
    assert a.tolist() == gpugrad.rand(3, device="cuda", generator=g).tolist()
    with pytest.raises(RuntimeError, match="device type for generator"):
        gpugrad.rand(3, device="cpu", generator=g)
