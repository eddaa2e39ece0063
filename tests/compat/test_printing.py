"""Printing tensors as torch prints them, and ``set_printoptions`` (precision, threshold, edgeitems, linewidth,
profile, sci_mode), ``get_printoptions`` and ``printoptions``: ``repr`` compared character for character with
torch's ("gpugrad." read as "torch.")."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad

VALUES = {
    "fixed": [1.0, 2.5, -3.125], "whole": [1.0, 2.0, 3.0], "small": [1e-5, 1.0], "large": [1e10, 1.0],
    "ratio": [1e5, 2e5, 123.5], "nan_inf": [float("nan"), 1.0, float("inf")], "zeros": [0.0, -0.0],
    "ints": [1, 200, -3], "bools": [True, False], "matrix": np.random.default_rng(0).standard_normal((7, 9)).tolist(),
    "cube": np.random.default_rng(1).standard_normal((3, 4, 5)).tolist(), "long": list(range(2000)),
    "long_floats": (np.arange(1500.0) / 7).tolist(), "wide": [[1.5] * 30] * 3, "scalar": 3.25, "complex": [1 + 2j, -3.5j],
}
OPTIONS = {
    "default": {}, "precision_2": {"precision": 2}, "precision_8": {"precision": 8}, "threshold_5": {"threshold": 5},
    "edgeitems_1": {"edgeitems": 1, "threshold": 10}, "edgeitems_0": {"edgeitems": 0, "threshold": 3},
    "linewidth_40": {"linewidth": 40}, "linewidth_120": {"linewidth": 120}, "short": {"profile": "short"},
    "full": {"profile": "full"}, "sci_on": {"sci_mode": True}, "sci_off": {"sci_mode": False},
}


@pytest.fixture
def restore(torch):
    yield
    torch.set_printoptions(profile="default")
    gpugrad.set_printoptions(profile="default")


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("name", VALUES)
@pytest.mark.parametrize("dtype", [None, "float64", "int32"])
def test_repr_matches_torchs(name, opts, dtype, torch, restore):
    reprs = []
    for lib in (torch, gpugrad):
        lib.set_printoptions(**OPTIONS[opts])
        try:
            t = lib.tensor(VALUES[name], **({} if dtype is None else {"dtype": getattr(lib, dtype)}))
        except (TypeError, RuntimeError):
            pytest.skip("not a dtype these values convert to")
        reprs.append(repr(t).replace("gpugrad.", "torch."))
    assert reprs[1] == reprs[0]


@pytest.mark.parametrize("make", [
    lambda t: t.zeros(0, 3), lambda t: t.zeros(0, dtype=t.int64), lambda t: t.zeros(0, dtype=t.float64),
    lambda t: t.ones(3, requires_grad=True), lambda t: t.ones(2, 3, requires_grad=True) * 2,
    lambda t: t.zeros(3, dtype=t.float16), lambda t: t.tensor(True), lambda t: t.arange(12).reshape(3, 4) > 5,
    lambda t: t.nn.Parameter(t.ones(2)), lambda t: t.arange(200.0).reshape(2, 100).double().requires_grad_(),
], ids=["empty_2d", "empty_int", "empty_double", "leaf", "grad_fn", "half", "bool_0d", "mask", "parameter",
        "wrapped_suffix"])
def test_suffixes_match_torchs(make, torch):
    assert repr(make(gpugrad)).replace("gpugrad.", "torch.") == repr(make(torch))


def test_printoptions_round_trip_and_context(torch, restore):
    """torch keeps get_printoptions and printoptions in torch._tensor_str; gpugrad in gpugrad.methods.printing."""
    from gpugrad.methods import printing
    for lib, opts in ((torch, torch._tensor_str), (gpugrad, printing)):
        assert opts.get_printoptions() == {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80,
                                          "sci_mode": None}
        lib.set_printoptions(precision=2, sci_mode=True)
        lib.set_printoptions(linewidth=100)  # as torch's: every call sets sci_mode, to None here
        assert opts.get_printoptions()["precision"] == 2 and opts.get_printoptions()["sci_mode"] is None
        with opts.printoptions(precision=1):
            assert repr(lib.tensor([1.25])) == "tensor([1.2])"
        assert opts.get_printoptions()["precision"] == 2
        lib.set_printoptions(profile="default")


def test_an_unknown_profile_is_refused(restore):
    with pytest.raises(ValueError, match="unknown profile"):
        gpugrad.set_printoptions(profile="huge")
