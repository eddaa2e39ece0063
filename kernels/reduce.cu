// kernels/reduce.cu: row-wise softmax family and the column sum, as template kernels in a cupy.RawModule.
// Row kernels: x is C-contiguous (rows, cols), one block per row (grid.x = rows, block = 32..1024 threads, a power
// of two chosen from cols by kernels.py row_block), reductions over the last axis with the numerically stable
// max subtraction (online log-sum-exp, common.cuh). The first K*blockDim columns of a row stay in registers, so
// rows up to 8192 floats / 4096 doubles are read once; longer rows re-read later chunks (from L2).
#include "common.cuh"

// softmax: y = exp(x - m) / sum(exp(x - m)), m = row max. T float/double. Op: softmax forward.
template <typename T>
__global__ void __launch_bounds__(1024) softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const T* xr = x + (long long)blockIdx.x * ncols;
    T* yr = y + (long long)blockIdx.x * ncols;
    T v[K], m, s;
    gg::row_lse(xr, cols, v, m, s);
    const T inv = T(1) / s;
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < cols) yr[c] = gg::exp_(v[j] - m) * inv;
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(v, xr, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) yr[c] = gg::exp_(v[j] - m) * inv;
        }
    }
}

// softmax backward: gx = y * (gy - sum(gy * y)), y the saved softmax output. T float/double. Op: softmax.
template <typename T>
__global__ void __launch_bounds__(1024)
softmax_bwd(const T* __restrict__ y, const T* __restrict__ gy, T* __restrict__ gx, long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    y += off, gy += off, gx += off;  // this block's row
    T yv[K], gv[K], dot = T(0);
    gg::load_chunk(yv, y, 0, cols, T(0));
    gg::load_chunk(gv, gy, 0, cols, T(0));
#pragma unroll
    for (int j = 0; j < K; ++j) dot += yv[j] * gv[j];
    for (int base = step; base < cols; base += step) {
        T a[K], b[K];
        gg::load_chunk(a, y, base, cols, T(0));
        gg::load_chunk(b, gy, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) dot += a[j] * b[j];
    }
    dot = gg::block_reduce_sum(dot);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < cols) gx[c] = yv[j] * (gv[j] - dot);
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(yv, y, base, cols, T(0));
        gg::load_chunk(gv, gy, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) gx[c] = yv[j] * (gv[j] - dot);
        }
    }
}

// log_softmax: y = x - lse(x). T float/double. Op: log_softmax forward.
template <typename T>
__global__ void __launch_bounds__(1024) log_softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const T* xr = x + (long long)blockIdx.x * ncols;
    T* yr = y + (long long)blockIdx.x * ncols;
    T v[K], m, s;
    gg::row_lse(xr, cols, v, m, s);
    const T lse = m + gg::log_(s);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < cols) yr[c] = v[j] - lse;
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(v, xr, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) yr[c] = v[j] - lse;
        }
    }
}

// log_softmax backward: gx = gy - exp(y) * sum(gy), y the saved log-probabilities. T float/double.
// Only gy is needed for the sum, so only gy is cached; y is read once, in the output pass. Op: log_softmax.
template <typename T>
__global__ void __launch_bounds__(1024)
log_softmax_bwd(const T* __restrict__ y, const T* __restrict__ gy, T* __restrict__ gx, long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    y += off, gy += off, gx += off;  // this block's row
    T gv[K], yv[K], sum = T(0);
    gg::load_chunk(gv, gy, 0, cols, T(0));
#pragma unroll
    for (int j = 0; j < K; ++j) sum += gv[j];
    for (int base = step; base < cols; base += step) {
        T b[K];
        gg::load_chunk(b, gy, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) sum += b[j];
    }
    gg::load_chunk(yv, y, 0, cols, T(0));  // issued before the reduction so its latency overlaps it
    sum = gg::block_reduce_sum(sum);
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < cols) gx[c] = gv[j] - gg::exp_(yv[j]) * sum;
    }
    for (int base = step; base < cols; base += step) {
        gg::load_chunk(yv, y, base, cols, T(0));
        gg::load_chunk(gv, gy, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) gx[c] = gv[j] - gg::exp_(yv[j]) * sum;
        }
    }
}

// logsumexp: lse[r] = m + log(sum(exp(x[r] - m))), shape (rows,); -inf for an all -inf (or empty) row.
// T float/double. Op: logsumexp forward.
template <typename T>
__global__ void __launch_bounds__(1024) logsumexp_fwd(const T* __restrict__ x, T* __restrict__ lse, long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    T v[K], m, s;
    gg::row_lse(x + (long long)blockIdx.x * ncols, (int)ncols, v, m, s);
    if (threadIdx.x == 0) lse[blockIdx.x] = m + gg::log_(s);
}

// logsumexp backward: gx = glse[r] * exp(x - lse[r]); no reduction, one pass. T float/double. Op: logsumexp.
template <typename T>
__global__ void __launch_bounds__(1024)
logsumexp_bwd(const T* __restrict__ x, const T* __restrict__ lse, const T* __restrict__ glse, T* __restrict__ gx,
              long long ncols) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    x += off, gx += off;  // this block's row
    const T l = lse[blockIdx.x], g = glse[blockIdx.x];
    for (int base = 0; base < cols; base += step) {
        T v[K];
        gg::load_chunk(v, x, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) gx[c] = g * gg::exp_(v[j] - l);
        }
    }
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
