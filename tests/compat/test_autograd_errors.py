"""Autograd's errors in torch's words: each snippet raises with torch and with gpugrad, the same exception type, and
gpugrad's message starts with torch's first sentence (``harness.check_raises_as_torch``), which is what PyTorch's
own tests match. gpugrad's detail comes after it."""
from __future__ import annotations

import pytest

from tests.compat.harness import check_raises_as_torch


def _x(torch, n=3, **kw):
    return torch.ones(n, requires_grad=True, **kw)


def _saved_output_changed(torch):
    b = _x(torch).exp()
    b.add_(1)
    b.sum().backward()


def _saved_input_changed(torch):
    c = _x(torch) * 1
    b = c * c
    c.add_(1)
    b.sum().backward()


def _saved_leaf_changed(torch, shape=(3,), dtype=None):
    a = torch.ones(*shape, dtype=dtype, requires_grad=True)
    b = a.sin()
    with torch.no_grad():
        a.add_(1)
    b.sum().backward()


def _second_backward(torch):
    y = _x(torch).exp().sum()
    y.backward()
    y.backward()


def _nested_dual_levels(torch):
    with torch.autograd.forward_ad.dual_level():
        with torch.autograd.forward_ad.dual_level():
            pass


def _jacobian(torch, fn, *inputs, **kw):
    torch.autograd.functional.jacobian(fn, inputs if len(inputs) > 1 else inputs[0], strict=True, **kw)


CASES = {
    # grad_outputs / gradient of the wrong shape
    "grad_shape": lambda torch: torch.autograd.grad(_x(torch) * 2, _x(torch), torch.ones(2)),
    "backward_shape": lambda torch: (_x(torch) * 2).backward(torch.ones(2)),
    "backward_shape_extra_axis": lambda torch: (_x(torch) * 2).backward(torch.ones(1, 3)),
    "grad_shape_of_a_scalar": lambda torch: torch.autograd.grad((_x(torch) * 2).sum(), _x(torch), torch.ones(2)),
    "gradient_count": lambda torch: torch.autograd.backward([_x(torch).sum(), _x(torch).sum()], [torch.ones(())]),
    # what can be differentiated
    "unused_input": lambda torch: torch.autograd.grad((_x(torch) * 2).sum(), [_x(torch)]),
    "unused_second_input": lambda torch: (lambda x: torch.autograd.grad((x * 2).sum(), [x, _x(torch)]))(_x(torch)),
    "input_without_grad": lambda torch: torch.autograd.grad((_x(torch) * 2).sum(), [torch.ones(3)]),
    "output_without_grad": lambda torch: torch.ones(3).sum().backward(),
    "implicit_gradient": lambda torch: (_x(torch) * 2).backward(),
    "empty_backward_inputs": lambda torch: (_x(torch) * 2).sum().backward(inputs=[]),
    "empty_grad_inputs": lambda torch: torch.autograd.grad((_x(torch) * 2).sum(), []),
    "backward_input_without_grad": lambda torch: (_x(torch) * 2).sum().backward(inputs=[torch.ones(3)]),
    "numpy_of_a_leaf": lambda torch: _x(torch).numpy(),
    "numpy_of_a_result": lambda torch: (_x(torch) * 2).numpy(),
    # freed graphs and in-place changes
    "second_backward": _second_backward,
    "saved_output_changed": _saved_output_changed,
    "saved_input_changed": _saved_input_changed,
    "saved_leaf_changed": _saved_leaf_changed,
    "saved_2d_leaf_changed": lambda torch: _saved_leaf_changed(torch, (2, 3)),
    "saved_float64_leaf_changed": lambda torch: _saved_leaf_changed(torch, dtype=torch.float64),
    # out=, forward mode, autograd.functional's strict mode
    "out_of_add": lambda torch: torch.add(_x(torch), 1, out=torch.empty(3)),
    "out_of_exp": lambda torch: torch.exp(_x(torch), out=torch.empty(3)),
    "nested_dual_levels": _nested_dual_levels,
    "jacobian_strict_independent": lambda torch: _jacobian(torch, lambda a, b: a * 2, torch.ones(2), torch.ones(2)),
    "jacobian_strict_constant": lambda torch: _jacobian(torch, lambda a: torch.ones(2), torch.ones(2)),
    "vjp_strict": lambda torch: torch.autograd.functional.vjp(lambda a, b: a * 2, (torch.ones(2), torch.ones(2)),
                                                              torch.ones(2), strict=True),
    "hessian_strict_linear": lambda torch: torch.autograd.functional.hessian(lambda a: (a * 2).sum(), torch.ones(2),
                                                                              strict=True),
    "gradcheck_without_an_input_that_requires_grad": lambda torch: torch.autograd.gradcheck(
        lambda t: t * 2, (torch.ones(2, dtype=torch.float64),)),
    # where torch refuses what gpugrad once let through
    "linear_float64_input": lambda torch: torch.nn.functional.linear(torch.ones(2, 3, dtype=torch.float64),
                                                                     torch.ones(4, 3)),
    "linear_float16_input": lambda torch: torch.nn.functional.linear(torch.ones(2, 3, dtype=torch.float16),
                                                                     torch.ones(4, 3)),
    "linear_float64_bias": lambda torch: torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3),
                                                                    torch.ones(4, dtype=torch.float64)),
    "linear_float64_weight_and_input": lambda torch: torch.nn.functional.linear(
        torch.ones(5, 2, 3, dtype=torch.float64), torch.ones(4, 3, dtype=torch.float64), torch.ones(4)),
    "linear_1d_float64_input": lambda torch: torch.nn.functional.linear(torch.ones(3, dtype=torch.float64),
                                                                        torch.ones(4, 3), torch.ones(4)),
    "nn_linear_float64_input": lambda torch: torch.nn.Linear(3, 4)(torch.ones(2, 3, dtype=torch.float64)),
    "cross_entropy_int32": lambda torch: torch.nn.functional.cross_entropy(
        torch.zeros(2, 3), torch.tensor([0, 1], dtype=torch.int32)),
    "cross_entropy_int16": lambda torch: torch.nn.functional.cross_entropy(
        torch.zeros(2, 3), torch.tensor([0, 1], dtype=torch.int16)),
    "nll_loss_int32": lambda torch: torch.nn.functional.nll_loss(torch.zeros(2, 3),
                                                                 torch.tensor([0, 1], dtype=torch.int32)),
    "cross_entropy_module_bool": lambda torch: torch.nn.CrossEntropyLoss()(torch.zeros(2, 3),
                                                                           torch.tensor([True, False])),
}


@pytest.mark.parametrize("case", CASES)
def test_error_starts_with_torch_sentence(case):
    check_raises_as_torch(CASES[case])
