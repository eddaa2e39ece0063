// kernels/norm.cu: LayerNorm over the last axis, forward and backward, as template kernels in a cupy.RawModule.
// T is x's storage type: float, double, gg::bf16 or gg::f16 (common.cuh); every kernel computes in M =
// gg::math_t<T> (float for the 2-byte types) and rounds each result once, at its store. The per-row statistics
// (mean, rstd) and the per-column parameters (w, b) are M arrays: float32 for bf16 / f16 x, as PyTorch keeps its
// saved statistics (a 2-byte mean or rstd loses the digits xhat = (x - mean) * rstd needs) and so a float32 weight
// beside a low-precision x is read exactly (the launchers widen a bf16 / f16 w or b: cols values).
// x C-contiguous (rows, cols), w and b (cols,). Row kernels as in reduce.cu: a team per row (common.cuh RowTeam:
// G lanes of a warp for short rows, a block of 64..512 threads for long ones, from launch.py row_plan), the first
// K*team columns cached in registers (common.cuh TeamCache), 16-byte accesses when cols is a multiple of the vector
// width and x, y/gy/gx, w, b are 16-byte aligned, __launch_bounds__(512, 2) (two blocks per SM, <= 64 registers).
// NOTE: mean and variance are two exact passes over the cached row (not Welford): var = mean((x - mean)^2) has no
// cancellation, and for rows that fit the cache the second pass costs no memory traffic.
#include "common.cuh"

// A chunk of the per-column M vector p (w or b) in the column layout of the row's storage type T (common.cuh
// team_col), so element j pairs with element j of team_load<VEC>(.., x, ..): for bf16 / f16 x a vector covers 8
// columns, 16 bytes of x but 32 of a float w (two 16-byte loads; c is a multiple of 8, so p + c keeps p's alignment).
// For float and double (M = T) this is team_load itself. Columns past the row read 0.
template <bool VEC, typename T, typename M, int K>
__device__ __forceinline__ void team_load_cols(M (&v)[K], const M* __restrict__ p, int base, const gg::RowTeam& t) {
    constexpr int V = VEC ? gg::Vec<T>::N : 1;
#pragma unroll
    for (int q = 0; q < K / V; ++q) {
        const int c = gg::team_col<VEC, T>(q * V, base, t);
        if (c < t.cols) {
            gg::load_pack<V>(&v[q * V], p + c);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[q * V + j] = M(0);
        }
    }
}

// forward: mean = sum(x)/n, rstd = 1/sqrt(sum((x - mean)^2)/n + eps), y = (x - mean) * rstd * w + b; writes y and
// the saved mean, rstd (rows,). x, y: T; w, b, mean, rstd: M. Op: layer_norm forward.
template <bool VEC, typename T, typename M>
__device__ __forceinline__ void layer_norm_fwd_row(const T* __restrict__ x, const M* __restrict__ w,
                                                   const M* __restrict__ b, T* __restrict__ y, M* __restrict__ mean,
                                                   M* __restrict__ rstd, M eps, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    M v[K], u[K], acc = M(0);
    gg::team_load<VEC>(v, x, 0, M(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) acc += v[j];
    for (int base = step; base < t.cols; base += step) {
        gg::team_load<VEC>(u, x, base, M(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) acc += u[j];
    }
    const M mu = gg::team_reduce_sum(acc, t) / M(t.cols);
    acc = M(0);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const M d = gg::team_col<VEC, T>(j, 0, t) < t.cols ? v[j] - mu : M(0);  // padding adds nothing
        acc += d * d;
    }
    for (int base = step; base < t.cols; base += step) {
        gg::team_load<VEC>(u, x, base, mu, t);  // padding = mu: adds nothing
#pragma unroll
        for (int j = 0; j < K; ++j) acc += (u[j] - mu) * (u[j] - mu);
    }
    const M rs = M(1) / gg::sqrt_(gg::team_reduce_sum(acc, t) / M(t.cols) + eps);
    if (t.lane == 0 && t.active) {
        mean[t.row] = mu;
        rstd[t.row] = rs;
    }
    for (int base = 0; base < t.cols; base += step) {
        if (base) gg::team_load<VEC>(v, x, base, M(0), t);
        M wv[K], bv[K];
        team_load_cols<VEC, T>(wv, w, base, t);
        team_load_cols<VEC, T>(bv, b, base, t);
#pragma unroll
        for (int j = 0; j < K; ++j) v[j] = (v[j] - mu) * rs * wv[j] + bv[j];
        gg::team_store<VEC>(y, v, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
layer_norm_fwd(const T* __restrict__ x, const gg::math_t<T>* __restrict__ w, const gg::math_t<T>* __restrict__ b,
               T* __restrict__ y, gg::math_t<T>* __restrict__ mean, gg::math_t<T>* __restrict__ rstd, long long rows,
               long long ncols, long long lanes, double eps) {
    using M = gg::math_t<T>;
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    gg::with_vec(gg::rows_vectorizable(ncols, x, y, w, b), [&](auto vec) {
        layer_norm_fwd_row<decltype(vec)::value>(x + t.off, w, b, y + t.off, mean, rstd, M(eps), t);
    });
}

// backward, input gradient: xhat = (x - mean) * rstd, g = gy * w, gx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// One team reduction of the pair (sum g, sum g*xhat). x, gy, gx: T; w, mean, rstd: M. Op: layer_norm backward.
template <bool VEC, typename T, typename M>
__device__ __forceinline__ void layer_norm_bwd_row(const T* __restrict__ x, const M* __restrict__ w, M mu, M rs,
                                                   const T* __restrict__ gy, T* __restrict__ gx, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    // NOTE: for bf16 / f16 the widening of x and gy needs registers of its own, and keeping w's chunk 0 across the
    // reduction as well spills under the 64-register cap; there w's chunk 0 (a cols vector, in L1) is read again.
    constexpr bool KEEP_W = sizeof(T) == sizeof(M);
    const int step = K * t.size;
    M xv[K], gv[K], wv[K], sg = M(0), sgx = M(0);
    gg::team_load<VEC>(xv, x, 0, M(0), t);
    gg::team_load<VEC>(gv, gy, 0, M(0), t);  // padding gy = w = 0: g = 0 adds nothing to either sum
    team_load_cols<VEC, T>(wv, w, 0, t);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const M g = gv[j] * wv[j];
        sg += g;
        sgx += g * (xv[j] - mu) * rs;
    }
    for (int base = step; base < t.cols; base += step) {
        M a[K], e[K], f[K];
        gg::team_load<VEC>(a, x, base, M(0), t);
        gg::team_load<VEC>(e, gy, base, M(0), t);
        team_load_cols<VEC, T>(f, w, base, t);
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const M g = e[j] * f[j];
            sg += g;
            sgx += g * (a[j] - mu) * rs;
        }
    }
    gg::team_reduce_sum2(sg, sgx, t);
    const M mg = sg / M(t.cols), mgx = sgx / M(t.cols);
    for (int base = 0; base < t.cols; base += step) {
        if (base) {
            gg::team_load<VEC>(xv, x, base, M(0), t);
            gg::team_load<VEC>(gv, gy, base, M(0), t);
            if (KEEP_W) team_load_cols<VEC, T>(wv, w, base, t);
        }
        if (!KEEP_W) team_load_cols<VEC, T>(wv, w, base, t);
#pragma unroll
        for (int j = 0; j < K; ++j) gv[j] = rs * (gv[j] * wv[j] - mg - (xv[j] - mu) * rs * mgx);
        gg::team_store<VEC>(gx, gv, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
layer_norm_bwd(const T* __restrict__ x, const gg::math_t<T>* __restrict__ w, const gg::math_t<T>* __restrict__ mean,
               const gg::math_t<T>* __restrict__ rstd, const T* __restrict__ gy, T* __restrict__ gx, long long rows,
               long long ncols, long long lanes) {
    using M = gg::math_t<T>;
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    const M mu = t.active ? mean[t.row] : M(0), rs = t.active ? rstd[t.row] : M(0);
    gg::with_vec(gg::rows_vectorizable(ncols, x, gy, gx, w), [&](auto vec) {
        layer_norm_bwd_row<decltype(vec)::value>(x + t.off, w, mu, rs, gy + t.off, gx + t.off, t);
    });
}

// backward, parameter gradients: pw[chunk, c] = sum over the chunk's rows of gy * xhat, pb[chunk, c] = sum of gy.
// Column traversal as sum_rows (block (32, 8), grid (ceil(cols / 32), chunks), deterministic); the launcher adds
// the chunks with sum_rows. x, gy: T; mean, rstd and the partials pw, pb: M (float32 for bf16 / f16 x: the launcher
// rounds gw and gb once, after the last pass). Op: layer_norm backward (gw, gb).
template <typename T>
__global__ void __launch_bounds__(256)
layer_norm_bwd_wb(const T* __restrict__ x, const gg::math_t<T>* __restrict__ mean,
                  const gg::math_t<T>* __restrict__ rstd, const T* __restrict__ gy, gg::math_t<T>* __restrict__ pw,
                  gg::math_t<T>* __restrict__ pb, long long rows, long long cols, long long rows_per_chunk) {
    using M = gg::math_t<T>;
    const auto [c, r0, r1] = gg::column_chunk(rows, rows_per_chunk);
    M aw = M(0), ab = M(0);
    if (c < cols) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += gg::COL_TILE_Y) {
            const long long i = r * cols + c;
            const M g = gg::load_math(gy[i]);
            aw += g * ((gg::load_math(x[i]) - mean[r]) * rstd[r]);
            ab += g;
        }
    }
    gg::column_tile_store(aw, pw + (long long)blockIdx.y * cols, c, cols);
    gg::column_tile_store(ab, pb + (long long)blockIdx.y * cols, c, cols);
}
