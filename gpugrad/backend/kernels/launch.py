"""Launch shapes: threads per row and per row team (reduce.cu / norm.cu), the column-sum grid and its partial
sums (sum_rows, the bias and LayerNorm weight gradients)."""
from __future__ import annotations

import numpy as np

from gpugrad.backend.kernels.names import LOW_CTYPES, STORAGE_CTYPES, _expr

ROW_CACHE = {2: 8, 4: 8, 8: 4}  # itemsize -> elements a thread holds per row chunk (= common.cuh RowCache<T>::K)


def row_block(cols: int, itemsize: int) -> int:
    """Threads per row block: the smallest power of two in [32, 1024] with cols <= K * threads, K the register
    cache per thread (8 floats / 4 doubles, common.cuh RowCache), so rows that fit are read once. Powers of two
    >= 32 because block reductions need whole warps; small blocks for short rows keep many rows per SM;
    1024 is the hardware limit, beyond it threads loop over chunks."""
    need = -(-cols // ROW_CACHE[itemsize])
    block = 32
    while block < need and block < 1024:
        block *= 2
    return block


ROW_BLOCK_MAX = 512  # = __launch_bounds__(512, 2) of the reduce.cu / norm.cu row kernels: two blocks per SM
_TEAM_BLOCK = 128  # threads per block when lanes of a warp own short rows: 128 / G rows per block
TEAM_CACHE = {2: 8, 4: 8, 8: 2}  # itemsize -> elements a thread holds per row chunk (= common.cuh TeamCache<T>::K)


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
        rt.raw_kernel(family, _expr(kernel, STORAGE_CTYPES[x.dtype.name]))(
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
    """(dst, result) for a column kernel launched on ``grid`` over a ``dtype`` array. One row chunk: dst is a
    (1, cols) view of a fresh (cols,) result, which the kernel writes straight into. Several: dst holds the
    (chunks, cols) partials and result is None (_column_sum adds them). Both are in the kernels' math dtype: float32
    for float16 and bfloat16 (their sum_rows and layer_norm_bwd_wb write float partials and sums, which the caller
    rounds once, _column_sum's ``dtype``), the dtype itself otherwise.
    NOTE: a result that owns its memory (.base None) matters: a reshaped (1, cols) partial is a view, which the
    autograd engine must treat as shared and copy before accumulating into it (one more launch per bias per step)."""
    acc = np.dtype(np.float32) if dtype.name in LOW_CTYPES else dtype
    if grid[1] == 1:
        result = rt.empty((cols,), acc)
        return result.reshape(1, cols), result
    return rt.empty((grid[1], cols), acc), None


def _column_sum(rt, g, dtype=None):
    """Deterministic sum over axis 0 of a C-contiguous 2-D array with rows, cols > 0 (one or more passes), as a
    fresh (cols,) array of ``dtype`` (default g's). A float16 or bfloat16 g is summed in float32 through every pass
    and rounded once, at the end (an extra (cols,) cast); so is float32 g (partials) with a low ``dtype``."""
    dtype = g.dtype if dtype is None else dtype
    rows, cols = g.shape
    while True:
        grid, per_chunk = _column_plan(rows, cols)
        dst, result = _column_out(rt, grid, cols, g.dtype)
        rt.raw_kernel("reduce", _expr("sum_rows", STORAGE_CTYPES[g.dtype.name]))(
            grid, (32, 8), (g, dst, rows, cols, per_chunk))
        if result is not None:
            return result if result.dtype == dtype else result.astype(dtype)
        g, rows = dst, grid[1]

def _launch_rows(rt, family, kernel, x, args):
    """One block per row of the 2-D array x."""
    rows, cols = x.shape
    if rows:
        block = row_block(cols, x.dtype.itemsize)
        rt.raw_kernel(family, _expr(kernel, STORAGE_CTYPES[x.dtype.name]))((rows,), (block,), args)
