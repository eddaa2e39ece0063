// kernels/common.cuh: helpers shared by every kernel family (math overloads, warp/block reductions, row and
// column traversal). No system headers: NVRTC from pip ships none, and the CPU emulator compiles this with g++.
// NOTE: every block reduction here assumes blockDim.x is a multiple of 32 (launchers use 32..1024, powers of 2).
#pragma once

#ifndef GG_DYNAMIC_SMEM
// NOTE: a template kernel instantiated for float and double cannot declare `extern __shared__ T buf[]` twice
// with two element types, so the dynamic buffer is one byte array cast per use. (The emulator predefines this.)
#define GG_DYNAMIC_SMEM(T, name)                                                                   \
    extern __shared__ __align__(16) unsigned char gg_dynamic_smem_[];                              \
    T* name = reinterpret_cast<T*>(gg_dynamic_smem_)
#endif

// for (i = global thread id; i < n; i += total threads), 64-bit so buffers past 2^31 elements work.
#define GG_GRID_STRIDE_LOOP(i, n)                                                                  \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n);       \
         i += (long long)blockDim.x * gridDim.x)

namespace gg {

// +inf and NaN without <cmath>/<limits>: NVRTC has neither INFINITY nor __builtin_huge_val; g++ has no __int_as_float.
template <typename T> __device__ __forceinline__ T inf();
#if defined(__CUDACC_RTC__) || defined(__NVCC__)
template <> __device__ __forceinline__ float inf<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double inf<double>() { return __longlong_as_double(0x7ff0000000000000LL); }
#else
template <> __device__ __forceinline__ float inf<float>() { return __builtin_huge_valf(); }
template <> __device__ __forceinline__ double inf<double>() { return __builtin_huge_val(); }
#endif

template <typename T> __device__ __forceinline__ T nan();
#if defined(__CUDACC_RTC__) || defined(__NVCC__)
template <> __device__ __forceinline__ float nan<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double nan<double>() { return __longlong_as_double(0x7ff8000000000000LL); }
#else
template <> __device__ __forceinline__ float nan<float>() { return __builtin_nanf(""); }
template <> __device__ __forceinline__ double nan<double>() { return __builtin_nan(""); }
#endif

// Precise (not __expf-style) math by overload, so templates pick the float or double library function.
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_(double x) { return tanh(x); }
__device__ __forceinline__ float sqrt_(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_(double x) { return sqrt(x); }

// Elements each thread keeps in registers per row chunk: 8 floats / 4 doubles (32 B). With 1024 threads that
// caches 8192 float / 4096 double columns, so rows up to that size are read from DRAM exactly once, and the
// K independent loads per thread give the memory-level parallelism that vector loads would.
template <typename T> struct RowCache { static constexpr int K = sizeof(T) == 4 ? 8 : 4; };

// ---- warp / block reductions (every thread of the block gets the result) ----------------------------------
template <typename T> __device__ __forceinline__ T warp_reduce_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ __forceinline__ T warp_reduce_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

template <typename T> __device__ __forceinline__ T block_reduce_sum(T v) {
    __shared__ T partial[32];  // one slot per warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce_sum(v);
    __syncthreads();  // NOTE: a previous call's readers of `partial` must be done before it is overwritten
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_reduce_sum(lane < nwarps ? partial[lane] : T(0));  // every warp reduces: no broadcast step
}

template <typename T> __device__ __forceinline__ T block_reduce_max(T v) {
    __shared__ T partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_reduce_max(lane < nwarps ? partial[lane] : -inf<T>());
}

// Sum of a pair in one reduction (two barriers instead of four); LayerNorm backward needs two row sums.
template <typename T> __device__ __forceinline__ void block_reduce_sum2(T& a, T& b) {
    __shared__ T partial[2][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    a = warp_reduce_sum(a);
    b = warp_reduce_sum(b);
    __syncthreads();
    if (lane == 0) { partial[0][warp] = a; partial[1][warp] = b; }
    __syncthreads();
    a = warp_reduce_sum(lane < nwarps ? partial[0][lane] : T(0));
    b = warp_reduce_sum(lane < nwarps ? partial[1][lane] : T(0));
}

// ---- online log-sum-exp: (m, s) stands for s * exp(m); merging rescales the smaller side -------------------
// NOTE: a side with m == -inf holds no mass (s == 0); skipping it avoids exp(-inf - -inf) = NaN, so rows with
// -inf entries (masks) work and an all -inf row gives lse = -inf, as in the reference. NaN in s propagates.
template <typename T> __device__ __forceinline__ void lse_merge(T& m, T& s, T m2, T s2) {
    if (m2 == -inf<T>()) return;
    if (m == -inf<T>()) { m = m2; s = s2; return; }
    if (m2 > m) { s = s * exp_(m - m2) + s2; m = m2; }
    else { s += s2 * exp_(m2 - m); }
}

// Fold K register values into (m, s): one exp per element against the chunk max, one merge per chunk.
template <typename T, int K> __device__ __forceinline__ void lse_add_chunk(T& m, T& s, const T (&v)[K]) {
    T cm = v[0];
#pragma unroll
    for (int j = 1; j < K; ++j) cm = v[j] > cm ? v[j] : cm;
    if (cm == -inf<T>()) return;  // padding (-inf) or masked entries only
    T cs = T(0);
#pragma unroll
    for (int j = 0; j < K; ++j) cs += exp_(v[j] - cm);
    lse_merge(m, s, cm, cs);
}

template <typename T> __device__ __forceinline__ void block_reduce_lse(T& m, T& s) {
    __shared__ T pm[32], ps[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        T m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    __syncthreads();
    if (lane == 0) { pm[warp] = m; ps[warp] = s; }
    __syncthreads();
    m = lane < nwarps ? pm[lane] : -inf<T>();
    s = lane < nwarps ? ps[lane] : T(0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        T m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
}

// ---- row traversal: a block owns one row; chunk c covers columns [c*K*B, (c+1)*K*B), thread t takes
// columns base + t + j*B (j < K), so each of the K loads is coalesced across the warp. Column indices are int
// (the launchers reject rows of 2^31 or more columns); only the row offset needs 64 bits. ------------------------
template <typename T, int K>
__device__ __forceinline__ void load_chunk(T (&v)[K], const T* __restrict__ row, int base, int cols, T fill) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
        const int c = base + threadIdx.x + j * blockDim.x;
        v[j] = c < cols ? row[c] : fill;
    }
}

// log-sum-exp of one row; chunk 0 stays in `v0` for the caller's output pass (later chunks are re-read).
template <typename T, int K>
__device__ __forceinline__ void row_lse(const T* __restrict__ row, int cols, T (&v0)[K], T& m, T& s) {
    const int step = K * blockDim.x;
    m = -inf<T>();
    s = T(0);
    load_chunk(v0, row, 0, cols, -inf<T>());
    lse_add_chunk(m, s, v0);
    for (int base = step; base < cols; base += step) {
        T v[K];
        load_chunk(v, row, base, cols, -inf<T>());
        lse_add_chunk(m, s, v);
    }
    block_reduce_lse(m, s);
}

// ---- column traversal for sums over rows (bias / weight gradients): block (32, 8) covers 32 columns and a
// chunk of rows; thread (x, y) sums rows y, y+8, ... of column x, then the 8 partials are added in order.
// Deterministic: the association depends only on the launch shape, never on timing (no atomics).
constexpr int COL_TILE_X = 32, COL_TILE_Y = 8;

// This thread's column c and this block's rows [r0, r1) (chunk blockIdx.y of rows_per_chunk rows).
struct ColumnChunk {
    long long c, r0, r1;
};
__device__ __forceinline__ ColumnChunk column_chunk(long long rows, long long rows_per_chunk) {
    const long long r0 = (long long)blockIdx.y * rows_per_chunk;
    return {(long long)blockIdx.x * COL_TILE_X + threadIdx.x, r0, r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows};
}

template <typename T>
__device__ __forceinline__ void column_tile_store(T acc, T* __restrict__ out, long long c, long long cols) {
    __shared__ T tile[COL_TILE_Y][COL_TILE_X + 1];  // +1: no bank conflicts for doubles either
    __syncthreads();  // NOTE: a kernel may call this twice (LayerNorm gw and gb): the first readers must be done
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        T s = tile[0][threadIdx.x];
#pragma unroll
        for (int k = 1; k < COL_TILE_Y; ++k) s += tile[k][threadIdx.x];
        out[c] = s;
    }
}

}  // namespace gg
