"""Real PyTorch tutorials, unchanged, run once with PyTorch and once with ``import gpugrad as torch``.

Each script in ``tutorials/`` is a verbatim copy of a public PyTorch tutorial (its header names the source commit,
author and license). For the gpugrad run every ``gpugrad.*`` module is installed under its ``torch.*`` name in
``sys.modules`` (``torch``, ``torch.nn``, ``torch.nn.functional``, ``torch.optim``, ``torch.autograd``,
``torch.utils.data``, ...), the real ``torch.*`` entries are set aside, and the script runs as ``__main__``.
Both runs must print the same lines (numbers within the tutorial's tolerance, ``gpugrad.`` read as ``torch.``,
object addresses ignored) and end with the same module-level Tensors (shape, dtype, values) and Modules
(parameter names, shapes, values).

Same random numbers: gpugrad's generator is not torch's (a deliberate difference: NumPy's PCG64 / CuPy's), so the
gpugrad run's random functions (``randn``, ``rand``, ``*_like``, ``randint``, ``randperm``, ``nn.init.*``) are
wrapped: gpugrad's own function runs first (its signature, dtype, device and ``requires_grad`` handling are what
is tested), then its values are overwritten with what torch's generator, seeded as in the torch run, draws for the
same call. Python's ``random`` and NumPy's global generator are seeded the same for both runs.

Run one tutorial and see every difference: ``python tests/compat/test_tutorials.py polynomial_nn``.
"""
from __future__ import annotations

import contextlib
import io
import math
import random
import re
import runpy
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import gpugrad

# the tutorials' docstrings hold LaTeX (":math:`y=\\sin(x)`") in plain strings: Python warns as it compiles them
pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence")
HERE = Path(__file__).resolve().parent / "tutorials"
HEADER_END = "# ---- end of vendoring header ----\n"


@dataclass(frozen=True)
class Tutorial:
    name: str
    rtol: float = 1e-4  # long float32 training loops drift apart as rounding differs in the last bits
    atol: float = 1e-5
    slow: bool = False  # over ~10 s for both runs on a 2-core CPU: run with -m slow
    noisy: tuple = ()  # module-level names whose values are float32 rounding noise: shape and dtype compared only


TUTORIALS = [
    Tutorial("tensorqs_tutorial"),
    Tutorial("autogradqs_tutorial"),
    Tutorial("buildmodel_tutorial"),
    Tutorial("polynomial_tensor", rtol=1e-3),
    Tutorial("polynomial_autograd", rtol=1e-3),
    Tutorial("polynomial_custom_function", rtol=1e-3),
    Tutorial("polynomial_nn", rtol=1e-3),
    Tutorial("polynomial_optim", rtol=1e-3),
    Tutorial("polynomial_module", rtol=1e-3),
    Tutorial("dynamic_net", rtol=1e-3, slow=True),  # 30,000 steps: ~15 s with torch, ~25 s with gpugrad
    # its last gradients are of a residual y_pred - y ~ 1e-3 left from sums of ~300 in float32 (error ~1e-4):
    # rounding noise that differs with the summation order of any two BLAS libraries
    Tutorial("two_layer_net_tensor", rtol=1e-3, noisy=("grad_y_pred", "grad_w2", "grad_h_relu", "grad_h", "grad_w1")),
    Tutorial("two_layer_net_autograd", rtol=1e-3),
    Tutorial("two_layer_net_custom_function", rtol=1e-3),
]

# the scripts import these without using them: an empty module stands in, for torch and gpugrad alike
UNUSED_IMPORTS = {"torchvision": ("datasets", "transforms")}
RANDOM_FUNCTIONS = ("randn", "rand", "randn_like", "rand_like", "randint", "randint_like", "randperm")
RANDOM_INITS = ("uniform_", "normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_",
                "trunc_normal_")


@dataclass
class Run:
    out: str
    scope: dict
    error: BaseException | None = None
    where: str = ""


def _torch_dtype(d, torch):
    s = str(d)
    return getattr(torch, s.split(".", 1)[1] if s.startswith(("gpugrad.", "torch.")) else np.dtype(d).name)


def _to_torch(x, torch):
    """An argument of a gpugrad random call as torch takes it."""
    if isinstance(x, gpugrad.Tensor):
        return torch.from_numpy(np.array(x.detach().cpu().numpy()))
    if isinstance(x, (type, np.dtype)) or str(x).startswith("gpugrad."):  # a dtype: NumPy's or gpugrad's
        return _torch_dtype(x, torch)
    return x


def _overwrite(t, ref):
    with gpugrad.no_grad():
        t.copy_(gpugrad.tensor(ref.detach().numpy(), dtype=t.dtype, device=t.device))


_drawing: list = []


def _shared_draw(ours, theirs, torch, init=False):
    def draw(*args, **kwargs):
        if _drawing:  # a wrapped function called by another (kaiming_uniform_ -> uniform_): torch draws once
            return ours(*args, **kwargs)
        _drawing.append(draw)
        try:
            out = ours(*args, **kwargs)  # gpugrad's own call: its argument handling is under test
        finally:
            _drawing.pop()
        kw = {k: _to_torch(v, torch) for k, v in kwargs.items() if k not in ("device", "generator", "pin_memory")}
        if init:  # nn.init.<f>_(tensor, ...): torch fills a fresh tensor of the same shape and dtype
            ref = theirs(torch.empty(tuple(args[0].shape), dtype=_torch_dtype(args[0].dtype, torch)),
                         *args[1:], **kw)
            _overwrite(args[0], ref)
        else:
            _overwrite(out, theirs(*(_to_torch(a, torch) for a in args), **kw))
        return out
    return draw


@contextlib.contextmanager
def _as_torch(torch):
    """gpugrad under every torch.* name, with its random functions drawing torch's numbers; all undone after."""
    import gpugrad.autograd.forward_ad  # noqa: F401  (load the submodules a script may import by their torch name)
    import gpugrad.nn.functional  # noqa: F401
    import gpugrad.optim  # noqa: F401
    with contextlib.suppress(ImportError):
        import gpugrad.utils.data  # noqa: F401
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "torch" or k.startswith("torch.")}
    patched = [(gpugrad, n, getattr(gpugrad, n)) for n in RANDOM_FUNCTIONS if hasattr(gpugrad, n)]
    patched += [(gpugrad.nn.init, n, getattr(gpugrad.nn.init, n)) for n in RANDOM_INITS
                if hasattr(gpugrad.nn.init, n)]
    try:
        for owner, name, fn in patched:
            setattr(owner, name, _shared_draw(fn, getattr(torch.nn.init if owner is gpugrad.nn.init else torch, name),
                                              torch, init=owner is gpugrad.nn.init))
        sys.modules.update({"torch" + k[len("gpugrad"):]: m for k, m in list(sys.modules.items())
                            if k == "gpugrad" or k.startswith("gpugrad.")})
        yield gpugrad
    finally:
        for owner, name, fn in patched:
            setattr(owner, name, fn)
        for k in [k for k in sys.modules if k == "torch" or k.startswith("torch.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@contextlib.contextmanager
def _unused_imports():
    saved = {k: sys.modules.get(k) for k in UNUSED_IMPORTS}
    for name, attrs in UNUSED_IMPORTS.items():
        mod = sys.modules[name] = types.ModuleType(name)
        for a in attrs:
            setattr(mod, a, types.ModuleType(f"{name}.{a}"))
    try:
        yield
    finally:
        for k, m in saved.items():
            sys.modules.pop(k, None)
            if m is not None:
                sys.modules[k] = m


def _where(exc, path):
    """The tutorial's line that raised, for the failure message."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f"line {frames[-1].lineno}: {frames[-1].line}" if frames else "(outside the script)"


def run(tut: Tutorial, lib: str) -> Run:
    """Run a tutorial with ``lib`` ("torch" or "gpugrad") as ``torch``; its printed output and module scope."""
    torch = pytest.importorskip("torch", reason="the tutorials are compared against PyTorch: pip install torch")
    path = HERE / f"{tut.name}.py"
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    gpugrad.manual_seed(0)
    dtypes = [(m, m.get_default_dtype()) for m in (torch, gpugrad) if hasattr(m, "get_default_dtype")]
    out, scope, error = io.StringIO(), {}, None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_unused_imports())
            if lib == "gpugrad":
                stack.enter_context(_as_torch(torch))
            stack.enter_context(contextlib.redirect_stdout(out))
            scope = runpy.run_path(str(path), run_name="__main__")
    except Exception as e:  # noqa: BLE001 - reported with the script's line
        error = e
    finally:  # a script may set a default device or dtype: not for the tests after it
        for m, dtype in dtypes:
            m.set_default_dtype(dtype)
            if hasattr(m, "set_default_device"):
                m.set_default_device(None)
    return Run(out.getvalue(), scope, error, _where(error, path) if error else "")


NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|[-+]?\binf\b")


def _normalize(text):
    return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x...", text.replace("gpugrad.", "torch."))


def _close(a, b, tut):
    a, b = float(a), float(b)
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tut.atol + tut.rtol * abs(b)


def output_differences(ours: str, theirs: str, tut: Tutorial) -> list[str]:
    """Lines that differ: text outside numbers must be equal, numbers within the tutorial's tolerance."""
    a, b = _normalize(ours).splitlines(), _normalize(theirs).splitlines()
    diffs = [f"gpugrad printed {len(a)} lines, torch {len(b)}"] if len(a) != len(b) else []
    for i, (x, y) in enumerate(zip(a, b)):
        if NUMBER.split(x) != NUMBER.split(y) or not all(
                _close(p, q, tut) for p, q in zip(NUMBER.findall(x), NUMBER.findall(y))):
            diffs.append(f"line {i + 1}:\n  gpugrad: {x}\n  torch:   {y}")
    return diffs


def _close_arrays(got, want, tut):
    """Equal NaNs where torch has them, and the largest difference within tolerance of the largest value: the
    rounding of a sum (matmul, reduction) scales with its terms, not with its result, which may be near 0."""
    if want.dtype.kind not in "fc":
        return np.array_equal(got, want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    if not np.array_equal(np.isnan(g), nan):
        return False
    g, w = g[~nan], w[~nan]
    return not w.size or np.max(np.abs(g - w)) <= tut.atol + tut.rtol * np.max(np.abs(w))


def scope_differences(ours: dict, theirs: dict, tut: Tutorial, torch) -> list[str]:
    """Module-level Tensors and Modules the script ends with: the same names, shapes, dtypes and values."""
    def arrays(v):
        if isinstance(v, torch.nn.Module):
            return {f".{k}": p for k, p in v.state_dict().items()}
        return {"": v} if isinstance(v, torch.Tensor) else {}

    diffs = []
    for name, value in theirs.items():
        for suffix, t in arrays(value).items():
            o = ours.get(name)
            if suffix:
                o = o.state_dict().get(suffix[1:]) if hasattr(o, "state_dict") else None
            if not isinstance(o, gpugrad.Tensor):
                diffs.append(f"{name}{suffix}: torch has a Tensor, gpugrad {type(o).__name__}")
                continue
            want = t.detach().cpu().numpy()
            got = o.detach().cpu().numpy()
            if got.shape != want.shape or got.dtype != want.dtype:
                diffs.append(f"{name}{suffix}: gpugrad {got.dtype}{list(got.shape)}, torch {want.dtype}{list(want.shape)}")
            elif want.size and name not in tut.noisy and not _close_arrays(got, want, tut):
                err = np.max(np.abs(got.astype(np.float64) - want))
                diffs.append(f"{name}{suffix}: values differ (max abs difference {err:.3g}, "
                             f"largest value {np.max(np.abs(want)):.3g})")
    return diffs


def compare(tut: Tutorial, device="cpu"):
    """Run ``tut`` with torch (on the CPU) and with gpugrad (its data on ``device``) and assert they agree."""
    torch = pytest.importorskip("torch", reason="the tutorials are compared against PyTorch: pip install torch")
    theirs = run(tut, "torch")
    assert theirs.error is None, f"{tut.name} fails with torch itself ({theirs.where}): {theirs.error!r}"
    ours = run(tut, "gpugrad")
    if ours.error is not None:
        raise AssertionError(f"{tut.name} fails with gpugrad at {ours.where}\n{type(ours.error).__name__}: "
                             f"{ours.error}") from ours.error
    elsewhere = [k for k, v in ours.scope.items() if isinstance(v, gpugrad.Tensor) and v.device.type != device]
    assert not elsewhere, f"{tut.name}: {elsewhere} are not on {device}"
    diffs = output_differences(ours.out, theirs.out, tut) + scope_differences(ours.scope, theirs.scope, tut, torch)
    assert not diffs, f"{tut.name}: gpugrad differs from torch in {len(diffs)} places:\n" + "\n".join(diffs[:20])


@pytest.mark.parametrize("tut", [pytest.param(t, marks=[pytest.mark.slow] if t.slow else []) for t in TUTORIALS],
                         ids=lambda t: t.name)
def test_tutorial_runs_unchanged_as_with_torch(tut):
    compare(tut)


# the scripts that leave the device to the library: on a GPU (or the simulated one) gpugrad's default device is CUDA
ON_DEFAULT_DEVICE = ("polynomial_autograd", "polynomial_nn", "polynomial_optim", "polynomial_module")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ON_DEFAULT_DEVICE)
def test_tutorial_on_cuda_matches_torch_on_the_cpu(name):
    compare(next(t for t in TUTORIALS if t.name == name), device="cuda")


def test_every_vendored_script_is_run_and_names_its_source_and_license():
    scripts = {p.stem for p in HERE.glob("*.py")}
    assert scripts == {t.name for t in TUTORIALS}
    assert (HERE / "LICENSE-pytorch-tutorials.txt").read_text().startswith("The scripts in this folder")
    for name in scripts:
        header = (HERE / f"{name}.py").read_text(encoding="utf-8").split(HEADER_END)[0]
        assert re.search(r"# Source: https://github\.com/\S+/blob/[0-9a-f]{40}/\S+\.py\n", header), name
        assert "# Author: " in header and "# License: " in header, name


def test_output_comparison_catches_a_changed_number_and_changed_text():
    tut = Tutorial("x", rtol=1e-3)
    assert not output_differences("99 1.0001e3\n<Mul object at 0x1f>", "99 1000.0\n<Mul object at 0x2e>", tut)
    assert output_differences("99 1.01e3", "99 1000.0", tut)
    assert output_differences("tensor([1., 2.])", "tensor([1., 2.], grad_fn=<AddBackward0>)", tut)
    assert output_differences("a\nb", "a", tut)


if __name__ == "__main__":  # python tests/compat/test_tutorials.py [name ...]: every difference, torch's output
    for t in TUTORIALS:
        if len(sys.argv) == 1 or t.name in sys.argv[1:]:
            try:
                compare(t)
                print(f"{t.name}: same as torch")
            except AssertionError as e:
                print(f"{t.name}: {e}")
