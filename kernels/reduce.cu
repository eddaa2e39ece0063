// kernels/reduce.cu: row-wise softmax family and the column sum, as template kernels in a cupy.RawModule.
// T is the storage type: float, double, gg::bf16 or gg::f16 (common.cuh). Every kernel computes in M =
// gg::math_t<T> (float for the 2-byte types, as PyTorch's opmath): values are widened on load, every sum and max is
// taken in M, and a result is rounded once, at its store, so a bf16 / f16 result is the float32 one rounded.
// Row kernels: x C-contiguous (rows, cols), reductions over the last axis with the numerically stable max
// subtraction (online log-sum-exp, common.cuh). A team owns each row (common.cuh RowTeam): G = 1..32 lanes of a
// warp for rows of up to 32 * K columns (`lanes` = G, block 128 threads = 128 / G rows, shuffle reductions only),
// else one block of 64..512 threads per row (`lanes` = 0, grid.x = rows); launch.py row_plan chooses from cols.
// The first K * team columns of a row stay in registers (K = 8 floats / 2 doubles / 8 bf16 or f16 widened to floats,
// common.cuh TeamCache), so rows up to 4096 floats, bf16 or f16 / 1024 doubles are read once; longer rows re-read
// later chunks (from L2). Accesses are 16-byte vectors (4 floats, 2 doubles, 8 bf16 / f16) when cols is a multiple of
// the vector width and every array is 16-byte aligned, else scalars (the same code, VEC false).
// __launch_bounds__(512, 2): two 512-thread blocks per SM (at most 64 registers), so one block's loads overlap
// the other's reductions. Deterministic: results depend on (rows, cols) and on whether the arrays are 16-byte
// aligned (the summation order of the vector and scalar layouts differs), never on timing.
#include "common.cuh"

// Each kernel below is a __device__ body for one row, templated on VEC, and a __global__ that finds the row and
// picks the vector or scalar body (gg::with_vec).

// softmax: y = exp(x - m) / sum(exp(x - m)), m = row max. x, y: T. Op: softmax forward.
template <bool VEC, typename T>
__device__ __forceinline__ void softmax_fwd_row(const T* __restrict__ x, T* __restrict__ y, const gg::RowTeam& t) {
    using M = gg::math_t<T>;
    constexpr int K = gg::TeamCache<T>::K;
    M v[K], m, s;
    gg::team_row_lse<VEC>(x, v, m, s, t);
    const M inv = M(1) / gg::softmax_sum(m, s);
    for (int base = 0; base < t.cols; base += K * t.size) {
        if (base) gg::team_load<VEC>(v, x, base, M(0), t);  // chunk 0 is still in registers
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

// softmax backward: gx = y * (gy - sum(gy * y)), y the saved softmax output. y, gy, gx: T. Op: softmax.
template <bool VEC, typename T>
__device__ __forceinline__ void softmax_bwd_row(const T* __restrict__ y, const T* __restrict__ gy, T* __restrict__ gx,
                                                const gg::RowTeam& t) {
    using M = gg::math_t<T>;
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    M yv[K], gv[K], dot = M(0);
    gg::team_load<VEC>(yv, y, 0, M(0), t);
    gg::team_load<VEC>(gv, gy, 0, M(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) dot += yv[j] * gv[j];
    for (int base = step; base < t.cols; base += step) {
        M a[K], b[K];
        gg::team_load<VEC>(a, y, base, M(0), t);
        gg::team_load<VEC>(b, gy, base, M(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) dot += a[j] * b[j];
    }
    dot = gg::team_reduce_sum(dot, t);
    for (int base = 0; base < t.cols; base += step) {
        if (base) {
            gg::team_load<VEC>(yv, y, base, M(0), t);
            gg::team_load<VEC>(gv, gy, base, M(0), t);
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

// log_softmax: y = (x - m) - log(sum(exp(x - m))), m = row max, as torch computes it. x, y: T.
// NOTE: not x - lse with lse = m + log(sum): that rounds log(sum) to an ulp of m (all of it for floats ~1e8).
// Op: log_softmax forward.
template <bool VEC, typename T>
__device__ __forceinline__ void log_softmax_fwd_row(const T* __restrict__ x, T* __restrict__ y, const gg::RowTeam& t) {
    using M = gg::math_t<T>;
    constexpr int K = gg::TeamCache<T>::K;
    M v[K], m, s;
    gg::team_row_lse<VEC>(x, v, m, s, t);
    const M ls = gg::log_(gg::softmax_sum(m, s));
    for (int base = 0; base < t.cols; base += K * t.size) {
        if (base) gg::team_load<VEC>(v, x, base, M(0), t);
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

// log_softmax backward: gx = gy - exp(y) * sum(gy), y the saved log-probabilities. y, gy, gx: T.
// Only gy is needed for the sum, so only gy is cached; y is read once, in the output pass. Op: log_softmax.
template <bool VEC, typename T>
__device__ __forceinline__ void log_softmax_bwd_row(const T* __restrict__ y, const T* __restrict__ gy,
                                                    T* __restrict__ gx, const gg::RowTeam& t) {
    using M = gg::math_t<T>;
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    M gv[K], yv[K], sum = M(0);
    gg::team_load<VEC>(gv, gy, 0, M(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) sum += gv[j];
    for (int base = step; base < t.cols; base += step) {
        M b[K];
        gg::team_load<VEC>(b, gy, base, M(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) sum += b[j];
    }
    gg::team_load<VEC>(yv, y, 0, M(0), t);  // issued before the reduction so its latency overlaps it
    sum = gg::team_reduce_sum(sum, t);
    for (int base = 0; base < t.cols; base += step) {
        if (base) {
            gg::team_load<VEC>(yv, y, base, M(0), t);
            gg::team_load<VEC>(gv, gy, base, M(0), t);
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
// x, lse: T (a bf16 / f16 lse is the float one rounded, as reference.opmath returns it; the logsumexp op itself
// keeps its saved lse in float32 and so launches this on float32 x). Op: logsumexp forward.
template <typename T>
__global__ void __launch_bounds__(512, 2)
logsumexp_fwd(const T* __restrict__ x, T* __restrict__ lse, long long rows, long long ncols, long long lanes) {
    using M = gg::math_t<T>;
    constexpr int K = gg::TeamCache<T>::K;
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    M v[K], m, s;
    gg::with_vec(gg::rows_vectorizable(ncols, x), [&](auto vec) {
        gg::team_row_lse<decltype(vec)::value>(x + t.off, v, m, s, t);
    });
    if (t.lane == 0 && t.active) lse[t.row] = gg::store_math<T>(m + gg::log_(s));
}

// logsumexp backward: gx = glse[r] * exp(x - lse[r]); no reduction, one pass. x, gx: T; lse, glse (rows,): M, so
// the float32 lse the op saves for bf16 / f16 x is read as it is (launchers widen a bf16 / f16 one: rows values).
// Op: logsumexp.
template <bool VEC, typename T, typename M>
__device__ __forceinline__ void logsumexp_bwd_row(const T* __restrict__ x, M l, M g, T* __restrict__ gx,
                                                  const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    for (int base = 0; base < t.cols; base += K * t.size) {
        M v[K];
        gg::team_load<VEC>(v, x, base, M(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) v[j] = g * gg::exp_(v[j] - l);
        gg::team_store<VEC>(gx, v, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
logsumexp_bwd(const T* __restrict__ x, const gg::math_t<T>* __restrict__ lse, const gg::math_t<T>* __restrict__ glse,
              T* __restrict__ gx, long long rows, long long ncols, long long lanes) {
    using M = gg::math_t<T>;
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    const M l = t.active ? lse[t.row] : M(0), g = t.active ? glse[t.row] : M(0);
    gg::with_vec(gg::rows_vectorizable(ncols, x, gx), [&](auto vec) {
        logsumexp_bwd_row<decltype(vec)::value>(x + t.off, l, g, gx + t.off, t);
    });
}

// sum_rows: out[chunk, c] = sum of g[r, c] over the chunk's rows (the bias gradient / broadcast undo over axis 0).
// g: T, C-contiguous (rows, cols); out: M, so bf16 / f16 sums stay float (the float32 partials, or the float32 sum
// that launch.py _column_sum rounds once at the end, not once per pass). Launch: block (32, 8), grid
// (ceil(cols / 32), chunks); a warp reads 32 consecutive columns of one row (coalesced); with chunks > 1 the
// launcher sums the (chunks, cols) partials with this kernel again (the M instantiation), so the result is
// deterministic. Ops: sum_rows, bias_act and layer_norm bwd.
template <typename T>
__global__ void __launch_bounds__(256)
sum_rows(const T* __restrict__ g, gg::math_t<T>* __restrict__ out, long long rows, long long cols,
         long long rows_per_chunk) {
    using M = gg::math_t<T>;
    const auto [c, r0, r1] = gg::column_chunk(rows, rows_per_chunk);
    M acc = M(0);
    if (c < cols) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += gg::COL_TILE_Y) acc += gg::load_math(g[r * cols + c]);
    }
    gg::column_tile_store(acc, out + (long long)blockIdx.y * cols, c, cols);
}
