"""Device-agnostic habits: ``torch.accelerator`` (pytorch/examples pick their device with it), ``torch.cuda``'s
seeds and generator states, ``torch.compile`` (accepted; gpugrad runs eagerly) and the ``RemovableHandle`` that
every hook registration returns (tests/compat/harness.py where torch's CPU build can answer the same)."""
from __future__ import annotations

import pytest

import gpugrad
from tests.compat.harness import compat

# --- torch.accelerator ---------------------------------------------------------------------------------------------

@compat
def test_the_pytorch_examples_device_line_without_an_accelerator(torch):
    device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
    return device, torch.accelerator.device_count(), torch.accelerator.current_accelerator(), \
        torch.accelerator.current_accelerator(check_available=True)


@pytest.mark.parametrize("name", ["current_device_index", "synchronize", "current_device_idx"])
def test_accelerator_queries_without_one_raise_as_torch(name, torch, monkeypatch):
    monkeypatch.setattr(gpugrad.cuda, "is_available", lambda: False)
    for lib in (torch, gpugrad):
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
            getattr(lib.accelerator, name)()
    with pytest.raises(RuntimeError, match="none is available"):
        gpugrad.accelerator.set_device_index(0)


@pytest.mark.gpu
def test_accelerator_on_cuda():
    acc = gpugrad.accelerator
    assert acc.is_available() and acc.current_accelerator().type == "cuda"
    assert acc.device_count() == gpugrad.cuda.device_count() >= 1
    assert acc.current_device_index() == 0
    acc.set_device_index(0)
    with acc.device_index(0):
        assert gpugrad.zeros(2, device=acc.current_accelerator()).device == gpugrad.device("cuda", 0)
    acc.synchronize()
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        acc.set_device_index(acc.device_count())


@pytest.mark.gpu
def test_set_device_chooses_what_cuda_means():
    n = gpugrad.cuda.device_count()
    last = n - 1
    try:
        gpugrad.cuda.set_device(last)
        assert gpugrad.cuda.current_device() == last
        assert gpugrad.zeros(1, device="cuda").device == gpugrad.device("cuda", last)
    finally:
        gpugrad.cuda.set_device(0)
    assert gpugrad.zeros(1, device="cuda").device == gpugrad.device("cuda", 0)


# --- torch.cuda seeds and generator states --------------------------------------------------------------------------

def test_cuda_seeds_can_be_set_without_a_gpu(torch):
    for lib in (torch, gpugrad):
        assert lib.cuda.manual_seed(3) is None and lib.cuda.manual_seed_all(3) is None


@pytest.mark.gpu
def test_cuda_manual_seed_repeats_the_draws_and_initial_seed_reports_it():
    gpugrad.cuda.manual_seed(123)
    a = gpugrad.rand(5, device="cuda").cpu().tolist()
    assert gpugrad.cuda.initial_seed() == 123
    gpugrad.cuda.manual_seed_all(123)
    assert gpugrad.rand(5, device="cuda").cpu().tolist() == a
    gpugrad.cuda.seed()
    assert gpugrad.cuda.initial_seed() != 123
    gpugrad.cuda.seed_all()
    gpugrad.manual_seed(123)  # the global seed reseeds the CUDA generators too, as torch's
    assert gpugrad.rand(5, device="cuda").cpu().tolist() == a


@pytest.mark.gpu
def test_cuda_rng_state_restores_the_stream():
    gpugrad.cuda.manual_seed(7)
    gpugrad.randn(3, device="cuda")
    state = gpugrad.cuda.get_rng_state()
    assert state.device.type == "cpu" and state.dtype == gpugrad.uint8
    after = gpugrad.randn(4, device="cuda").cpu().tolist()
    gpugrad.randn(10, device="cuda")
    gpugrad.cuda.set_rng_state(state)
    assert gpugrad.randn(4, device="cuda").cpu().tolist() == after
    states = gpugrad.cuda.get_rng_state_all()
    assert len(states) == gpugrad.cuda.device_count()
    again = gpugrad.rand(2, device="cuda").cpu().tolist()
    gpugrad.cuda.set_rng_state_all(states)
    assert gpugrad.rand(2, device="cuda").cpu().tolist() == again
    with pytest.raises(RuntimeError, match="expected a state from Generator.get_state"):
        gpugrad.cuda.set_rng_state(gpugrad.get_rng_state())  # a CPU generator's state


def test_cpu_rng_state_restores_the_stream(torch):
    for lib in (torch, gpugrad):
        lib.manual_seed(5)
        state = lib.get_rng_state()
        first = lib.rand(3).tolist()
        lib.set_rng_state(state)
        assert lib.rand(3).tolist() == first
        g = lib.Generator().manual_seed(9)
        s = g.get_state()
        x = lib.randn(2, generator=g).tolist()
        g.set_state(s)
        assert lib.randn(2, generator=g).tolist() == x and g.initial_seed() == 9


# --- torch.compile -------------------------------------------------------------------------------------------------
# NOTE: not run with torch: torch.compile really compiles (a minute on this machine); gpugrad's differs on purpose
# (README: it returns what it is given, where torch wraps it in an OptimizedModule)

def test_compile_takes_torchs_keywords(torch):
    import inspect
    theirs = set(inspect.signature(torch.compile).parameters)
    ours = set(inspect.signature(gpugrad.compile).parameters)
    assert {"model", "fullgraph", "dynamic", "backend", "mode", "options", "disable"} <= theirs & ours


def test_compile_returns_the_module_or_function_unchanged():
    model = gpugrad.nn.Linear(3, 2)
    assert gpugrad.compile(model) is model

    def f(x):
        return x * 2 + 1

    assert gpugrad.compile(f, mode="reduce-overhead", fullgraph=True, dynamic=False, backend="inductor") is f

    @gpugrad.compile
    def h(x):
        return x - 1

    @gpugrad.compile(mode="max-autotune")
    def k(x):
        return x.sin()

    x = gpugrad.arange(3.0)
    assert h(x).tolist() == [-1.0, 0.0, 1.0] and k.__name__ == "k" and gpugrad.compile(disable=True)(f) is f
    with pytest.raises(AssertionError, match="A callable function is expected"):
        gpugrad.compile(3)


# --- hook handles --------------------------------------------------------------------------------------------------

@compat
def test_every_hook_registration_returns_a_removable_handle(torch):
    handle_type = torch.utils.hooks.RemovableHandle
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    m = torch.nn.Linear(2, 2)
    handles = [x.register_hook(lambda g: g), y.register_hook(lambda g: g),
               x.register_post_accumulate_grad_hook(lambda t: None), m.register_forward_hook(lambda *a: None),
               m.register_forward_pre_hook(lambda *a: None), m.register_full_backward_hook(lambda *a: None),
               m.register_full_backward_pre_hook(lambda *a: None)]
    return [type(h).__name__ for h in handles], all(isinstance(h, handle_type) for h in handles), \
        len({h.id for h in handles}) == len(handles)


@compat
def test_a_removed_hook_no_longer_runs_and_removing_twice_is_harmless(torch):
    x = torch.ones(2, requires_grad=True)
    seen = []
    h = x.register_hook(lambda g: seen.append(g.sum().item()))
    (x * 3).sum().backward()
    h.remove()
    h.remove()
    (x * 3).sum().backward()
    with x.register_hook(lambda g: g * 0) as h2:
        (x * 1).sum().backward()
    (x * 1).sum().backward()
    return seen, x.grad, h2.id > h.id


@compat
def test_a_handle_made_by_hand_removes_from_its_dict(torch):
    import collections
    hooks = collections.OrderedDict()
    h = torch.utils.hooks.RemovableHandle(hooks)
    hooks[h.id] = "hook"
    extra = collections.OrderedDict({h.id: "also"})
    h2 = torch.utils.hooks.RemovableHandle(hooks, extra_dict=extra)
    hooks[h2.id] = "second"
    extra[h2.id] = "x"
    h2.remove()
    h.remove()
    return len(hooks), list(extra.values())


@compat
def test_clone_records_clone_backward(torch):
    return torch.ones(2, requires_grad=True).clone().grad_fn.name()
