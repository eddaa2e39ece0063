"""The simulated CUDA device itself (gpugrad/testing/cuda_sim): it offers only CuPy 14's surface, it is as strict
as CuPy about host memory and devices, and its counters count what a GPU would queue. These run in the ordinary
suite (they build the simulated module directly); the suites that run gpugrad on it are the ``gpu``-marked ones.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from gpugrad.backend import cuda as cuda_backend
from gpugrad.testing import cuda_sim
from gpugrad.testing.cuda_sim import _state, namespace
from gpugrad.testing.cuda_sim.cuda import CompileException


@pytest.fixture
def cp():
    m = cuda_sim.module()
    cuda_sim.reset_counters()
    return m


@pytest.fixture
def cp2():
    before = _state.device_count
    m = cuda_sim.module(2)
    cuda_sim.reset_counters()
    yield m
    _state.device_count = before


def _delta(before):
    now = cuda_sim.counters()
    return {k: now[k] - before[k] for k in ("launches", "syncs", "allocs", "h2d", "d2h")}


# ---- the namespace is CuPy's ------------------------------------------------------------------------------------
def test_namespace_file_matches_the_installed_cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed: the committed namespace cannot be checked")
    ns, now = namespace.load(), namespace.generate()
    if ns["cupy_version"].split(".")[:2] == cupy.__version__.split(".")[:2]:
        for key in ("functions", "ufuncs", "ndarray_methods", "random_generator", "linalg", "cuda"):
            assert ns[key] == now[key], f"cupy_namespace.json [{key}] is stale: regenerate it with " \
                                        "python -m gpugrad.testing.cuda_sim.namespace --write"
    else:  # another CuPy: what the simulator offers must still exist there, with the keywords it accepts
        for key in ("functions", "ndarray_methods", "random_generator", "linalg"):
            for name, sig in ns[key].items():
                assert name in now[key], f"{key}: CuPy {cupy.__version__} has no {name}"
                if sig and now[key][name] and not now[key][name]["varkw"]:
                    assert set(sig["kwonly"]) <= set(now[key][name]["kwonly"]) | set(now[key][name]["params"])


def test_simulated_module_offers_only_cupy_names(cp):
    ns = namespace.load()
    known = set(ns["functions"]) | set(ns["ufuncs"]) | set(ns["classes"]) | set(ns["constants"])
    extra = {n for n in vars(cp) if not n.startswith("_")} - known - {"cuda", "random", "linalg", "simulated"}
    assert not extra, f"the simulator offers names CuPy 14 does not have: {sorted(extra)}"
    methods = {n for n in dir(cp.ndarray) if not n.startswith("_")}
    assert methods <= set(ns["ndarray_methods"]) | set(ns["ndarray_attributes"]), \
        sorted(methods - set(ns["ndarray_methods"]) - set(ns["ndarray_attributes"]))
    lazy = {"cublas", "curand", "cusolver", "cusparse"}  # cupy.cuda.__getattr__ imports them (cupy/cuda/__init__.py:52)
    assert set(vars(cp.cuda)) - {"__name__", "__doc__", "__package__", "__loader__", "__spec__"} <= set(ns["cuda"]) | lazy
    for name in ("matmul", "sum", "add", "where", "take", "ElementwiseKernel", "RawModule"):
        assert hasattr(cp, name)


def test_names_numpy_has_but_cupy_lacks_are_missing(cp):
    for name in ("insert", "nanpercentile", "geomspace", "block"):
        with pytest.raises(AttributeError, match="not in CuPy 14"):
            getattr(cp, name)
    with pytest.raises(AttributeError):
        cp.random.default_rng(0).normal(size=3)  # cupy.random.Generator has no normal(); NumPy's has


def test_keywords_cupy_does_not_take_raise_type_error(cp):
    x = cp.ones((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="where"):
        cp.sum(x, where=True)  # NumPy takes it, CuPy does not
    with pytest.raises(TypeError, match="initial"):
        x.max(initial=0)
    with pytest.raises(TypeError, match="like"):
        cp.zeros(3, like=x)
    assert float(cp.sum(x, axis=1, keepdims=True).sum()) == 6.0  # CuPy's own keywords work


# ---- strictness: host memory -----------------------------------------------------------------------------------
def test_implicit_host_conversion_raises_type_error_as_cupy(cp):
    x = cp.arange(4, dtype=np.float32)
    for convert in (np.asarray, np.array, lambda a: a.__array__(), lambda a: np.float32(1) + np.zeros(4) + a):
        with pytest.raises(TypeError):
            convert(x)


def test_numpy_functions_reach_it_only_where_cupy_implements_them(cp):
    x = cp.arange(6, dtype=np.float64).reshape(2, 3)
    assert type(np.exp(x)) is cp.ndarray  # a ufunc CuPy has: dispatched through __array_ufunc__
    assert type(np.concatenate([x, x])) is cp.ndarray  # a function CuPy has: through __array_function__
    with pytest.raises(TypeError, match="no implementation found"):
        np.insert(x, 0, 1.0)  # CuPy has no insert
    with pytest.raises(TypeError):
        np.spacing(x)  # nor this ufunc


def test_host_arrays_and_lists_are_refused_where_cupy_refuses_them(cp):
    x = cp.ones(3)
    with pytest.raises(TypeError, match="Unsupported type"):
        cp.add(x, np.ones(3))
    with pytest.raises(TypeError, match="Unsupported type"):
        x + np.ones(3)
    with pytest.raises(TypeError, match="Unsupported type"):
        cp.exp([1.0, 2.0])


def test_explicit_transfers_and_scalar_reads_are_syncs(cp):
    x = cp.asarray(np.array([1.5, 2.5], np.float32))
    before = cuda_sim.counters()
    assert x.get().tolist() == [1.5, 2.5]
    assert float(x[0]) == 1.5 and int(x[1]) == 2 and bool(x[0]) and x[1].item() == 2.5
    assert cp.asnumpy(x).dtype == np.float32
    repr(x)
    assert _delta(before) == {"launches": 0, "syncs": 7, "allocs": 0, "h2d": 0, "d2h": 7}
    with cuda_sim.forbid_syncs("a CUDA-graph capture"):
        y = x * 2  # queued work is fine
        with pytest.raises(cuda_sim.SyncForbidden, match="graph capture"):
            float(y[0])
    with pytest.raises(TypeError):
        range(x[0])  # CuPy arrays have no __index__
    assert pickle.loads(pickle.dumps(x)).get().tolist() == [1.5, 2.5]


# ---- strictness: devices and indices ---------------------------------------------------------------------------
def test_work_on_an_array_of_another_device_raises(cp2):
    with cp2.cuda.Device(1):
        b = cp2.ones(3)
    assert b.device.id == 1
    with pytest.raises(ValueError, match=r"resides \(1\).*current device \(0\)"):
        b + 1
    assert b.reshape(3, 1).shape == (3, 1) and b[1:].shape == (2,)  # views launch nothing: allowed, as in CuPy
    assert b.get().tolist() == [1.0, 1.0, 1.0]  # transfers switch device themselves
    with cp2.cuda.Device(1):
        assert (b + 1).device.id == 1
        a = cp2.asarray(cp2.zeros(2))  # made on 1
    c = cp2.asarray(a)  # on 0 now: a peer copy
    assert c.device.id == 0 and a.device.id == 1


def test_generator_lives_on_the_device_that_made_it(cp2):
    g = cp2.random.default_rng(0)
    g.random(3)
    with cp2.cuda.Device(1), pytest.raises(ValueError, match="made on device 0"):
        g.random(3)


def test_integer_array_indices_wrap_around_as_in_cupy(cp):
    x = cp.asarray(np.arange(5.0))
    idx = cp.asarray(np.array([-1, 5, 7]))
    assert x[idx].get().tolist() == [4.0, 0.0, 2.0]  # NumPy would raise IndexError for 5 and 7
    assert cp.take(x, idx).get().tolist() == [4.0, 0.0, 2.0]
    acc = cp.zeros(5)
    cp.add.at(acc, idx, 1.0)
    assert acc.get().tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_reductions_and_indexing_return_0d_arrays_not_scalars(cp):
    x = cp.asarray(np.arange(6.0).reshape(2, 3))
    for r in (x.sum(), x[1, 2], cp.max(x), x.argmax()):
        assert type(r) is cp.ndarray and r.ndim == 0
    v = x[1, 2]
    x[1, 2] = 10.0
    assert float(v) == 10.0  # a 0-d view, as in CuPy


# ---- counters -----------------------------------------------------------------------------------------------------
def test_counters_count_launches_allocations_and_transfers(cp):
    before = cuda_sim.counters()
    x = cp.asarray(np.ones((64, 32), np.float32))  # h2d + alloc
    assert _delta(before) == {"launches": 0, "syncs": 0, "allocs": 1, "h2d": 1, "d2h": 0}
    before = cuda_sim.counters()
    x.T.reshape(-1)  # a copy: the transpose is not C-contiguous
    x.reshape(32, 64)[::2]  # views
    cp.empty((4, 4))  # memory, no kernel
    assert _delta(before) == {"launches": 1, "syncs": 0, "allocs": 2, "h2d": 0, "d2h": 0}
    before = cuda_sim.counters()
    y = cp.exp(x)
    cp.add(y, 1, out=y)  # in place: a launch, no allocation
    y += 1
    y.sum(axis=0)
    y.fill(0)
    cp.zeros(3)  # a memset
    assert _delta(before) == {"launches": 6, "syncs": 0, "allocs": 3, "h2d": 0, "d2h": 0}
    before = cuda_sim.counters()
    cp.matmul(x, x.T)  # cuBLAS reads the transpose in place
    cp.matmul(x[:, ::2], x[:, ::2].T)  # neither C nor F ordered: two copies first
    assert _delta(before)["launches"] == 1 + 3
    before = cuda_sim.counters()
    cp.nonzero(x)
    x[x > 0]  # the result's size lives on the device
    assert _delta(before)["syncs"] == 2
    cuda_sim.reset_counters()
    assert set(cuda_sim.counters().values()) == {0}


def test_trace_names_each_event(cp):
    x = cp.ones(4)
    with cuda_sim.trace() as events:
        float((x * 2).sum())
    assert ("launch", "cupy.multiply") in events and ("launch", "ndarray.sum") in events
    assert events[-1] == ("sync", "float(ndarray)")


def test_memory_pool_tracks_live_allocations(cp):
    pool = cp.get_default_memory_pool()
    before = pool.used_bytes()
    x = cp.zeros(1000, dtype=np.float64)
    assert pool.used_bytes() - before == 8000
    del x
    assert pool.used_bytes() == before


# ---- kernels -------------------------------------------------------------------------------------------------------
_SRC = r"""
template <typename T>
__global__ void scale(const T* x, T* y, long long n, double a) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (T)(a * x[i]);
}
"""


def test_raw_module_runs_the_source_and_refuses_what_a_gpu_would_get_wrong(cp):
    mod = cp.RawModule(code=_SRC, options=("-std=c++17",), name_expressions=["scale<float>"])
    k = mod.get_function("scale<float>")
    x = cp.asarray(np.arange(40, dtype=np.float32))
    y = cp.empty(40, dtype=np.float32)
    before = cuda_sim.counters()
    k((2,), (32,), (x, y, 40, 0.5))
    assert _delta(before)["launches"] == 1
    np.testing.assert_array_equal(y.get(), np.arange(40, dtype=np.float32) * 0.5)
    with pytest.raises(ValueError, match="non-contiguous"):
        k((1,), (32,), (x[::2], y, 20, 1.0))  # CuPy would pass the bare pointer: silently wrong elements
    with pytest.raises(TypeError, match="Unsupported type"):
        k((1,), (32,), (np.zeros(4, np.float32), y, 4, 1.0))
    with pytest.raises(KeyError, match="name_expressions"):
        mod.get_function("scale<double>")


def test_elementwise_kernel_broadcasts_binds_types_and_writes_outputs(cp):
    k = cp.ElementwiseKernel("T x, T b", "T y", "y = x * 2 + b", "gg_test_axpb")
    x = cp.asarray(np.arange(6, dtype=np.float64).reshape(2, 3))
    b = cp.asarray(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(k(x, b).get(), np.arange(6.0).reshape(2, 3) * 2 + [1, 2, 3])
    out = cp.empty((2, 3))
    assert k(x, b, out) is out
    with pytest.raises(CompileException, match="undefined_function"):
        cp.ElementwiseKernel("T x", "T y", "y = undefined_function(x)", "gg_broken")(x)


# ---- is_available(): a trivial kernel must compile and run ---------------------------------------------------------
def test_probe_passes_on_a_working_device(cp):
    assert cuda_backend._check_kernels(cp) == ""


@pytest.mark.parametrize("message, names", [
    ('catastrophic error: cannot open source file "cuda_fp16.h"', ["headers", "gpugrad[cuda]"]),
    ("RuntimeError: Failed to find CUDA headers (CUDA_PATH is not set)", ["headers", "CUDA_PATH"]),
    ("libnvrtc.so.13: cannot open shared object file", ["NVRTC", "gpugrad[cuda]"]),
    ("CUDADriverError: CUDA_ERROR_NO_BINARY_FOR_GPU", ["driver"]),
])
def test_probe_names_the_missing_piece_and_the_fix(cp, monkeypatch, message, names):
    def broken(*args, **kwargs):
        raise CompileException(message)

    monkeypatch.setattr(cp, "ElementwiseKernel", broken)
    reason = cuda_backend._check_kernels(cp)
    for n in names:
        assert n in reason, reason


def test_probe_reports_wrong_results(cp, monkeypatch):
    real = cp.ElementwiseKernel
    monkeypatch.setattr(cp, "ElementwiseKernel", lambda i, o, op, name: real(i, o, "z = x", name))
    assert "computed" in cuda_backend._check_kernels(cp)


def test_unavailable_cuda_falls_back_to_the_cpu(monkeypatch):
    monkeypatch.setenv("GPUGRAD_CUDA_SIM", "1")
    monkeypatch.delenv("GPUGRAD_DEVICE", raising=False)
    from gpugrad.backend import default_device

    m = cuda_sim.module()
    monkeypatch.setattr(m, "RawModule", lambda **kw: (_ for _ in ()).throw(
        CompileException('cannot open source file "cuda_fp16.h"')))
    cuda_backend._probe.cache_clear()
    try:
        assert not cuda_backend.is_available()
        assert "headers" in cuda_backend.unavailable_reason()
        assert str(default_device()) == "cpu"
    finally:
        cuda_backend._probe.cache_clear()


# ---- CUDA-graph capture: recorded, not run; replayed on the captured buffers -------------------------------------
def test_stream_capture_records_work_and_graph_launch_replays_it(cp):
    x = cp.asarray(np.arange(4, dtype=np.float32))
    w = cp.ones(4, dtype=np.float32)
    s, pool = cp.cuda.Stream(non_blocking=True), cp.cuda.MemoryPool()
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        assert s.is_capturing()
        y = x * 2 + w  # allocated in the graph's pool; not computed yet
        w += y
        g = s.end_capture()
    assert np.isnan(y.get()).all() and w.get().tolist() == [1.0] * 4  # nothing ran during capture
    cuda_sim.reset_counters()
    g.launch()
    assert w.get().tolist() == [2.0, 4.0, 6.0, 8.0] and y.get().tolist() == [1.0, 3.0, 5.0, 7.0]
    counts = cuda_sim.counters()
    assert counts["graph_launches"] == 1 and counts["launches"] == 3 and counts["allocs"] == 0
    x[...] = 10.0  # replays read the buffers' current values
    g.launch()
    assert w.get().tolist() == [24.0, 28.0, 32.0, 36.0]  # y = 10 * 2 + w; w += y


# ---- cupy.linalg (RULES.md 20-23) ------------------------------------------------------------------------------
def test_linalg_refuses_a_capturing_stream(cp):
    a = cp.asarray(np.eye(3) * 2)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        for call in (lambda: cp.linalg.inv(a), lambda: cp.linalg.solve(a, a), lambda: cp.linalg.det(a),
                     lambda: cp.linalg.slogdet(a), lambda: cp.linalg.svd(a), lambda: cp.linalg.qr(a)):
            with pytest.raises(NotImplementedError, match="calling cuSOLVER API during stream capture is currently "
                                                          "unsupported"):
                call()
        s.end_capture()
    np.testing.assert_allclose(cp.linalg.inv(a).get(), np.eye(3) / 2)  # eager works


def test_linalg_of_a_singular_matrix_raises_nothing(cp):
    singular = cp.asarray(np.array([[1.0, 2.0], [2.0, 4.0]]))
    assert np.isnan(cp.linalg.inv(singular).get()).all()
    assert np.isnan(cp.linalg.solve(singular, cp.ones((2, 1))).get()).all()
    assert float(cp.linalg.det(singular)) == 0.0


def test_linalg_solve_does_not_broadcast(cp):
    a = cp.asarray(np.tile(np.eye(3), (2, 1, 1)))
    with pytest.raises(ValueError, match=r"b must have \(\.\.\., M, K\)"):
        cp.linalg.solve(a, cp.ones((3, 2)))
    with pytest.raises(ValueError, match=r"b must have \(M,\)"):
        cp.linalg.solve(a, cp.ones(4))
    assert cp.linalg.solve(a, cp.ones((2, 3, 2))).shape == (2, 3, 2)


def test_linalg_refuses_float16_and_host_arrays(cp):
    with pytest.raises(TypeError, match="float16 is unsupported in linalg"):
        cp.linalg.inv(cp.ones((2, 2), dtype=np.float16))
    with pytest.raises(np.linalg.LinAlgError, match="only supports cupy.ndarray"):
        cp.linalg.det(np.eye(2))
    with pytest.raises(AttributeError, match="does not implement it"):
        cp.linalg.eigvals  # noqa: B018 - CuPy has it; the simulator does not


def test_generator_state_lives_in_device_memory(cp):
    """RULES.md 24: ``Generator.bit_generator._state`` is an int8 device array that every draw advances; writing an
    old copy back restores the stream (what gpugrad.cuda.get_rng_state / set_rng_state rely on)."""
    g = cp.random.default_rng(3)
    state = g.bit_generator._state
    assert type(state) is cp.ndarray and state.dtype == np.int8
    saved = state.copy()
    first = g.random(4).get()
    assert not np.array_equal(g.bit_generator._state.get(), saved.get())
    g.bit_generator._state[...] = saved
    np.testing.assert_array_equal(g.random(4).get(), first)
