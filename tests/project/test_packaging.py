"""What a first real GPU run depends on before any code runs: the `cuda` extra brings a CuPy that can compile
kernels (CUDA headers and NVRTC), and Dockerfile.cuda builds offline from scripts/wheelhouse.sh's wheels."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile.cuda"
WHEELHOUSE = ROOT / "scripts" / "wheelhouse.sh"


def _instructions(path):
    """Dockerfile instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(kw.upper(), rest.strip()) for kw, _, rest in (line.strip().partition(" ") for line in text.splitlines())
            if kw]


def test_the_cuda_extra_is_cupy_14_with_the_cuda_toolkit_wheels():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    requirements = pytest.importorskip("packaging.requirements")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    reqs = [requirements.Requirement(r) for r in extras["cuda"]]
    (cupy,) = [r for r in reqs if r.name.startswith("cupy")]
    assert cupy.name == "cupy-cuda13x"  # CUDA 13, the kernels' target
    assert "ctk" in cupy.extras  # the CUDA runtime, NVRTC and headers as wheels: CuPy cannot compile without them
    assert cupy.specifier.contains("14.0") and not cupy.specifier.contains("13.6")


@pytest.mark.skipif(not DOCKERFILE.exists(), reason="Dockerfile.cuda is not part of an installed copy")
def test_the_cuda_image_builds_offline_from_the_wheelhouse():
    instructions = _instructions(DOCKERFILE)
    runs = [args for kw, args in instructions if kw == "RUN"]
    installs = [r for r in runs if re.search(r"\bpip3? install\b", r)]
    assert installs, "Dockerfile.cuda installs gpugrad with pip"
    for r in installs:
        assert "--no-index" in r and "--find-links" in r, f"a pip install that would need network: {r}"
    for r in runs:
        assert not re.search(r"\b(apt-get|apt|apk|yum|dnf|curl|wget)\b", r), f"a step that needs network: {r}"
    copied = {args.split()[0] for kw, args in instructions if kw == "COPY" and not args.startswith("--from")}
    assert {"wheelhouse", "tests", "benchmarks", "scripts", "gpugrad", "kernels"} <= copied, copied
    (cmd,) = [args for kw, args in instructions if kw == "CMD"]
    assert "scripts/gpu-check.sh" in cmd

    assert WHEELHOUSE.is_file() and os.access(WHEELHOUSE, os.X_OK), "scripts/wheelhouse.sh must be executable"
    # the wheels must be for the image's Python
    version = re.search(r"^python_version=(\S+)$", WHEELHOUSE.read_text(), re.M).group(1)
    images = [args.split()[0] for kw, args in instructions if kw == "FROM"]
    assert images and all(image.startswith(f"python:{version}-") for image in images), (version, images)
