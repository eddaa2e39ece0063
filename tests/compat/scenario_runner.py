"""Run a plain PyTorch script twice, once with PyTorch and once with gpugrad under every ``torch.*`` name, and say
where the two runs differ: printed lines and the module-level Tensors and Modules the script ends with.

For the gpugrad run, ``import torch`` (and ``torch.nn``, ``torch.nn.functional``, ``torch.utils.data``, ``torch.func``,
any ``torch.<x>``) gives the module ``gpugrad.<x>``, or fails as an import of a missing module does; the real
``torch.*`` entries of ``sys.modules`` are set aside and put back after.

Same random numbers: gpugrad's generators are not torch's (a deliberate difference: NumPy's PCG64 / CuPy's), so in
the gpugrad run every random function (``randn``, ``randint``, ``multinomial``, ``nn.init.*``, ``Tensor.uniform_``,
...) runs as gpugrad's own first (its signature, dtype, device and ``requires_grad`` handling are under test), then
its values are overwritten with what torch draws for the same call. Each ``gpugrad.Generator`` the script makes has a
torch ``Generator`` behind it, seeded alike; ``manual_seed`` seeds torch's default generator too. A shuffling
``RandomSampler`` yields torch's order and ``random_split`` torch's subsets (after checking gpugrad's own), and
iterating a ``DataLoader`` makes the draw torch makes to seed its workers, so that the draws after a shuffled epoch
line up as well.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import io
import math
import random
import re
import runpy
import sys
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import gpugrad
import gpugrad.utils.data as gpugrad_data

RANDOM_FUNCTIONS = ("randn", "rand", "randn_like", "rand_like", "randint", "randint_like", "randperm",
                    "multinomial", "normal", "bernoulli", "poisson")
RANDOM_INITS = ("uniform_", "normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_",
                "trunc_normal_")
RANDOM_METHODS = ("uniform_", "normal_", "random_", "bernoulli_", "exponential_", "multinomial", "bernoulli")
NOT_FOR_TORCH = ("device", "pin_memory")  # the torch run is on the CPU whatever device gpugrad's tensors are on


@dataclass
class Run:
    out: str
    scope: dict
    error: BaseException | None = None
    where: str = ""


def _torch():
    return pytest.importorskip("torch", reason="the scenarios are compared against PyTorch: pip install torch")


class _TorchNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import torch.<x>`` gives ``gpugrad.<x>`` (imported on first use), or fails as a missing module does."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch" and not name.startswith("torch."):
            return None
        ours = "gpugrad" + name[len("torch"):]
        if importlib.util.find_spec(ours) is None:
            return None  # then no finder has it: ModuleNotFoundError: No module named 'torch.<x>'
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module("gpugrad" + spec.name[len("torch"):])
        self._spec = module.__spec__  # the import system relabels the module with the alias's spec: undone below
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec


def _torch_dtype(d, torch):
    s = str(d)
    return getattr(torch, s.split(".", 1)[1] if s.startswith(("gpugrad.", "torch.")) else np.dtype(d).name)


def _overwrite(t, ref):
    with gpugrad.no_grad():
        t.copy_(gpugrad.tensor(ref.detach().numpy(), dtype=t.dtype, device=t.device))


class _TorchDraws:
    """Makes the gpugrad run draw torch's random numbers (see the module's docstring)."""

    def __init__(self, torch):
        self.torch = torch
        self.generators = weakref.WeakKeyDictionary()  # gpugrad Generator -> the torch Generator behind it
        self.busy = False  # a wrapped function called by another (kaiming_uniform_ -> uniform_): torch draws once

    def generator(self, g):
        """The torch generator behind gpugrad's ``g`` (None: the default generator, torch's too)."""
        if g is None or g is gpugrad.default_generator:
            return None
        if g not in self.generators:
            self.generators[g] = self.torch.Generator().manual_seed(g.initial_seed())
        return self.generators[g]

    def to_torch(self, x):
        """An argument of a gpugrad random call as torch takes it."""
        if isinstance(x, gpugrad.Tensor):
            return self.torch.from_numpy(np.array(x.detach().cpu().numpy()))
        if isinstance(x, gpugrad.Generator):
            return self.generator(x)
        if isinstance(x, (type, np.dtype)) or str(x).startswith("gpugrad."):  # a dtype: NumPy's or gpugrad's
            return _torch_dtype(x, self.torch)
        return x

    def draw(self, ours, theirs, in_place):
        """``ours``, with its result (or, ``in_place``, its first argument) holding ``theirs``'s draw."""
        def draw(*args, **kwargs):
            if self.busy:
                return ours(*args, **kwargs)
            self.busy = True
            try:
                out = ours(*args, **kwargs)  # gpugrad's own call: its argument handling is under test
            finally:
                self.busy = False
            kw = {k: self.to_torch(v) for k, v in kwargs.items() if k not in NOT_FOR_TORCH}
            ref = theirs(*(self.to_torch(a) for a in args), **kw)
            _overwrite(args[0] if in_place else out, ref)
            return out
        return draw

    def manual_seed(self, ours):
        def manual_seed(seed):
            out = ours(seed)  # first: gpugrad's checks of the seed
            # NOTE: not torch.manual_seed, which imports torch.cuda inside: in this run that would be gpugrad's
            self.torch.default_generator.manual_seed(seed)
            return out
        return manual_seed

    def generator_seed(self, ours):
        def manual_seed(gen, seed):
            self.generators.pop(gen, None)  # the next draw makes a torch generator with the new seed
            return ours(gen, seed)
        return manual_seed

    def sampler_order(self, ours):
        """``RandomSampler.__iter__`` yielding torch's order, once gpugrad's own is checked to be a valid one."""
        def __iter__(sampler):
            got, n = list(ours(sampler)), len(sampler.data_source)
            want = list(self.torch.utils.data.RandomSampler(
                range(n), replacement=sampler.replacement, num_samples=sampler.num_samples,
                generator=self.generator(sampler.generator)))
            whole = not sampler.replacement and len(got) == n
            if len(got) != len(want) or not all(0 <= i < n for i in got) or whole and sorted(got) != list(range(n)):
                raise AssertionError(f"gpugrad's RandomSampler yielded {got[:20]}... for {n} samples, "
                                     f"{sampler.num_samples} wanted (replacement={sampler.replacement})")
            return iter(want)
        return __iter__

    def split(self, ours):
        """``random_split`` into the Subsets torch's permutation gives, once gpugrad's own sizes are checked."""
        def random_split(dataset, lengths, generator=None):
            got = ours(dataset, lengths, generator)
            want = self.torch.utils.data.random_split(range(len(dataset)), lengths, generator=self.generator(generator))
            if [len(s) for s in got] != [len(s) for s in want]:
                raise AssertionError(f"gpugrad's random_split made sizes {[len(s) for s in got]}, torch's "
                                     f"{[len(s) for s in want]}")
            return [gpugrad_data.Subset(dataset, list(s.indices)) for s in want]
        return random_split

    def loader_iter(self, ours):
        def __iter__(loader):
            # NOTE: each iteration of a torch DataLoader draws a base seed for its workers from the loader's
            # generator (num_workers=0 too): the draws after a shuffled epoch come after it
            self.torch.empty((), dtype=self.torch.int64).random_(generator=self.generator(loader.generator))
            return ours(loader)
        return __iter__

    def patches(self):
        """(owner, name, replacement) for every random entry point gpugrad has."""
        torch, init = self.torch, gpugrad.nn.init
        out = [(gpugrad, n, self.draw(getattr(gpugrad, n), getattr(torch, n), in_place=False))
               for n in RANDOM_FUNCTIONS if hasattr(gpugrad, n)]
        out += [(init, n, self.draw(getattr(init, n), getattr(torch.nn.init, n), in_place=True))
                for n in RANDOM_INITS if hasattr(init, n)]
        out += [(gpugrad.Tensor, n, self.draw(getattr(gpugrad.Tensor, n), getattr(torch.Tensor, n),
                                              in_place=n.endswith("_")))
                for n in RANDOM_METHODS if hasattr(gpugrad.Tensor, n)]
        return out + [
            (gpugrad, "manual_seed", self.manual_seed(gpugrad.manual_seed)),
            (gpugrad.Generator, "manual_seed", self.generator_seed(gpugrad.Generator.manual_seed)),
            (gpugrad_data.RandomSampler, "__iter__", self.sampler_order(gpugrad_data.RandomSampler.__iter__)),
            (gpugrad_data.DataLoader, "__iter__", self.loader_iter(gpugrad_data.DataLoader.__iter__)),
            (gpugrad_data, "random_split", self.split(gpugrad_data.random_split)),
        ]


@contextlib.contextmanager
def _as_torch(torch):
    """gpugrad under every torch.* name, drawing torch's random numbers; all undone after."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "torch" or k.startswith("torch.")}
    patches = _TorchDraws(torch).patches()
    originals = [(owner, name, vars(owner).get(name)) for owner, name, _ in patches]  # None: inherited
    finder = _TorchNames()
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        sys.modules.update({"torch" + k[len("gpugrad"):]: m for k, m in list(sys.modules.items())
                            if k == "gpugrad" or k.startswith("gpugrad.")})
        sys.meta_path.insert(0, finder)
        yield
    finally:
        sys.meta_path.remove(finder)
        for owner, name, original in originals:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        for k in [k for k in sys.modules if k == "torch" or k.startswith("torch.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _where(exc, path):
    """The script's line that raised, for the failure message."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f"line {frames[-1].lineno}: {frames[-1].line}" if frames else "(outside the script)"


def run(path: Path, lib: str) -> Run:
    """Run the script at ``path`` with ``lib`` ("torch" or "gpugrad") as ``torch``: its output and module scope."""
    torch = _torch()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    gpugrad.manual_seed(0)
    dtypes = [(m, m.get_default_dtype()) for m in (torch, gpugrad)]
    out, scope, error = io.StringIO(), {}, None
    try:
        with contextlib.ExitStack() as stack:
            if lib == "gpugrad":
                stack.enter_context(_as_torch(torch))
            stack.enter_context(contextlib.redirect_stdout(out))
            scope = runpy.run_path(str(path), run_name="__main__")
    except Exception as e:  # noqa: BLE001 - reported with the script's line
        error = e
    finally:  # a script may set a default device or dtype: not for the tests after it
        for m, dtype in dtypes:
            m.set_default_dtype(dtype)
            m.set_default_device(None)
    return Run(out.getvalue(), scope, error, _where(error, path) if error else "")


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-4  # float32 training loops drift apart as rounding differs in the last bits
    atol: float = 1e-5
    noisy: tuple = ()  # module-level names whose values are float32 rounding noise: shape and dtype compared only


NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|[-+]?\binf\b")


def _normalize(text):
    return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x...", text.replace("gpugrad.", "torch."))


def _close(a, b, tol):
    a, b = float(a), float(b)
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol.atol + tol.rtol * abs(b)


def _off_the_cpu(text):
    """Output as it reads whatever the device: no ``device='cuda:0'`` in a tensor's repr, and so no line wrapping
    that the longer repr moves (continuation lines joined, runs of spaces made one)."""
    text = re.sub(r",\s*device='cuda(?::\d+)?'", "", text)
    return re.sub(r"[ \t]+", " ", re.sub(r"\n[ \t]+", " ", text))


def output_differences(ours: str, theirs: str, tol: Tolerance, device="cpu") -> list[str]:
    """Lines that differ: text outside numbers must be equal, numbers within tolerance. ``device``: where gpugrad's
    tensors were (torch's are on the CPU)."""
    if device != "cpu":
        ours, theirs = _off_the_cpu(ours), _off_the_cpu(theirs)
    a, b = _normalize(ours).splitlines(), _normalize(theirs).splitlines()
    diffs = [f"gpugrad printed {len(a)} lines, torch {len(b)}"] if len(a) != len(b) else []
    for i, (x, y) in enumerate(zip(a, b)):
        if NUMBER.split(x) != NUMBER.split(y) or not all(
                _close(p, q, tol) for p, q in zip(NUMBER.findall(x), NUMBER.findall(y))):
            diffs.append(f"line {i + 1}:\n  gpugrad: {x}\n  torch:   {y}")
    return diffs


def _close_arrays(got, want, tol):
    """Equal NaNs where torch has them, and the largest difference within tolerance of the largest value: the
    rounding of a sum (matmul, reduction) scales with its terms, not with its result, which may be near 0."""
    if want.dtype.kind not in "fc":
        return np.array_equal(got, want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    if not np.array_equal(np.isnan(g), nan):
        return False
    g, w = g[~nan], w[~nan]
    return not w.size or np.max(np.abs(g - w)) <= tol.atol + tol.rtol * np.max(np.abs(w))


def scope_differences(ours: dict, theirs: dict, tol: Tolerance, torch) -> list[str]:
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
            elif want.size and name not in tol.noisy and not _close_arrays(got, want, tol):
                err = np.max(np.abs(got.astype(np.float64) - want))
                diffs.append(f"{name}{suffix}: values differ (max abs difference {err:.3g}, "
                             f"largest value {np.max(np.abs(want)):.3g})")
    return diffs


def compare(path: Path, tol: Tolerance = Tolerance(), device="cpu"):
    """Run the script with torch (on the CPU) and with gpugrad (its data on ``device``) and assert they agree."""
    torch, name = _torch(), path.stem
    theirs = run(path, "torch")
    assert theirs.error is None, f"{name} fails with torch itself ({theirs.where}): {theirs.error!r}"
    ours = run(path, "gpugrad")
    if ours.error is not None:
        raise AssertionError(f"{name} fails with gpugrad at {ours.where}\n{type(ours.error).__name__}: "
                             f"{ours.error}") from ours.error
    elsewhere = [k for k, v in ours.scope.items() if isinstance(v, gpugrad.Tensor) and v.device.type != device]
    assert not elsewhere, f"{name}: {elsewhere} are not on {device}"
    diffs = output_differences(ours.out, theirs.out, tol, device) + scope_differences(ours.scope, theirs.scope, tol, torch)
    assert not diffs, f"{name}: gpugrad differs from torch in {len(diffs)} places:\n" + "\n".join(diffs[:20])
