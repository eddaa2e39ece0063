"""gpugrad.bfloat16 against torch.bfloat16 on the CPU: rounding, promotion, printing, files, and every op of the op
table run in bfloat16 (output dtypes, values and gradients within bfloat16's precision)."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from tests.amp.compare import assert_matches_torch, name
from tests.op_cases import CASES, case_inputs

BF16_EPS = 2.0 ** -8  # half an ulp at 1: bfloat16 keeps 8 significant bits



def test_rounding_to_bfloat16_is_torchs(torch):
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 100
    x[:4] = [np.inf, -np.inf, np.nan, 3.3895314e38]  # specials and bfloat16's max
    ours = gpugrad.tensor(x).bfloat16().float().numpy()
    theirs = torch.tensor(x).bfloat16().float().numpy()
    np.testing.assert_array_equal(ours, theirs)  # round to nearest even, the same bits


@pytest.mark.parametrize("other", ["float16", "float32", "float64", "int64", "bool", "complex64"])
def test_promotion_is_torchs(other, torch):
    assert name(gpugrad.promote_types(gpugrad.bfloat16, getattr(gpugrad, other))) == \
        name(torch.promote_types(torch.bfloat16, getattr(torch, other)))


def test_python_numbers_and_other_tensors_promote_as_in_torch(torch):
    x, tx = gpugrad.ones(3).bfloat16(), torch.ones(3).bfloat16()
    for f in (lambda a, lib: a + 1.5, lambda a, lib: a * 2, lambda a, lib: a + lib.ones(3),
              lambda a, lib: a + lib.ones(3).half(), lambda a, lib: a + lib.ones(3, dtype=lib.int64),
              lambda a, lib: a + lib.tensor(2.0)):
        assert name(f(x, gpugrad).dtype) == name(f(tx, torch).dtype)


def test_finfo_and_flags_are_torchs(torch):
    ours, theirs = gpugrad.finfo(gpugrad.bfloat16), torch.finfo(torch.bfloat16)
    for field in ("bits", "eps", "max", "min", "tiny", "resolution"):
        assert getattr(ours, field) == pytest.approx(getattr(theirs, field), rel=1e-6), field
    assert gpugrad.bfloat16.is_floating_point and gpugrad.bfloat16.itemsize == 2
    assert gpugrad.ones(2).bfloat16().is_floating_point()
    assert gpugrad.ones(2).bfloat16().type() == torch.ones(2).bfloat16().type().replace("torch", "gpugrad")


def test_printing_is_torchs(torch):
    x = np.array([[0.1, -2.5, 3.0], [100.25, 1e-3, -7.0]], dtype=np.float32)
    ours = repr(gpugrad.tensor(x).bfloat16())
    assert ours == repr(torch.tensor(x).bfloat16()).replace("torch.", "gpugrad.")


def test_save_and_load_keep_bfloat16(tmp_path, torch):
    x = gpugrad.randn(4, 3).bfloat16().requires_grad_()
    gpugrad.save({"x": x}, tmp_path / "m.pt")
    y = gpugrad.load(tmp_path / "m.pt")["x"]
    assert y.dtype == gpugrad.bfloat16 and y.requires_grad
    np.testing.assert_array_equal(y.detach().float().numpy(), x.detach().float().numpy())
    from safetensors.torch import load_file  # the file is a safetensors file torch reads as bfloat16

    t = load_file(tmp_path / "m.pt")["0"]
    assert t.dtype == torch.bfloat16
    np.testing.assert_array_equal(t.float().numpy(), x.detach().float().numpy())


PARAMS = [c for c in CASES if c.torch_fn and c.shift == 0]  # rows around -1000 are below bfloat16's resolution


@pytest.mark.parametrize("case", PARAMS, ids=[c.name for c in PARAMS])
def test_every_op_in_bfloat16_matches_torch(case, torch):
    arrays = case_inputs(case, case.shapes[0])
    floats = [a.dtype.kind == "f" for a in arrays]
    theirs = [torch.tensor(a).bfloat16().requires_grad_() if f else torch.tensor(a) for a, f in zip(arrays, floats)]
    try:
        ty = case.torch_fn(*theirs)
    except (RuntimeError, TypeError, NotImplementedError) as e:
        pytest.skip(f"torch has no bfloat16 {case.name}: {e}")
    ours = [gpugrad.tensor(a).bfloat16().requires_grad_() if f else gpugrad.tensor(a) for a, f in zip(arrays, floats)]
    y = case.fn(*ours)
    # each side rounds its own intermediates: a few bfloat16 ulps of the result's scale apart
    assert_matches_torch(torch, y, ty, ours, theirs, 8 * BF16_EPS, 16 * BF16_EPS)


def test_dlpack_with_torch_both_ways_shares_bfloat16_memory(torch):
    t = torch.randn(3, 4).bfloat16()
    x = gpugrad.from_dlpack(t)
    assert x.dtype == gpugrad.bfloat16
    np.testing.assert_array_equal(x.float().numpy(), t.float().numpy())
    t[0, 0] = 7.0  # zero copy: the same memory
    assert float(x[0, 0]) == 7.0
    xt = gpugrad.from_dlpack(t.t())  # strides come through
    np.testing.assert_array_equal(xt.float().numpy(), t.t().float().numpy())
    y = gpugrad.randn(2, 6).bfloat16()
    for view in (y, y[:, ::2]):
        ty = torch.from_dlpack(view)
        assert ty.dtype == torch.bfloat16
        np.testing.assert_array_equal(ty.float().numpy(), view.float().numpy())
    torch.from_dlpack(y)[1, 1] = -3.0
    assert float(y[1, 1]) == -3.0
    y.__dlpack__()  # a capsule nobody consumes is freed by its own destructor
    assert torch.from_dlpack(gpugrad.ones(2)).dtype == torch.float32  # other dtypes: NumPy's DLPack as before
