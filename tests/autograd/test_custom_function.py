"""Custom Functions and products to second order: against torch 2.13 and float64 finite differences.

In torch a saved output unpacks as the output itself, connected to the Function's node, so a double backward flows
through it; a saved input is the input; anything else saved is a constant. ``prod`` and ``cumprod`` have their own
formulas at zeros (one zero, several in a row): their first and second derivatives are checked there too.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _functions(lib):
    """The same custom Functions written against ``lib`` (torch or gpugrad)."""
    class ProdOfProd(lib.autograd.Function):  # saves its input and its own output
        @staticmethod
        def forward(ctx, x):
            y = x.prod(-1).prod(-1)
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return (g * y)[:, None, None] / x

    class Cube(lib.autograd.Function):  # saves its input only
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * g * x * x

    class Exp(lib.autograd.Function):  # saves its output only
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    class TwiceExp(lib.autograd.Function):  # saves an intermediate: a constant to a double backward, as in torch
        @staticmethod
        def forward(ctx, x):
            e = x.exp()
            ctx.save_for_backward(e)
            return e * 2

        @staticmethod
        def backward(ctx, g):
            (e,) = ctx.saved_tensors
            return 2 * g * e

    class SinCos(lib.autograd.Function):  # two outputs, both saved
        @staticmethod
        def forward(ctx, x):
            s, c = x.sin(), x.cos()
            ctx.save_for_backward(s, c)
            return s, c

        @staticmethod
        def backward(ctx, gs, gc):
            s, c = ctx.saved_tensors
            return gs * c - gc * s

    return {"prod_of_prod": ProdOfProd.apply, "cube": Cube.apply, "exp": Exp.apply, "twice_exp": TwiceExp.apply,
            "sin_cos": lambda x: sum(o.sum() * w for o, w in zip(SinCos.apply(x), (1.5, -0.5)))}


def _second_order(lib, fn, x, u, device=None):
    """(first derivative of fn(x).sum(), second: the gradient of <first, u>, or None where the first does not
    depend on x), as host arrays."""
    kw = {"device": device} if device else {}
    x = lib.tensor(x, dtype=lib.float64, requires_grad=True, **kw)
    (g,) = lib.autograd.grad(fn(x).sum(), x, create_graph=True)
    if not g.requires_grad:
        return g.detach().cpu().numpy(), None
    (h,) = lib.autograd.grad((g * lib.tensor(u, dtype=lib.float64, **kw)).sum(), x, allow_unused=True)
    return g.detach().cpu().numpy(), None if h is None else h.detach().cpu().numpy()


def _finite_second(fn, x, u, eps=1e-6):
    """d/dx <first derivative, u> by central differences of the first derivative (float64)."""
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        plus = _second_order(gpugrad, fn, x + d, u)[0]
        minus = _second_order(gpugrad, fn, x - d, u)[0]
        out[i] = np.sum((plus - minus) / (2 * eps) * u)
    return out


INPUTS = {
    "prod_of_prod": lambda rng: [np.ones((2, 4, 4)), rng.uniform(0.5, 1.5, (2, 3, 3))],
    "cube": lambda rng: [rng.uniform(-2, 2, (3, 2))],
    "exp": lambda rng: [rng.uniform(-2, 2, (4,))],
    "twice_exp": lambda rng: [rng.uniform(-2, 2, (4,))],
    "sin_cos": lambda rng: [rng.uniform(-2, 2, (5,))],
}


@pytest.mark.parametrize("name", INPUTS)
def test_custom_function_second_derivatives_match_torch(name, torch):
    rng = np.random.default_rng(3)
    ours, theirs = _functions(gpugrad)[name], _functions(torch)[name]
    for x in INPUTS[name](rng):
        u = rng.standard_normal(x.shape)
        g, h = _second_order(gpugrad, ours, x, u)
        tg, th = _second_order(torch, theirs, x, u)
        np.testing.assert_allclose(g, tg, rtol=1e-10, atol=1e-12)
        assert (h is None) == (th is None), f"{name}: torch's second derivative is {th}, gpugrad's {h}"
        if h is not None:
            np.testing.assert_allclose(h, th, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["prod_of_prod", "cube", "exp", "sin_cos"])
def test_custom_function_second_derivatives_match_finite_differences(name):
    rng = np.random.default_rng(5)
    fn = _functions(gpugrad)[name]
    x = INPUTS[name](rng)[-1]
    u = rng.standard_normal(x.shape)
    np.testing.assert_allclose(_second_order(gpugrad, fn, x, u)[1], _finite_second(fn, x, u), rtol=1e-5, atol=1e-6)


def test_the_issue_example_at_ones():
    """x = ones(2, 4, 4): the second derivative reaches the saved output (torch: 15 summed over [0], not -1)."""
    x = gpugrad.ones(2, 4, 4, dtype=gpugrad.float64, requires_grad=True)
    (g,) = gpugrad.autograd.grad(_functions(gpugrad)["prod_of_prod"](x).sum(), x, create_graph=True)
    (h,) = gpugrad.autograd.grad(g[0, 0, 1], x)
    # y = Π x over 16 elements; g_j = y / x_j; d g_j / d x_i = y / (x_i x_j) for i != j, 0 for i == j
    want = np.ones((2, 4, 4))
    want[0, 0, 1] = 0
    want[1] = 0
    np.testing.assert_array_equal(h.numpy(), want)
    assert float(h[0].sum()) == 15


@pytest.mark.parametrize("device", DEVICES)
def test_saved_output_of_a_two_output_function_on_each_device(device):
    """The two-output Function's double backward on the CPU and the (simulated) GPU: the closed form."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (6,))
    u = rng.standard_normal(6)
    g, h = _second_order(gpugrad, _functions(gpugrad)["sin_cos"], x, u, device)
    np.testing.assert_allclose(g, 1.5 * np.cos(x) + 0.5 * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(h, (-1.5 * np.sin(x) + 0.5 * np.cos(x)) * u, rtol=1e-12)


# -- prod and cumprod at zeros -------------------------------------------------------------------------------------

ZEROS = {
    "none": [1.5, -0.5, 2.0, 0.75, -1.25],
    "one": [1.5, -0.5, 0.0, 0.75, -1.25],
    "two_in_a_row": [1.5, 0.0, 0.0, 0.75, -1.25],
    "three_in_a_row": [0.0, 0.0, 0.0, 0.75, -1.25],
    "first": [0.0, -0.5, 2.0, 0.75, -1.25],
    "last": [1.5, -0.5, 2.0, 0.75, 0.0],
    "apart": [0.0, -0.5, 2.0, 0.0, -1.25],
}
PRODUCTS = {
    "prod": lambda t: t.prod(),
    "prod_dim": lambda t: t.reshape(1, 5).expand(2, 5).prod(1),
    "cumprod": lambda t: t.cumprod(0) * t.new_tensor([1.0, -2.0, 0.5, 3.0, 1.5]).to(t.dtype),
}


@pytest.mark.parametrize("zeros", ZEROS)
@pytest.mark.parametrize("op", PRODUCTS)
def test_products_at_zeros_to_second_order(op, zeros, torch):
    x = np.array(ZEROS[zeros])
    u = np.random.default_rng(11).standard_normal(5)
    fn = PRODUCTS[op]
    g, h = _second_order(gpugrad, fn, x, u)
    tg, th = _second_order(torch, fn, x, u)
    np.testing.assert_allclose(g, tg, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, th, rtol=1e-12, atol=1e-12)
    # and both against finite differences of the first derivative (a polynomial: exact up to rounding)
    np.testing.assert_allclose(h, _finite_second(fn, x, u), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("zeros", ZEROS)
def test_cumprod_of_rows_with_zeros_matches_torch(zeros, torch):
    """Rows with zeros in different places, scanned along dim 1, to second order."""
    rows = np.stack([np.array(ZEROS[zeros]), np.roll(ZEROS[zeros], 2), np.array(ZEROS["none"])])
    u = np.random.default_rng(13).standard_normal(rows.shape)

    def fn(t):
        return t.cumprod(1) * t.new_tensor(np.arange(15.0).reshape(3, 5)).to(t.dtype)

    g, h = _second_order(gpugrad, fn, rows, u)
    tg, th = _second_order(torch, fn, rows, u)
    np.testing.assert_allclose(g, tg, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, th, rtol=1e-12, atol=1e-12)
