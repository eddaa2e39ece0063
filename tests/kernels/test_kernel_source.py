"""Kernel sources reach every compiler with their headers inlined (``kernels.source``): CuPy keys its on-disk cache
on the source text and options only, so a header reached through ``-I`` could change under a stale binary.
``#line`` directives keep compiler errors pointing at the header's (or the .cu file's) own file and line."""
from __future__ import annotations

import re
import shutil

import pytest

from gpugrad.backend import kernels
from gpugrad.testing import nvrtc_check

_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"', re.M)


@pytest.mark.parametrize("family", kernels.FAMILIES)
def test_no_local_include_remains(family):
    src = kernels.source(family)
    assert not _LOCAL_INCLUDE.search(src)
    assert f'#line 1 "{kernels.kernel_dir() / "common.cuh"}"' in src
    assert "gg::warp_reduce_sum" in src or "namespace gg" in src  # common.cuh's text is there
    assert not any(o.startswith("-I") for o in kernels.OPTIONS)


@pytest.fixture
def kdir(tmp_path):
    """A copy of kernels/ to edit."""
    return shutil.copytree(kernels.kernel_dir(), tmp_path / "kernels")


def test_source_changes_when_a_header_changes(kdir):
    before = kernels.inline_source(kdir / "reduce.cu")
    assert before.replace(str(kdir), str(kernels.kernel_dir())) == kernels.source("reduce")
    header = kdir / "common.cuh"
    header.write_text(header.read_text().replace("#pragma once", "#pragma once\n#define GG_EDITED 1", 1))
    after = kernels.inline_source(kdir / "reduce.cu")
    assert after != before and "#define GG_EDITED 1" in after


def _lines(src):
    return [line for line in src.splitlines() if line]


def test_headers_go_in_once_recursively_with_line_directives(tmp_path):
    (tmp_path / "once.cuh").write_text("#pragma once\nint once_;\n")
    guarded = '// a guard\n#ifndef G_H\n#define G_H\n#include "once.cuh"\nint g_;\n#endif\n'
    (tmp_path / "guarded.cuh").write_text(guarded)
    (tmp_path / "plain.cuh").write_text("P_ITEM\n")  # no guard: expanded at every include, like the preprocessor
    (tmp_path / "k.cu").write_text('#include <cuda_fp16.h>\n#include "guarded.cuh"\n#include "once.cuh"\n'
                                   '#include "plain.cuh"\n#include "plain.cuh"\n#include "guarded.cuh"\nint k_;\n'
                                   '#include "missing.cuh"\n')
    k, g, o, p = (str(tmp_path / n) for n in ("k.cu", "guarded.cuh", "once.cuh", "plain.cuh"))
    assert _lines(kernels.inline_source(tmp_path / "k.cu")) == [
        f'#line 1 "{k}"', "#include <cuda_fp16.h>",  # system headers stay
        f'#line 1 "{g}"', "// a guard", "#ifndef G_H", "#define G_H",
        f'#line 1 "{o}"', "int once_;", f'#line 5 "{g}"', "int g_;", "#endif", f'#line 3 "{k}"',
        f'#line 1 "{p}"', "P_ITEM", f'#line 5 "{k}"', f'#line 1 "{p}"', "P_ITEM", f'#line 6 "{k}"',
        "int k_;",  # the second guarded.cuh expands to an empty line, so numbering goes on without a #line
        '#include "missing.cuh"']  # not a local file: left to the compiler


def test_an_include_cycle_without_a_guard_is_an_error(tmp_path):
    (tmp_path / "a.cuh").write_text('#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text('#include "a.cuh"\n')
    (tmp_path / "k.cu").write_text('#include "a.cuh"\n')
    with pytest.raises(ValueError, match="a.cuh includes itself"):
        kernels.inline_source(tmp_path / "k.cu")


_NVRTC, _WHY = nvrtc_check.available()


@pytest.mark.skipif(not _NVRTC, reason=_WHY)
@pytest.mark.parametrize("where", ["common.cuh", "optim.cu"])
def test_compile_errors_name_the_file_and_line(kdir, where):
    """A syntax error injected into the copied header (or into the .cu file after its include) is reported by
    NVRTC at that file's name and line: the #line directives map the inlined text back."""
    path = kdir / where
    lines = path.read_text().splitlines()
    bad = len(lines) - 3 if where.endswith(".cu") else 20  # past the include in optim.cu; inside common.cuh
    lines.insert(bad - 1, "this is not C++;")
    path.write_text("\n".join(lines) + "\n")
    result = nvrtc_check.compile_family("optim", kernels.inline_source(kdir / "optim.cu"),
                                        kernels.NAME_EXPRESSIONS["optim"])
    assert not result.ok
    assert f"{path}({bad}): error" in result.log, result.log
