"""Every kernel function of backend/reference.py against exact closed forms (tests/exact_kernel_cases.py), and the
CUDA kernels themselves on the CPU emulator against the same values (skipped without a C++ compiler).

tests/kernels/test_kernel_emulated.py holds the kernels to the references; this holds both to the definitions, so a
formula wrong in the .cu file and in reference.py alike fails here.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from gpugrad.backend import kernels, reference
from tests.exact import assert_exact
from tests.exact_kernel_cases import ROWS

try:
    from gpugrad.testing.cuda_emu import EmuRuntime, compiler_available
except ImportError as e:  # the emulator is optional
    EmuRuntime, _EMU_MISSING = None, f"CPU emulator not importable: {e}"
else:
    _EMU_MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"

PARAMS = [pytest.param(row, dtype, id=f"{row.id}-{np.dtype(dtype).name}") for row in ROWS for dtype in row.dtypes]
# set_hyper_ is a host-to-device copy (cupy.ndarray.set), not a kernel: nothing to emulate
EMULATED = [p for p in PARAMS if hasattr(kernels, p.values[0].name) and p.values[0].name != "set_hyper_"]


def kernel_functions(module):
    """The public kernel functions of a module: first parameter ``xp`` (what opmath_all wraps)."""
    return {name for name, f in vars(module).items() if inspect.isfunction(f) and not name.startswith("_")
            and list(inspect.signature(f).parameters)[:1] == ["xp"]}


def _outputs(got):
    return list(got) if isinstance(got, tuple) else [got]


def run_row(module, row, dtype):
    args, exact_args = row.build(dtype)
    got = getattr(module, row.name)(np, *args)
    want = row.expected(row.want, exact_args)
    if want is None:
        assert got is None, f"{row.id}: returned {type(got).__name__}, expected None"
    else:
        got, want = _outputs(got), _outputs(want)
        assert len(got) == len(want), f"{row.id}: {len(got)} outputs, expected {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            if w is None:
                assert g is None, f"{row.id}: output {k} should be None"
                continue
            if g.dtype.kind == "f":
                assert g.dtype == dtype, f"{row.id}: output {k} is {g.dtype}, expected {np.dtype(dtype)}"
            assert_exact(g, w, g.dtype, row.tol, f"{row.id} {np.dtype(dtype).name} output {k}")
    after = row.after(*exact_args) if callable(row.after) else \
        {k: row.expected(v, exact_args) for k, v in row.after.items()}
    for pos, value in after.items():
        a = np.asarray(args[pos])
        assert_exact(a, value, a.dtype, row.tol, f"{row.id} {np.dtype(dtype).name} argument {pos} after the call")


@pytest.mark.parametrize("row, dtype", PARAMS)
def test_reference_matches_closed_form(row, dtype):
    run_row(reference, row, dtype)


@pytest.fixture(scope="module")
def emu():
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())], schedule="random",
                      seed=0)


@pytest.mark.skipif(_EMU_MISSING is not None, reason=_EMU_MISSING or "")
@pytest.mark.parametrize("row, dtype", EMULATED)
def test_kernel_matches_closed_form(emu, row, dtype):
    with kernels.use_runtime(emu):
        run_row(kernels, row, dtype)


def test_every_kernel_function_has_a_closed_form():
    covered = {row.name for row in ROWS}
    missing = sorted(kernel_functions(reference) - covered)
    assert not missing, f"kernel functions of backend/reference.py without a row in tests/exact_kernel_cases.py: {missing}"
    unknown = sorted(covered - kernel_functions(reference))
    assert not unknown, f"rows naming functions that backend/reference.py does not have: {unknown}"
