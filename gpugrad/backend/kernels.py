"""CuPy launchers for the hand-written kernels in ``kernels/*.cu``.

Every launcher has the signature of its NumPy/CuPy reference in ``backend/reference.py`` (``name(xp, *arrays,
**params)``): the CPU backend runs the reference, the CUDA backend runs the kernel, tests compare the two.
Nothing here imports CuPy at import time: all CuPy calls go through a *runtime* (``runtime()``; default
:class:`CupyRuntime`, lazily importing CuPy), which tests swap for the CPU emulator with :func:`use_runtime`::

    with kernels.use_runtime(EmuRuntime(source_for_family=kernels.source, include_dirs=[kernel_dir()])):
        y = kernels.softmax_fwd(np, x)

Runtime protocol: ``xp``; ``raw_kernel(family, name_expr)`` -> ``k(grid, block, args, shared_mem=0)``;
``elementwise(family, in_params, out_params, operation, name)`` -> a ``cupy.ElementwiseKernel``-like callable;
``empty(shape, dtype)``, ``zeros(shape, dtype)``, ``ascontiguousarray(a)``.
Scalar kernel arguments are passed as Python ``int`` (-> ``long long``) and ``float`` (-> ``double``), the types
CuPy gives Python scalars, so every raw kernel declares its scalars as ``long long`` / ``double``.
Like the references, launchers accept any layout (in-place buffers too) and float16, which the shared
``reference.opmath`` wrapper computes in float32; the kernels themselves are float and double only.
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import inspect
import math
import pathlib
import re

from gpugrad.backend import reference
from gpugrad.backend.reference import REDUCTIONS, opmath_all
from gpugrad.ops.declarations import ACTIVATIONS, KERNEL_OPS, POINTWISE

CALLS: collections.Counter = collections.Counter()  # launcher name -> launches; proves the kernel path ran


def kernel_dir() -> pathlib.Path:
    """``gpugrad/_kernels`` inside an installed wheel, else ``<repo>/kernels``."""
    pkg = pathlib.Path(__file__).resolve().parent.parent
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


CTYPES = {"float32": "float", "float64": "double"}

# Raw kernels per family; each is a template instantiated for float and double (bias_act_bwd also per activation).
RAW_KERNELS = {
    "elementwise": ("bias_act_bwd", "pointwise"),
    "reduce": ("softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd", "logsumexp_fwd", "logsumexp_bwd",
               "sum_rows"),
    "loss": ("softmax_xent_fwd", "softmax_xent_bwd"),
    "norm": ("layer_norm_fwd", "layer_norm_bwd", "layer_norm_bwd_wb"),
    "optim": ("sgd_update_", "adam_update_", "sgd_multi_update_", "adam_multi_update_", "rmsprop_multi_update_",
              "adagrad_multi_update_"),
    "check": ("check_index", "check_finite"),  # check_index per index type (INDEX_CTYPES), not per float type
}
INDEX_CTYPES = {"int32": "int", "int64": "long long"}


def _expr(kernel: str, ctype: str) -> str:
    return f"{kernel}<{ctype}>"


def _saves_x(act):
    return act in POINTWISE and POINTWISE[act].saves == "x"


# The Op functors pointwise<Op> is instantiated for (elementwise.cu), all from ops/declarations.py: every pointwise
# op's forward (the identity is copy_) and g * f', bias + activation, dropout (randoms u in either float type) and
# accumulate_.
POINTWISE_OPS = tuple(op for c in CTYPES.values() for op in (
    *(f"ActFwd<{c}, pw::{a}>" for a in ACTIVATIONS),
    *(f"ActBwd<{c}, pw::{d.name}>" for d in KERNEL_OPS),
    *(f"BiasActFwd<{c}, pw::{a}, {str(_saves_x(a)).lower()}>" for a in ACTIVATIONS),
    *(f"DropoutFwd<{c}, {u}>" for u in CTYPES.values()),
    f"DropoutBwd<{c}>", f"Accumulate<{c}>"))


def _instantiations(kernel):
    if kernel == "pointwise":
        return [f"pointwise<{op}>" for op in POINTWISE_OPS]
    if kernel == "bias_act_bwd":
        return [f"{kernel}<{c}, pw::{a}>" for c in CTYPES.values() for a in ACTIVATIONS]
    ctypes = INDEX_CTYPES if kernel == "check_index" else CTYPES
    return [f"{kernel}<{c}>" for c in ctypes.values()]


# Every template instantiation the launchers use: CuPy's RawModule name_expressions and the NVRTC check.
NAME_EXPRESSIONS = {fam: [e for k in ks for e in _instantiations(k)] for fam, ks in RAW_KERNELS.items()}


def _bias_spec(a):
    y = f"pw::{a}::fwd(z, p0, p1)"
    if _saves_x(a):  # the backward reads z
        return "T x, T b, T p0, T p1", "T y, T z", f"z = x + b; y = {y}"
    return "T x, T b, T p0, T p1", "T y", f"T z = x + b; y = {y}"


# cupy.ElementwiseKernel specs (in_params, out_params, operation) over the pw:: structs of elementwise.cu.
# The NVRTC check compiles a wrapper kernel per entry from these same strings.
ELEMENTWISE = {
    **{k: v for d in KERNEL_OPS for k, v in (
        (f"{d.name}_fwd", ("T x, T p0, T p1", "T y", f"y = pw::{d.name}::fwd(x, p0, p1)")),
        (f"{d.name}_bwd", ("T s, T g, T p0, T p1", "T gx", f"gx = pw::{d.name}::bwd(s, g, p0, p1)")))},
    **{f"bias_{a}_fwd": _bias_spec(a) for a in ACTIVATIONS},
    "dropout_fwd": ("T x, U u, U p, T scale", "T y, bool mask", "mask = u >= p; y = mask ? x * scale : T(0)"),
    "dropout_bwd": ("T gy, bool mask, T scale", "T gx", "gx = mask ? gy * scale : T(0)"),
    "accumulate_": ("T g", "T acc", "acc += g"),
    "copy_": ("T src", "T dst", "dst = src"),
}

# launcher -> the kernels it launches ("family:kernel" raw, "ew:key" ELEMENTWISE); tests check both directions.
USES = {
    # pointwise launchers: the vectorized raw kernel for contiguous arrays, the ElementwiseKernel for the rest
    **{f"{d.name}_{e}": ("elementwise:pointwise", f"ew:{d.name}_{e}") for d in KERNEL_OPS for e in ("fwd", "bwd")},
    "bias_act_fwd": ("elementwise:pointwise", *(f"ew:bias_{a}_fwd" for a in ACTIVATIONS)),
    "bias_act_bwd": ("elementwise:bias_act_bwd", "reduce:sum_rows"),
    "dropout_fwd": ("elementwise:pointwise", "ew:dropout_fwd"),
    "dropout_bwd": ("elementwise:pointwise", "ew:dropout_bwd"),
    "accumulate_": ("elementwise:pointwise", "ew:accumulate_"),
    "copy_": ("elementwise:pointwise", "ew:copy_"),
    **{k: (f"reduce:{k}",) for k in RAW_KERNELS["reduce"]},
    "softmax_xent_fwd": ("loss:softmax_xent_fwd",),
    "softmax_xent_bwd": ("loss:softmax_xent_bwd",),
    "token_logprob_fwd": ("loss:softmax_xent_fwd",),
    "token_logprob_bwd": ("loss:softmax_xent_bwd",),
    "check_index": ("check:check_index",),
    "check_finite": ("check:check_finite",),
    "layer_norm_fwd": ("norm:layer_norm_fwd",),
    "layer_norm_bwd": ("norm:layer_norm_bwd", "norm:layer_norm_bwd_wb", "reduce:sum_rows"),
    "sgd_update_": ("optim:sgd_update_",),
    "adam_update_": ("optim:adam_update_",),
    "sgd_multi_update_": ("optim:sgd_multi_update_",),
    "adam_multi_update_": ("optim:adam_multi_update_",),
    "rmsprop_multi_update_": ("optim:rmsprop_multi_update_",),
    "adagrad_multi_update_": ("optim:adagrad_multi_update_",),
}


# ---- runtimes -------------------------------------------------------------------------------------------------
class CupyRuntime:
    """The real GPU path: RawModules memoized per (family, device), ElementwiseKernels per spec (CuPy caches
    their binaries per device and dtype itself)."""

    def __init__(self):
        from gpugrad.backend.cuda import cupy_module  # lazy: only a CUDA launch gets here

        self.cupy = self.xp = cupy_module()  # CuPy, or the simulated device under GPUGRAD_CUDA_SIM
        self._modules, self._functions, self._elementwise = {}, {}, {}

    def raw_kernel(self, family, name_expr):
        dev = self.cupy.cuda.Device().id
        fn = self._functions.get((family, name_expr, dev))
        if fn is None:
            mod = self._modules.get((family, dev))
            if mod is None:
                mod = self._modules[family, dev] = self.cupy.RawModule(
                    code=source(family), options=OPTIONS, name_expressions=NAME_EXPRESSIONS[family])
            fn = self._functions[family, name_expr, dev] = mod.get_function(name_expr)
        return fn

    def elementwise(self, family, in_params, out_params, operation, name):
        key = (family, in_params, out_params, operation, name)
        k = self._elementwise.get(key)
        if k is None:
            k = self._elementwise[key] = self.cupy.ElementwiseKernel(
                in_params, out_params, operation, name, preamble=source(family), options=OPTIONS)
        return k

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype)

    def zeros(self, shape, dtype):
        return self.cupy.zeros(shape, dtype)

    def ascontiguousarray(self, a):
        return self.cupy.ascontiguousarray(a)


_default_runtime = None
_runtime_override: contextvars.ContextVar = contextvars.ContextVar("gpugrad_kernel_runtime", default=None)


def runtime():
    """The runtime launchers use: the innermost :func:`use_runtime`, else the (lazily built) CupyRuntime."""
    global _default_runtime
    rt = _runtime_override.get()
    if rt is not None:
        return rt
    if _default_runtime is None:
        _default_runtime = CupyRuntime()
    return _default_runtime


@contextlib.contextmanager
def use_runtime(rt):
    token = _runtime_override.set(rt)
    try:
        yield rt
    finally:
        _runtime_override.reset(token)


# ---- validation and launch shapes ---------------------------------------------------------------------------
def _describe(arrays):
    return ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in arrays)


def _check_float(name, *arrays):
    """All float32 or all float64 (one dtype; float16 arrives here as float32, see reference.opmath); returns the
    C type name."""
    dt = arrays[0].dtype
    if dt.name not in CTYPES or any(a.dtype != dt for a in arrays):
        raise TypeError(f"{name}: expected float arrays of one dtype (float16, float32 or float64), "
                        f"got {_describe(arrays)}")
    return CTYPES[dt.name]


def _check_shapes(name, shape, *arrays):
    if any(tuple(a.shape) != tuple(shape) for a in arrays):
        raise ValueError(f"{name}: expected arrays of shape {tuple(shape)}, got {_describe(arrays)}")


def _check_2d(name, x):
    if x.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D (rows, cols) array, got {_describe([x])}")
    if x.shape[0] > 2**31 - 1 or x.shape[1] > 2**31 - 1:
        raise ValueError(f"{name}: at most 2**31 - 1 rows (grid.x) and columns (int indices), got {x.shape}")


def row_block(cols: int, itemsize: int) -> int:
    """Threads per row block: the smallest power of two in [32, 1024] with cols <= K * threads, K the register
    cache per thread (8 floats / 4 doubles, common.cuh RowCache), so rows that fit are read once. Powers of two
    >= 32 because block reductions need whole warps; small blocks for short rows keep many rows per SM;
    1024 is the hardware limit, beyond it threads loop over chunks."""
    need = -(-cols // (32 // itemsize))
    block = 32
    while block < need and block < 1024:
        block *= 2
    return block


ROW_BLOCK_MAX = 512  # = __launch_bounds__(512, 2) of the reduce.cu / norm.cu row kernels: two blocks per SM
_TEAM_BLOCK = 128  # threads per block when lanes of a warp own short rows: 128 / G rows per block
TEAM_CACHE = {4: 8, 8: 2}  # itemsize -> elements a thread holds per row chunk (= common.cuh TeamCache<T>::K)


def row_plan(cols: int, itemsize: int) -> tuple:
    """(lanes, block) for the reduce.cu / norm.cu row kernels (common.cuh RowTeam). Rows that 32 lanes can hold
    in registers (cols <= 32 * K, K = TEAM_CACHE: 8 floats / 2 doubles) get G lanes of a warp, G the
    smallest power of two that holds the row, in blocks of 128 threads: short rows leave no lanes idle and
    reduce with shuffles only (no shared memory, no barriers). Longer rows get a block each (lanes 0), the
    smallest power of two in [64, 512] threads that holds the row; past 512 threads they loop over chunks."""
    need = -(-cols // TEAM_CACHE[itemsize])  # threads that hold the row in one register chunk
    pow2 = 1 << max(need - 1, 0).bit_length()  # the smallest power of two >= need
    return (pow2, _TEAM_BLOCK) if need <= 32 else (0, min(max(pow2, 64), ROW_BLOCK_MAX))


def _launch_team_rows(rt, family, kernel, x, arrays, *scalars):
    """A reduce.cu / norm.cu row kernel over the rows of the 2-D x: args (*arrays, rows, cols, lanes, *scalars)."""
    rows, cols = x.shape
    if rows:
        lanes, block = row_plan(cols, x.dtype.itemsize)
        grid = rows if lanes == 0 else -(-rows // (block // lanes))
        rt.raw_kernel(family, _expr(kernel, CTYPES[x.dtype.name]))(
            (grid,), (block,), (*arrays, rows, cols, lanes, *scalars))


_COL_TARGET_BLOCKS = 2048  # ~2 waves of 256-thread blocks on a 132-SM H100/H200
_COL_MIN_ROWS = 64  # rows per chunk below which another partial-sum pass costs more than it saves


def _column_plan(rows, cols):
    """(grid, rows_per_chunk) for the (32, 8)-block column kernels: split rows into chunks until the grid fills
    the GPU; each chunk writes its own partial row (summed again by sum_rows, so no atomics)."""
    col_blocks = -(-cols // 32)
    chunks = max(1, min(-(-_COL_TARGET_BLOCKS // col_blocks), -(-rows // _COL_MIN_ROWS), 65535))
    per_chunk = -(-rows // chunks)
    return (col_blocks, -(-rows // per_chunk)), per_chunk


def _column_out(rt, grid, cols, dtype):
    """(dst, result) for a column kernel launched on ``grid``. One row chunk: dst is a (1, cols) view of a fresh
    (cols,) result, which the kernel writes straight into. Several: dst holds the (chunks, cols) partials and
    result is None (_column_sum adds them).
    NOTE: a result that owns its memory (.base None) matters: a reshaped (1, cols) partial is a view, which the
    autograd engine must treat as shared and copy before accumulating into it (one more launch per bias per step)."""
    if grid[1] == 1:
        result = rt.empty((cols,), dtype)
        return result.reshape(1, cols), result
    return rt.empty((grid[1], cols), dtype), None


def _column_sum(rt, g):
    """Deterministic sum over axis 0 of a C-contiguous 2-D array with rows, cols > 0 (one or more passes), as a
    fresh (cols,) array."""
    rows, cols = g.shape
    while True:
        grid, per_chunk = _column_plan(rows, cols)
        dst, result = _column_out(rt, grid, cols, g.dtype)
        rt.raw_kernel("reduce", _expr("sum_rows", CTYPES[g.dtype.name]))(grid, (32, 8), (g, dst, rows, cols, per_chunk))
        if result is not None:
            return result
        g, rows = dst, grid[1]


def _ew(key):
    return runtime().elementwise("elementwise", *ELEMENTWISE[key], f"gg_{key}")


def _launch_rows(rt, family, kernel, x, args):
    """One block per row of the 2-D array x."""
    rows, cols = x.shape
    if rows:
        block = row_block(cols, x.dtype.itemsize)
        rt.raw_kernel(family, _expr(kernel, CTYPES[x.dtype.name]))((rows,), (block,), args)


# ---- elementwise --------------------------------------------------------------------------------------------
# Contiguous arrays take the vectorized raw kernel pointwise<Op> (elementwise.cu); strided, broadcast and other
# layouts the ElementwiseKernel of the same formula. (A contiguous view at an odd offset takes the raw kernel,
# whose scalar path handles pointers that are not 16-byte aligned.)
_EW_BLOCK = 256  # = GG_EW_BLOCK in elementwise.cu
# Grid: at most one full wave of an H200, 132 SMs x 4 resident blocks (which __launch_bounds__(256, 4) guarantees
# by capping registers at 64); each thread then loops grid-stride. Smaller arrays get one block per 256 x kVecs
# vectors. More blocks than fit at once would only add a partial second wave; a GPU with fewer SMs runs this grid
# in a few waves.
_EW_MAX_GRID = 132 * 4


def _contiguous(*arrays):
    return all(a.flags.c_contiguous for a in arrays)


def _launch_pointwise(op, a, b, outs, cols=1, s0=0.0, s1=0.0, in_place=False):
    """pointwise<op> over the C-contiguous a (and b) into the C-contiguous outs, (y,) or (y, z); returns y or
    (y, z). Unused slots get a and y again (the kernel never touches them)."""
    y = outs[0]
    if y.size:
        per_vector = 16 // y.itemsize  # elements of one 16-byte vector; vectors per thread as PointwiseOp::kVecs:
        loads = per_vector * (a.itemsize + (0 if b is None else b.itemsize) + (y.itemsize if in_place else 0))
        per_block = _EW_BLOCK * max(1, min(4, 64 // loads))  # 64 bytes of loads in flight per thread
        grid = (min(-(-max(1, y.size // per_vector) // per_block), _EW_MAX_GRID),)
        runtime().raw_kernel("elementwise", f"pointwise<{op}>")(
            grid, (_EW_BLOCK,), (a, a if b is None else b, y, outs[-1], y.size, int(cols), float(s0), float(s1)))
    return y if len(outs) == 1 else tuple(outs)


def _pointwise_launcher(op, direction):
    """The launcher ``<op>_fwd(xp, x, *params)`` or ``<op>_bwd(xp, saved, g, *params)`` of a declared pointwise op."""
    name = f"{op}_{direction}"
    decl = POINTWISE[op]

    def launch(xp, *args):
        n = 1 if direction == "fwd" else 2
        arrays, params = args[:n], args[n:]
        if len(params) != len(decl.params):
            raise TypeError(f"{name}: expected parameters {tuple(p for p, _ in decl.params)}, got {params}")
        ctype = _check_float(name, *arrays)
        _check_shapes(name, arrays[0].shape, *arrays)
        CALLS[name] += 1
        p0, p1 = (tuple(float(p) for p in params) + (0.0, 0.0))[:2]
        if not _contiguous(*arrays):
            t = arrays[0].dtype.type
            return _ew(name)(*arrays, t(p0), t(p1))
        functor = f"{'ActFwd' if direction == 'fwd' else 'ActBwd'}<{ctype}, pw::{op}>"
        y = runtime().empty(arrays[0].shape, arrays[0].dtype)
        return _launch_pointwise(functor, arrays[0], arrays[1] if n > 1 else None, (y,), s0=p0, s1=p1)

    launch.__name__ = launch.__qualname__ = name
    launch.__signature__ = inspect.signature(getattr(reference, name))
    launch.__doc__ = f"{name}: the pw::{op} kernel of elementwise.cu (reference: backend/reference.py {name})."
    return launch


for _d in KERNEL_OPS:
    for _direction in ("fwd", "bwd"):
        globals()[f"{_d.name}_{_direction}"] = _pointwise_launcher(_d.name, _direction)


def _check_act(name, act, params):
    if act not in ACTIVATIONS:
        raise ValueError(f"{name}: act must be one of {ACTIVATIONS}, got {act!r}")
    want = POINTWISE[act].params if act in POINTWISE else ()
    if len(params) != len(want):
        raise TypeError(f"{name}: activation {act!r} takes parameters {tuple(p for p, _ in want)}, got {params}")
    return (tuple(float(p) for p in params) + (0.0, 0.0))[:2]


def bias_act_fwd(xp, x, b, act, *params):
    """(y, saved) with y = act(x + b), b (C,) broadcast over x's last axis; saved = z = x + b for an act whose
    backward reads its input, else y."""
    p0, p1 = _check_act("bias_act_fwd", act, params)
    ctype = _check_float("bias_act_fwd", x, b)
    if x.ndim < 1 or b.shape != (x.shape[-1],):
        raise ValueError(f"bias_act_fwd: expected x (..., C) and b (C,), got {_describe([x, b])}")
    CALLS["bias_act_fwd"] += 1
    saves_x = _saves_x(act)
    if _contiguous(x, b) and x.shape[-1] < 2**31:  # (the kernel's bias columns are 32-bit)
        rt = runtime()
        y = rt.empty(x.shape, x.dtype)
        z = rt.empty(x.shape, x.dtype) if saves_x else y
        return _launch_pointwise(f"BiasActFwd<{ctype}, pw::{act}, {str(saves_x).lower()}>", x, b, (y, z),
                                 cols=max(1, x.shape[-1]), s0=p0, s1=p1)
    t = x.dtype.type
    out = _ew(f"bias_{act}_fwd")(x, b, t(p0), t(p1))
    return out if saves_x else (out, out)


def bias_act_bwd(xp, x_or_y, gy, act, *params):
    """(gz, gb): gz = dL/d(x + b) from what bias_act_fwd saved, gb = gz summed over all leading axes."""
    name = "bias_act_bwd"
    p0, p1 = _check_act(name, act, params)
    ctype = _check_float(name, x_or_y, gy)
    _check_shapes(name, gy.shape, x_or_y)
    if gy.ndim < 1:
        raise ValueError(f"{name}: expected arrays of shape (..., C), got {_describe([gy])}")
    rt = runtime()
    CALLS[name] += 1
    cols = gy.shape[-1]
    rows = math.prod(gy.shape[:-1])
    gz = rt.empty(gy.shape, gy.dtype)
    if rows == 0 or cols == 0:
        return gz, rt.zeros((cols,), gy.dtype)
    saved2 = rt.ascontiguousarray(x_or_y).reshape(rows, cols)
    gy2 = rt.ascontiguousarray(gy).reshape(rows, cols)
    grid, per_chunk = _column_plan(rows, cols)
    partial, gb = _column_out(rt, grid, cols, gy.dtype)
    rt.raw_kernel("elementwise", f"{name}<{ctype}, pw::{act}>")(
        grid, (32, 8), (saved2, gy2, gz.reshape(rows, cols), partial, rows, cols, per_chunk, p0, p1))
    return gz, (gb if gb is not None else _column_sum(rt, partial))


def _dropout_scale(name, p):
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: p must be in [0, 1], got {p}")
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)  # p == 1 drops everything: y = 0, not 0 * inf


def dropout_fwd(xp, x, p, u):
    """(y, mask): mask = u >= p (bool), y = x * mask / (1 - p); u uniform [0, 1) randoms of x's shape."""
    ctype, utype = _check_float("dropout_fwd", x), _check_float("dropout_fwd", u)
    _check_shapes("dropout_fwd", x.shape, u)
    scale = _dropout_scale("dropout_fwd", p)
    CALLS["dropout_fwd"] += 1
    if _contiguous(x, u):
        rt = runtime()
        y, mask = rt.empty(x.shape, x.dtype), rt.empty(x.shape, bool)
        return _launch_pointwise(f"DropoutFwd<{ctype}, {utype}>", x, u, (y, mask), s0=float(p), s1=scale)
    # NOTE: p is compared in u's dtype and scale applied in x's, exactly as the reference does.
    return _ew("dropout_fwd")(x, u, u.dtype.type(p), x.dtype.type(scale))


def dropout_bwd(xp, gy, mask, p):
    """gx = gy * mask / (1 - p)."""
    ctype = _check_float("dropout_bwd", gy)
    _check_shapes("dropout_bwd", gy.shape, mask)
    if mask.dtype != bool:
        mask = mask.astype(bool)
    scale = _dropout_scale("dropout_bwd", p)
    CALLS["dropout_bwd"] += 1
    if _contiguous(gy, mask):
        return _launch_pointwise(f"DropoutBwd<{ctype}>", gy, mask, (runtime().empty(gy.shape, gy.dtype),), s0=scale)
    return _ew("dropout_bwd")(gy, mask, gy.dtype.type(scale))


def accumulate_(xp, acc, g):
    """acc += g in place (same shape and dtype); returns acc."""
    ctype = _check_float("accumulate_", acc, g)
    _check_shapes("accumulate_", acc.shape, g)
    CALLS["accumulate_"] += 1
    if _contiguous(acc, g):
        _launch_pointwise(f"Accumulate<{ctype}>", g, None, (acc,), in_place=True)
    else:
        _ew("accumulate_")(g, acc)
    return acc


def copy_(xp, dst, src):
    """dst[...] = src in place (same shape and dtype); returns dst. Contiguous arrays take the vectorized kernel
    (the identity activation), which ``gpugrad bench`` also times as the vectorized-copy bandwidth peak."""
    ctype = _check_float("copy_", dst, src)
    _check_shapes("copy_", dst.shape, src)
    CALLS["copy_"] += 1
    if _contiguous(dst, src):
        _launch_pointwise(f"ActFwd<{ctype}, pw::identity>", src, None, (dst,))
    else:
        _ew("copy_")(src, dst)
    return dst


# ---- row reductions (reduce.cu) -----------------------------------------------------------------------------
def _rows_in(name, x, like=(), row_vectors=(), col_vectors=()):
    """Validate everything before touching the runtime: a 2-D float x, arrays of its shape (like), per-row (rows,)
    and per-column (cols,) vectors (None allowed) of its dtype. Then count the launch and return the runtime and
    C-contiguous versions, in that order."""
    _check_2d(name, x)
    _check_float(name, x, *like, *row_vectors, *(c for c in col_vectors if c is not None))
    _check_shapes(name, x.shape, *like)
    _check_shapes(name, x.shape[:1], *row_vectors)
    _check_shapes(name, x.shape[1:], *(c for c in col_vectors if c is not None))
    rt = runtime()
    CALLS[name] += 1
    return (rt, *(None if a is None else rt.ascontiguousarray(a) for a in (x, *like, *row_vectors, *col_vectors)))


def softmax_fwd(xp, x):
    rt, x = _rows_in("softmax_fwd", x)
    y = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "softmax_fwd", x, (x, y))
    return y


def softmax_bwd(xp, y, gy):
    rt, y, gy = _rows_in("softmax_bwd", y, [gy])
    gx = rt.empty(y.shape, y.dtype)
    _launch_team_rows(rt, "reduce", "softmax_bwd", y, (y, gy, gx))
    return gx


def log_softmax_fwd(xp, x):
    rt, x = _rows_in("log_softmax_fwd", x)
    y = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "log_softmax_fwd", x, (x, y))
    return y


def log_softmax_bwd(xp, y, gy):
    rt, y, gy = _rows_in("log_softmax_bwd", y, [gy])
    gx = rt.empty(y.shape, y.dtype)
    _launch_team_rows(rt, "reduce", "log_softmax_bwd", y, (y, gy, gx))
    return gx


def logsumexp_fwd(xp, x):
    rt, x = _rows_in("logsumexp_fwd", x)
    lse = rt.empty((x.shape[0],), x.dtype)
    _launch_team_rows(rt, "reduce", "logsumexp_fwd", x, (x, lse))
    return lse


def logsumexp_bwd(xp, x, lse, glse):
    rt, x, lse, glse = _rows_in("logsumexp_bwd", x, row_vectors=[lse, glse])
    gx = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "reduce", "logsumexp_bwd", x, (x, lse, glse, gx))
    return gx


def sum_rows(xp, g):
    """Column sums of a 2-D array (the sum over axis 0) -> (cols,); deterministic."""
    rt, g = _rows_in("sum_rows", g)
    rows, cols = g.shape
    if rows == 0 or cols == 0:
        return rt.zeros((cols,), g.dtype)
    return _column_sum(rt, g)


# ---- losses (loss.cu) and range checks (check.cu) ---------------------------------------------------------------
# Both record a failed range check in a device's status words (common.cuh; gpugrad/backend/deferred.py keeps one
# array per device) under a site id, instead of a host sync. status None: a throwaway (nobody reads the record).
STATUS_WORDS = 4  # = gg::STATUS_WORDS
_CHECK_BLOCK = 256  # = check_index's __launch_bounds__; its grid is at most one block's worth of partials


def _check_status(name, status):
    if status is not None and (status.dtype != "int64" or status.shape != (STATUS_WORDS,)
                               or not status.flags.c_contiguous):
        raise ValueError(f"{name}: status must be a C-contiguous int64 array of {STATUS_WORDS} words, "
                         f"got {_describe([status])}")


def _status(rt, status):
    return rt.zeros((STATUS_WORDS,), "int64") if status is None else status


def _check_reduction(name, reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


_REDUCE = {"none": 0, "sum": 1, "mean": 2}  # the kernels' reduce parameter


def _check_targets(name, x, t):
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer class ids, got {_describe([t])}")
    _check_shapes(name, x.shape[:1], t)


def _xent_in(name, x, t, reduction, w, row_vectors=()):
    """Checked, C-contiguous (rt, x, w, *row_vectors, t): w (cols,) of x's dtype, or None (a null pointer: all 1)."""
    _check_targets(name, x, t)
    _check_reduction(name, reduction)
    w = None if w is None else w.astype(x.dtype, copy=False)  # class weights in x's dtype, as the reference
    rt, x, *rv, w = _rows_in(name, x, row_vectors=row_vectors, col_vectors=[w])
    return (rt, x, w, *rv, rt.ascontiguousarray(t.astype("int64", copy=False)))


def _ignore_args(ignore_index):
    return (0, 0) if ignore_index is None else (1, int(ignore_index))


def _xent_fwd(name, x, t, sign, reduction, status, site, w=None, ignore_index=None, smoothing=0.0):
    _check_status(name, status)
    rt, x, w, t = _xent_in(name, x, t, reduction, w)
    rows = x.shape[0]
    loss, lse, aux = rt.empty((rows,), x.dtype), rt.empty((rows,), x.dtype), rt.empty((2,), x.dtype)
    total = loss if reduction == "none" else rt.empty((), x.dtype)
    if rows == 0:  # no launch: the sum of no rows is 0, their mean NaN (0 / 0)
        aux[...] = reference.xent_aux(rt.xp, x, t, w)
        if reduction != "none":
            total[...] = 0.0 if reduction == "sum" else math.nan
        return total, lse, aux
    _launch_rows(rt, "loss", "softmax_xent_fwd", x, (x, t, w, loss, lse, total, aux, _status(rt, status), x.shape[1],
                                                     sign, _REDUCE[reduction], *_ignore_args(ignore_index),
                                                     float(smoothing), int(site)))
    return total, lse, aux


def _xent_bwd(name, x, t, lse, g, sign, reduction, w=None, ignore_index=None, smoothing=0.0, aux=None):
    if reduction == "none":
        rt, x, w, lse, g, t = _xent_in(name, x, t, reduction, w, [lse, g])
    else:  # the 0-d upstream gradient of the sum or mean, read by the kernel
        _check_float(name, x, g)
        _check_shapes(name, (), g)
        rt, x, w, lse, t = _xent_in(name, x, t, reduction, w, [lse])
        g = rt.ascontiguousarray(g)
    if aux is None:  # called without the forward's (den, W): the same terms, from the reference
        aux = reference.xent_aux(rt.xp, x, t, w, ignore_index)
    _check_float(name, x, aux)
    _check_shapes(name, (2,), aux)
    gx = rt.empty(x.shape, x.dtype)
    _launch_rows(rt, "loss", "softmax_xent_bwd", x, (x, t, w, lse, g, rt.ascontiguousarray(aux), gx, x.shape[1], sign,
                                                     _REDUCE[reduction], *_ignore_args(ignore_index), float(smoothing)))
    return gx


def softmax_xent_fwd(xp, x, t, reduction="none", status=None, site=0, w=None, ignore_index=None, smoothing=0.0):
    """(loss, lse, aux), loss_i = (1 - e) w[t_i] (log Σ - (x[i, t_i] - max)) + e / C Σ_c w_c (log Σ - (x[i, c] - max))
    (lse_i = max + log Σ; torch's class weights w, label smoothing e), 0 where t_i == ignore_index, reduced ('none' |
    'sum' | 'mean' over the summed row weights: 0-d) in the same launch; aux = (summed row weights, Σ w); NaN rows
    where t_i is outside [0, cols) and not ignored, recorded in status under site."""
    return _xent_fwd("softmax_xent_fwd", x, t, 1.0, reduction, status, site, w, ignore_index, smoothing)


def softmax_xent_bwd(xp, x, t, lse, gloss, reduction="none", w=None, ignore_index=None, smoothing=0.0, aux=None):
    """gx = g_i * (softmax(x)_i a_i - onehot(t_i) b_i - e_i w) (reference._xent_grad), g_i = gloss_i ('none') or
    gloss / aux[0] ('mean', 0-d gloss) or gloss ('sum'); NaN rows for invalid targets, 0 rows for ignored ones."""
    return _xent_bwd("softmax_xent_bwd", x, t, lse, gloss, 1.0, reduction, w, ignore_index, smoothing, aux)


def token_logprob_fwd(xp, x, t, status=None, site=0):
    """(logp, lse), logp_i = log_softmax(x)[i, t_i] = (x[i, t_i] - max) - log Σ (the cross-entropy kernel, sign -1)."""
    return _xent_fwd("token_logprob_fwd", x, t, -1.0, "none", status, site)[:2]


def token_logprob_bwd(xp, x, t, lse, glogp):
    """gx = glogp_i * (onehot(t_i) - softmax(x)_i)."""
    return _xent_bwd("token_logprob_bwd", x, t, lse, glogp, -1.0, "none")


def check_index(xp, ids, n, status, site):
    """Record (site, min, max) in status when an id of ``ids`` (any shape and layout) lies outside [0, n)."""
    name = "check_index"
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer ids, got {_describe([ids])}")
    _check_status(name, status)
    rt = runtime()
    CALLS[name] += 1
    if ids.size == 0:
        return
    if ids.dtype.name not in INDEX_CTYPES:
        ids = ids.astype("int64")
    ids = rt.ascontiguousarray(ids).reshape(-1)
    grid = min(-(-ids.size // _CHECK_BLOCK), _CHECK_BLOCK)
    partial = rt.empty((2 * grid,), "int64")
    rt.raw_kernel("check", _expr(name, INDEX_CTYPES[ids.dtype.name]))(
        (grid,), (_CHECK_BLOCK,), (ids, partial, _status(rt, status), ids.size, int(n), int(site)))



_CF_SLOTS, _CF_BLOCK, _CF_MAX_GRID = 8, 256, 1024  # = GG_CF_SLOTS and check_finite's __launch_bounds__


def _dense(rt, a):
    """A C-contiguous array holding each element of ``a`` exactly once: ``a``, or a view of its memory when ``a``
    is a transpose, a broadcast or a reversal of contiguous data (no launch), else a copy."""
    if a.flags.c_contiguous:
        return a
    v = a[tuple(slice(0, 1) if s == 0 else slice(None, None, -1) if s < 0 else slice(None) for s in a.strides)]
    v = v.transpose(sorted(range(v.ndim), key=lambda i: -v.strides[i]))
    return v if v.flags.c_contiguous else rt.ascontiguousarray(a)


def check_finite(xp, flags, node, epoch, *arrays):
    """Record in row ``node`` of ``flags`` (int64, (nodes, 2)) whether any of ``arrays`` (None allowed) holds a NaN
    (column 0) or +-inf (column 1), as ``epoch`` (> 0) * 2**32 + INT_MAX - the index of the first such array (the
    largest value is kept: a stale epoch loses, as does a later index). One launch per dtype and 8 arrays; no sync."""
    name = "check_finite"
    if flags.dtype != "int64" or flags.ndim != 2 or flags.shape[1] != 2 or not flags.flags.c_contiguous \
            or not 0 <= node < flags.shape[0]:
        raise ValueError(f"{name}: flags must be a C-contiguous int64 (nodes, 2) array with a row {node}, "
                         f"got {_describe([flags])}")
    rt = runtime()
    CALLS[name] += 1
    groups = {}
    for o, a in enumerate(arrays):
        if a is not None and a.size:
            groups.setdefault(_check_float(name, a), []).append((_dense(rt, a), o))
    for ctype, slots in groups.items():
        for c in range(0, len(slots), _CF_SLOTS):
            chunk = slots[c:c + _CF_SLOTS]
            grid = (min(-(-max(a.size for a, _ in chunk) // _CF_BLOCK), _CF_MAX_GRID),)
            args = tuple(x for a, o in chunk for x in (a, a.size, o)) + (None, 0, 0) * (_CF_SLOTS - len(chunk))
            rt.raw_kernel("check", _expr(name, ctype))(grid, (_CF_BLOCK,), (flags, int(node), int(epoch), *args))


# ---- layer norm (norm.cu) -----------------------------------------------------------------------------------
def _filled_if_none(rt, w, x, fill):
    """A layer without affine parameters (w is None) runs the same kernel with constant ones / zeros."""
    if w is None:
        w = rt.empty((x.shape[1],), x.dtype)
        w[...] = fill
    return w


def layer_norm_fwd(xp, x, w, b, eps):
    """(y, mean, rstd) over the last axis of a 2-D x; w, b (cols,) or None (no affine)."""
    name = "layer_norm_fwd"
    rt, x, w, b = _rows_in(name, x, col_vectors=[w, b])
    w, b = _filled_if_none(rt, w, x, 1), _filled_if_none(rt, b, x, 0)
    y = rt.empty(x.shape, x.dtype)
    mean, rstd = rt.empty((x.shape[0],), x.dtype), rt.empty((x.shape[0],), x.dtype)
    _launch_team_rows(rt, "norm", name, x, (x, w, b, y, mean, rstd), float(eps))
    return y, mean, rstd


def layer_norm_bwd(xp, x, w, mean, rstd, gy):
    """(gx, gw, gb) from the saved mean and rstd; w None means no affine (gw, gb still returned)."""
    name = "layer_norm_bwd"
    rt, x, gy, mean, rstd, w = _rows_in(name, x, like=[gy], row_vectors=[mean, rstd], col_vectors=[w])
    w = _filled_if_none(rt, w, x, 1)
    rows, cols = x.shape
    gx = rt.empty(x.shape, x.dtype)
    _launch_team_rows(rt, "norm", name, x, (x, w, mean, rstd, gy, gx))
    if rows == 0 or cols == 0:
        return gx, rt.zeros((cols,), x.dtype), rt.zeros((cols,), x.dtype)
    grid, per_chunk = _column_plan(rows, cols)
    (pw, gw), (pb, gb) = _column_out(rt, grid, cols, x.dtype), _column_out(rt, grid, cols, x.dtype)
    rt.raw_kernel("norm", _expr("layer_norm_bwd_wb", CTYPES[x.dtype.name]))(
        grid, (32, 8), (x, mean, rstd, gy, pw, pb, rows, cols, per_chunk))
    if gw is not None:
        return gx, gw, gb
    return gx, _column_sum(rt, pw), _column_sum(rt, pb)


# ---- optimizers (optim.cu) ----------------------------------------------------------------------------------
_OPTIM_BLOCK, _OPTIM_MAX_GRID = 256, 4096


def _optim_in(name, p, g, *state):
    """(runtime, C type, contiguous g, grid, work buffers). The kernels update p and the state in place and need
    them C-contiguous: a non-contiguous one (a transposed or strided parameter view) is updated in a contiguous
    copy that :func:`_write_back` copies into it, so it works as on the CPU and the caller's array keeps its
    identity and memory. g may be any layout."""
    ctype = _check_float(name, p, g, *state)
    _check_shapes(name, p.shape, g, *state)
    rt = runtime()
    CALLS[name] += 1
    grid = (max(1, min(-(-p.size // _OPTIM_BLOCK), _OPTIM_MAX_GRID)),)
    work = [a if a.flags.c_contiguous else rt.ascontiguousarray(a) for a in (p, *state)]
    return rt, ctype, rt.ascontiguousarray(g), grid, work


def _write_back(buffers, work):
    for a, w in zip(buffers, work):
        if w is not a:
            a[...] = w


def sgd_update_(xp, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """torch.optim.SGD step in place on p (and buf, unused and may be None when momentum == 0)."""
    name = "sgd_update_"
    if momentum != 0 and buf is None:
        raise ValueError(f"{name}: momentum={momentum} needs a momentum buffer")
    state = () if buf is None else (buf,)
    rt, ctype, g, grid, work = _optim_in(name, p, g, *state)
    wp, wbuf = work[0], (work[1] if state else work[0])
    if p.size:
        rt.raw_kernel("optim", _expr(name, ctype))(
            grid, (_OPTIM_BLOCK,), (wp, g, wbuf, p.size, float(lr), float(momentum), float(dampening),
                                    float(weight_decay), int(bool(nesterov)), int(bool(first_step))))
    _write_back((p, *state), work)


def adam_update_(xp, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """torch.optim.Adam (decoupled=False, L2) / AdamW (decoupled=True) step in place; step counts from 1."""
    name = "adam_update_"
    if int(step) < 1:
        raise ValueError(f"{name}: step counts from 1 (the value after increment), got {step}")
    rt, ctype, g, grid, (wp, wm, wv) = _optim_in(name, p, g, m, v)
    bc1, bc2 = 1.0 - float(beta1) ** int(step), 1.0 - float(beta2) ** int(step)
    if p.size:
        rt.raw_kernel("optim", _expr(name, ctype))(
            grid, (_OPTIM_BLOCK,), (wp, g, wm, wv, p.size, float(beta1), float(beta2), float(eps), float(weight_decay),
                                    1.0 - float(lr) * float(weight_decay), int(bool(decoupled)), float(lr) / bc1,
                                    bc2 ** 0.5))
    _write_back((p, m, v), (wp, wm, wv))



# Multi-tensor updates: every parameter of one (device, dtype) in ceil(n / _MT_SLOTS) launches, the tensors' pointers
# and sizes passed as kernel arguments (no device-side table, so a new gradient buffer costs no transfer and a
# captured CUDA graph holds the whole step), hyperparameters read from a device array (see optim.Optimizer).
_MT_SLOTS = 16  # = GG_MT_SLOTS in optim.cu


def _multi_in(name, hyper, n, tensors, float_runs, counts=False, n_hyper=6):
    """Validate a multi-tensor call whose ``tensors`` are runs of n arrays: parameters, gradients, then state
    arrays (``float_runs`` counts allowed for these float runs), then int64 0-d step counts when ``counts``;
    ``hyper``: the kernel's float64 options array of ``n_hyper`` entries.
    Returns (runtime, C type, contiguous hyper, runs, write-backs): parameters and states are updated in place, in
    contiguous work copies for non-contiguous ones (the (array, copy) write-backs), gradients may have any layout."""
    n_runs = len(tensors) // n if n else 0
    if len(tensors) != n_runs * n or (n and n_runs - counts not in float_runs):
        kinds = " or ".join(str(k + counts) for k in float_runs)
        raise ValueError(f"{name}: expected {kinds} runs of {n} arrays, got {len(tensors)} arrays")
    runs = [list(tensors[k * n:(k + 1) * n]) for k in range(n_runs)]
    floats = runs[:len(runs) - counts]
    ctype = _check_float(name, *(a for run in floats for a in run)) if n else None
    for i in range(n):
        _check_shapes(name, runs[0][i].shape, *(run[i] for run in floats[1:]))
    if counts and any(s.dtype != "int64" or s.shape != () for s in runs[-1]):
        raise TypeError(f"{name}: step counts must be int64 0-d arrays, got {_describe(runs[-1])}")
    if hyper.dtype != "float64" or hyper.shape != (n_hyper,):  # the kernel reads hyper[0 .. n_hyper - 1]
        raise TypeError(f"{name}: hyper must be a float64 array of shape ({n_hyper},), got {_describe([hyper])}")
    rt = runtime()
    CALLS[name] += 1
    back = []

    def work(a):
        if a.flags.c_contiguous:
            return a
        back.append((a, rt.ascontiguousarray(a)))
        return back[-1][1]

    runs = [[rt.ascontiguousarray(a) for a in run] if k == 1 else [work(a) for a in run] for k, run in enumerate(runs)]
    return rt, ctype, rt.ascontiguousarray(hyper), runs, back


def _multi_launch(rt, name, ctype, head, slots, sizes, null_slot, always, back):
    """``head`` arguments, then _MT_SLOTS slots (tensors of ``sizes`` elements) per launch, ``null_slot`` padding
    the last; then the write-backs. A launch whose tensors are all empty is skipped unless ``always`` (Adam still
    counts the step of an empty tensor)."""
    for c in range(0, len(slots), _MT_SLOTS):
        chunk, total = slots[c:c + _MT_SLOTS], sum(sizes[c:c + _MT_SLOTS])
        if total or always:
            args = head + tuple(a for s in chunk for a in s) + null_slot * (_MT_SLOTS - len(chunk))
            grid = (max(1, min(-(-total // _OPTIM_BLOCK), _OPTIM_MAX_GRID)),)
            rt.raw_kernel("optim", _expr(name, ctype))(grid, (_OPTIM_BLOCK,), args)
    for a, w in back:
        a[...] = w


def sgd_multi_update_(xp, hyper, first_steps, *tensors):
    """sgd_update_ of n = len(first_steps) tensors at once: ``tensors`` = n parameters, their n gradients and, for
    momentum, their n momentum buffers (given buffers mean momentum is applied); ``hyper`` = float64 [lr, momentum,
    dampening, weight_decay, nesterov, maximize] on the device, read by the kernel; ``first_steps[i]``: buffer i
    starts as d."""
    name = "sgd_multi_update_"
    n = len(first_steps)
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, n, tensors, (2, 3))
    bufs = runs[2] if len(runs) == 3 else [None] * n
    slots = [(p, g, b, p.size, int(bool(f))) for p, g, b, f in zip(runs[0], runs[1], bufs, first_steps)]
    _multi_launch(rt, name, ctype, (hyper,), slots, [p.size for p in runs[0]], (None, None, None, 0, 0), False, back)


def _ticket(rt, name, ticket):
    if ticket is None:
        return rt.zeros((1,), "uint32")
    if ticket.dtype != "uint32" or ticket.shape != (1,):
        raise TypeError(f"{name}: ticket must be a uint32 array of shape (1,), got {_describe([ticket])}")
    return ticket


def adam_multi_update_(xp, hyper, ticket, decoupled, amsgrad, *tensors):
    """adam_update_ of n tensors at once: ``tensors`` = n parameters, n gradients, n exp_avg, n exp_avg_sq, (with
    ``amsgrad``) n max_exp_avg_sq and n step counts (int64 0-d arrays, the steps taken so far: this is step count + 1,
    and every count advances by one, on the device); ``hyper`` = float64 [lr, beta1, beta2, eps, weight_decay,
    maximize] on the device, read by the kernel; ``ticket``: a zero uint32 (1,) array the kernel counts finished
    blocks in (left 0), or None for a fresh one."""
    name, n = "adam_multi_update_", len(tensors) // (5 + bool(amsgrad))
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, n, tensors, (4 + bool(amsgrad),), counts=True)
    ticket = _ticket(rt, name, ticket)
    vmax = runs[4] if amsgrad else [None] * n
    slots = [(p, g, m, v, vm, s, p.size) for p, g, m, v, vm, s in zip(*runs[:4], vmax, runs[-1])]
    _multi_launch(rt, name, ctype, (hyper, ticket, int(bool(decoupled))), slots, [s[-1] for s in slots],
                  (None,) * 6 + (0,), True, back)


def rmsprop_multi_update_(xp, hyper, centered, momentum, *tensors):
    """torch.optim.RMSprop's step of n tensors at once: ``tensors`` = n parameters, n gradients, n square_avg, (when
    ``centered``) n grad_avg and (with ``momentum``) n momentum buffers; ``hyper`` = float64 [lr, alpha, eps,
    weight_decay, momentum, maximize] on the device, read by the kernel."""
    name, runs_n = "rmsprop_multi_update_", 3 + bool(centered) + bool(momentum)
    n = len(tensors) // runs_n
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, n, tensors, (runs_n,))
    ga = runs[3] if centered else [None] * n
    bufs = runs[-1] if momentum else [None] * n
    slots = [(p, g, sq, a, b, p.size) for p, g, sq, a, b in zip(*runs[:3], ga, bufs)]
    _multi_launch(rt, name, ctype, (hyper,), slots, [s[-1] for s in slots], (None,) * 5 + (0,), False, back)


def adagrad_multi_update_(xp, hyper, ticket, *tensors):
    """torch.optim.Adagrad's step of n tensors at once: ``tensors`` = n parameters, n gradients, n sums of squares
    and n step counts (int64 0-d arrays, advanced by one on the device, as Adam's); ``hyper`` = float64 [lr,
    lr_decay, weight_decay, eps, maximize] on the device; ``ticket`` as adam_multi_update_'s."""
    name = "adagrad_multi_update_"
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, len(tensors) // 4, tensors, (3,), counts=True, n_hyper=5)
    ticket = _ticket(rt, name, ticket)
    slots = [(p, g, s, c, p.size) for p, g, s, c in zip(*runs)]
    _multi_launch(rt, name, ctype, (hyper, ticket), slots, [s[-1] for s in slots], (None,) * 4 + (0,), True, back)


def set_hyper_(xp, hyper, values):
    """hyper[:] = values (a host float64 array of the same shape) by an asynchronous copy on the current stream:
    a few bytes, no host sync, no kernel. The optimizers call it only when a hyperparameter changed."""
    hyper.set(values, stream=xp.cuda.get_current_stream())


opmath_all(globals())  # float16 in float32, exactly as the references (reference.opmath)
