"""ReLU's two host paths, NumPy's maximum against a zero row where it is proven torch's relu and the bit mask
elsewhere, and its backward's integer select: bit for bit against torch on every special value, at the lengths that
reach each of NumPy's loops."""
from __future__ import annotations

import platform

import numpy as np
import pytest

from gpugrad.backend.reference import elementwise as E

BITS = {np.float32: np.int32, np.float64: np.int64}


def _specials(dtype, n, seed=0):
    """n values mixing normal ones with every special value, in random positions."""
    info = np.finfo(dtype)
    special = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, info.smallest_subnormal,
                        -info.smallest_subnormal, info.max, -info.max], dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dtype)
    pick = rng.random(n) < 0.3
    x[pick] = rng.choice(special, pick.sum())
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (7,), (33,), (4096,), (4097,), (3, 4099), (2, 4096), (512, 10), (0,),
                                   (2, 0, 3)])
def test_relu_forward_is_torchs_relu_bit_for_bit(dtype, shape, torch):
    x = _specials(dtype, int(np.prod(shape))).reshape(shape)
    want = torch.relu(torch.from_numpy(x.copy())).numpy()
    for got in (E.relu_fwd(np, x), E._relu_by_mask(x)):
        assert got.shape == x.shape and got.dtype == x.dtype
        np.testing.assert_array_equal(got.view(BITS[dtype]), want.view(BITS[dtype]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_forward_of_a_strided_input_keeps_torchs_bits_and_layout(dtype, torch):
    x = _specials(dtype, 6 * 4100).reshape(6, 4100)[:, ::3]
    for a in (x, x.T, np.asfortranarray(x)):  # strided, then F-ordered: the mask path, in the input's layout
        want = torch.relu(torch.from_numpy(a)).numpy()
        got = E.relu_fwd(np, a)
        np.testing.assert_array_equal(got.view(BITS[dtype]), want.view(BITS[dtype]))
        assert got.strides == want.strides


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the maximum path is x86's")
def test_the_probe_accepts_numpys_maximum_on_x86():
    assert E._MAXIMUM_IS_RELU == {np.dtype(np.float32): True, np.dtype(np.float64): True}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_probe_refuses_a_maximum_that_orders_minus_zero_below_zero(dtype, monkeypatch):
    # NEON's FMAX, C's fmax and maximum(x, 0)'s operand order all give +0.0 for -0.0: each must send relu to the mask
    real = np.maximum

    def plus_zero(a, b, out=None):
        r = real(b, a, out=out)  # max(x, 0): the second operand, +0.0, for -0.0
        return r

    monkeypatch.setattr(np, "maximum", plus_zero)
    assert not E._maximum_probe(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_probe_refuses_a_maximum_that_quiets_signalling_nans(dtype, monkeypatch):
    real, bits = np.maximum, BITS[dtype]
    quiet = bits(1) << (np.finfo(dtype).nmant - 1)

    def quieting(a, b, out=None):
        r = real(a, b, out=out)
        v = r.view(bits)
        v[np.isnan(r)] |= quiet
        return r

    monkeypatch.setattr(np, "maximum", quieting)
    assert not E._maximum_probe(dtype)


def test_relu_uses_the_mask_where_the_probe_failed(monkeypatch, torch):
    x = _specials(np.float32, 5000)
    monkeypatch.setitem(E._MAXIMUM_IS_RELU, np.dtype(np.float32), False)
    monkeypatch.setattr(E, "_relu_by_maximum", lambda x: pytest.fail("the maximum path ran"))
    np.testing.assert_array_equal(E.relu_fwd(np, x).view(np.int32),
                                  torch.relu(torch.from_numpy(x)).numpy().view(np.int32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 9, 4099])
def test_relu_backward_is_torchs_threshold_backward_bit_for_bit(dtype, n, torch):
    y = _specials(dtype, n, seed=1)  # negative y too: the kernel parity tests feed any saved value
    gy = _specials(dtype, n, seed=2)  # inf and NaN gradients are dropped where y <= 0, not turned into NaN
    want = torch.ops.aten.threshold_backward(torch.from_numpy(gy), torch.from_numpy(y), 0).numpy()
    got = E.relu_bwd(np, y, gy)
    assert got.dtype == gy.dtype and got.shape == gy.shape
    np.testing.assert_array_equal(got.view(BITS[dtype]), want.view(BITS[dtype]))
    y0 = np.asarray(y[0])  # a 0-d pair gives a 0-d array, not a NumPy scalar
    assert isinstance(E.relu_bwd(np, y0, np.asarray(gy[0])), np.ndarray)
