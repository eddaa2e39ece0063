"""The remaining emulator schedules ("reverse", "warp-serial", "warp-random") for every kernel case: the main
suite (test_kernel_emulated.py) runs forward/random/warp-reverse over all instances; these three run over the same
instances, so every kernel passes under every schedule the emulator has."""
from __future__ import annotations

import pytest

from gpugrad.backend import kernels
from tests.kernels.test_kernel_emulated import EmuRuntime, _instances, needs_emu, run_case

MORE_SCHEDULES = ("reverse", "warp-serial", "warp-random")


@pytest.fixture(scope="module", params=MORE_SCHEDULES)
def emu_more(request):
    return EmuRuntime(source_for_family=kernels.source, include_dirs=[str(kernels.kernel_dir())],
                      schedule=request.param, seed=1)


@needs_emu
@pytest.mark.parametrize("case, dtype, shape, layout", list(_instances()))
def test_kernel_matches_reference_under_every_schedule(emu_more, case, dtype, shape, layout):
    run_case(emu_more, case, dtype, shape, layout)
