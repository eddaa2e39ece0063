// kernels/norm.cu: LayerNorm over the last axis, forward and backward, as template kernels in a cupy.RawModule.
// x C-contiguous (rows, cols), w and b (cols,). Row kernels: one block per row (grid.x = rows, block 32..1024
// from kernels.py row_block), the first K*blockDim columns cached in registers (common.cuh RowCache).
// NOTE: mean and variance are two exact passes over the cached row (not Welford): var = mean((x - mean)^2) has no
// cancellation, and for rows that fit the cache the second pass costs no memory traffic.
#include "common.cuh"

// forward: mean = sum(x)/n, rstd = 1/sqrt(sum((x - mean)^2)/n + eps), y = (x - mean) * rstd * w + b; writes y and
// the saved mean, rstd (rows,). T float/double. Op: layer_norm forward.
template <typename T>
__global__ void __launch_bounds__(1024)
layer_norm_fwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
               T* __restrict__ mean, T* __restrict__ rstd, long long ncols, double eps) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    x += off, y += off;  // this block's row
    T v[K], t[K], acc = T(0);
    gg::load_chunk(v, x, 0, cols, T(0));
#pragma unroll
    for (int j = 0; j < K; ++j) acc += v[j];
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(t, x, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) acc += t[j];
    }
    const T mu = gg::block_reduce_sum(acc) / T(cols);
    acc = T(0);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const T d = threadIdx.x + j * blockDim.x < cols ? v[j] - mu : T(0);  // padding adds nothing
        acc += d * d;
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(t, x, base, cols, mu);  // padding = mu: adds nothing
#pragma unroll
        for (int j = 0; j < K; ++j) acc += (t[j] - mu) * (t[j] - mu);
    }
    const T rs = T(1) / gg::sqrt_(gg::block_reduce_sum(acc) / T(cols) + T(eps));
    if (threadIdx.x == 0) { mean[blockIdx.x] = mu; rstd[blockIdx.x] = rs; }
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < cols) y[c] = (v[j] - mu) * rs * w[c] + b[c];
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(t, x, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) y[c] = (t[j] - mu) * rs * w[c] + b[c];
        }
    }
}

// backward, input gradient: xhat = (x - mean) * rstd, g = gy * w, gx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// One block reduction of the pair (sum g, sum g*xhat). T float/double. Op: layer_norm backward.
template <typename T>
__global__ void __launch_bounds__(1024)
layer_norm_bwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ mean,
               const T* __restrict__ rstd, const T* __restrict__ gy, T* __restrict__ gx, long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    x += off, gy += off, gx += off;  // this block's row
    const T mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
    T xv[K], gv[K], sg = T(0), sgx = T(0);
    gg::load_chunk(xv, x, 0, cols, T(0));
    gg::load_chunk(gv, gy, 0, cols, T(0));  // padding gy = 0: adds nothing to either sum
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        const T g = c < cols ? gv[j] * w[c] : T(0);
        sg += g;
        sgx += g * (xv[j] - mu) * rs;
    }
    for (int base = step; base < cols; base += step) {
        T a[K], e[K];
        gg::load_chunk(a, x, base, cols, T(0));
        gg::load_chunk(e, gy, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            const T g = c < cols ? e[j] * w[c] : T(0);
            sg += g;
            sgx += g * (a[j] - mu) * rs;
        }
    }
    gg::block_reduce_sum2(sg, sgx);
    const T mg = sg / T(cols), mgx = sgx / T(cols);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < cols) gx[c] = rs * (gv[j] * w[c] - mg - (xv[j] - mu) * rs * mgx);
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(xv, x, base, cols, T(0));
        gg::load_chunk(gv, gy, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) gx[c] = rs * (gv[j] * w[c] - mg - (xv[j] - mu) * rs * mgx);
        }
    }
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
