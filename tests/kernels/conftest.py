"""The CPU emulator of the kernel families as a module-scoped ``emu`` fixture (skipped where no C++ compiler is
found), for the test modules here that do not define their own."""
from __future__ import annotations

import pytest

from gpugrad.backend import kernels

try:
    from gpugrad.testing.cuda_emu import EmuRuntime, compiler_available
except ImportError as e:  # pragma: no cover
    EmuRuntime, MISSING = None, f"CPU emulator not importable: {e}"
else:
    MISSING = None if compiler_available() else "CPU emulator: no C++ compiler found"


@pytest.fixture(scope="module")
def emu():
    if MISSING:
        pytest.skip(MISSING)
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())])
