"""The CUDA-on-CPU emulator (gpugrad.testing.cuda_emu): fixture kernels against NumPy under every schedule,
the bugs it must expose (missing barrier, shared buffer reused without a barrier, divergent barrier, divergent
warp op, deadlock), what each schedule runs when, argument checks, EmuRuntime's CuPy slice, and the compile
cache."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpugrad.testing import cuda_emu
from gpugrad.testing.cuda_emu import EmulationError, EmuModule, EmuRuntime, compiler_available

pytestmark = pytest.mark.skipif(not compiler_available(), reason="g++ not found (the CUDA emulator compiles with it)")

FIX = Path(cuda_emu.__file__).parent / "fixtures"
# Lock-step thread orders, then the same orders one warp at a time (races between warps; see runtime.cpp).
SCHEDULES = ["forward", "reverse", "random", "warp-serial", "warp-reverse", "warp-random"]
DTYPES = [np.float32, np.float64]
CT = {np.float32: "float", np.float64: "double"}


def source(name):
    path = FIX / name
    return f'#line 1 "{path}"\n' + path.read_text()


@pytest.fixture(scope="module")
def k():
    names = [f"{n}<{t}>" for n in ("axpy", "block_sum", "warp_sum_atomic") for t in ("float", "double")]
    names += ["histogram", "reverse_blocks<float>", "transpose<double>", "warp_ops", "thread_ids", "apply_mode",
              "row_max_sum<double>", "event_order"]
    return EmuModule(source("emu_kernels.cu"), names, include_dirs=[FIX], source_name="emu_kernels.cu").get_function


@pytest.fixture(scope="module")
def bugs():
    names = ["block_sum_missing_barrier<double>", "row_max_sum_missing_barrier<double>", "divergent_barrier", "two_barriers", "shuffle_exited_lane",
             "shuffle_vs_barrier", "traps", "asserts"]
    return EmuModule(source("emu_bugs.cu"), names, include_dirs=[FIX], source_name="emu_bugs.cu").get_function


def block_sums(x, block):
    return np.pad(x, (0, -len(x) % block)).reshape(-1, block).sum(1)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("n", [1, 1000, 4099])  # fewer elements than threads, and not a multiple of the block
@pytest.mark.parametrize("dtype", DTYPES)
def test_grid_stride_elementwise(k, dtype, n, schedule):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    want = dtype(2.5) * x + y
    k(f"axpy<{CT[dtype]}>")((3,), (128,), (dtype(2.5), x, y, n), schedule=schedule)
    np.testing.assert_allclose(y, want, rtol=1e-6)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("block", [64, 1024])
@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_memory_tree_reduction(k, dtype, block, schedule):
    x = np.random.default_rng(1).standard_normal(3000).astype(dtype)
    out = np.zeros(-(-3000 // block), dtype)
    k(f"block_sum<{CT[dtype]}>")(out.shape, (block,), (x, out, 3000), schedule=schedule)
    np.testing.assert_allclose(out, block_sums(x.astype(np.float64), block), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_warp_shuffle_reduction_with_atomics_across_blocks(k, dtype, schedule):
    x = np.random.default_rng(2).standard_normal(10_000).astype(dtype)
    total = np.zeros(1, dtype)
    k(f"warp_sum_atomic<{CT[dtype]}>")((7,), (96,), (x, total, len(x)), schedule=schedule, threads=2)
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_integer_atomics_are_exact_across_os_threads(k, threads):
    x = np.random.default_rng(3).integers(0, 10, 50_000).astype(np.int32)
    counts = np.zeros(10, np.uint32)
    k("histogram")((16,), (64,), (x, counts, len(x)), threads=threads)
    np.testing.assert_array_equal(counts, np.bincount(x, minlength=10))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_dynamic_shared_memory(k, schedule):
    block = 128
    x = np.arange(5 * block, dtype=np.float32)
    y = np.zeros_like(x)
    k("reverse_blocks<float>")((5,), (block,), (x, y), shared_mem=block * 4, schedule=schedule)
    np.testing.assert_array_equal(y, x.reshape(5, block)[:, ::-1].ravel())


def test_3d_grid_with_2d_blocks(k):
    x = np.random.default_rng(4).standard_normal((3, 37, 50))
    y = np.zeros((3, 50, 37))
    k("transpose<double>")((4, 3, 3), (16, 16), (x, y, 37, 50), schedule="random", seed=5)
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1))


def test_3d_block_and_grid_indices(k):
    block, grid = (4, 3, 2), (2, 3, 2)
    ids = np.full(np.prod(grid) * np.prod(block), -1, np.int32)
    k("thread_ids")(grid, block, (ids,))
    z, y, x = np.meshgrid(range(block[2]), range(block[1]), range(block[0]), indexing="ij")
    bz, by, bx = np.meshgrid(range(grid[2]), range(grid[1]), range(grid[0]), indexing="ij")
    t = (x + 10 * y + 100 * z).ravel()
    b = (1000 * bx + 10000 * by + 100000 * bz).ravel()
    np.testing.assert_array_equal(ids, (b[:, None] + t[None, :]).ravel())


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_warp_votes_and_shuffle_variants(k, schedule):
    x = np.random.default_rng(6).uniform(-2.5, 2.5, 64).astype(np.float32)
    f, v = np.zeros((64, 4), np.float32), np.zeros((64, 4), np.uint32)
    k("warp_ops")((1,), (64,), (x, f, v), schedule=schedule)
    t = np.arange(64)
    lane, base = t % 32, t - t % 32
    np.testing.assert_array_equal(f[:, 0], x[base + 3])
    np.testing.assert_array_equal(f[:, 1], np.where(lane == 0, x, x[t - 1]))
    np.testing.assert_array_equal(f[:, 2], x[t ^ 1])
    np.testing.assert_array_equal(f[:, 3], np.where((lane < 16) & (lane + 2 < 16), x[np.minimum(t + 2, 63)], x))
    w = (x > 0).reshape(2, 32)
    np.testing.assert_array_equal(v[:, 0], np.repeat((w * (1 << np.arange(32, dtype=np.uint64))).sum(1), 32))
    np.testing.assert_array_equal(v[:, 1], np.repeat((x > 2).reshape(2, 32).any(1), 32))
    np.testing.assert_array_equal(v[:, 2], np.repeat((x > -2).reshape(2, 32).all(1), 32))
    np.testing.assert_array_equal(v[:, 3], (x > 0).sum())


def test_missing_barrier_shows_under_some_schedule(k, bugs):
    block = 256
    x = np.random.default_rng(7).integers(-100, 100, 4 * block).astype(np.float64)  # integer sums: exact
    want = block_sums(x, block)
    got = {}
    for schedule in SCHEDULES:
        out = np.zeros(4)
        bugs("block_sum_missing_barrier<double>")((4,), (block,), (x, out, len(x)), schedule=schedule, seed=1)
        got[schedule] = out
        good = np.zeros(4)
        k("block_sum<double>")((4,), (block,), (x, good, len(x)), schedule=schedule, seed=1)
        np.testing.assert_array_equal(good, want)  # the fixed kernel is right under every schedule
    # Forward: thread 0 finishes its whole loop before the threads that feed it have added anything.
    assert not np.array_equal(got["forward"], want)
    # Reverse happens to run every reader after its writers, so the schedules disagree: the race is visible.
    np.testing.assert_array_equal(got["reverse"], want)


def test_reused_shared_buffer_race_shows_only_under_warp_reverse(k, bugs):
    """Two block reductions through one __shared__ slot array with no barrier between (the bug of a block_reduce
    that lost its leading __syncthreads). Every lock-step schedule misses it; warp-reverse runs warp 0, which
    writes the result, after every other warp has overwritten its max partial with its sum partial."""
    rows, cols, block = 3, 1000, 256  # 8 warps
    # Positive integers: exact in any order, and every warp's sum partial exceeds every element (the race shows).
    x = np.random.default_rng(10).integers(1, 100, (rows, cols)).astype(np.float64)
    want = np.stack([x.max(1), x.sum(1)], 1).ravel()
    got = {}
    for schedule in SCHEDULES:
        good = np.zeros(2 * rows)
        k("row_max_sum<double>")((rows,), (block,), (x, good, np.int32(cols)), schedule=schedule, seed=1)
        np.testing.assert_array_equal(good, want)  # with the barrier: right under every schedule
        got[schedule] = np.zeros(2 * rows)
        bugs("row_max_sum_missing_barrier<double>")((rows,), (block,), (x, got[schedule], np.int32(cols)),
                                                    schedule=schedule, seed=1)
    for schedule in ("forward", "reverse", "random", "warp-serial"):  # warp-serial: warp 0 reads first
        np.testing.assert_array_equal(got[schedule], want, err_msg=schedule)
    np.testing.assert_array_equal(got["warp-reverse"][1::2], want[1::2])  # the sums are right,
    assert (got["warp-reverse"][::2] > want[::2]).all()  # the maxima took other warps' sum partials


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_what_runs_when(k, schedule):
    """Tickets drawn from one counter record the order: the warp-* schedules run each warp alone, in their warp
    order, up to the block barrier; the others interleave the warps. Block (40, 2): warps by linear thread id, the
    last of 16 lanes."""
    order = np.full(3 * 80, -1, np.int32)
    k("event_order")((1,), (40, 2), (order, np.zeros(1, np.int32)), schedule=schedule, seed=3)
    t, warp = order.reshape(80, 3), np.arange(80) // 32
    assert sorted(order) == list(range(240))
    assert t[:, :2].max() < t[:, 2].min()  # the block barrier
    for w in range(3):
        assert t[warp == w, 0].max() < t[warp == w, 1].min()  # the warp op: a rendezvous within the warp
    phases = [t[:, :2], t[:, 2:]]
    alone = [np.ptp(p[warp == w]) == p[warp == w].size - 1 for p in phases for w in range(3)]  # contiguous runs
    if not schedule.startswith("warp-"):
        assert not all(alone)
        return
    assert all(alone)
    firsts = [[p[warp == w].min() for w in range(3)] for p in phases]
    lanes0 = t[warp == 0, 0]  # lane order of the first event within warp 0
    if schedule == "warp-serial":
        assert all(np.argsort(f).tolist() == [0, 1, 2] for f in firsts) and (np.diff(lanes0) > 0).all()
    elif schedule == "warp-reverse":
        assert all(np.argsort(f).tolist() == [2, 1, 0] for f in firsts) and (np.diff(lanes0) < 0).all()


@pytest.mark.parametrize("schedule", ["random", "warp-random"])
def test_random_schedules_are_reproducible_by_seed(k, bugs, schedule):
    x = np.random.default_rng(8).integers(-100, 100, 1024).astype(np.float64)
    runs = []
    for seed in (3, 3, 4):
        out = np.zeros(4)
        bugs("block_sum_missing_barrier<double>")((4,), (256,), (x, out, len(x)), schedule=schedule, seed=seed)
        runs.append(out)
    np.testing.assert_array_equal(runs[0], runs[1])
    if schedule == "warp-random":  # the warp order is drawn from the seed
        orders = set()
        for seed in range(8):
            order = np.zeros(3 * 96, np.int32)
            k("event_order")((1,), (96,), (order, np.zeros(1, np.int32)), schedule=schedule, seed=seed)
            orders.add(tuple(np.argsort(order.reshape(3, 32, 3)[:, :, 0].min(1))))
        assert len(orders) > 1


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("kernel, match", [
    ("divergent_barrier", r"divergent_barrier: divergent barrier in block \(B, 0, 0\).*threads 0-4 wait at "
                          r"__syncthreads \(.*emu_bugs.cu:\d+\) but threads 5-63 have exited"),
    ("two_barriers", r"divergent barrier in block \(B.*threads 0-4 wait at __syncthreads \(.*:\d+\) but threads 5-63 "
                     r"wait at"),
    ("shuffle_exited_lane", r"divergent warp op in block \(B.*__shfl_down_sync.*mask 0xffffffff.*lane 16 \(thread 16\) "
                            r"has exited"),
    ("shuffle_vs_barrier", r"deadlock in block \(B.*threads 0-15 wait in __shfl_xor_sync.*mask 0xffffffff; "
                           r"threads 16-63 wait in __syncthreads"),
    ("traps", r"traps: error in block \(B, 0, 0\).*thread 7 .*__trap\(\) called"),
    ("asserts", r"asserts: error in block \(B, 0, 0\).*thread 9 .*assert\(threadIdx.x != 9\) failed at .*emu_bugs.cu:\d+"),
], ids=lambda v: v if v.isidentifier() else None)
def test_kernel_bugs_raise_promptly(bugs, kernel, match, schedule):
    x = np.zeros(64, np.float32)
    start = time.perf_counter()
    # Both blocks fail; the one reported is the first in schedule order (reverse runs block 1 first).
    first = "1" if schedule in ("reverse", "warp-reverse") else "0"
    with pytest.raises(EmulationError, match=match.replace("B", first)):
        bugs(kernel)((2,), (64,), (x,), schedule=schedule, threads=2)
    assert time.perf_counter() - start < 2
    y = np.zeros(1)  # the process and the module are still usable
    bugs("block_sum_missing_barrier<double>")((1,), (32,), (np.ones(32), y, 32), schedule="reverse")
    assert y[0] == 32


@pytest.mark.parametrize("body, expect", [
    ("if (blockIdx.x == 2 && threadIdx.x == 5) out = (float*)16; out[threadIdx.x] = 1.0f;",
     r"cuda_emu: segmentation fault at 0x\w+ in kernel crash, block \(2, 0, 0\), thread \(5, 0, 0\)\n"),
    ("volatile float a[40000]; a[0] = 1.0f; out[threadIdx.x] = a[0];",  # 160 KB of locals, 64 KB fiber stacks
     r"in kernel crash, block \(\d, 0, 0\), thread \(0, 0, 0\): fiber stack overflow, raise GPUGRAD_EMU_STACK_KB"),
], ids=["wild_pointer", "stack_overflow"])
def test_crash_names_kernel_block_and_thread(body, expect):
    src = f'extern "C" __global__ void crash(float* out) {{ {body} }}'
    EmuModule(src, ["crash"])  # compiled here; the child process only loads it from the cache
    code = ("import numpy as np\nfrom gpugrad.testing.cuda_emu import EmuModule\n"
            f"EmuModule({src!r}, ['crash']).get_function('crash')((4,), (32,), (np.zeros(32, np.float32),))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and re.search(expect, r.stderr), r.stderr


def test_argument_checks(k):
    x, y = np.ones(8, np.float32), np.ones(8, np.float32)
    axpy = k("axpy<float>")
    with pytest.raises(EmulationError, match=r"argument 0: 8-byte float .* pass numpy.float32"):
        axpy((1,), (32,), (2.0, x, y, 8))  # under CuPy a Python float is a double: garbage in a float param
    with pytest.raises(EmulationError, match=r"argument 1: array dtype does not match"):
        axpy((1,), (32,), (np.float32(2), x.astype(np.float64), y, 8))
    ro = np.ones(8, np.float32)
    ro.setflags(write=False)
    with pytest.raises(EmulationError, match=r"argument 2: read-only array passed for a non-const pointer"):
        axpy((1,), (32,), (np.float32(2), x, ro, 8))
    with pytest.raises(EmulationError, match=r"argument 3: integer >= 2\^63"):
        axpy((1,), (32,), (np.float32(2), x, y, np.uint64(2**63 + 5)))
    with pytest.raises(EmulationError, match=r"transpose<double>: argument 2: integer value does not survive"):
        k("transpose<double>")((1,), (16, 16), (np.ones(8), np.ones(8), 2**31, 1))  # int rows: CuPy would pass INT_MIN
    with pytest.raises(EmulationError, match=r"takes 4 arguments, got 3"):
        axpy((1,), (32,), (np.float32(2), x, y))
    with pytest.raises(ValueError, match=r"argument 1: .* not C-contiguous"):
        axpy((1,), (32,), (np.float32(2), np.ones(16, np.float32)[::2], y, 8))
    with pytest.raises(EmulationError, match=r"invalid launch configuration"):
        axpy((1,), (2048,), (np.float32(2), x, y, 8))
    axpy((1,), (32,), (np.float32(2), x, y, np.int32(8)))  # narrower ints are fine: CuPy zero-pads them
    np.testing.assert_array_equal(y, 3)
    z = np.arange(4, dtype=np.float32)
    k("apply_mode")((1,), (4,), (z, 1, True, np.uint8(3)))  # enum, bool and char parameters
    k("apply_mode")((1,), (4,), (z, 0, False, 200))
    np.testing.assert_array_equal(z, np.arange(4) * 3)
    with pytest.raises(EmulationError, match=r"apply_mode: argument 3: integer value does not survive"):
        k("apply_mode")((1,), (4,), (z, 0, True, 300))


# ---- EmuRuntime -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    return EmuRuntime(lambda family: source(f"{family}.cu"), include_dirs=[FIX])


def test_runtime_raw_kernel(rt):
    x = np.random.default_rng(9).standard_normal((5, 7)).astype(np.float32)
    y = rt.empty(x.shape, np.float32)
    rt.raw_kernel("emu_family", "leaky_rows<float>")((2,), (32,), (x, y, np.float32(0.1), x.size))
    np.testing.assert_allclose(y, np.where(x > 0, x, np.float32(0.1) * x), rtol=1e-6)
    assert rt.xp is np


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_broadcasts_and_binds_scalars(rt, dtype):
    kern = rt.elementwise("emu_family", "T x, T y, T slope", "T z", "z = leaky(x, slope) + y", "leaky_add")
    x = np.linspace(-1, 1, 3, dtype=dtype).reshape(3, 1)
    y = np.arange(4, dtype=dtype)
    z = kern(x, y, 0.5)  # the Python float is cast to T, bound by x
    assert z.shape == (3, 4) and z.dtype == dtype
    np.testing.assert_allclose(z, np.where(x > 0, x, dtype(0.5) * x) + y, rtol=1e-6)


def test_elementwise_in_place_and_non_contiguous_outputs(rt):
    sgd = rt.elementwise("emu_family", "T g, T lr", "T p", "p = p - lr * g", "sgd_step")
    p, g = np.ones((4, 6), np.float32), np.full((4, 6), 2, np.float32)
    assert sgd(g, np.float32(0.25), p) is p
    np.testing.assert_array_equal(p, 0.5)
    big = np.ones((4, 12), np.float32)
    sgd(g, 0.25, big[:, ::2])  # strided output: computed in a copy and written back
    np.testing.assert_array_equal(big[:, ::2], 0.5)
    np.testing.assert_array_equal(big[:, 1::2], 1.0)


def test_elementwise_several_outputs_and_concrete_types(rt):
    kern = rt.elementwise("emu_family", "T x", "T sq, int32 sign, bool pos", "sq = x * x; sign = x > 0 ? 1 : -1; "
                          "pos = x > 0 && i % 2 == 0", "sq_sign")
    x = np.array([-2.0, 3.0, 0.5, -0.25, 4.0])
    sq, sign, pos = kern(x)
    np.testing.assert_array_equal(sq, x * x)
    assert sign.dtype == np.int32 and pos.dtype == np.bool_
    np.testing.assert_array_equal(sign, np.where(x > 0, 1, -1))
    np.testing.assert_array_equal(pos, (x > 0) & (np.arange(5) % 2 == 0))


# ---- compile cache ----------------------------------------------------------------------------------------------
def test_cache_skips_the_compiler_and_tracks_included_headers(tmp_path, monkeypatch):
    cuda_emu._load_runtime()  # the runtime library stays where it is; only this module goes to tmp_path
    monkeypatch.setenv("GPUGRAD_EMU_CACHE", str(tmp_path / "cache"))
    calls = []
    real = cuda_emu._run_compiler
    monkeypatch.setattr(cuda_emu, "_run_compiler", lambda cmd: (calls.append(cmd), real(cmd)))
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "value.cuh").write_text("#define VALUE 1\n")
    src = '#include "value.cuh"\nextern "C" __global__ void value(int* out) { out[threadIdx.x] = VALUE; }\n'

    def build_and_run():
        monkeypatch.setattr(cuda_emu, "_modules", {})  # forget loaded modules: only the disk cache remains
        start = time.perf_counter()
        fn = EmuModule(src, ["value"], include_dirs=[inc]).get_function("value")
        elapsed = time.perf_counter() - start
        out = np.zeros(2, np.int32)
        fn((1,), (2,), (out,))
        return out[0], elapsed

    assert build_and_run()[0] == 1 and len(calls) == 1
    value, elapsed = build_and_run()
    assert value == 1 and len(calls) == 1 and elapsed < 0.2  # warm: no g++
    (inc / "value.cuh").write_text("#define VALUE 2\n")
    assert build_and_run()[0] == 2 and len(calls) == 2  # an edited header rebuilds


def test_compile_errors_carry_gxx_output():
    with pytest.raises(EmulationError, match=r"(?s)g\+\+ failed.*broken.cu:2"):
        EmuModule('extern "C" __global__ void f(float* x) {\n  x[0] = undefined_name;\n}\n', ["f"],
                  source_name="broken.cu")
