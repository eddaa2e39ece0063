"""A line budget (after tinygrad's sz.py): code lines, not docstrings, comments or blank lines.

Raising a budget is a decision: do it in its own commit, saying what the new lines buy.
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "gpugrad"
TOOLING = ("cli", "bench")  # the command line and benchmarks
TESTING = ("testing",)  # test tooling: the CUDA emulator, the NVRTC check, the simulated CUDA device
# library 4200 -> 4400: device scoping for multi-GPU, the kernel probe behind is_available(), header inlining and
# float16 opmath (issue 8). Test tooling gets its own budget: the simulated device (~1,000 lines) is what lets CI run
# the whole CUDA path; it should not squeeze the CLI's.
# library 4400 -> 4600 (issue 9): CUDA graphs (backend/graphs.py), device-side range checks that never sync
# (backend/deferred.py), launchers for the vectorized, row-team, multi-tensor optimizer and check kernels.
# library 4600 -> 5000, tooling 1900 -> 2100 (issue 12): anomaly mode (autograd/anomaly.py, ~170), saving what torch
# saves, 0-d results, view/expand checks and hooks without cycles (~150), IDX files read with bounds (~60); the CLI's
# hardened checkpoint reader, config validation shared with the parser and the divergence stop (~230).
# library 5000 -> 6800, tooling 2100 -> 2420, testing 1700 -> 1730 (issues 10, 13, 14): forward-mode AD, the op
# declarations and every op's JVP and double backward, autograd.functional (~800); explain / draw / record (~365);
# gpugrad.distributed, DistributedDataParallel and DistributedSampler (~650); the explain CLI, train --distributed,
# bench --modes and --distributed (~320); a world-size-1 NCCL on the simulated device (~30).
# library 6800 -> 9900 (issue 11, the PyTorch surface, ~3,100): dim/keepdim, named tuples and ~180 top-level functions
# with sort/topk/cumsum/einsum/norm/scatter and the rounding ops (~775); dtype objects, Size, devices, torch's
# promotion, creation functions, generators, DLPack (~495); losses with weights/ignore_index/label smoothing/probability
# targets, BatchNorm, containers, hooks, nn.utils, exact GELU/erf (~740); RMSprop, Adagrad, amsgrad, 15 schedulers,
# torch's param_groups and state_dict, utils.data with worker processes, save/load without pickle (~1,070).
# library 9900 -> 10100, testing 1730 -> 1910 (issue 18, a CUDA path real CuPy accepts, ~240 + ~180): gpugrad's own
# cuBLAS GEMMs, the same path eager and captured (backend/cublas.py, ~150), its refusals inside a capture
# (backend/capture.py and the optimizer's, ~60), NCCL's rank check; the simulator's CuPy 14.2 rules (transfers,
# invalidated captures, library setStream, DLPack streams) and its libcublas stand-in (testing/cuda_sim/cublas.py).
# library 10100 -> 10335 (issue 21, files and processes a user can trust, ~235): gpugrad.load reads the safetensors
# header first and checks every declared size against the file and the byte cap, rebuilds Size, return types and
# complex128 and refuses each inconsistency of a crafted file by name; gpugrad.save writes atomically through symlinks
# keeping the file's mode (~165); DataLoader workers that watch their parent, pickle their own results and are reaped
# on every exit path, lazily drawn samplers (~70).
# library 10335 -> 10415, tooling 2420 -> 2460 (issue 19): backend/kernels.py, backend/reference.py and bench/suites.py
# split into one module per family; the ~110 new lines are the modules' imports and the packages' re-exports.
# library 10415 -> 10455, testing 1910 -> 1960 (issue 18): a RawModule per instantiation, kernels.instantiations and
# warm_up on a thread pool (~35); nvrtc_check --timings, the cold-compile seconds in the README (~50).
# library 10455 -> 11460, tooling 2460 -> 2513, testing 1960 -> 2031 (issue 22, mixed precision): the base this started
# from (c4c5c5e, the core rebuilt) already counted ~11,000 / 2,455 / 2,023 without raising the budget; issue 22's own
# ~460 library lines buy gpugrad.autocast with torch's per-device op lists and its cache (core/autocast.py,
# amp/autocast_mode.py, ~170), GradScaler with its decisions on the device (~170), bfloat16 (dtype, opmath, matmul,
# einsum, ~40), the TF32 switches (~20), the optimizer kernels' skip argument (~20); the CLI's --amp/--tf32 (~55);
# the cuBLAS stand-in's bfloat16 and TF32 (~8).
# library 11460 -> 11580 (issue 22): GradScaler's unscale and update as kernels, their launchers and references (~40),
# DLPack of bfloat16 on the CPU, which NumPy's own refuses (backend/dlpack.py, ~80).
# library 11580 -> 11600 (issue 22): the bfloat16 kernels' instantiations and their opmath pass-through (~10),
# GradScaler's torch refusals (~6).
BUDGETS = {"library": 11600, "tooling": 2513, "testing": 2031}


def code_lines(path: Path) -> int:
    src = path.read_text()
    docs = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docs)


def test_code_stays_within_budget():
    counts = dict.fromkeys(BUDGETS, 0)
    for path in PKG.rglob("*.py"):
        part = path.relative_to(PKG).parts[0]
        counts["tooling" if part in TOOLING else "testing" if part in TESTING else "library"] += code_lines(path)
    print(f"code lines: {counts} (budgets {BUDGETS})")
    for kind, n in counts.items():
        assert n <= BUDGETS[kind], f"gpugrad {kind} code is {n} lines, over its budget of {BUDGETS[kind]}"


def test_counter_ignores_docstrings_and_comments(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""doc\\nstring"""\n# comment\n\ndef f(x):\n    """doc"""\n    return (x +\n            1)  # why\n')
    assert code_lines(f) == 3
