// kernels/reduce.cu: row-wise softmax family and the column sum, as template kernels in a cupy.RawModule.
// Row kernels: x C-contiguous (rows, cols), reductions over the last axis with the numerically stable max
// subtraction (online log-sum-exp, common.cuh). A team owns each row (common.cuh RowTeam): G = 1..32 lanes of a
// warp for rows of up to 32 * K columns (`lanes` = G, block 128 threads = 128 / G rows, shuffle reductions only),
// else one block of 64..512 threads per row (`lanes` = 0, grid.x = rows); launch.py row_plan chooses from cols.
// The first K * team columns of a row stay in registers (K = 8 floats / 2 doubles, common.cuh TeamCache), so rows
// up to 4096 floats / 1024 doubles are read once; longer rows re-read later chunks (from L2). Accesses are 16-byte
// vectors when cols is a multiple of the vector width and every array is 16-byte aligned, else scalars (the same
// code, VEC false).
// __launch_bounds__(512, 2): two 512-thread blocks per SM (at most 64 registers), so one block's loads overlap
// the other's reductions. Deterministic: results depend on (rows, cols) and on whether the arrays are 16-byte
// aligned (the summation order of the vector and scalar layouts differs), never on timing.
#include "common.cuh"

// Each kernel below is a __device__ body for one row, templated on VEC, and a __global__ that finds the row and
// picks the vector or scalar body (gg::with_vec).

// softmax: y = exp(x - m) / sum(exp(x - m)), m = row max. T float/double. Op: softmax forward.
template <bool VEC, typename T>
__device__ __forceinline__ void softmax_fwd_row(const T* __restrict__ x, T* __restrict__ y, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    T v[K], m, s;
    gg::team_row_lse<VEC>(x, v, m, s, t);
    const T inv = T(1) / gg::softmax_sum(m, s);
    for (int base = 0; base < t.cols; base += K * t.size) {
        if (base) gg::team_load<VEC>(v, x, base, T(0), t);  // chunk 0 is still in registers
#pragma unroll
        for (int j = 0; j < K; ++j) v[j] = gg::exp_(v[j] - m) * inv;
        gg::team_store<VEC>(y, v, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long rows, long long ncols, long long lanes) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    gg::with_vec(gg::rows_vectorizable(ncols, x, y), [&](auto vec) {
        softmax_fwd_row<decltype(vec)::value>(x + t.off, y + t.off, t);
    });
}

// softmax backward: gx = y * (gy - sum(gy * y)), y the saved softmax output. T float/double. Op: softmax.
template <bool VEC, typename T>
__device__ __forceinline__ void softmax_bwd_row(const T* __restrict__ y, const T* __restrict__ gy, T* __restrict__ gx,
                                                const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    T yv[K], gv[K], dot = T(0);
    gg::team_load<VEC>(yv, y, 0, T(0), t);
    gg::team_load<VEC>(gv, gy, 0, T(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) dot += yv[j] * gv[j];
    for (int base = step; base < t.cols; base += step) {
        T a[K], b[K];
        gg::team_load<VEC>(a, y, base, T(0), t);
        gg::team_load<VEC>(b, gy, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) dot += a[j] * b[j];
    }
    dot = gg::team_reduce_sum(dot, t);
    for (int base = 0; base < t.cols; base += step) {
        if (base) {
            gg::team_load<VEC>(yv, y, base, T(0), t);
            gg::team_load<VEC>(gv, gy, base, T(0), t);
        }
#pragma unroll
        for (int j = 0; j < K; ++j) yv[j] *= gv[j] - dot;
        gg::team_store<VEC>(gx, yv, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
softmax_bwd(const T* __restrict__ y, const T* __restrict__ gy, T* __restrict__ gx, long long rows, long long ncols,
            long long lanes) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    gg::with_vec(gg::rows_vectorizable(ncols, y, gy, gx), [&](auto vec) {
        softmax_bwd_row<decltype(vec)::value>(y + t.off, gy + t.off, gx + t.off, t);
    });
}

// log_softmax: y = (x - m) - log(sum(exp(x - m))), m = row max, as torch computes it. T float/double.
// NOTE: not x - lse with lse = m + log(sum): that rounds log(sum) to an ulp of m (all of it for floats ~1e8).
// Op: log_softmax forward.
template <bool VEC, typename T>
__device__ __forceinline__ void log_softmax_fwd_row(const T* __restrict__ x, T* __restrict__ y, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    T v[K], m, s;
    gg::team_row_lse<VEC>(x, v, m, s, t);
    const T ls = gg::log_(gg::softmax_sum(m, s));
    for (int base = 0; base < t.cols; base += K * t.size) {
        if (base) gg::team_load<VEC>(v, x, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) v[j] = (v[j] - m) - ls;
        gg::team_store<VEC>(y, v, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
log_softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long rows, long long ncols, long long lanes) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    gg::with_vec(gg::rows_vectorizable(ncols, x, y), [&](auto vec) {
        log_softmax_fwd_row<decltype(vec)::value>(x + t.off, y + t.off, t);
    });
}

// log_softmax backward: gx = gy - exp(y) * sum(gy), y the saved log-probabilities. T float/double.
// Only gy is needed for the sum, so only gy is cached; y is read once, in the output pass. Op: log_softmax.
template <bool VEC, typename T>
__device__ __forceinline__ void log_softmax_bwd_row(const T* __restrict__ y, const T* __restrict__ gy,
                                                    T* __restrict__ gx, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    T gv[K], yv[K], sum = T(0);
    gg::team_load<VEC>(gv, gy, 0, T(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) sum += gv[j];
    for (int base = step; base < t.cols; base += step) {
        T b[K];
        gg::team_load<VEC>(b, gy, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) sum += b[j];
    }
    gg::team_load<VEC>(yv, y, 0, T(0), t);  // issued before the reduction so its latency overlaps it
    sum = gg::team_reduce_sum(sum, t);
    for (int base = 0; base < t.cols; base += step) {
        if (base) {
            gg::team_load<VEC>(yv, y, base, T(0), t);
            gg::team_load<VEC>(gv, gy, base, T(0), t);
        }
#pragma unroll
        for (int j = 0; j < K; ++j) gv[j] -= gg::exp_(yv[j]) * sum;
        gg::team_store<VEC>(gx, gv, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
log_softmax_bwd(const T* __restrict__ y, const T* __restrict__ gy, T* __restrict__ gx, long long rows,
                long long ncols, long long lanes) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    gg::with_vec(gg::rows_vectorizable(ncols, y, gy, gx), [&](auto vec) {
        log_softmax_bwd_row<decltype(vec)::value>(y + t.off, gy + t.off, gx + t.off, t);
    });
}

// logsumexp: lse[r] = m + log(sum(exp(x[r] - m))), shape (rows,); -inf for an all -inf (or empty) row, inf for a
// row holding +inf (common.cuh lse_merge), NaN for a row holding NaN.
// T float/double. Op: logsumexp forward.
template <typename T>
__global__ void __launch_bounds__(512, 2)
logsumexp_fwd(const T* __restrict__ x, T* __restrict__ lse, long long rows, long long ncols, long long lanes) {
    constexpr int K = gg::TeamCache<T>::K;
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    T v[K], m, s;
    gg::with_vec(gg::rows_vectorizable(ncols, x), [&](auto vec) {
        gg::team_row_lse<decltype(vec)::value>(x + t.off, v, m, s, t);
    });
    if (t.lane == 0 && t.active) lse[t.row] = m + gg::log_(s);
}

// logsumexp backward: gx = glse[r] * exp(x - lse[r]); no reduction, one pass. T float/double. Op: logsumexp.
template <bool VEC, typename T>
__device__ __forceinline__ void logsumexp_bwd_row(const T* __restrict__ x, T l, T g, T* __restrict__ gx,
                                                  const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    for (int base = 0; base < t.cols; base += K * t.size) {
        T v[K];
        gg::team_load<VEC>(v, x, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) v[j] = g * gg::exp_(v[j] - l);
        gg::team_store<VEC>(gx, v, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
logsumexp_bwd(const T* __restrict__ x, const T* __restrict__ lse, const T* __restrict__ glse, T* __restrict__ gx,
              long long rows, long long ncols, long long lanes) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    const T l = t.active ? lse[t.row] : T(0), g = t.active ? glse[t.row] : T(0);
    gg::with_vec(gg::rows_vectorizable(ncols, x, gx), [&](auto vec) {
        logsumexp_bwd_row<decltype(vec)::value>(x + t.off, l, g, gx + t.off, t);
    });
}

// sum_rows: out[chunk, c] = sum of g[r, c] over the chunk's rows (the bias gradient / broadcast undo over axis 0).
// T float/double; g C-contiguous (rows, cols). Launch: block (32, 8), grid (ceil(cols / 32), chunks); a warp
// reads 32 consecutive columns of one row (coalesced); with chunks > 1 the launcher sums the (chunks, cols)
// partials with this kernel again, so the result is deterministic. Ops: sum_rows, bias_act and layer_norm bwd.
template <typename T>
__global__ void __launch_bounds__(256)
sum_rows(const T* __restrict__ g, T* __restrict__ out, long long rows, long long cols, long long rows_per_chunk) {
    const auto [c, r0, r1] = gg::column_chunk(rows, rows_per_chunk);
    T acc = T(0);
    if (c < cols) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += gg::COL_TILE_Y) acc += g[r * cols + c];
    }
    gg::column_tile_store(acc, out + (long long)blockIdx.y * cols, c, cols);
}
