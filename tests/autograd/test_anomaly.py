"""Anomaly mode (gpugrad/autograd/anomaly.py), as torch.autograd.detect_anomaly: the node whose backward made a NaN
or inf is named, with the file and line of the forward call that made it; on CUDA (pytest -m gpu, in CI on the
simulated device) the checks cost one sync per backward and none per node."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import gpugrad
import gpugrad.nn as nn
import gpugrad.nn.functional as F
from gpugrad import autograd
from gpugrad.testing import cuda_sim

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_sim = pytest.mark.skipif(not cuda_sim.enabled(), reason="the counters exist on the simulated device only "
                                                              "(GPUGRAD_CUDA_SIM=1)")
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")  # NumPy on the NaN-making forwards


@pytest.fixture(autouse=True)
def _anomaly_off():
    """Every test starts and ends with anomaly mode off, whatever it left behind."""
    autograd.set_detect_anomaly(False)
    yield
    assert not autograd.is_anomaly_enabled(), "a test left anomaly mode on"


def here():
    return sys._getframe(1).f_lineno


def forward_line(line):
    return f'File "{__file__}", line {line}, in '


def leaf(values, device):
    return gpugrad.tensor(values, device=device, requires_grad=True)


@pytest.mark.parametrize("device", DEVICES)
def test_sqrt_of_a_negative_names_sqrt_backward_and_the_forward_line(device):
    x = leaf([-1.0, 4.0], device)
    with autograd.detect_anomaly():
        y = x.sqrt(); line = here()  # noqa: E702
        with pytest.raises(RuntimeError) as info:
            y.sum().backward()
    msg = str(info.value)
    assert msg.startswith("Function 'SqrtBackward0' returned nan values in its 0th output.\n"
                          "Traceback of forward call that caused the error:\n")
    assert forward_line(line) + "test_sqrt_of_a_negative_names_sqrt_backward_and_the_forward_line" in msg
    assert "y = x.sqrt(); line = here()" in msg  # the source line, as in a Python traceback


@pytest.mark.parametrize("device", DEVICES)
def test_zero_over_zero_names_div_backward_and_its_output(device):
    a, b = leaf([0.0, 1.0], device), leaf([0.0, 2.0], device)
    with autograd.detect_anomaly():
        z = a / b; line = here()  # noqa: E702
        with pytest.raises(RuntimeError, match=r"^Function 'DivBackward0' returned nan values in its 1th output") \
                as info:
            (z * 3).sum().backward()  # MulBackward0 runs first and is finite
    assert forward_line(line) in str(info.value)


@pytest.mark.parametrize("device", DEVICES)
def test_an_infinite_gradient_is_an_anomaly_too(device):
    x = leaf([0.0, 4.0], device)
    with autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="'SqrtBackward0' returned inf values in its 0th"):
            x.sqrt().sum().backward()
        x = leaf([1.0, 4.0], device)
        x.sqrt().sum().backward()  # the same rows of the reused flags array, flagged by the last backward: stale now
    np.testing.assert_allclose(x.grad.cpu().numpy(), [0.5, 0.25])


@pytest.mark.parametrize("device", DEVICES)
def test_the_first_node_to_run_with_a_bad_output_is_named(device):
    """Every node after the first bad one sees NaN too; the first, in execution order, is named (on CUDA, where all
    of them run before the flags are read, as on the CPU, which stops at it)."""
    x = leaf([-1.0, 4.0], device)
    with autograd.detect_anomaly():
        y = x.sqrt()
        z = y * y; line = here()  # noqa: E702  (z's backward gy * y is NaN where y is)
        with pytest.raises(RuntimeError, match="^Function 'MulBackward0' returned nan") as info:
            z.sum().backward()
    assert forward_line(line) in str(info.value)


@pytest.mark.parametrize("device", DEVICES)
def test_finite_gradients_raise_nothing_and_are_unchanged(device):
    def grads(anomaly):
        gpugrad.manual_seed(0)
        model = nn.MLP([5, 8, 3]).to(device)
        x, t = gpugrad.randn(4, 5, device=device), gpugrad.randint(0, 3, size=(4,), device=device)
        with autograd.set_detect_anomaly(anomaly):
            F.cross_entropy(model(x), t).backward()
        return [p.grad.cpu().numpy() for p in model.parameters()]

    for got, want in zip(grads(True), grads(False)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_create_graph(device):
    x = leaf([1.0, 4.0], device)
    with autograd.detect_anomaly():
        (g,) = autograd.grad((x ** 3).sum(), x, create_graph=True)
        g.sum().backward()  # d/dx 3x^2 = 6x, through the graph of the first gradient
    np.testing.assert_allclose(x.grad.cpu().numpy(), [6.0, 24.0])
    with autograd.detect_anomaly():
        (g,) = autograd.grad(x.sqrt().sum(), x, create_graph=True)  # 1 / (2 sqrt(x))
        h = (g * 0 - 1).sqrt(); line = here()  # noqa: E702  NaN values, then NaN gradients
        with pytest.raises(RuntimeError, match="^Function 'SqrtBackward0' returned nan") as info:
            h.sum().backward()
    assert forward_line(line) in str(info.value)


def test_context_manager_decorator_and_set_detect_anomaly():
    assert not autograd.is_anomaly_enabled()
    with autograd.detect_anomaly() as mode:
        assert autograd.is_anomaly_enabled() and autograd.is_anomaly_check_nan_enabled()
        with autograd.detect_anomaly(check_nan=False):
            assert autograd.is_anomaly_enabled() and not autograd.is_anomaly_check_nan_enabled()
        assert autograd.is_anomaly_check_nan_enabled()
        with autograd.set_detect_anomaly(False):
            assert not autograd.is_anomaly_enabled()
        assert autograd.is_anomaly_enabled()
    assert isinstance(mode, autograd.detect_anomaly) and not autograd.is_anomaly_enabled()

    @autograd.detect_anomaly()
    def step(x):
        assert autograd.is_anomaly_enabled()
        x.sqrt().sum().backward()

    with pytest.raises(RuntimeError, match="SqrtBackward0"):
        step(leaf([-1.0], "cpu"))
    assert not autograd.is_anomaly_enabled()

    @autograd.set_detect_anomaly(True)
    def on():
        return autograd.is_anomaly_enabled()

    assert not autograd.is_anomaly_enabled() and on() and not autograd.is_anomaly_enabled()
    autograd.set_detect_anomaly(True)  # as a function: in effect at once, until turned off
    assert autograd.is_anomaly_enabled()
    x = leaf([-1.0], "cpu")
    with pytest.raises(RuntimeError, match="SqrtBackward0"):
        x.sqrt().sum().backward()
    autograd.set_detect_anomaly(False)
    x.sqrt().sum().backward()  # off: NaN gradients pass, as without anomaly mode
    assert np.isnan(x.grad.cpu().numpy()).all()


def test_check_nan_false_keeps_the_traces_and_skips_the_checks():
    x = leaf([-1.0], "cpu")
    with autograd.detect_anomaly(check_nan=False):
        y = x.sqrt()
        y.sum().backward()
    assert np.isnan(x.grad.cpu().numpy()).all() and y.grad_fn._anomaly_stack


def test_a_node_made_before_anomaly_mode_has_no_forward_trace():
    y = leaf([-1.0], "cpu").sqrt()
    with autograd.detect_anomaly(), pytest.raises(RuntimeError, match="No forward pass information available"):
        y.sum().backward()


def test_an_error_raised_by_a_backward_gets_the_forward_trace():
    x = leaf([1.0, 2.0], "cpu")
    with autograd.detect_anomaly():
        y = x.exp(); line = here()  # noqa: E702  exp saves its output...
        z = y.sum()
        with gpugrad.no_grad():
            y.mul_(2)  # ...which is then changed in place
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            z.backward()
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "Error detected in ExpBackward0. Traceback of forward call" in text and forward_line(line) in text


def test_a_custom_function_is_named_with_its_forward_line():
    class Log(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.log()

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            return gy / x

    x = leaf([0.0, 1.0], "cpu")
    with autograd.detect_anomaly():
        y = Log.apply(x); line = here()  # noqa: E702
        with pytest.raises(RuntimeError, match="^Function 'LogBackward' returned inf values in its 0th") as info:
            y.sum().backward()
    assert forward_line(line) in str(info.value)


def test_the_stack_holds_code_objects_not_frames():
    """A frame would keep its locals alive (tensors included) as long as the graph lives."""
    with autograd.detect_anomaly():
        y = leaf([1.0], "cpu").exp()
    stack = y.grad_fn._anomaly_stack
    assert stack and all(type(c).__name__ == "code" for c in stack[0::2]) and all(type(n) is int for n in stack[1::2])
    assert sys._getframe().f_code in stack[0::2]


# ---- CUDA: one sync per backward, none per node ------------------------------------------------------------------
def _mlp(batch=64):
    gpugrad.manual_seed(0)
    model = nn.MLP([784, 1024, 1024, 10]).to("cuda")
    x, t = gpugrad.randn(batch, 784, device="cuda"), gpugrad.randint(0, 10, size=(batch,), device="cuda")
    return model, x, t


@needs_sim
@pytest.mark.gpu
@pytest.mark.parametrize("batch", [64, 512])
def test_anomaly_mode_costs_one_sync_per_backward_and_one_launch_per_node(batch):
    model, x, t = _mlp(batch)

    def backward(anomaly):
        model.zero_grad()
        loss = F.cross_entropy(model(x), t)
        with autograd.set_detect_anomaly(anomaly):
            cuda_sim.reset_counters()
            with cuda_sim.trace() as events:
                loss.backward()
        return cuda_sim.counters(), events

    backward(True)  # the first checked backward makes the flags array (reused after that)
    off, _ = backward(False)
    on, events = backward(True)
    nodes = 6  # cross-entropy, 3 x addmm, 2 x bias + relu
    checks = [w for e, w in events if e == "launch" and w.startswith("check_finite")]
    assert (off["syncs"], on["syncs"], on["d2h"]) == (0, 1, 1)
    assert len(checks) == nodes and on["launches"] == off["launches"] + nodes
    assert on["allocs"] == off["allocs"]  # no copies of strided gradients, no new flags array
    assert [e for e, _ in events if e in ("sync", "launch")][-1] == "sync"  # the read comes after the last check


@needs_sim
@pytest.mark.gpu
def test_no_sync_happens_inside_any_node():
    """The one sync is the engine's read after the last node: forbid syncs around every node's VJP and check, and
    none fires; the read itself is the backward's only sync."""
    from gpugrad.core import anomaly, op as function

    model, x, t = _mlp()
    run_backward, check = function.Op.run_backward, anomaly._Checker.__call__

    def guarded(f):
        def run(self, *args):
            with cuda_sim.forbid_syncs(f"{f.__qualname__} under anomaly mode"):
                return f(self, *args)
        return run

    function.Op.run_backward, anomaly._Checker.__call__ = guarded(run_backward), guarded(check)
    try:
        with autograd.detect_anomaly():
            loss = F.cross_entropy(model(x), t)
            cuda_sim.reset_counters()
            loss.backward()
    finally:
        function.Op.run_backward, anomaly._Checker.__call__ = run_backward, check
    assert cuda_sim.counters()["syncs"] == 1


@needs_sim
@pytest.mark.gpu
def test_a_nan_on_cuda_is_found_among_many_nodes_with_one_sync():
    x = leaf(np.linspace(0.5, 2, 12).reshape(3, 4), "cuda")
    with autograd.detect_anomaly():
        h = x
        for _ in range(20):
            h = (h * 1.01).tanh() + h
        bad = h.log() - (x - x).sqrt(); line = here()  # noqa: E702  sqrt(0): an infinite gradient, 1 / 0
        loss = (bad.t() @ bad).sum()  # transposed gradients flow through the dense-view path
        gpugrad.cuda.synchronize()  # reads range checks left armed by earlier tests (read first on a failure)
        cuda_sim.reset_counters()
        with pytest.raises(RuntimeError, match=r"^Function 'SqrtBackward0' returned inf values in its 0th") as info:
            loss.backward()
    assert cuda_sim.counters()["syncs"] == 1 and forward_line(line) in str(info.value)
