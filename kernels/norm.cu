// kernels/norm.cu: LayerNorm over the last axis, forward and backward, as template kernels in a cupy.RawModule.
// x C-contiguous (rows, cols), w and b (cols,). Row kernels as in reduce.cu: a team per row (common.cuh RowTeam:
// G lanes of a warp for short rows, a block of 64..512 threads for long ones, from launch.py row_plan), the first
// K*team columns cached in registers (common.cuh TeamCache), 16-byte accesses when cols is a multiple of the vector
// width and x, y/gy/gx, w, b are 16-byte aligned, __launch_bounds__(512, 2) (two blocks per SM, <= 64 registers).
// NOTE: mean and variance are two exact passes over the cached row (not Welford): var = mean((x - mean)^2) has no
// cancellation, and for rows that fit the cache the second pass costs no memory traffic.
#include "common.cuh"

// forward: mean = sum(x)/n, rstd = 1/sqrt(sum((x - mean)^2)/n + eps), y = (x - mean) * rstd * w + b; writes y and
// the saved mean, rstd (rows,). T float/double. Op: layer_norm forward.
template <bool VEC, typename T>
__device__ __forceinline__ void layer_norm_fwd_row(const T* __restrict__ x, const T* __restrict__ w,
                                                   const T* __restrict__ b, T* __restrict__ y, T* __restrict__ mean,
                                                   T* __restrict__ rstd, T eps, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    T v[K], u[K], acc = T(0);
    gg::team_load<VEC>(v, x, 0, T(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) acc += v[j];
    for (int base = step; base < t.cols; base += step) {
        gg::team_load<VEC>(u, x, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) acc += u[j];
    }
    const T mu = gg::team_reduce_sum(acc, t) / T(t.cols);
    acc = T(0);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const T d = gg::team_col<VEC, T>(j, 0, t) < t.cols ? v[j] - mu : T(0);  // padding adds nothing
        acc += d * d;
    }
    for (int base = step; base < t.cols; base += step) {
        gg::team_load<VEC>(u, x, base, mu, t);  // padding = mu: adds nothing
#pragma unroll
        for (int j = 0; j < K; ++j) acc += (u[j] - mu) * (u[j] - mu);
    }
    const T rs = T(1) / gg::sqrt_(gg::team_reduce_sum(acc, t) / T(t.cols) + eps);
    if (t.lane == 0 && t.active) {
        mean[t.row] = mu;
        rstd[t.row] = rs;
    }
    for (int base = 0; base < t.cols; base += step) {
        if (base) gg::team_load<VEC>(v, x, base, T(0), t);
        T wv[K], bv[K];
        gg::team_load<VEC>(wv, w, base, T(0), t);
        gg::team_load<VEC>(bv, b, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) v[j] = (v[j] - mu) * rs * wv[j] + bv[j];
        gg::team_store<VEC>(y, v, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
layer_norm_fwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
               T* __restrict__ mean, T* __restrict__ rstd, long long rows, long long ncols, long long lanes, double eps) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    gg::with_vec(gg::rows_vectorizable(ncols, x, y, w, b), [&](auto vec) {
        layer_norm_fwd_row<decltype(vec)::value>(x + t.off, w, b, y + t.off, mean, rstd, T(eps), t);
    });
}

// backward, input gradient: xhat = (x - mean) * rstd, g = gy * w, gx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// One team reduction of the pair (sum g, sum g*xhat). T float/double. Op: layer_norm backward.
template <bool VEC, typename T>
__device__ __forceinline__ void layer_norm_bwd_row(const T* __restrict__ x, const T* __restrict__ w, T mu, T rs,
                                                   const T* __restrict__ gy, T* __restrict__ gx, const gg::RowTeam& t) {
    constexpr int K = gg::TeamCache<T>::K;
    const int step = K * t.size;
    T xv[K], gv[K], wv[K], sg = T(0), sgx = T(0);
    gg::team_load<VEC>(xv, x, 0, T(0), t);
    gg::team_load<VEC>(gv, gy, 0, T(0), t);  // padding gy = w = 0: g = 0 adds nothing to either sum
    gg::team_load<VEC>(wv, w, 0, T(0), t);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const T g = gv[j] * wv[j];
        sg += g;
        sgx += g * (xv[j] - mu) * rs;
    }
    for (int base = step; base < t.cols; base += step) {
        T a[K], e[K], f[K];
        gg::team_load<VEC>(a, x, base, T(0), t);
        gg::team_load<VEC>(e, gy, base, T(0), t);
        gg::team_load<VEC>(f, w, base, T(0), t);
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const T g = e[j] * f[j];
            sg += g;
            sgx += g * (a[j] - mu) * rs;
        }
    }
    gg::team_reduce_sum2(sg, sgx, t);
    const T mg = sg / T(t.cols), mgx = sgx / T(t.cols);
    for (int base = 0; base < t.cols; base += step) {
        if (base) {
            gg::team_load<VEC>(xv, x, base, T(0), t);
            gg::team_load<VEC>(gv, gy, base, T(0), t);
            gg::team_load<VEC>(wv, w, base, T(0), t);
        }
#pragma unroll
        for (int j = 0; j < K; ++j) gv[j] = rs * (gv[j] * wv[j] - mg - (xv[j] - mu) * rs * mgx);
        gg::team_store<VEC>(gx, gv, base, t);
    }
}

template <typename T>
__global__ void __launch_bounds__(512, 2)
layer_norm_bwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ mean,
               const T* __restrict__ rstd, const T* __restrict__ gy, T* __restrict__ gx, long long rows,
               long long ncols, long long lanes) {
    const gg::RowTeam t = gg::row_team(rows, ncols, lanes);
    const T mu = t.active ? mean[t.row] : T(0), rs = t.active ? rstd[t.row] : T(0);
    gg::with_vec(gg::rows_vectorizable(ncols, x, gy, gx, w), [&](auto vec) {
        layer_norm_bwd_row<decltype(vec)::value>(x + t.off, w, mu, rs, gy + t.off, gx + t.off, t);
    });
}

// backward, parameter gradients: pw[chunk, c] = sum over the chunk's rows of gy * xhat, pb[chunk, c] = sum of gy.
// Column traversal as sum_rows (block (32, 8), grid (ceil(cols / 32), chunks), deterministic); the launcher adds
// the chunks with sum_rows. T float/double. Op: layer_norm backward (gw, gb).
template <typename T>
__global__ void __launch_bounds__(256)
layer_norm_bwd_wb(const T* __restrict__ x, const T* __restrict__ mean, const T* __restrict__ rstd,
                  const T* __restrict__ gy, T* __restrict__ pw, T* __restrict__ pb, long long rows, long long cols,
                  long long rows_per_chunk) {
    const auto [c, r0, r1] = gg::column_chunk(rows, rows_per_chunk);
    T aw = T(0), ab = T(0);
    if (c < cols) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += gg::COL_TILE_Y) {
            const long long i = r * cols + c;
            const T g = gy[i];
            aw += g * ((x[i] - mean[r]) * rstd[r]);
            ab += g;
        }
    }
    gg::column_tile_store(aw, pw + (long long)blockIdx.y * cols, c, cols);
    gg::column_tile_store(ab, pb + (long long)blockIdx.y * cols, c, cols);
}
