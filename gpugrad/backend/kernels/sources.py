"""Kernel sources: where ``kernels/*.cu`` live, the compile options, and the text every compiler gets (headers
inlined, ``#line`` directives kept)."""
from __future__ import annotations

import functools
import pathlib
import re


def kernel_dir() -> pathlib.Path:
    """``gpugrad/_kernels`` inside an installed wheel, else ``<repo>/kernels``."""
    pkg = pathlib.Path(__file__).resolve().parents[2]  # gpugrad/
    wheel = pkg / "_kernels"
    return wheel if wheel.is_dir() else pkg.parent / "kernels"


# The same options go to CuPy (RawModule, ElementwiseKernel) and to the NVRTC check (testing/nvrtc_check.py).
# No -I: source() inlines the headers, because CuPy keys its on-disk kernel cache on the source text and options
# only, so a header reached through -I could change under a stale cached binary.
# NOTE: CuPy appends -ftz=true to every compile (cupy/cuda/compiler.py, _compile_with_cache_cuda), so float32
# denormal inputs and results are flushed to zero on the GPU (float64 is not affected), unlike NumPy and the CPU
# emulator. This is deliberately not modelled: a denormal is below 2**-126 ~ 1.2e-38, so flushing one moves every
# kernel's output by far less than the float32 parity atol (tests/cuda/test_parity.py TOL; shown in
# tests/tensor/test_dtype_layout.py). float16 inputs never meet it: they are computed in float32, where every float16
# (subnormals included) is a normal number.
OPTIONS = ("-std=c++17",)
FAMILIES = ("elementwise", "reduce", "loss", "norm", "optim", "check")

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\b")
_GUARD = re.compile(r"\A(?:\s|//[^\n]*\n|/\*.*?\*/)*#\s*ifndef\s+(\w+)\s*\n\s*#\s*define\s+\1\b", re.S)


def _line(n, path):
    return '#line %d "%s"' % (n, str(path).replace("\\", "\\\\").replace('"', '\\"'))


def _inline(path, done, stack):
    """path's text with each local ``#include "x"`` (x found next to the including file) replaced by x's text
    between ``#line`` directives. A header with ``#pragma once`` or an include guard goes in once (``done``);
    ``#pragma once`` lines become blank, as the header is now part of one file."""
    text = path.read_text()
    if any(_PRAGMA_ONCE.match(line) for line in text.splitlines()) or _GUARD.match(text):
        done.add(path)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _INCLUDE.match(line)
        header = (path.parent / m.group(1)).resolve() if m else None
        if header is None or not header.is_file():  # <system> headers and unknown files: the compiler's job
            out.append("" if _PRAGMA_ONCE.match(line) else line)
            continue
        if header in done:  # already inlined (or a guarded cycle): the preprocessor would expand nothing here
            out.append("")
            continue
        if header in stack:
            raise ValueError(f"{path}:{n}: {header.name} includes itself (through {[p.name for p in stack]})")
        out += [_line(1, header), _inline(header, done, stack + (header,)), _line(n + 1, path)]
    return "\n".join(out)


def inline_source(path) -> str:
    """The text of a .cu file with its local headers inlined (recursively, each once) and ``#line`` directives,
    so compiler errors still name the right file and line, and the text changes whenever a header does."""
    path = pathlib.Path(path).resolve()
    return _line(1, path) + "\n" + _inline(path, set(), (path,)) + "\n"


@functools.cache
def source(family: str) -> str:
    """``kernels/<family>.cu`` with its headers inlined (:func:`inline_source`): what CuPy, the NVRTC check and
    the emulator compile."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {FAMILIES}")
    return inline_source(kernel_dir() / f"{family}.cu")
