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
# library 10455 -> 10555 (issue 19): BLAS threads that fit the machine (backend/threads.py, ~130): the pool sized to the
# free cores, set_num_threads / get_num_threads as torch's.  tooling 2460 -> 2480 (issue 19): `gpugrad train` as a
# run object in five modules instead of one 843-line file (~25: each module's imports, one header per method).
# library 10555 -> 11899 (issue 20, gpugrad.func, ~1,345): vmap's batched tensors, levels, batching layer and ~30
# rules (~650), grad / grad_and_value / vjp / jacrev / hessian (~230), jvp / jacfwd (~140), functional_call (~70),
# pytrees (~75), the hooks below (Op.apply, random draws, custom Functions, expand, in-place, ~25).
# library 11899 -> 13060, testing 1960 -> 2105 (issue 20, the API real scripts call, ~1160 + ~80): linalg
# inv/solve/det/slogdet ops with every order of derivative and torch's errors, linalg's norms (~300); addmm, addcmul,
# addcdiv, lerp, atan2 (~175); multinomial, bernoulli, bincount, histc, histogram, one_hot (~245); printing by
# torch's formatter with set_printoptions (~110); nn.init's missing fills (~95); legacy constructors, torch.cuda
# seeds and generator states, accelerator, compile, one RemovableHandle, list-of-lists indexing, arange (~235); the
# simulated device's cupy.linalg and generator state in device memory (~80).
# library 13060 -> 13118, tooling 2480 -> 2853 (issue 21, reliability second pass: +58 and +373): gpugrad explain's
# own evaluator instead of eval (cli/expression.py, ~175), one run per checkpoint (cli/checkpoint_lock.py, ~60),
# bench's --sizes check against device and host memory (bench/memory.py, ~60), resumed checkpoints checked field by
# field (~40), SIGTERM and the signal hand-over (~50), the ranks' config check (~12), explain's --draw and --help
# (~18); the command's Ctrl-C guard while gpugrad imports (_command.py, ~27) and the stale-temporary clean-up moved
# into serialization's one writer (~30), while the CLI's own writer goes (-51).
# library 13118 -> 13718, tooling 2853 -> 2908, testing 2105 -> 2113 (issue 22, mixed precision, ~600 / 55 / 8):
# gpugrad.autocast with torch's per-device op lists and its cache (core/autocast.py, amp/autocast_mode.py, ~170),
# GradScaler with its decisions on the device (~175) and its unscale and update as kernels (~40), bfloat16 (dtype,
# opmath, matmul, einsum, kernel instantiations, ~50), DLPack of bfloat16 on the CPU, which NumPy's own refuses
# (backend/dlpack.py, ~80), the TF32 switches (~20), the optimizer kernels' skip argument (~20); the CLI's
# --amp/--tf32 (~55); the cuBLAS stand-in's bfloat16 and TF32 (~8).
BUDGETS = {"library": 13718, "tooling": 2908, "testing": 2113}


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
