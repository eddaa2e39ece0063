import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


# ---- appended for the gpugrad.bench workloads (bench_elementwise/reduce/softmax_xent/matmul/optim.py) ------------------
# Each benchmark group is one workload on one device; its members are the implementations (kernel or gpugrad,
# baseline, torch), so pytest-benchmark's per-group ratios compare them in the same run.
import pytest  # noqa: E402

import gpugrad  # noqa: E402


_TORCH_LEFT_OUT = pytest.StashKey[str]()


def pytest_collection_modifyitems(config, items):
    """Skip gpu-marked benchmarks without CUDA, with the reason (tests/conftest.py does it for tests/). With CUDA,
    leave out the PyTorch peers on it when PyTorch cannot run there (a CPU-only wheel; the simulated device): such a
    peer cannot exist on this machine, so a GPU run deselects it (said in the summary) rather than skipping it."""
    if not gpugrad.cuda.is_available():
        skip = pytest.mark.skip(reason=f"no CUDA device: {gpugrad.cuda.unavailable_reason()}")
        for item in items:
            if item.get_closest_marker("gpu") is not None or item.get_closest_marker("cuda") is not None:
                item.add_marker(skip)
        return
    here = Path(__file__).parent

    def torch_on_cuda(item):
        params = item.callspec.params if hasattr(item, "callspec") else {}
        return params.get("impl") == "torch" and params.get("device") == "cuda" and here in item.path.parents

    peers = [item for item in items if torch_on_cuda(item)]
    if peers:
        from gpugrad.bench.workloads.torch_peer import torch_unavailable_reason

        reason = torch_unavailable_reason("cuda")
        if reason:
            items[:] = [item for item in items if not torch_on_cuda(item)]
            config.hook.pytest_deselected(items=peers)
            config.stash[_TORCH_LEFT_OUT] = f"{len(peers)} PyTorch-on-CUDA benchmarks deselected: {reason}"


def pytest_terminal_summary(terminalreporter, config):
    if _TORCH_LEFT_OUT in config.stash:
        terminalreporter.write_line(f"benchmarks/conftest.py: {config.stash[_TORCH_LEFT_OUT]}")


class _OneCall:
    """pytest-benchmark's ``benchmark`` as it behaves under --benchmark-disable: the function runs once and nothing
    is measured (``stats`` stays None), so every bench_* file still runs as a smoke test without the plugin."""

    disabled = True

    def __init__(self):
        self.group, self.extra_info, self.stats = None, {}, None

    def __call__(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def pedantic(self, target, args=(), kwargs=None, setup=None, teardown=None, rounds=1, warmup_rounds=0,
                 iterations=1):
        if setup is not None:
            args, kwargs = setup() or (args, kwargs)
        return target(*args, **(kwargs or {}))


class _BenchmarkFallback:
    @pytest.fixture
    def benchmark(self):
        return _OneCall()


def pytest_configure(config):
    # NOTE: ask for the plugin's option, not for the package: it may be installed yet not loaded
    # (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1, -p no:benchmark), and a conftest fixture would shadow the real one.
    if not hasattr(config.option, "benchmark_disable"):
        config.pluginmanager.register(_BenchmarkFallback(), "gpugrad-benchmark-fallback")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return request.param


@pytest.fixture
def bench(benchmark):
    """bench(group, build, device, nbytes=None, flops=None): time build() (a zero-argument callable; LookupError
    skips with its reason) in ``group``; GPU work is synchronized per call; GB/s or GFLOP/s go to extra_info."""
    from gpugrad.backend import get_backend
    from gpugrad.bench.timing import synced

    def run(group, build, device, nbytes=None, flops=None):
        try:
            fn = synced(build(), get_backend(device))
        except LookupError as e:
            pytest.skip(str(e))
        benchmark.group = group
        benchmark(fn)
        if not benchmark.disabled:
            median = benchmark.stats.stats.median
            if nbytes:
                benchmark.extra_info["GB/s"] = round(nbytes / median / 1e9, 2)
            if flops:
                benchmark.extra_info["GFLOP/s"] = round(flops / median / 1e9, 2)

    return run


@pytest.fixture
def bench_kernel(bench, benchmark):
    """One kernel case (gpugrad.bench.workloads.kernels.KERNELS) and implementation on a device."""
    from gpugrad.bench.workloads.inputs import bench_shape, bytes_moved, shared_inputs
    from gpugrad.bench.workloads.kernels import kernel_workload

    def run(case, impl, device):
        inputs = shared_inputs(device, *bench_shape(device, not benchmark.disabled))
        nbytes = None
        if not benchmark.disabled:  # the launcher's traffic, for every implementation in the group alike
            fn, args = kernel_workload(case, "kernel", inputs)
            nbytes = bytes_moved(args, fn(), case.inplace)
        bench(f"kernel {case.id} [{device}]", lambda: kernel_workload(case, impl, inputs)[0], device,
              nbytes=nbytes)

    return run


@pytest.fixture
def bench_op(bench, benchmark):
    """One autograd op case (gpugrad.bench.workloads.ops.OPS), forward + backward, and implementation on a device."""
    from gpugrad.bench.workloads.inputs import bench_shape, shared_inputs
    from gpugrad.bench.workloads.ops import op_workload

    def run(case, impl, device, shape=None):
        shape = shape or bench_shape(device, not benchmark.disabled)
        inputs = shared_inputs(device, *shape)
        bench(f"op {case.name} fwd+bwd [{device}]", lambda: op_workload(case, impl, inputs), device)

    return run
