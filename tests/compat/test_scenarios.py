"""Scenarios: plain PyTorch scripts of our own, each written as a PyTorch user writes one (``import torch``,
``import torch.nn as nn``, ``from torch.utils.data import ...``), run once with PyTorch and once with gpugrad under
every ``torch.*`` name (``scenario_runner.py`` says how, and how both runs draw the same random numbers).

Both runs must print the same lines (numbers within the scenario's tolerance, ``gpugrad.`` read as ``torch.``, object
addresses ignored) and end with the same module-level Tensors (shape, dtype, values) and Modules (parameter names,
shapes, values). A scenario that needs what gpugrad lacks is an xfail naming it (``missing``), and a test below fails
as soon as gpugrad has it, so the xfail goes with the gap.

See every difference of one scenario: ``python tests/compat/test_scenarios.py cubic_fit_four_ways``.
"""
from __future__ import annotations

import importlib
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import gpugrad
from tests.compat.scenario_runner import Tolerance, compare, output_differences, run, scope_differences

HERE = Path(__file__).resolve().parent / "scenarios"


@dataclass(frozen=True)
class Scenario:
    name: str
    tol: Tolerance = Tolerance()
    slow: bool = False  # over ~10 s for both runs on a 2-core CPU: run with -m slow
    # what gpugrad lacks for it, as paths under gpugrad ("multinomial", "nn.functional.one_hot", "linalg"): an
    # xfail until every one exists
    missing: tuple = ()
    # a behaviour gpugrad gets wrong that no missing name covers: an xfail saying what differs
    differs: str = ""
    # picks its device with torch.cuda.is_available() or leaves it to the library: also run with gpugrad's tensors on
    # CUDA (the GPU's default device in gpugrad), against torch's run on the CPU
    on_cuda: bool = False

    def params(self):
        marks = [pytest.mark.slow] if self.slow else []
        if self.missing or self.differs:
            reason = "; ".join(([f"missing: {', '.join(self.missing)}"] if self.missing else []) +
                               ([self.differs] if self.differs else []))
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        return pytest.param(self, marks=marks, id=self.name)


LOOSE = Tolerance(rtol=1e-3)  # training loops of a few hundred float32 steps

SCENARIOS = [
    Scenario("tensor_basics"),
    Scenario("autograd_basics", on_cuda=True),
    Scenario("cubic_fit_four_ways", LOOSE, on_cuda=True),
    Scenario("dynamic_depth", LOOSE, on_cuda=True),
    Scenario("build_model", on_cuda=True),
    Scenario("two_layer_net_three_ways", LOOSE, on_cuda=True),
    Scenario("bigram_counts"),
    Scenario("bigram_neural", LOOSE),
    # not on_cuda: its torch.Generator() is a CPU one, and gpugrad's default device on a GPU is CUDA (torch, with
    # torch.set_default_device("cuda"), refuses a CPU generator for a CUDA draw the same way)
    Scenario("mlp_language_model", LOOSE),
    Scenario("custom_function_outputs"),
    Scenario("func_transforms"),
    Scenario("dataloader_training", LOOSE, on_cuda=True),
    Scenario("save_and_resume", on_cuda=True),
]


@pytest.mark.parametrize("scenario", [s.params() for s in SCENARIOS])
def test_scenario_runs_as_with_torch(scenario):
    compare(HERE / f"{scenario.name}.py", scenario.tol)


@pytest.mark.gpu
@pytest.mark.parametrize("scenario", [s.params() for s in SCENARIOS if s.on_cuda])
def test_scenario_on_cuda_matches_torch_on_the_cpu(scenario):
    compare(HERE / f"{scenario.name}.py", scenario.tol, device="cuda")


def test_every_scenario_script_is_in_the_table():
    assert {p.stem for p in HERE.glob("*.py")} == {s.name for s in SCENARIOS}


def _has(path):
    """Whether ``gpugrad.<path>`` exists, as an attribute or as a submodule that ``import gpugrad`` does not load
    (``gpugrad.linalg`` may be one)."""
    owner, parts = gpugrad, path.split(".")
    for i, part in enumerate(parts):
        if not hasattr(owner, part):
            try:
                owner = importlib.import_module(".".join(["gpugrad", *parts[:i + 1]]))
                continue
            except ImportError:
                return False
        owner = getattr(owner, part)
    return True


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.missing], ids=lambda s: s.name)
def test_a_missing_name_is_still_missing(scenario):
    """When gpugrad gains a name, the xfail that waits for it must be updated (or removed): run the scenario."""
    assert _has("nn.functional.relu") and _has("utils.data.DataLoader") and _has("func.vmap")
    assert not _has("nn.no_such_layer") and not _has("func.no_such_transform")
    arrived = [m for m in scenario.missing if _has(m)]
    assert not arrived, f"gpugrad now has {arrived}: update {scenario.name}'s row in SCENARIOS"


def _script(tmp_path, source):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    return path


def test_the_gpugrad_run_sees_gpugrad_under_every_torch_name(tmp_path, torch):
    path = _script(tmp_path, """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.utils.data import DataLoader
        from torch.optim import SGD
        print(torch.__name__, nn.__name__, F.__name__, DataLoader.__module__, SGD.__module__)
        import torch.no_such_module
    """)
    ours = run(path, "gpugrad")
    names = ours.out.split()
    assert names[:3] == ["gpugrad", "gpugrad.nn", "gpugrad.nn.functional"], names
    assert all(n.startswith("gpugrad.") for n in names[3:]), names
    assert isinstance(ours.error, ModuleNotFoundError) and "torch.no_such_module" in str(ours.error)
    assert sys.modules["torch"] is torch and gpugrad.__spec__.name == "gpugrad"  # all put back
    assert run(path, "torch").out.split()[0] == "torch"


def test_seeded_draws_line_up_with_torch(tmp_path):
    """Global and Generator seeds, reseeding, nn.init, in-place fills and shuffled epochs give torch's numbers."""
    compare(_script(tmp_path, """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(3)
        a = torch.randn(4, 3)
        g = torch.Generator().manual_seed(11)
        b = torch.rand(5, generator=g)
        c = torch.randint(0, 9, (6,), generator=g)
        g.manual_seed(11)
        again = torch.rand(5, generator=g)
        layer = nn.Linear(3, 2)
        filled = torch.empty(3, 3).uniform_(-2, 2)
        loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=4, shuffle=True)
        for epoch in range(2):
            print([batch.tolist() for (batch,) in loader])
        after = torch.randperm(7)
    """))


def test_output_comparison_catches_a_changed_number_and_changed_text():
    tol = Tolerance(rtol=1e-3)
    assert not output_differences("99 1.0001e3\n<Mul object at 0x1f>", "99 1000.0\n<Mul object at 0x2e>", tol)
    assert output_differences("99 1.01e3", "99 1000.0", tol)
    assert output_differences("tensor([1., 2.])", "tensor([1., 2.], grad_fn=<AddBackward0>)", tol)
    assert output_differences("a\nb", "a", tol)
    # gpugrad's tensors on a GPU, torch's on the CPU: the device and the wrapping it moves are not differences
    on_gpu = "w: tensor([1.0000, 2.0000], device='cuda:0',\n       requires_grad=True) ok\nnext"
    on_cpu = "w: tensor([1.0000, 2.0000], requires_grad=True) ok\nnext"
    assert not output_differences(on_gpu, on_cpu, tol, "cuda")
    assert output_differences(on_gpu, on_cpu.replace("2.0000", "2.5000"), tol, "cuda")
    assert output_differences(on_gpu, on_cpu.replace("\nnext", ""), tol, "cuda")
    assert output_differences(on_gpu.replace("cuda:0", "cpu"), on_cpu, tol, "cuda")
    assert output_differences(on_gpu, on_cpu, tol)  # on the CPU every character counts


def test_scope_comparison_catches_a_changed_value_dtype_and_parameter(torch):
    tol = Tolerance()
    theirs = {"w": torch.ones(3), "net": torch.nn.Linear(2, 1), "n": 3}
    net = gpugrad.nn.Linear(2, 1)
    with gpugrad.no_grad():
        net.weight.copy_(gpugrad.tensor(theirs["net"].weight.detach().numpy()))
        net.bias.copy_(gpugrad.tensor(theirs["net"].bias.detach().numpy()))
    assert not scope_differences({"w": gpugrad.ones(3), "net": net}, theirs, tol, torch)
    assert scope_differences({"w": gpugrad.ones(3) * 1.01, "net": net}, theirs, tol, torch)
    assert scope_differences({"w": gpugrad.ones(3, dtype=gpugrad.float64), "net": net}, theirs, tol, torch)
    assert scope_differences({"w": gpugrad.ones(3), "net": gpugrad.nn.Linear(2, 1)}, theirs, tol, torch)
    assert scope_differences({"net": net}, theirs, tol, torch)  # w missing


if __name__ == "__main__":  # python tests/compat/test_scenarios.py [name ...]: every difference from torch
    for s in SCENARIOS:
        if len(sys.argv) == 1 or s.name in sys.argv[1:]:
            try:
                compare(HERE / f"{s.name}.py", s.tol)
                print(f"{s.name}: same as torch")
            except AssertionError as e:
                print(f"{s.name}: {e}")
