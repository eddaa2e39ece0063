"""Sampling and counting as torch users call them: ``multinomial``, ``bernoulli``/``bernoulli_``, ``bincount``,
``histc``, ``histogram`` and ``F.one_hot``, each run with torch and with gpugrad (tests/compat/harness.py).

Random draws differ between the libraries' generators, so the random snippets return what does not depend on the
stream (shapes, dtypes, which values can occur, errors); tests/tensor/test_sampling_statistics.py checks the
distributions."""
from __future__ import annotations

import pytest

from tests.compat.harness import check, compat

P = [0.1, 0.2, 0.3, 0.4]


# --- multinomial ---------------------------------------------------------------------------------------------------

@compat
def test_multinomial_of_a_vector_gives_int64_indices(torch):
    out = torch.multinomial(torch.tensor(P), 3)
    return out.dtype, out.shape, sorted(set(out.tolist())) == sorted(out.tolist()), bool((out < 4).all())


@compat
def test_multinomial_of_rows_with_replacement_and_a_generator(torch):
    g = torch.Generator().manual_seed(5)
    out = torch.multinomial(torch.tensor([P, P[::-1]]), num_samples=10, replacement=True, generator=g)
    return out.dtype, out.shape, bool(((out >= 0) & (out < 4)).all())


@compat
def test_multinomial_never_draws_a_zero_weight_with_replacement(torch):
    out = torch.tensor([[0.0, 1.0, 0.0, 2.0]] * 3).multinomial(50, True)
    return set(out.flatten().tolist()) <= {1, 3}


@compat
def test_multinomial_without_replacement_draws_zero_weights_last(torch):
    out = torch.multinomial(torch.tensor([0.0, 1.0, 0.0]), 2)
    return out[0], out.shape


@compat
def test_multinomial_of_every_category_is_a_permutation(torch):
    return torch.multinomial(torch.tensor([P] * 5), 4).sort(1).values


@compat
def test_multinomial_of_float64_weights_and_unnormalized_weights(torch):
    out = torch.multinomial(torch.tensor([3.0, 0.0, 7.0], dtype=torch.float64), 6, True)
    return out.dtype, set(out.tolist()) <= {0, 2}


@compat
def test_multinomial_of_no_rows(torch):
    return torch.multinomial(torch.ones(0, 3), 2)


@pytest.mark.parametrize("call", [
    lambda t: t.multinomial(t.tensor(P), 5),  # more than there are without replacement
    lambda t: t.multinomial(t.tensor(P), 0),
    lambda t: t.multinomial(t.tensor(P), -1, True),
    lambda t: t.multinomial(t.tensor([0.1, -0.2, 0.7]), 1),
    lambda t: t.multinomial(t.tensor([0.1, float("inf"), 0.7]), 1),
    lambda t: t.multinomial(t.tensor([0.1, float("nan"), 0.7]), 1, True),
    lambda t: t.multinomial(t.tensor([[0.0, 0.0], [1.0, 1.0]]), 1),  # a row summing to 0
    lambda t: t.multinomial(t.ones(2, 2, 2), 1),
    lambda t: t.multinomial(t.tensor(1.0), 1),
    lambda t: t.multinomial(t.tensor([1, 2]), 1),
], ids=["too_many", "zero", "negative_count", "negative", "inf", "nan", "zero_sum", "3d", "0d", "int"])
def test_multinomial_refuses_as_torch(call):
    check(call)


def test_multinomial_error_messages_are_torchs(torch):
    import gpugrad
    for t in (torch, gpugrad):
        with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
            t.multinomial(t.tensor([0.1, -0.2]), 1)
        with pytest.raises(RuntimeError, match=r"invalid multinomial distribution \(sum of probabilities <= 0\)"):
            t.multinomial(t.tensor([0.0, 0.0]), 1)
        with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size"):
            t.multinomial(t.tensor([0.5, 0.5]), 3)
        with pytest.raises(RuntimeError, match="multinomial only supports floating-point dtypes for input, got: Long"):
            t.multinomial(t.tensor([1, 2]), 1)


# --- bernoulli -----------------------------------------------------------------------------------------------------

@compat
def test_bernoulli_of_certain_probabilities(torch):
    return torch.bernoulli(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))


@compat
def test_bernoulli_keeps_the_dtype(torch):
    g = torch.Generator().manual_seed(1)
    out = torch.bernoulli(torch.full((3, 4), 0.5, dtype=torch.float64), generator=g)
    return out.dtype, out.shape, bool(((out == 0) | (out == 1)).all())


@compat
def test_bernoulli_with_a_number_p(torch):
    return torch.bernoulli(torch.zeros(5), 1.0), torch.bernoulli(torch.ones(2, 2), 0.0)


@compat
def test_tensor_bernoulli_method(torch):
    return torch.tensor([1.0, 0.0, 1.0]).bernoulli(), torch.ones(3).bernoulli(0.0)


@compat
def test_bernoulli_in_place_with_a_number_and_a_tensor(torch):
    a = torch.empty(2, 3).bernoulli_(1.0)
    b = torch.zeros(2, 3, dtype=torch.int64).bernoulli_(0.0)
    c = torch.empty(2, 3).bernoulli_(torch.tensor([0.0, 1.0, 1.0]))
    return a, b, c


@compat
def test_bernoulli_of_a_tensor_that_requires_grad_records_a_node(torch):
    y = torch.bernoulli(torch.tensor([0.0, 1.0], requires_grad=True))
    return y, y.grad_fn.name()


@pytest.mark.parametrize("call", [
    lambda t: t.bernoulli(t.tensor([1.5])),
    lambda t: t.bernoulli(t.tensor([float("nan")])),
    lambda t: t.bernoulli(t.tensor([1, 0])),
    lambda t: t.zeros(3).bernoulli_(1.5),
    lambda t: t.zeros(3).bernoulli_(t.tensor([0.5, -0.1, 0.5])),
    lambda t: t.zeros(2, requires_grad=True).bernoulli_(0.5),
], ids=["above_one", "nan", "int", "in_place_above_one", "in_place_tensor_negative", "leaf"])
def test_bernoulli_refuses_as_torch(call):
    check(call)


# --- bincount, histc, histogram ------------------------------------------------------------------------------------

@compat
def test_bincount(torch):
    x = torch.tensor([0, 1, 1, 3, 1])
    return torch.bincount(x), x.bincount(minlength=7), torch.bincount(x[:0]), torch.bincount(x[:0], minlength=2)


@compat
def test_bincount_weights_and_their_dtypes(torch):
    x = torch.tensor([0, 1, 1, 3])
    return (torch.bincount(x, weights=torch.tensor([0.5, 1.0, 2.0, 3.0])),
            torch.bincount(x, torch.tensor([0.5, 1.0, 2.0, 3.0], dtype=torch.float64)),
            torch.bincount(x, torch.tensor([1, 2, 3, 4]), minlength=6),
            torch.bincount(x.int()), torch.bincount(x.to(torch.uint8)),
            torch.bincount(x[:0], x[:0].double(), minlength=3))  # nothing to count: int64 zeros, weights or not


@pytest.mark.parametrize("call", [
    lambda t: t.bincount(t.tensor([0, -1])),
    lambda t: t.bincount(t.tensor([[0, 1]])),
    lambda t: t.bincount(t.tensor([0.0, 1.0])),
    lambda t: t.bincount(t.tensor([True])),
    lambda t: t.bincount(t.tensor([0]), minlength=-1),
    lambda t: t.bincount(t.tensor([0, 1]), weights=t.tensor([1.0])),
], ids=["negative", "2d", "float", "bool", "minlength", "weights"])
def test_bincount_refuses_as_torch(call):
    check(call)


@compat
def test_histc(torch):
    x = torch.tensor([1.0, 2.0, 1.0, 4.0, -0.5, 3.0])
    return (torch.histc(x, bins=4, min=0, max=3), x.histc(), torch.histc(x, 3), torch.histc(x[:2] * 0 + 1, 3),
            torch.histc(x[:0], 2), torch.histc(x.double(), 5, min=-1, max=4))


@compat
def test_histc_edges_and_bins_near_them(torch):
    x = torch.tensor([i / 100 for i in range(-100, 100)])  # many values at or next to a bin edge
    return torch.histc(x, bins=7, min=-0.7, max=0.7), torch.histc(x, bins=10, min=-1, max=1)


@pytest.mark.parametrize("call", [
    lambda t: t.histc(t.tensor([1, 2]), 3),
    lambda t: t.histc(t.tensor([1.0]), bins=3, min=3, max=1),
    lambda t: t.histc(t.tensor([1.0]), bins=0),
    lambda t: t.histc(t.tensor([1.0, float("nan")]), bins=2),
    lambda t: t.histc(t.tensor([1.0, float("inf")]), bins=2),
], ids=["int", "min_above_max", "no_bins", "nan", "inf"])
def test_histc_refuses_as_torch(call):
    check(call)


@compat
def test_histogram_returns_counts_and_edges(torch):
    x = torch.tensor([1.0, 2.0, 1.0, 4.0])
    out = torch.histogram(x, bins=4, range=(0.0, 3.0))
    return out, type(out).__name__, out.hist, out.bin_edges


@compat
def test_histogram_of_the_data_range_and_of_a_constant(torch):
    x = torch.tensor([[1.0, 2.0], [1.0, 4.5]])
    return torch.histogram(x), x.histogram(3), torch.histogram(torch.ones(3), 2), torch.histogram(torch.ones(0), 2)


@compat
def test_histogram_with_edges_weights_and_density(torch):
    x = torch.tensor([1.0, 2.0, 1.0, 4.0, 2.5], dtype=torch.float64)
    edges = torch.tensor([0.0, 1.0, 2.5, 4.0], dtype=torch.float64)
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5], dtype=torch.float64)
    return (torch.histogram(x, edges), torch.histogram(x, bins=2, weight=w, density=True),
            torch.histogram(x, edges, weight=w), torch.histogram(x, 3, density=True))


@compat
def test_histogram_of_values_on_edges(torch):
    x = torch.tensor([i / 100 for i in range(101)])
    return torch.histogram(x, bins=10), torch.histogram(x, bins=30, range=(0.1, 0.9))


@pytest.mark.parametrize("call", [
    lambda t: t.histogram(t.tensor([1, 2]), bins=2),
    lambda t: t.histogram(t.tensor([1.0]), bins=0),
    lambda t: t.histogram(t.tensor([1.0]), bins=2, range=(3.0, 1.0)),
    lambda t: t.histogram(t.tensor([1.0, float("nan")]), bins=2),
], ids=["int", "no_bins", "range", "nan"])
def test_histogram_refuses_as_torch(call):
    check(call)


# --- one_hot -------------------------------------------------------------------------------------------------------

@compat
def test_one_hot(torch):
    F = torch.nn.functional
    return (F.one_hot(torch.tensor([0, 2, 1])), F.one_hot(torch.tensor([[0, 2]]), num_classes=4),
            F.one_hot(torch.tensor(2), 3), F.one_hot(torch.tensor([], dtype=torch.int64), 3))


@compat
def test_one_hot_as_float_inputs_to_a_matmul(torch):
    F = torch.nn.functional
    xenc = F.one_hot(torch.tensor([1, 0, 2]), num_classes=3).float()
    return xenc @ torch.arange(9.0).reshape(3, 3)


@pytest.mark.parametrize("call", [
    lambda t: t.nn.functional.one_hot(t.tensor([0, 5]), 3),
    lambda t: t.nn.functional.one_hot(t.tensor([0, -1]), 3),
    lambda t: t.nn.functional.one_hot(t.tensor([0.0, 1.0]), 3),
    lambda t: t.nn.functional.one_hot(t.tensor([0, 1], dtype=t.int32), 3),
    lambda t: t.nn.functional.one_hot(t.tensor([], dtype=t.int64)),
    lambda t: t.nn.functional.one_hot(t.tensor([0]), 0),
], ids=["too_large", "negative", "float", "int32", "empty", "no_classes"])
def test_one_hot_refuses_as_torch(call):
    check(call)


def test_one_hot_messages_are_torchs(torch):
    import gpugrad
    for t in (torch, gpugrad):
        with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes."):
            t.nn.functional.one_hot(t.tensor([0, 5]), 3)
        with pytest.raises(RuntimeError, match="Class values must be non-negative."):
            t.nn.functional.one_hot(t.tensor([-1]), 3)


@compat
def test_nelement_is_numel(torch):
    return torch.zeros(2, 3, 4).nelement(), torch.tensor(1.0).nelement()


@pytest.mark.gpu
def test_counting_and_one_hot_on_the_gpu_match_the_cpu():
    import numpy as np

    import gpugrad
    F = gpugrad.nn.functional
    x = np.array([0.5, 2.0, 1.0, 4.0, -0.5, 3.0, 2.0], np.float32)
    ids = np.array([0, 3, 1, 1, 5])
    calls = [lambda d: gpugrad.bincount(gpugrad.tensor(ids, device=d), minlength=8),
             lambda d: gpugrad.bincount(gpugrad.tensor(ids, device=d), gpugrad.tensor(x[:5], device=d)),
             lambda d: gpugrad.histc(gpugrad.tensor(x, device=d), 4),
             lambda d: gpugrad.histc(gpugrad.tensor(x, device=d), 3, min=0, max=3),
             lambda d: gpugrad.histogram(gpugrad.tensor(x, device=d), 5).hist,
             lambda d: gpugrad.histogram(gpugrad.tensor(x, device=d), 5).bin_edges,
             lambda d: gpugrad.histogram(gpugrad.tensor(x, device=d), gpugrad.tensor([0.0, 1.0, 3.5], device=d),
                                         density=True).hist,
             lambda d: F.one_hot(gpugrad.tensor(ids, device=d)),
             lambda d: F.one_hot(gpugrad.tensor(ids, device=d), 7)]
    for call in calls:
        on_gpu, on_cpu = call("cuda"), call("cpu")
        assert on_gpu.device.type == "cuda" and on_gpu.dtype == on_cpu.dtype
        np.testing.assert_allclose(on_gpu.cpu().numpy(), on_cpu.numpy(), rtol=1e-6)


@pytest.mark.gpu
def test_one_hot_of_a_bad_class_on_the_gpu_raises_at_the_next_read():
    import gpugrad
    out = gpugrad.nn.functional.one_hot(gpugrad.tensor([0, 7], device="cuda"), 3)  # no sync here
    with pytest.raises(RuntimeError, match="Class values must be non-negative and smaller than num_classes"):
        out.tolist()
