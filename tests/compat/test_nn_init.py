"""``torch.nn.init`` as torch users call it: every function torch has, with torch's signatures, its deterministic
fills (dirac_, eye_, constant_, zeros_, ones_) and gains compared with torch's, the random ones' shapes, ranges and
reproducibility from a Generator, and torch's errors (tests/compat/harness.py).  The distributions themselves are
checked by statistics in tests/nn/test_init_distributions.py (the streams are not torch's)."""
from __future__ import annotations

import inspect
import warnings

import pytest

import gpugrad
from tests.compat.harness import check, compat


def test_every_torch_init_function_exists_with_torchs_parameters(torch):
    public = [n for n in dir(torch.nn.init) if not n.startswith("_") and inspect.isfunction(getattr(torch.nn.init, n))
              and getattr(torch.nn.init, n).__module__ == "torch.nn.init"]
    assert len(public) > 20
    for name in public:
        ours = getattr(gpugrad.nn.init, name, None)
        assert ours is not None, f"nn.init.{name} is missing"
        theirs = inspect.signature(getattr(torch.nn.init, name)).parameters
        if name.endswith("_") or name == "calculate_gain":  # the deprecated aliases take *args, **kwargs
            assert list(inspect.signature(ours).parameters) == list(theirs), name
    assert callable(gpugrad.nn.init._calculate_correct_fan) and callable(gpugrad.nn.init._calculate_fan_in_and_fan_out)


@compat
def test_dirac_and_eye(torch):
    a, b, c, d = torch.empty(4, 2, 3), torch.empty(6, 3, 3, 3), torch.empty(2, 2, 3, 3, 1), torch.empty(3, 5)
    torch.nn.init.dirac_(a, groups=2)
    torch.nn.init.dirac_(b, 3)
    torch.nn.init.dirac_(c)
    return a, b, c, torch.nn.init.eye_(d), torch.nn.init.eye_(torch.empty(4, 2))


@compat
def test_constant_zeros_ones(torch):
    init = torch.nn.init
    return init.constant_(torch.empty(2, 3), 0.25), init.zeros_(torch.ones(3)), init.ones_(torch.empty(2, 2))


@compat
def test_calculate_gain_and_fans(torch):
    init = torch.nn.init
    gains = [init.calculate_gain(n) for n in ("linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu")]
    return gains, init.calculate_gain("leaky_relu", 0.2), init._calculate_fan_in_and_fan_out(torch.empty(5, 3, 2, 2)), \
        init._calculate_correct_fan(torch.empty(5, 3), "fan_out")


@compat
def test_random_fills_keep_shape_dtype_and_their_ranges(torch):
    init = torch.nn.init
    w = torch.empty(64, 32, dtype=torch.float64)
    out = []
    for fill in (lambda t: init.uniform_(t, -0.5, 0.25), lambda t: init.trunc_normal_(t, 0.5, 1.0, -1.0, 1.5),
                 lambda t: init.xavier_uniform_(t, gain=2.0), lambda t: init.kaiming_uniform_(t, a=5 ** 0.5)):
        r = fill(w)
        out.append((r is w, r.shape, r.dtype))
    return (out, bool(init.uniform_(w, -0.5, 0.25).ge(-0.5).all() and w.lt(0.25).all()),
            bool(init.trunc_normal_(w, 0.5, 1.0, -1.0, 1.5).ge(-1.0).all() and w.le(1.5).all()),
            bool(init.xavier_uniform_(w, 2.0).abs().le(2.0 * (6 / 96) ** 0.5).all()))


@compat
def test_orthogonal_gives_orthonormal_rows_or_columns(torch):
    init = torch.nn.init
    wide, tall, conv = torch.empty(3, 7), torch.empty(7, 3), torch.empty(4, 2, 3, 3)
    init.orthogonal_(wide, gain=2.0)
    init.orthogonal_(tall)
    init.orthogonal_(conv)
    flat = conv.reshape(4, -1)
    return wide @ wide.T, tall.T @ tall, flat @ flat.T


@compat
def test_sparse_zeroes_a_fraction_of_each_column(torch):
    w = torch.empty(10, 6)
    torch.nn.init.sparse_(w, sparsity=0.25, std=0.5)
    return (w == 0).sum(0), bool(w.abs().max() > 0)


@compat
def test_a_generator_makes_the_fills_reproducible(torch):
    init = torch.nn.init
    fills = [lambda t, g: init.uniform_(t, generator=g), lambda t, g: init.normal_(t, 1.0, 2.0, generator=g),
             lambda t, g: init.xavier_normal_(t, generator=g), lambda t, g: init.kaiming_normal_(t, generator=g),
             lambda t, g: init.trunc_normal_(t, generator=g), lambda t, g: init.orthogonal_(t, generator=g),
             lambda t, g: init.xavier_uniform_(t, generator=g),
             lambda t, g: init.kaiming_uniform_(t, generator=g)]
    same = []
    for fill in fills:
        a = fill(torch.empty(4, 5), torch.Generator().manual_seed(11))
        b = fill(torch.empty(4, 5), torch.Generator().manual_seed(11))
        same.append(bool(torch.equal(a, b)))
    return same


def test_sparse_draws_its_zeros_from_the_generator_too():
    """torch 2.13's sparse_ takes the zeros' rows from the global generator (torch.randperm without generator=), so a
    Generator does not make it reproducible there; gpugrad draws both from ``generator`` (a listed difference)."""
    a = gpugrad.nn.init.sparse_(gpugrad.empty(6, 5), 0.5, generator=gpugrad.Generator().manual_seed(3))
    gpugrad.rand(10)  # the global stream moves on
    b = gpugrad.nn.init.sparse_(gpugrad.empty(6, 5), 0.5, generator=gpugrad.Generator().manual_seed(3))
    assert a.tolist() == b.tolist()


def test_the_old_names_warn_and_still_fill():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        w = gpugrad.nn.init.uniform(gpugrad.zeros(50), 2.0, 3.0)
        gpugrad.nn.init.eye(gpugrad.zeros(2, 2))
    assert [type(s.message) for s in seen] == [FutureWarning, FutureWarning]
    assert "`nn.init.uniform` is now deprecated in favor of `nn.init.uniform_`" in str(seen[0].message)
    assert w.min().item() >= 2.0 and w.max().item() < 3.0


@pytest.mark.parametrize("call", [
    lambda t: t.nn.init.dirac_(t.empty(3, 3)),
    lambda t: t.nn.init.dirac_(t.empty(3, 2, 3), groups=2),
    lambda t: t.nn.init.eye_(t.empty(3)),
    lambda t: t.nn.init.orthogonal_(t.empty(3)),
    lambda t: t.nn.init.sparse_(t.empty(2, 3, 4), 0.1),
    lambda t: t.nn.init.kaiming_uniform_(t.empty(3, 3), mode="fan_sideways"),
    lambda t: t.nn.init.calculate_gain("swish"),
    lambda t: t.nn.init.xavier_uniform_(t.empty(3)),
], ids=["dirac_2d", "dirac_groups", "eye_1d", "orthogonal_1d", "sparse_3d", "fan_mode", "gain", "fan_1d"])
def test_init_refuses_as_torch(call):
    check(call)


@compat
def test_trunc_normal_warns_when_the_mean_is_far_outside(torch):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.nn.init.trunc_normal_(torch.empty(10), mean=5.0, std=1.0, a=-1.0, b=1.0)
    return [str(s.message).split(".")[0] for s in seen]
