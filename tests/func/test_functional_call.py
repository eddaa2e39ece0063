"""functional_call against torch.func.functional_call: a module run with other parameters and buffers (a dict or
a sequence of dicts), its own restored afterwards (also when the call raises), tied weights, strict, kwargs, and
gradients with respect to the given tensors."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from tests.func.helpers import assert_same, both, same_error

RNG = np.random.default_rng(3)
X = RNG.standard_normal((4, 3))
W, B, W2 = RNG.standard_normal((2, 3)), RNG.standard_normal(2), RNG.standard_normal((2, 2))
OWN = [RNG.standard_normal(s) for s in ((2, 3), (2,), (2, 2), (2,))]  # the module's own parameters


class Net:
    """A model with a tied weight and a buffer, built the same way for either library."""

    def __new__(cls, lib):
        class _Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.first = lib.nn.Linear(3, 2).double()
                self.second = lib.nn.Linear(2, 2).double()
                self.tied = self.second  # one module under two names: its weight is tied
                self.register_buffer("shift", lib.zeros(2, dtype=lib.float64))

            def forward(self, x, scale=1.0):
                return self.tied(self.first(x) * scale) + self.shift
        net = _Net()
        with lib.no_grad():
            for p, a in zip((net.first.weight, net.first.bias, net.second.weight, net.second.bias), OWN):
                p.copy_(lib.tensor(a))
        return net


def test_the_given_tensors_are_used_and_the_modules_restored(torch):
    def run(lib, fn):
        net = Net(lib)
        before = {k: v.clone() for k, v in net.state_dict().items()}
        given = {"first.weight": lib.tensor(W), "first.bias": lib.tensor(B), "shift": lib.tensor(B)}
        out = fn.functional_call(net, given, (lib.tensor(X),), {"scale": 2.0})
        split = fn.functional_call(net, ({"first.weight": lib.tensor(W)}, {"second.weight": lib.tensor(W2)}),
                                   lib.tensor(X))
        after = net.state_dict()
        return out, split, all(bool((before[k] == after[k]).all()) for k in before)
    ours, theirs = both(torch, run)
    assert_same(ours[:2], theirs[:2])
    # NOTE: torch 2.13 leaves the tied weight swapped in after the second call (it restores second.weight, then
    # tied.weight, the same entry, to the value it saw there: the given one); gpugrad restores in reverse order
    assert ours[2]


def test_the_module_is_restored_when_the_call_raises():
    net = Net(gpugrad)
    weight = net.first.weight
    with pytest.raises(ValueError):
        gpugrad.func.functional_call(net, {"first.weight": gpugrad.tensor(W)}, (gpugrad.tensor(X[:, :2]),))
    assert net.first.weight is weight


def test_gradients_with_respect_to_the_given_tensors(torch):
    def run(lib, fn):
        net = Net(lib)
        w = lib.tensor(W, requires_grad=True)
        fn.functional_call(net, {"first.weight": w}, (lib.tensor(X),)).pow(2).sum().backward()
        return w.grad, fn.grad(lambda p: fn.functional_call(net, p, (lib.tensor(X),)).sum())(
            {"second.weight": lib.tensor(W2), "shift": lib.tensor(B)})
    assert_same(*both(torch, run))


def test_tied_weights(torch):
    def run(lib, fn):
        net = Net(lib)
        tied = fn.functional_call(net, {"second.weight": lib.tensor(W2)}, (lib.tensor(X),))
        untied = fn.functional_call(net, {"second.weight": lib.tensor(W2)}, (lib.tensor(X),), tie_weights=False)
        return tied, untied
    assert_same(*both(torch, run))


@pytest.mark.parametrize("call", [
    lambda lib, fn: fn.functional_call(Net(lib), {"second.weight": lib.tensor(W2), "tied.weight": lib.tensor(W2)},
                                       (lib.tensor(X),)),
    lambda lib, fn: fn.functional_call(Net(lib), {"first.weight": lib.tensor(W), "nothing": lib.tensor(W)},
                                       (lib.tensor(X),), strict=True),
    lambda lib, fn: fn.functional_call(Net(lib), [{"shift": lib.tensor(B)}, {"shift": lib.tensor(B)}],
                                       (lib.tensor(X),)),
    lambda lib, fn: fn.functional_call(Net(lib), [{"shift": lib.tensor(B)}, 3], (lib.tensor(X),)),
    lambda lib, fn: fn.functional_call(Net(lib), 3, (lib.tensor(X),)),
], ids=["tied_twice", "strict", "repeated_key", "not_a_dict", "not_dicts"])
def test_errors_match_torch(torch, call):
    same_error(torch, call)
