"""The simulated device obeys CuPy 14.2's rules for stream capture, one test per rule of
gpugrad/testing/cuda_sim/RULES.md (named there), and gpugrad refuses what a capture cannot contain itself, with its
own errors, before CuPy or CUDA would (gpugrad/backend/capture.py)."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn as nn
import gpugrad.nn.functional as F
from gpugrad.backend import cuda as cuda_backend
from gpugrad.backend.capture import CaptureError
from gpugrad.testing import cuda_sim

pytestmark = pytest.mark.gpu
needs_sim = pytest.mark.skipif(not cuda_sim.enabled(), reason="a rule of the simulator (GPUGRAD_CUDA_SIM=1)")


@pytest.fixture
def cp():
    return cuda_backend.cupy_module()


class _RawCapture:
    """``with _RawCapture(cp) as s:`` captures on a new stream with CuPy's API alone; ``s.graph`` after the block
    (None if ending failed: ``s.end_error``)."""

    def __init__(self, cp):
        self.cp, self.graph, self.end_error = cp, None, None

    def __enter__(self):
        self.stream = self.cp.cuda.Stream(non_blocking=True)
        self.stream.__enter__()
        self.stream.begin_capture()
        return self

    def __exit__(self, *exc):
        try:
            self.graph = self.stream.end_capture()
        except Exception as e:
            self.end_error = e
        finally:
            self.stream.__exit__(None, None, None)
        return False


# ---- CuPy's rules (RULES.md) ---------------------------------------------------------------------------------------
@needs_sim
@pytest.mark.parametrize("call", ["matmul", "dot", "einsum", "ndarray @"])
def test_cublas_products_refuse_a_capturing_stream(cp, call):
    a = cp.ones((3, 3), np.float32)
    fns = {"matmul": lambda: cp.matmul(a, a), "dot": lambda: cp.dot(a, a),
           "einsum": lambda: cp.einsum("ij,jk->ik", a, a), "ndarray @": lambda: a @ a}
    with _RawCapture(cp) as s:
        with pytest.raises(NotImplementedError, match="calling cuBLAS API during stream capture is currently "
                                                      "unsupported"):
            fns[call]()
    assert s.end_error is None  # CuPy refuses before calling CUDA: the capture is still valid
    np.testing.assert_array_equal(cp.matmul(a, a).get(), np.full((3, 3), 3, np.float32))  # eager works


@needs_sim
def test_integer_products_take_cupys_own_kernel_and_capture(cp):
    a = cp.arange(4, dtype=np.int64).reshape(2, 2)
    with _RawCapture(cp) as s:
        y = cp.matmul(a, a)
    a[...] = cp.ones((2, 2), np.int64)
    s.graph.launch()
    np.testing.assert_array_equal(y.get(), np.full((2, 2), 2))


@needs_sim
@pytest.mark.parametrize("library, label", [("cublas", "cuBLAS"), ("curand", "cuRAND"), ("cusolver", "cuSOLVER"),
                                            ("cusparse", "cuSPARSE")])
def test_library_set_stream_refuses_a_capturing_stream(cp, library, label):
    lib = getattr(cp.cuda, library)
    lib.setStream(0, cp.cuda.Stream(non_blocking=True).ptr)  # fine outside a capture
    with _RawCapture(cp) as s:
        with pytest.raises(NotImplementedError, match=f"calling {label} API during stream capture is currently "
                                                      "unsupported"):
            lib.setStream(0, s.stream.ptr)


@needs_sim
def test_relaxed_mode_allocations_memsets_and_fills_are_captured(cp):
    with _RawCapture(cp) as s:  # no memory pool of the graph's own: CuPy's relaxed mode lets its pool allocate
        z = cp.zeros(4, np.float32)
        f = cp.full(3, 7.0, np.float32)
        c = cp.asarray(np.float32(2.5))  # a 0-d host value: a fill, no host copy
    assert s.end_error is None
    z[...] = cp.ones(4, np.float32)
    f.fill(0)
    c.fill(0)
    cuda_sim.reset_counters()
    s.graph.launch()
    assert cuda_sim.counters()["launches"] == 3 and cuda_sim.counters()["h2d"] == 0
    np.testing.assert_array_equal(z.get(), np.zeros(4))  # the replay ran the memset and the fills again
    np.testing.assert_array_equal(f.get(), np.full(3, 7.0))
    assert c.item() == 2.5


@needs_sim
def test_a_0d_host_value_is_a_fill_eagerly_too(cp):
    cuda_sim.reset_counters()
    x = cp.asarray(np.float64(3.0))
    assert (cuda_sim.counters()["launches"], cuda_sim.counters()["h2d"]) == (1, 0) and x.item() == 3.0


@needs_sim
@pytest.mark.parametrize("transfer", ["asarray", "set", "get", "item"])
def test_host_transfers_are_refused_by_cupy_while_capturing(cp, transfer):
    a = cp.zeros(3, np.float32)
    calls = {"asarray": lambda: cp.asarray(np.ones(3, np.float32)), "set": lambda: a.set(np.ones(3, np.float32)),
             "get": lambda: a.get(), "item": lambda: a[0].item()}
    direction = "H2D" if transfer in ("asarray", "set") else "D2H"
    with _RawCapture(cp) as s:
        with pytest.raises(RuntimeError, match=f"the current stream is capturing, so {direction} transfers are "
                                               "disallowed"):
            calls[transfer]()
    assert s.end_error is None  # refused by CuPy before any CUDA call: the capture stays valid


@needs_sim
@pytest.mark.parametrize("sync", ["stream", "device", "event"])
def test_a_sync_invalidates_the_capture(cp, sync):
    with _RawCapture(cp) as s:
        calls = {"stream": s.stream.synchronize, "device": cp.cuda.Device().synchronize,
                 "event": s.stream.record().synchronize}
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            calls[sync]()
    assert "cudaErrorStreamCaptureInvalidated" in str(s.end_error)


@needs_sim
def test_the_legacy_stream_refuses_capture(cp):
    with pytest.raises(RuntimeError, match=r"cannot capture on the default \(legacy\) stream"):
        cp.cuda.Stream.null.begin_capture()


@needs_sim
def test_nccl_unique_id_is_bytes(cp):
    uid = cp.cuda.nccl.get_unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128
    with pytest.raises(TypeError, match="bytes"):
        cp.cuda.nccl.NcclCommunicator(1, tuple(uid), 0)  # CuPy 13's tuple ids are refused
    cp.cuda.nccl.NcclCommunicator(1, uid, 0).destroy()


@needs_sim
def test_performance_warning_is_a_runtime_warning(cp):
    assert issubclass(cp._util.PerformanceWarning, RuntimeWarning)


@needs_sim
def test_generator_draws_are_kernels_that_capture_and_draw_anew_on_replay(cp):
    rng = cp.random.default_rng(0)
    with _RawCapture(cp) as s:
        u = rng.random(8, dtype=np.float32)
    s.graph.launch()
    first = u.get()
    s.graph.launch()
    assert not np.array_equal(u.get(), first) and ((0 <= first) & (first < 1)).all()


@needs_sim
def test_cublas_handles_are_per_device(cp):
    h = cp.cuda.device.get_cublas_handle()
    assert h == cp.cuda.get_cublas_handle() and isinstance(h, int) and h


def test_dlpack_round_trip_with_gpugrads_arrays(cp):
    x = gpugrad.arange(6.0, device="cuda").reshape(2, 3)
    y = cp.from_dlpack(x)
    y[0, 0] = 7.0
    assert x[0, 0].item() == 7.0  # the same memory
    z = gpugrad.from_dlpack(y)
    np.testing.assert_array_equal(z.cpu().numpy(), x.cpu().numpy())


# ---- gpugrad's own refusals: the same on the simulator and a GPU ------------------------------------------------------
@pytest.mark.parametrize("read", ["item", "float", "tolist", "cpu", "print", "numpy", "synchronize", "to_host"])
def test_host_reads_inside_a_capture_raise_gpugrads_error_naming_the_op(read):
    x = gpugrad.randn(3, device="cuda")
    reads = {"item": lambda: x.sum().item(), "float": lambda: float(x.sum()), "tolist": x.tolist,
             "cpu": x.cpu, "print": lambda: repr(x), "numpy": lambda: x.numpy(force=True),
             "synchronize": gpugrad.cuda.synchronize, "to_host": lambda: x._backend.to_host(x._data)}
    names = {"item": "Tensor.item()", "float": "Tensor.item()", "tolist": "Tensor.tolist()", "cpu": "copying a tensor to the CPU (Tensor.cpu(), .to('cpu'))",
             "print": "printing a tensor", "numpy": "Tensor.numpy()", "synchronize": "gpugrad.cuda.synchronize()",
             "to_host": "backend.to_host"}
    with pytest.raises(CaptureError) as info:
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            reads[read]()
    assert str(info.value).startswith(f"{names[read]} cannot be captured into a CUDA graph: it makes the host wait")
    assert not getattr(info.value, "__notes__", None)  # gpugrad refused first: the capture ended cleanly
    assert np.isfinite(x.sum().item())  # the device works as before


def test_the_bodys_error_wins_over_the_invalidated_capture(cp):
    with pytest.raises(ValueError, match="the body's own error") as info:
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            try:
                cp.cuda.get_current_stream().synchronize()  # an illegal call: CUDA invalidates the capture
            except Exception:
                pass
            raise ValueError("the body's own error")
    if cuda_sim.enabled():
        assert any("cudaErrorStreamCaptureInvalidated" in n for n in info.value.__notes__)


def test_host_to_device_copies_inside_a_capture_are_refused():
    with pytest.raises(CaptureError, match=r"backend\.asarray.* cannot be captured|cannot be captured.*backend\."
                                           r"asarray"):
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            gpugrad.tensor([1.0, 2.0], device="cuda")


def test_index_checks_without_status_words_are_refused(monkeypatch):
    from gpugrad.backend import status as deferred  # the status words live in backend/status.py

    monkeypatch.setattr(deferred, "_status", {})  # as in a fresh process: no checked op ran on the device yet
    x, t = gpugrad.randn(4, 3, device="cuda"), gpugrad.tensor([0, 1, 2, 0], device="cuda")
    with pytest.raises(CaptureError, match="cannot be captured into a CUDA graph: a device-side range check: the "
                                           "status words of cuda:0 does not exist yet.*warm-up"):
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            F.cross_entropy(x, t)


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_an_optimizer_without_warm_up_is_refused_naming_it(opt_name):
    model = nn.MLP([4, 8, 2]).to("cuda")
    opt = (gpugrad.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else gpugrad.optim.Adam(model.parameters()))
    x, t = gpugrad.randn(3, 4, device="cuda"), gpugrad.randint(0, 2, size=(3,), device="cuda")
    F.cross_entropy(model(x), t).backward()  # gradients exist; the optimizer never stepped
    name = type(opt).__name__
    with pytest.raises(CaptureError, match=rf"^{name}\.step\(\) cannot be captured into a CUDA graph: .* does not "
                                           r"exist yet.*warm-up steps"):
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            opt.step()
    assert not opt.state or all(not st for st in opt.state.values())  # nothing half made


def test_changing_an_option_inside_a_capture_is_refused():
    model = nn.MLP([4, 8, 2]).to("cuda")
    opt = gpugrad.optim.Adam(model.parameters())
    x, t = gpugrad.randn(3, 4, device="cuda"), gpugrad.randint(0, 2, size=(3,), device="cuda")
    F.cross_entropy(model(x), t).backward()
    opt.step()  # warm-up
    opt.param_groups[0]["lr"] = 0.5
    with pytest.raises(CaptureError, match=r"Adam\.step\(\) cannot be captured.*options changed.*between replays"):
        with gpugrad.cuda.graph(gpugrad.cuda.CUDAGraph()):
            opt.step()


def test_the_benchs_graphed_step_equals_its_eager_step():
    from gpugrad.backend import get_backend
    from gpugrad.bench.workloads import mlp as suites  # the MLP step workloads

    rng = np.random.default_rng(0)
    sizes = (12, 16, 5)
    host = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((16, 12), (16,), (5, 16), (5,))]
    x, t = rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 5, 8)
    be = get_backend("cuda")
    step, _ = suites._gpugrad_mlp_step(be, host, sizes, x, t, 0.1, set_to_none=False)
    eager = [step().item() for _ in range(4)]
    replay = suites._graphed_mlp_step(be, host, sizes, x, t, 0.1)
    graphed = [replay().item() for _ in range(4)]
    if cuda_sim.enabled():  # the same arithmetic replayed
        assert graphed == eager
    else:
        np.testing.assert_allclose(graphed, eager, rtol=1e-5)


class _TorchLikeProducer:
    """What CuPy's consumer side hands a CUDA producer such as a torch CUDA tensor: the stream it asks for."""

    def __init__(self, array):
        self.array, self.streams = array, []

    def __dlpack_device__(self):
        return 2, 0

    def __dlpack__(self, *, stream=None):  # an older producer: no max_version, CuPy retries without it
        self.streams.append(stream)
        return self.array.__dlpack__(stream=stream)


@needs_sim
def test_dlpack_consumers_pass_their_stream_and_producers_check_it(cp):
    x = cp.arange(3, dtype=np.float32)
    producer = _TorchLikeProducer(x)
    assert cp.from_dlpack(producer) is x and producer.streams == [1]  # the legacy stream, as 1
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        cp.from_dlpack(producer)
    assert producer.streams[-1] == s.ptr
    with pytest.raises(ValueError, match="valid stream for the DLPack protocol"):
        x.__dlpack__(stream=-2)
    t = gpugrad.from_dlpack(producer)  # gpugrad's consumer goes through CuPy's
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(3))


def test_dropout_captures_and_each_replay_draws_a_new_mask():
    x = gpugrad.ones(256, device="cuda")
    F.dropout(x, 0.5)  # warm-up: the device's generator exists before capture
    g = gpugrad.cuda.CUDAGraph()
    with gpugrad.cuda.graph(g):
        y = F.dropout(x, 0.5)  # CuPy's Generator draws with its own kernels (RULES.md, rule 12)
    g.replay()
    first = y.cpu().numpy()
    g.replay()
    second = y.cpu().numpy()
    assert set(np.unique(first)) <= {0.0, 2.0} and 0 < (first == 0).sum() < 256
    assert not np.array_equal(first, second)
