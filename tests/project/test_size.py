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
# Issues 18-22 (the third wave), each step measured at the merge that made it (library / tooling / testing lines):
# library 9900 -> 11000, tooling 2420 -> 2480, testing 1730 -> 2025 (issues 18, 19 and 21's files, +1129 / +71 /
# +293): gpugrad's own cuBLAS GEMMs, eager and captured (backend/cublas.py), its refusals inside a capture
# (backend/capture.py, the optimizer's), NCCL's rank check; one RawModule per instantiation and warm_up; gpugrad.load
# reading the safetensors header first and checking every size, gpugrad.save writing atomically through symlinks;
# DataLoader workers that watch their parent; the kernels/reference/bench modules split by family (their imports and
# re-exports); the core rebuilt in layers (core/, ops/, methods/: one module per idea, each with its imports); BLAS
# threads sized to the machine (backend/threads.py); `gpugrad train` as a run object. Testing: the simulator's CuPy
# 14.2 rules (transfers, invalidated captures, library setStream, DLPack streams), its libcublas stand-in and
# nvrtc_check --timings.
# library 11000 -> 11120, tooling 2480 -> 2515 (issues 19 and 21, +91 / +36): node names and edges as torch's, each
# op's formula attribute; thread-safe backward (the accumulation lock, per-thread callbacks, observer and record());
# the bench's engine section against torch.
# library 11120 -> 11560 (issue 20, +444): torch's custom Function contract (OutputSlot nodes, mark_dirty,
# mark_non_differentiable, once_differentiable, setup_context, saved outputs for double backward), gradgradcheck,
# Variable.
# library 11560 -> 12890 (issue 20, gpugrad.func, +1334): vmap's batched tensors, levels and rules for 90 of 93 ops,
# grad / vjp / jacrev / hessian / jvp / jacfwd, functional_call, pytrees.
# library 12890 -> 14070, testing 2025 -> 2105 (issue 20, the API real scripts call, +1181 / +82): linalg inv / solve /
# det / slogdet / norms with every order of derivative, addmm / addcmul / addcdiv / lerp / atan2, multinomial,
# bernoulli, bincount, histc, histogram, one_hot, printing by torch's formatter, nn.init's fills, legacy
# constructors, torch.cuda seeds and states, accelerator, compile; the simulator's cupy.linalg and generator state.
# library 14070 -> 14130, tooling 2515 -> 2890 (issue 21, reliability second pass, +58 / +372): explain's own
# evaluator instead of eval (cli/expression.py), one run per checkpoint (cli/checkpoint_lock.py), bench --sizes
# against memory (bench/memory.py), resumed checkpoints checked field by field, SIGTERM, the ranks' config check, the
# Ctrl-C guard while importing (_command.py).
# library 14130 -> 14715, tooling 2890 -> 2950, testing 2105 -> 2115 (issue 22, mixed precision, +584 / +61 / +8):
# autocast with torch's per-device op lists and its cache, GradScaler deciding on the device with its unscale and
# update as kernels, bfloat16 (dtype, opmath, matmul, einsum, kernels), DLPack of bfloat16, the TF32 switches; the
# CLI's --amp / --tf32; the cuBLAS stand-in's bfloat16 and TF32.
# library 14715 -> 15150 (issue 21, what the registry-wide fuzzer found, +437): forward mode through in-place writes
# and views as torch's (a view's tangent is its base's, tangent buffers written in place, JVPs of in-place ops read
# the old values; core/forward.py, forward_state.py, views.py, ~230), gradients that carry tangents inside a dual
# level (engine.py), outputs of multi-view ops refusing in-place writes, range checks and torch's errors in
# gather/scatter/index ops, cat/stack, einsum and integer division, repeat/tile in new storage, diagonal as a view,
# quiet losses.
# library 15150 -> 15170 (issues 20 and 21, +18): torch's RuntimeError for operands that do not broadcast (Op.apply),
# atan2's JVP as torch's, bernoulli_ in the tensor's dtype, smooth_l1 and huber derivatives that keep NaN.
# library 15170 -> 15435, tooling 2950 -> 2975 (issues 22, 19 and 20, +262 / +20): float16 and bfloat16 in the
# launchers of every kernel family (dtype checks, float32 statistics, sums rounded once; ~150), the optimizers'
# float32 master weights (state, stale-master rule, kernel slots; ~85), the graph's one- or two-edge nodes, integer
# pow, atleast_nd / dstack / column_stack / row_stack; the GradScaler's state in `gpugrad train` checkpoints.
# library 15435 -> 15500 (issue 22, +64): a step GradScaler skips leaves the optimizers as torch's: SGD's device flags
# for buffers no step has written (kernel slot, launcher checks, state_dict), RMSprop's step counts on the device.
# library 15500 -> 15525, tooling 2975 -> 2985 (issue 19, +20 / +5): the CPU optimizer updates in cache-sized pieces
# (SGD 1.5x, Adam 1.7x faster); the bench's settled CPU samples (each implementation alone before it is timed).
# library 15525 -> 15540 (issue 20's surface, +10): clamp's bounds in the result type, take_along_dim's negative ids.
# library 15540 -> 15565 (issue 19, +21): large CPU optimizer updates shared among the BLAS pool's threads.
# library 15565 -> 15655 (issue 19, +88): CPU SGD as BLAS axpy / scal of NumPy's OpenBLAS (backend/blas1.py), torch's
# fused multiply-adds on the pool's threads: 5x faster than NumPy's two passes, and torch's bits.
# tooling 2985 -> 2990 (issue 19, +4): the bench's long chain interleaved over 3 runs, each implementation's median.
# library 15655 -> 15665 (issue 19, +6): nodes share equal bookkeeping tuples, which halves the GC's cost of a long chain.
# library 15665 -> 15685 (issue 19, +16): the CPU cross-entropy's plain case in a third of the NumPy calls.
# library 15685 -> 15725 (issue 19, +40): host memory kept for reuse (backend/host_memory.py, glibc's mallopt).
# library 15725 -> 15790 (issue 19, +62): ReLU as maximum(0, x) behind its import-time probe, its backward as an
# integer select, Linear's short-batch product order, cross-entropy's id range handed to the reference.
# tooling 2990 -> 2995 (issue 19, +2): the bench's environment block names the host-malloc policy.
# library 15790 -> 15920 (issues 20 and 21, +127): torch's CPU values of arange / linspace / logspace with an exactly
# rounded fused multiply-add (backend/ranges.py, ~110); the fuzzer's findings in cat, masked setitem, prod and the
# forward-mode Jacobian of an empty input.
# library 15920 -> 16050 (issues 20 and 21, +126): fuzzer findings (seeds 4201-4204): aminmax as one node, hooks of an
# output whose sibling is captured, clamp's tangent with Tensor bounds, torch's index checks, a dual view's tangent.
BUDGETS = {"library": 16050, "tooling": 2995, "testing": 2115}


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
