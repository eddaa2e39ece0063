"""Types as torch has them, each run with torch and with gpugrad and compared (tests/compat/harness.py): dtype
objects and their attributes, type promotion of tensors, 0-d tensors and Python numbers (a grid over dtype pairs,
checked against torch.result_type / torch.promote_types), Size, devices, ``.data``, f-string formatting."""
from __future__ import annotations

import itertools

import pytest

from tests.compat.harness import check, compat

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
SCALARS = (True, 3, -2, 2.5, 1e-3)


def _t(torch, name, dim=True):
    d = getattr(torch, name)
    return torch.ones(2, dtype=d) if dim else torch.ones((), dtype=d)


# --- dtype objects -----------------------------------------------------------------------------------------------

@compat
def test_dtype_prints_as_the_library_s(torch):
    return str(torch.float32).split(".")[1], repr(torch.int64).split(".")[1]


@compat
def test_dtype_of_a_float_tensor(torch):
    return torch.tensor([1.0]).dtype


@compat
def test_dtype_aliases(torch):
    return [torch.float is torch.float32, torch.double is torch.float64, torch.long is torch.int64,
            torch.half is torch.float16, torch.int is torch.int32, torch.short is torch.int16,
            torch.cfloat is torch.complex64]


@compat
def test_dtype_attributes(torch):
    return [(d.is_floating_point, d.is_complex, d.is_signed, d.itemsize)
            for d in (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool, torch.complex64)]


@compat
def test_dtype_equality_and_hashing(torch):
    t = torch.zeros(2)
    return t.dtype == torch.float32, t.dtype != torch.float64, {torch.float32: "f"}[t.dtype], t.dtype in (torch.float32,)


@compat
def test_dtype_is_never_equal_to_a_string(torch):
    return torch.float32 == "float32"


@compat
def test_dtype_to_complex_and_real(torch):
    return torch.float64.to_complex(), torch.complex64.to_real()


@compat
def test_is_floating_point_checks(torch):
    x, i = torch.ones(2), torch.ones(2, dtype=torch.long)
    return x.is_floating_point(), i.is_floating_point(), torch.is_floating_point(x), x.is_complex()


@compat
def test_element_size(torch):
    return torch.ones(2, dtype=torch.float16).element_size(), torch.ones(2, dtype=torch.int64).element_size()


@compat
def test_finfo_eps_and_max(torch):
    f = torch.finfo(torch.float32)
    return f.eps, f.max, f.tiny, f.bits, torch.finfo(torch.float16).max, torch.finfo().eps


@compat
def test_iinfo_limits(torch):
    return torch.iinfo(torch.int32).max, torch.iinfo(torch.int8).min, torch.iinfo(torch.uint8).max


@compat
def test_finfo_of_an_int_raises(torch):
    return torch.finfo(torch.int32)


@compat
def test_casting_with_to_and_shortcuts(torch):
    x = torch.tensor([1.7, -2.2])
    return x.to(torch.float64), x.double(), x.long(), x.to(torch.int32), x.to(dtype=torch.float16)


@compat
def test_legacy_type_names(torch):
    return [torch.ones(1, dtype=d).type().split(".")[1] for d in (torch.float32, torch.float64, torch.int64,
                                                                 torch.uint8, torch.bool)]


@compat
def test_type_with_a_dtype_casts(torch):
    return torch.ones(2).type(torch.int32)


@compat
def test_to_another_tensor_takes_its_dtype(torch):
    return torch.tensor([1.5]).to(torch.zeros(1, dtype=torch.float64))


@compat
def test_to_same_dtype_returns_self(torch):
    x = torch.ones(2)
    return x.to(torch.float32) is x, x.to(torch.float32, copy=True) is x


@compat
def test_int_tensor_cannot_require_grad(torch):
    return torch.tensor([1, 2], requires_grad=True)


@compat
def test_requires_grad_on_a_long_tensor(torch):
    return torch.ones(2, dtype=torch.long).requires_grad_()


@compat
def test_set_default_dtype_float64(torch):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return torch.tensor([1.5]).dtype, torch.zeros(2).dtype, (torch.tensor([1]) / 2).dtype, torch.get_default_dtype()
    finally:
        torch.set_default_dtype(old)


@compat
def test_set_default_dtype_refuses_ints(torch):
    return torch.set_default_dtype(torch.int64)


# --- promotion -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b", list(itertools.product(DTYPES, DTYPES)))
def test_promote_types_grid(a, b):
    check(lambda torch: torch.promote_types(getattr(torch, a), getattr(torch, b)))


@pytest.mark.parametrize("a,b", list(itertools.product(DTYPES, DTYPES)))
def test_binary_op_dtype_grid(a, b):
    """A dimensioned tensor with another, and with a 0-d tensor (which only counts when of a higher category)."""
    check(lambda torch: [(_t(torch, a) * _t(torch, b)).dtype, (_t(torch, a) * _t(torch, b, dim=False)).dtype,
                         torch.result_type(_t(torch, a), _t(torch, b, dim=False))])


@pytest.mark.parametrize("a,s", list(itertools.product(DTYPES, SCALARS)))
def test_tensor_with_python_number(a, s):
    check(lambda torch: [(_t(torch, a) + s).dtype, (s * _t(torch, a)).dtype, torch.result_type(_t(torch, a), s)])


@compat
def test_float32_times_a_python_float_stays_float32(torch):
    return torch.tensor([1.0, 2.0]) * 2.5


@compat
def test_int_tensor_times_a_python_float_is_float32(torch):
    return torch.tensor([1, 2]) * 2.5


@compat
def test_int_tensor_plus_int_stays_int64(torch):
    return torch.tensor([1, 2]) + 3


@compat
def test_int32_tensor_plus_int_stays_int32(torch):
    return torch.tensor([1, 2], dtype=torch.int32) + 3


@compat
def test_true_division_of_ints_gives_float32(torch):
    return torch.tensor([1, 2, 3]) / torch.tensor([2, 2, 2]), torch.tensor([3]) / 2, 6 / torch.tensor([4])


@compat
def test_int_tensor_with_float_tensor(torch):
    return torch.tensor([1, 2]) + torch.tensor([0.5, 0.25])


@compat
def test_float32_with_float64(torch):
    return torch.ones(2) + torch.ones(2, dtype=torch.float64)


@compat
def test_float32_with_0d_float64_stays_float32(torch):
    return torch.ones(2) * torch.tensor(3.0, dtype=torch.float64)


@compat
def test_bool_mask_times_float(torch):
    x = torch.tensor([1.0, -2.0, 3.0])
    return (x > 0) * x, (x > 0) + 1, (x > 0).sum()


@compat
def test_float16_with_int64(torch):
    return (torch.ones(2, dtype=torch.float16) + torch.ones(2, dtype=torch.int64)).dtype


@compat
def test_exp_of_an_int_tensor_is_float(torch):
    return torch.exp(torch.tensor([0, 1])), torch.tensor([4, 9]).sqrt()


@compat
def test_int_power(torch):
    return torch.tensor([2, 3]) ** 2, torch.tensor([2, 3]) ** 0.5, 2 ** torch.tensor([1, 2])


@compat
def test_maximum_promotes(torch):
    return torch.maximum(torch.tensor([1, 5]), torch.tensor([2.5, 0.5]))


@compat
def test_where_promotes(torch):
    return torch.where(torch.tensor([True, False]), torch.tensor([1, 2]), torch.tensor([0.5, 0.5]))


@compat
def test_cat_promotes(torch):
    return torch.cat([torch.tensor([1, 2]), torch.tensor([0.5])])


@compat
def test_matmul_refuses_mixed_dtypes(torch):
    return torch.ones(2, 3) @ torch.ones(3, 2, dtype=torch.float64)


@compat
def test_grad_flows_through_a_promoted_op(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    y = (w * torch.tensor([3, 4])).sum()
    y.backward()
    return y, w.grad


@compat
def test_grad_of_a_float32_leaf_used_with_float64_is_float32(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * torch.tensor([3.0, 4.0], dtype=torch.float64)).sum().backward()
    return w.grad


@compat
def test_in_place_add_of_a_float_into_an_int_tensor_raises(torch):
    x = torch.tensor([1, 2])
    x += 0.5
    return x


@compat
def test_in_place_add_of_float64_into_float32_keeps_float32(torch):
    x = torch.ones(2)
    x += torch.ones(2, dtype=torch.float64)
    return x


@compat
def test_can_cast(torch):
    return [torch.can_cast(torch.float64, torch.int32), torch.can_cast(torch.int32, torch.float16),
            torch.can_cast(torch.float32, torch.float16), torch.can_cast(torch.bool, torch.uint8)]


# --- Size ------------------------------------------------------------------------------------------------------------

@compat
def test_shape_is_a_size(torch):
    return torch.zeros(2, 3).shape


@compat
def test_size_method(torch):
    x = torch.zeros(2, 3)
    return x.size(), x.size(1), x.size(-1), x.size(dim=0)


@compat
def test_size_prints_with_its_library(torch):
    return repr(torch.zeros(2, 3).shape).split(".")[1]


@compat
def test_size_numel_and_slicing(torch):
    s = torch.zeros(2, 3, 4).shape
    return s.numel(), s[1:], s[0], s[-1]


@compat
def test_size_equals_tuple_and_concatenates(torch):
    s = torch.zeros(2, 3).shape
    return s == (2, 3), s + (4,), (1,) + s, list(s)


@compat
def test_size_unpacks(torch):
    n, d = torch.zeros(5, 7).shape
    return n * d


@compat
def test_size_constructor(torch):
    return torch.Size([2, 3]), torch.zeros(torch.Size([2, 3])).shape


# --- devices ----------------------------------------------------------------------------------------------------------

@compat
def test_device_of_a_cpu_tensor(torch):
    return torch.zeros(2, device="cpu").device


@compat
def test_device_type_and_index(torch):
    d, c = torch.device("cuda:1"), torch.device("cuda")
    return d.type, d.index, c.type, c.index, str(d), repr(torch.device("cpu"))


@compat
def test_device_from_type_and_index(torch):
    return torch.device("cuda", 2), str(torch.device("cuda", 2))


@compat
def test_device_equality(torch):
    return [torch.device("cpu") == torch.device("cpu"), torch.device("cuda:0") == torch.device("cuda"),
            torch.device("cpu") == "cpu", torch.zeros(1).device.type == "cpu"]


@compat
def test_device_as_dict_key(torch):
    return {torch.device("cpu"): 1}[torch.zeros(1).device]


@compat
def test_bad_device_string(torch):
    return torch.device("gpu")


@compat
def test_bad_device_index(torch):
    return torch.device("cuda:x")


@compat
def test_device_of_tensor_passes_to_creation(torch):
    x = torch.ones(2)
    return torch.zeros(3, device=x.device).device, x.to(x.device) is x


@compat
def test_get_device_and_is_cuda(torch):
    x = torch.ones(1)
    return x.get_device(), x.is_cuda, x.is_cpu


@compat
def test_device_in_f_string(torch):
    return f"{torch.ones(1).device}"


# --- .data ---------------------------------------------------------------------------------------------------------------

@compat
def test_data_is_a_detached_tensor(torch):
    w = torch.ones(3, requires_grad=True)
    return w.data, w.data.requires_grad, type(w.data).__name__


@compat
def test_data_shares_storage(torch):
    w = torch.ones(3, requires_grad=True)
    w.data.mul_(2)
    w.data[0] = 5
    return w


@compat
def test_sgd_step_through_data(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    w.data -= 0.1 * w.grad.data
    return w


@compat
def test_data_assignment(torch):
    w = torch.ones(3, requires_grad=True)
    w.data = torch.zeros(3)
    return w, w.requires_grad


# --- formatting -------------------------------------------------------------------------------------------------------------

@compat
def test_f_string_of_a_0d_loss(torch):
    return f"{torch.tensor(3.14159):.2f}", f"{torch.tensor(2):d}", f"{torch.tensor(0.5):>8.3f}"


@compat
def test_f_string_format_spec_on_a_vector_raises(torch):
    return f"{torch.tensor([1.0, 2.0]):.2f}"


@compat
def test_f_string_without_spec(torch):
    return f"{torch.tensor([1.0, 2.0])}".replace(" ", "")


@compat
def test_item_of_a_loss_in_f_string(torch):
    loss = (torch.tensor([1.0, 2.0], requires_grad=True) ** 2).mean()
    return f"loss {loss.item():.3f}", f"{loss:.3f}"


@compat
def test_repr_shows_non_default_dtype(torch):
    return [repr(t).replace("torch.", "").replace("gpugrad.", "") for t in (torch.tensor([1.0], dtype=torch.float64), torch.tensor([1, 2]))]
