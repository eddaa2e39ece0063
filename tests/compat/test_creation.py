"""Creating tensors as torch users do, each run with torch and with gpugrad and compared (tests/compat/harness.py):
``tensor`` with torch's dtype inference, the factories and their ``*_like`` and ``new_*`` forms, ranges, random
draws with generators and seeds (values differ between the libraries' generators: the snippets compare shapes,
dtypes, ranges and reproducibility), and the errors torch raises for bad sizes."""
from __future__ import annotations

import numpy as np

from tests.compat.harness import compat

# --- tensor(): dtype inference -------------------------------------------------------------------------------------

@compat
def test_tensor_of_floats_is_float32(torch):
    return torch.tensor([[1.0, 2.0], [3.0, 4.0]])


@compat
def test_tensor_of_ints_is_int64(torch):
    return torch.tensor([1, 2, 3])


@compat
def test_tensor_of_bools_is_bool(torch):
    return torch.tensor([True, False])


@compat
def test_tensor_mixing_ints_and_floats_is_float32(torch):
    return torch.tensor([1, 2.5])


@compat
def test_tensor_mixing_bools_and_ints_is_int64(torch):
    return torch.tensor([True, 2])


@compat
def test_tensor_of_a_python_scalar_is_0d(torch):
    return torch.tensor(3.5), torch.tensor(3), torch.tensor(True)


@compat
def test_tensor_of_complex_is_complex64(torch):
    return torch.tensor([1 + 2j]).dtype


@compat
def test_empty_list_is_float32(torch):
    return torch.tensor([]), torch.tensor([[]]).shape


@compat
def test_tensor_with_explicit_dtype(torch):
    return torch.tensor([1, 2], dtype=torch.float64), torch.tensor([1.7, -1.7], dtype=torch.int64)


@compat
def test_tensor_from_numpy_keeps_its_dtype(torch):
    return torch.tensor(np.array([1.0, 2.0])), torch.tensor(np.arange(3, dtype=np.int32))


@compat
def test_tensor_of_numpy_scalars(torch):
    return torch.tensor([np.float32(1.5)]).dtype, torch.tensor(np.float64(2.0)).dtype


@compat
def test_tensor_of_0d_tensors(torch):
    return torch.tensor([torch.tensor(1.0), torch.tensor(2.0)])


@compat
def test_tensor_requires_grad(torch):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    return x, x.is_leaf, x.grad_fn is None


@compat
def test_ragged_list_raises(torch):
    return torch.tensor([[1, 2], [3]])


@compat
def test_tensor_of_strings_raises(torch):
    return torch.tensor([1, "a"])


@compat
def test_tensor_of_a_string_raises(torch):
    return torch.tensor("a")


@compat
def test_tensor_of_a_too_large_int_raises(torch):
    return torch.tensor([2 ** 64])


@compat
def test_as_tensor_shares_numpy_memory(torch):
    a = np.zeros(3, dtype=np.float32)
    t = torch.as_tensor(a)
    a[0] = 7
    return t


@compat
def test_from_numpy_shares_memory(torch):
    a = np.arange(4.0)
    t = torch.from_numpy(a)
    t[1] = 10
    return float(a[1]), t.dtype


# --- factories ---------------------------------------------------------------------------------------------------------

@compat
def test_zeros_ones_with_varargs_and_tuple(torch):
    return torch.zeros(2, 3), torch.ones((2, 3)), torch.zeros([4]), torch.ones(torch.Size([1, 2]))


@compat
def test_zeros_with_size_keyword(torch):
    return torch.zeros(size=(2, 3))


@compat
def test_zeros_with_dtype(torch):
    return torch.zeros(2, dtype=torch.int32), torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.float16)


@compat
def test_zeros_0d(torch):
    return torch.zeros(()), torch.ones([])


@compat
def test_zero_sized(torch):
    return torch.zeros(0, 3), torch.ones(2, 0).sum(1)


@compat
def test_negative_size_raises(torch):
    return torch.zeros(-1)


@compat
def test_float_size_raises(torch):
    return torch.zeros(2.5)


@compat
def test_empty_shape_and_dtype(torch):
    e = torch.empty(2, 3, dtype=torch.float64)
    return e.shape, e.dtype


@compat
def test_full_infers_dtype_from_the_value(torch):
    return torch.full((2,), 1.5), torch.full((2,), 7), torch.full((2,), True), torch.full((2, 2), 0.0).dtype


@compat
def test_full_with_dtype(torch):
    return torch.full((3,), 2, dtype=torch.float32)


@compat
def test_eye(torch):
    return torch.eye(3), torch.eye(2, 3), torch.eye(2, dtype=torch.int64)


@compat
def test_arange_forms(torch):
    return torch.arange(5), torch.arange(1, 4), torch.arange(0, 1, 0.25), torch.arange(5.0), torch.arange(10, 0, -3)


@compat
def test_arange_with_dtype(torch):
    return torch.arange(4, dtype=torch.float32), torch.arange(0, 10, 2.5, dtype=torch.float64)


@compat
def test_arange_step_zero_raises(torch):
    return torch.arange(0, 10, 0)


@compat
def test_arange_wrong_direction_raises(torch):
    return torch.arange(10, 0)


@compat
def test_arange_of_a_tensor_bound(torch):
    return torch.arange(torch.tensor(3))


@compat
def test_linspace(torch):
    return torch.linspace(0, 1, 5), torch.linspace(-1, 1, steps=3), torch.linspace(0, 10, 5, dtype=torch.int64)


@compat
def test_linspace_edge_steps(torch):
    return torch.linspace(0, 1, 1), torch.linspace(3, 3, 0)


@compat
def test_linspace_negative_steps_raises(torch):
    return torch.linspace(0, 1, -1)


@compat
def test_logspace(torch):
    return torch.logspace(0, 2, 3), torch.logspace(0, 3, 4, base=2)


@compat
def test_like_functions_keep_shape_and_dtype(torch):
    x = torch.ones(2, 3, dtype=torch.float64)
    return torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 7), torch.empty_like(x).shape


@compat
def test_like_functions_with_dtype(torch):
    x = torch.ones(2)
    return torch.zeros_like(x, dtype=torch.int64), torch.full_like(torch.ones(2, dtype=torch.long), 2.7)


@compat
def test_like_with_requires_grad(torch):
    return torch.zeros_like(torch.ones(2), requires_grad=True).requires_grad


@compat
def test_rand_like_and_randn_like(torch):
    x = torch.ones(3, 4, dtype=torch.float64)
    r, n = torch.rand_like(x), torch.randn_like(x)
    return r.shape, r.dtype, n.shape, n.dtype, bool(((r >= 0) & (r < 1)).all())


@compat
def test_rand_like_of_an_int_tensor_raises(torch):
    return torch.rand_like(torch.ones(2, dtype=torch.long))


@compat
def test_randint_like(torch):
    r = torch.randint_like(torch.ones(5), 10)
    return r.dtype, r.shape, bool(((r >= 0) & (r < 10)).all())


@compat
def test_new_factories_take_the_tensor_s_dtype(torch):
    x = torch.ones(2, dtype=torch.float64)
    return x.new_zeros(3), x.new_ones((2, 2)), x.new_full((2,), 3), x.new_empty(4).shape, x.new_tensor([1, 2])


# --- random --------------------------------------------------------------------------------------------------------------------

@compat
def test_rand_range_shape_and_dtype(torch):
    r = torch.rand(1000)
    return r.shape, r.dtype, bool(r.min() >= 0), bool(r.max() < 1)


@compat
def test_randn_statistics(torch):
    torch.manual_seed(0)
    x = torch.randn(100_000, dtype=torch.float64)
    return round(x.mean().item(), 1), round(x.std().item(), 1)


@compat
def test_rand_with_dtype(torch):
    return torch.rand(2, dtype=torch.float64).dtype, torch.rand(2, 2, dtype=torch.float16).dtype


@compat
def test_rand_of_an_int_dtype_raises(torch):
    return torch.rand(2, dtype=torch.int64)


@compat
def test_manual_seed_reproduces_draws(torch):
    torch.manual_seed(42)
    a = torch.randn(5)
    torch.manual_seed(42)
    return torch.equal(a, torch.randn(5)) if hasattr(torch, "equal") else bool((a == torch.randn(5)).all())


@compat
def test_manual_seed_returns_the_default_generator(torch):
    g = torch.manual_seed(3)
    return type(g).__name__, g.initial_seed(), torch.initial_seed(), g is torch.default_generator


@compat
def test_generator_manual_seed_chains(torch):
    g = torch.Generator().manual_seed(7)
    a = torch.rand(4, generator=g)
    g.manual_seed(7)
    return bool((a == torch.rand(4, generator=g)).all()), g.initial_seed(), g.device


@compat
def test_generators_are_independent_of_the_global_seed(torch):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, generator=g)
    torch.manual_seed(99)
    torch.randn(10)
    g.manual_seed(1)
    return bool((a == torch.randn(3, generator=g)).all())


@compat
def test_generator_state_round_trip(torch):
    g = torch.Generator().manual_seed(5)
    state = g.get_state()
    a = torch.rand(3, generator=g)
    g.set_state(state)
    return state.dtype, bool((a == torch.rand(3, generator=g)).all())


@compat
def test_global_rng_state_round_trip(torch):
    state = torch.get_rng_state()
    a = torch.rand(3)
    torch.set_rng_state(state)
    return bool((a == torch.rand(3)).all())


@compat
def test_negative_seed_wraps(torch):
    return torch.Generator().manual_seed(-1).initial_seed()


@compat
def test_float_seed_raises(torch):
    return torch.Generator().manual_seed(1.5)


@compat
def test_randint_forms(torch):
    a, b = torch.randint(10, (3,)), torch.randint(5, 8, (2, 2))
    return a.shape, a.dtype, b.shape, bool(((b >= 5) & (b < 8)).all()), torch.randint(3, (2,), dtype=torch.float32).dtype


@compat
def test_randint_with_generator(torch):
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 100, (5,), generator=g)
    g.manual_seed(0)
    return bool((a == torch.randint(0, 100, (5,), generator=g)).all())


@compat
def test_randint_empty_range_raises(torch):
    return torch.randint(5, 2, (3,))


@compat
def test_randperm_is_a_permutation(torch):
    p = torch.randperm(10)
    return p.dtype, sorted(p.tolist()), torch.randperm(4, dtype=torch.int32).dtype


@compat
def test_randperm_with_generator_reproduces(torch):
    g = torch.Generator().manual_seed(3)
    a = torch.randperm(20, generator=g)
    g.manual_seed(3)
    return bool((a == torch.randperm(20, generator=g)).all())


@compat
def test_randperm_negative_raises(torch):
    return torch.randperm(-1)


@compat
def test_shuffle_with_randperm_indexing(torch):
    x = torch.arange(10.0)
    return sorted(x[torch.randperm(10)].tolist())


@compat
def test_normal_with_numbers_and_tensors(torch):
    a = torch.normal(0.0, 1.0, size=(3, 2))
    b = torch.normal(torch.zeros(4), 2.0)
    return a.shape, a.dtype, b.shape, b.dtype


@compat
def test_normal_gives_a_zero_gradient_to_mean_and_std(torch):
    mean, std = torch.zeros(3, requires_grad=True), torch.ones(3, requires_grad=True)
    y = torch.normal(mean, std)
    y.sum().backward()
    return y.requires_grad, mean.grad, std.grad


@compat
def test_in_place_normal_and_uniform(torch):
    w = torch.empty(1000)
    w.normal_(0.0, 0.01)
    u = torch.empty(1000).uniform_(-2, 2)
    return bool(w.abs().max() < 0.1), bool(u.min() >= -2), bool(u.max() <= 2), w.dtype


@compat
def test_in_place_random_with_generator(torch):
    g = torch.Generator().manual_seed(4)
    a = torch.empty(3).uniform_(generator=g)
    g.manual_seed(4)
    return bool((a == torch.empty(3).uniform_(generator=g)).all())


@compat
def test_default_device_is_cpu_and_settable(torch):
    old = torch.get_default_device()
    torch.set_default_device("cpu")
    try:
        return torch.get_default_device(), torch.zeros(1).device
    finally:
        torch.set_default_device(old)


@compat
def test_device_context_manager(torch):
    with torch.device("cpu"):
        return torch.ones(2).device
