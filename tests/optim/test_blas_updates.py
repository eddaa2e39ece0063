"""CPU SGD through NumPy's BLAS (backend/blas1: axpy and scal) takes torch's own steps, so it matches torch.optim.SGD
bit for bit; where BLAS cannot take them, the NumPy formulas stand in, within a rounding of torch."""
import os
import types

import numpy as np
import pytest
import threadpoolctl

import gpugrad
from gpugrad.backend import blas1, threads

torch = pytest.importorskip("torch")
HAS_BLAS = blas1.level1(np.zeros(4, np.float32), np.zeros(4, np.float32)) is not None
needs_blas = pytest.mark.skipif(not HAS_BLAS, reason="NumPy's BLAS is not its bundled OpenBLAS")

CONFIGS = [{"lr": 0.1}, {"lr": 0.05, "momentum": 0.9}, {"lr": 0.05, "momentum": 0.9, "dampening": 0.3},
           {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 1e-2}, {"lr": 0.1, "weight_decay": 0.1},
           {"lr": 0.1, "momentum": 0.5, "maximize": True}]


def sgd_both(kw, shape, dtype=np.float32, steps=3, grads=None):
    """(gpugrad's, torch's) parameter after ``steps`` SGD steps from the same start on the same gradients."""
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(shape).astype(dtype)
    grads = rng.standard_normal((steps, *shape)).astype(dtype) if grads is None else grads
    p, tp = gpugrad.tensor(p0, requires_grad=True), torch.tensor(p0, requires_grad=True)
    opt, topt = gpugrad.optim.SGD([p], **kw), torch.optim.SGD([tp], **kw)
    for g in grads:
        p.grad, tp.grad = gpugrad.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
    return p.detach().numpy(), tp.detach().numpy()


@needs_blas
@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("shape, dtype", [((37, 5), np.float32), ((600, 500), np.float32), ((300, 7), np.float64)])
def test_sgd_matches_torch_bit_for_bit(kw, shape, dtype):
    mine, theirs = sgd_both(kw, shape, dtype)
    np.testing.assert_array_equal(mine, theirs)


@needs_blas
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.skipif(os.cpu_count() < 2, reason="needs 2 CPUs")
def test_a_threaded_blas_update_has_the_one_thread_bits(n):
    policy = threads.POLICY
    saved = policy.pinned, policy.current
    try:
        policy.pin(n)
        mine, theirs = sgd_both({"lr": 0.05, "momentum": 0.9}, (1000, 400))
        numpys = {lib["num_threads"] for lib in threadpoolctl.threadpool_info() if "/numpy" in lib["filepath"]}
        assert numpys == {n}  # the update ran on n BLAS threads
    finally:
        policy.pinned, policy.current, policy.next_check = saved[0], None, float("-inf")
    np.testing.assert_array_equal(mine, theirs)


def test_without_blas_the_numpy_formulas_stay_within_a_rounding_of_torch(monkeypatch):
    monkeypatch.setattr(blas1.LEVEL1, "bound", (None, {}))
    for kw in CONFIGS:
        mine, theirs = sgd_both(kw, (600, 500))
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kw", [{"lr": 0.0}, {"lr": 0.1, "momentum": 0.9, "dampening": 1.0}])
def test_a_zero_coefficient_carries_nans_as_torch_does(kw):
    # OpenBLAS's axpy skips a pass whose coefficient is 0, where torch's p + 0 * nan is nan: BLAS must not take it
    grads = np.full((2, 50, 4), np.nan, np.float32)
    mine, theirs = sgd_both(kw, (50, 4), grads=grads)
    assert np.isnan(theirs).all()
    np.testing.assert_array_equal(mine, theirs)


def test_level1_refuses_what_blas_cannot_update_in_place():
    a, b = np.zeros((8, 6), np.float32), np.ones((8, 6), np.float32)
    readonly = a.copy()
    readonly.flags.writeable = False
    refused = [(a, b.astype(np.float64)), (a.astype(np.float16), b.astype(np.float16)), (a, b.T), (a[:, ::2], b[:, ::2]),
               (a, b[:4]), (readonly, b), (a.view(np.matrix), b), (a.astype(np.int32), b.astype(np.int32))]
    for arrays in refused:
        assert blas1.level1(*arrays) is None, [x.dtype for x in arrays]
    if HAS_BLAS:
        axpy, scal = blas1.level1(a, b)
        axpy(0.5, b, a)
        scal(3.0, a)
        np.testing.assert_array_equal(a, np.full((8, 6), 1.5, np.float32))


def test_only_numpys_bundled_openblas_is_used():
    others = [types.SimpleNamespace(internal_api="openblas", filepath="/usr/lib/libopenblas.so.0"),
              types.SimpleNamespace(internal_api="mkl", filepath="/site-packages/numpy.libs/libmkl_rt.so")]
    assert blas1.numpy_openblas(others) is None
    assert blas1.bind(types.SimpleNamespace()) is None  # a library without CBLAS symbols binds nothing
    assert blas1.Level1(find=lambda: None).get(np.dtype(np.float32)) is None
