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
__device__ __forceinline__ float sin_(float x) { return sinf(x); }
__device__ __forceinline__ double sin_(double x) { return sin(x); }
__device__ __forceinline__ float cos_(float x) { return cosf(x); }
__device__ __forceinline__ double cos_(double x) { return cos(x); }
__device__ __forceinline__ float log1p_(float x) { return log1pf(x); }
__device__ __forceinline__ double log1p_(double x) { return log1p(x); }
__device__ __forceinline__ float expm1_(float x) { return expm1f(x); }
__device__ __forceinline__ double expm1_(double x) { return expm1(x); }
__device__ __forceinline__ float erf_(float x) { return erff(x); }
__device__ __forceinline__ double erf_(double x) { return erf(x); }
__device__ __forceinline__ float erfc_(float x) { return erfcf(x); }
__device__ __forceinline__ double erfc_(double x) { return erfc(x); }

// Elements each thread keeps in registers per row chunk: 8 floats / 4 doubles (32 B). With 1024 threads that
// caches 8192 float / 4096 double columns, so rows up to that size are read from DRAM exactly once, and the
// K independent loads per thread give the memory-level parallelism that vector loads would.
template <typename T> struct RowCache { static constexpr int K = sizeof(T) == 8 ? 4 : 8; };  // 2-byte T: 8 floats

// The same for the team row kernels (reduce.cu, norm.cu; RowTeam below): two 16-byte vectors of floats (8), one
// of doubles (2). NOTE: double exp/log need the registers: 4 cached doubles a thread spill under the 64-register
// cap that two 512-thread blocks per SM impose. A 512-thread team caches 4096 floats / 1024 doubles; longer rows
// re-read their later chunks (from L2). launch.py row_plan sizes the teams by the same K.
template <typename T> struct TeamCache { static constexpr int K = sizeof(T) == 8 ? 2 : 8; };  // 2-byte T: 8 floats

// ---- 16-byte vectors: a Pack of N elements is loaded or stored as one access (ld.global.v4.f32 / .v2.f64), the
// widest a thread can issue: 4x (2x) fewer memory instructions than scalar floats (doubles) for the same bytes.
// Packs of more than 16 bytes (4 doubles beside a float op) are 16-byte aligned and split into 16-byte accesses;
// smaller ones (4 bools of a mask) are aligned to their size. A pointer that is not aligned to alignof(Pack) must
// take a scalar path: callers check pack_aligned first (a view at an odd offset is contiguous but misaligned).
// Low-precision storage, kept header-free (no cuda_bf16.h / cuda_fp16.h: NVRTC from pip ships no headers, and the
// emulator compiles this with g++). Kernels compute both in float (PyTorch's opmath): widening is exact; narrowing
// rounds to nearest, ties to even, keeps NaN a quiet NaN and overflows to inf, as __float2bfloat16_rn /
// __float2half_rn, ml_dtypes and NumPy do.
// bfloat16: the bits of NumPy's ml_dtypes.bfloat16 (CuPy 14's bfloat16 arrays) and CUDA's __nv_bfloat16, a float's
// high 16 bits.
struct bf16 {
    unsigned short bits;
};
__device__ __forceinline__ float widen(bf16 v) { return __uint_as_float((unsigned int)v.bits << 16); }
__device__ __forceinline__ bf16 to_bf16(float f) {
    const unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{(unsigned short)((u >> 16) | 0x40u)};  // NaN: quiet, sign kept
    return bf16{(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// float16: IEEE binary16, the bits of NumPy's float16 and CUDA's __half (5 exponent bits, bias 15, 10 mantissa bits).
struct f16 {
    unsigned short bits;
};
#if defined(__CUDACC_RTC__) || defined(__NVCC__)
// On the GPU the conversion instructions (IEEE, round to nearest even; sm_53+): one instruction each way, where the
// integer code below is a dozen. The emulator, and the tests that check the rounding bit for bit, run that code.
__device__ __forceinline__ float widen(f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}
__device__ __forceinline__ f16 to_f16(float f) {
    f16 v;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v.bits) : "f"(f));
    return v;
}
#else
__device__ __forceinline__ float widen(f16 v) {
    const unsigned int sign = (unsigned int)(v.bits & 0x8000u) << 16, e = (v.bits >> 10) & 0x1fu, m = v.bits & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));  // inf, NaN (payload kept)
    if (e == 0u) {  // zero or subnormal: m * 2^-24, exact in float
        const float mag = (float)m * 5.9604644775390625e-8f;
        return sign ? -mag : mag;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));  // rebias 15 -> 127
}
__device__ __forceinline__ f16 to_f16(float f) {
    const unsigned int u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return f16{(unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};  // NaN: quiet
    if (a >= 0x477ff000u) return f16{(unsigned short)(sign | 0x7c00u)};  // >= 65520 (and inf): rounds to inf
    if (a < 0x38800000u) {
        // below 2^-14 (float16's smallest normal): adding 0.5, whose ulp is 2^-24 (float16's subnormal step), makes
        // the float unit round |f| to a multiple of 2^-24, to nearest even; the low mantissa bits are the result.
        const float r = __uint_as_float(a) + 0.5f;
        return f16{(unsigned short)(sign | (__float_as_uint(r) - 0x3f000000u))};
    }
    const unsigned int m = a - 0x38000000u;  // rebias 127 -> 15; the rounding carry may step into the exponent
    return f16{(unsigned short)(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13))};
}
#endif
// The type a storage type T computes in (float for bfloat16 and float16, T itself for float and double), and the
// conversions: for float and double they are the identity, so those instantiations compile to what they were.
template <typename T> struct Math { using type = T; };
template <> struct Math<bf16> { using type = float; };
template <> struct Math<f16> { using type = float; };
template <typename T> using math_t = typename Math<T>::type;
template <typename T> __device__ __forceinline__ T load_math(T v) { return v; }
__device__ __forceinline__ float load_math(bf16 v) { return widen(v); }
__device__ __forceinline__ float load_math(f16 v) { return widen(v); }
template <typename T> __device__ __forceinline__ T store_math(math_t<T> v) { return v; }
template <> __device__ __forceinline__ bf16 store_math<bf16>(float v) { return to_bf16(v); }
template <> __device__ __forceinline__ f16 store_math<f16>(float v) { return to_f16(v); }

template <typename E, int N> struct alignas(sizeof(E) * N < 16 ? sizeof(E) * N : 16) Pack { E v[N]; };
template <typename T> struct Vec { static constexpr int N = 16 / sizeof(T); };  // elements of one 16-byte vector

template <int N, typename E> __device__ __forceinline__ bool pack_aligned(const E* p) {
    return reinterpret_cast<unsigned long long>(p) % alignof(Pack<E, N>) == 0;
}
template <int N, typename... E> __device__ __forceinline__ bool packs_aligned(const E*... p) {
    return (pack_aligned<N>(p) && ...);
}

#ifdef GG_EMULATION  // a GPU faults on a misaligned vector access; the emulator fails the launch with a message
#define GG_CHECK_PACK(p, N) \
    if (!pack_aligned<N>(p)) ::gg_emu::fail("misaligned vector access: " #p " is not aligned to its Pack")
#else
#define GG_CHECK_PACK(p, N)
#endif

template <int N, typename E> __device__ __forceinline__ void load_pack(E* v, const E* __restrict__ p) {
    GG_CHECK_PACK(p, N);
    const Pack<E, N> q = *reinterpret_cast<const Pack<E, N>*>(p);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = q.v[j];
}

template <int N, typename E> __device__ __forceinline__ void store_pack(E* __restrict__ p, const E* v) {
    GG_CHECK_PACK(p, N);
    Pack<E, N> q;
#pragma unroll
    for (int j = 0; j < N; ++j) q.v[j] = v[j];
    *reinterpret_cast<Pack<E, N>*>(p) = q;
}

// f(BoolConst<true>{}) or f(BoolConst<false>{}): a kernel compiles its vector and its scalar body and takes one
// per launch (the flag is uniform, so the branch never diverges).
template <bool B> struct BoolConst { static constexpr bool value = B; };
template <class F> __device__ __forceinline__ void with_vec(bool vec, F&& f) {
    if (vec) f(BoolConst<true>{});
    else f(BoolConst<false>{});
}

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
// -inf entries (masks) work and an all -inf row gives lse = -inf, as in the reference. Equal maxima add without
// exp(m2 - m), so two sides with m == +inf merge to (inf, s + s2), not NaN: a row holding +inf has lse = inf, as
// torch's logsumexp (the softmax family reads such a row as NaN: softmax_sum). NaN in s propagates.
template <typename T> __device__ __forceinline__ void lse_merge(T& m, T& s, T m2, T s2) {
    if (m2 == -inf<T>()) return;
    if (m == -inf<T>()) { m = m2; s = s2; return; }
    if (m2 > m) { s = s * exp_(m - m2) + s2; m = m2; }
    else { s += m2 == m ? s2 : s2 * exp_(m2 - m); }
}

// Fold K register values into (m, s): one exp per element against the chunk max, one merge per chunk.
// The max itself counts 1 without exp(v - cm): exp(0) = 1 for a finite max, and +inf entries count 1 (not
// exp(inf - inf) = NaN); a NaN entry still makes cs NaN (v == cm is false for it).
template <typename T, int K> __device__ __forceinline__ void lse_add_chunk(T& m, T& s, const T (&v)[K]) {
    T cm = v[0];
#pragma unroll
    for (int j = 1; j < K; ++j) cm = v[j] > cm ? v[j] : cm;
    if (cm == -inf<T>()) return;  // padding (-inf) or masked entries only
    T cs = T(0);
#pragma unroll
    for (int j = 0; j < K; ++j) cs += v[j] == cm ? T(1) : exp_(v[j] - cm);
    lse_merge(m, s, cm, cs);
}

// The row's sum of exp(x - m) as torch's softmax, log_softmax and cross-entropy see it: NaN when the max m is +inf
// (x - max = inf - inf there), where logsumexp takes (m, s) as it is (inf).
template <typename T> __device__ __forceinline__ T softmax_sum(T m, T s) { return m == inf<T>() ? nan<T>() : s; }

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

// ---- row teams: the threads that own one row. A row of up to 32 * K columns gets G = 1..32 lanes of one warp
// (blockDim.x / G rows per block) and reduces with shuffles alone; a longer row gets a whole block (block
// reductions). launch.py row_plan picks G from cols and passes it as `lanes` (0: a block per row). A team past
// the last row is idle: it sees an empty row (cols 0) and stores nothing, but still takes part in its warp's
// shuffles (full-mask shuffles need every lane of the warp). Column indices are int (the launchers reject rows of
// 2^31 or more columns); only the row offset needs 64 bits.
struct RowTeam {
    long long row, off;     // this team's row and the offset of its first element (0 when idle)
    int cols, lane, size;   // the row's columns (0 when idle), this thread's index in the team, the team's size
    bool warp, active;      // a team inside one warp (shuffle reductions); a real row
};

__device__ __forceinline__ RowTeam row_team(long long rows, long long ncols, long long lanes) {
    RowTeam t;
    t.warp = lanes > 0;
    t.size = t.warp ? (int)lanes : (int)blockDim.x;
    t.lane = t.warp ? (int)(threadIdx.x & (lanes - 1)) : (int)threadIdx.x;
    t.row = t.warp ? (long long)blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes : (long long)blockIdx.x;
    t.active = t.row < rows;
    t.cols = t.active ? (int)ncols : 0;
    t.off = t.active ? t.row * ncols : 0;
    return t;
}

// Vector row accesses need every row of every array to start 16-byte aligned: cols a multiple of the vector
// width and every base pointer aligned. Per-column vectors (LayerNorm w, b) need only their pointer aligned.
template <typename T, typename... P>
__device__ __forceinline__ bool rows_vectorizable(long long ncols, const T* p, const P*... rest) {
    return ncols % Vec<T>::N == 0 && packs_aligned<Vec<T>::N>(p, rest...);
}

// Team reductions (every lane of the team gets the result; xor butterflies give every lane the same bits).
// NOTE: `o < t.size` is uniform in a warp (all its teams have one size), so every lane shuffles together.
template <typename T> __device__ __forceinline__ T team_reduce_sum(T v, const RowTeam& t) {
    if (!t.warp) return block_reduce_sum(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        if (o < t.size) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ __forceinline__ void team_reduce_sum2(T& a, T& b, const RowTeam& t) {
    if (!t.warp) return block_reduce_sum2(a, b);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        if (o < t.size) {
            a += __shfl_xor_sync(0xffffffffu, a, o);
            b += __shfl_xor_sync(0xffffffffu, b, o);
        }
}

template <typename T> __device__ __forceinline__ void team_reduce_lse(T& m, T& s, const RowTeam& t) {
    if (!t.warp) return block_reduce_lse(m, s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        if (o < t.size) {
            const T m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            lse_merge(m, s, m2, s2);
        }
}

// A chunk covers columns [base, base + K * size). Scalar layout: element j of lane l is column base + l + j * size
// (each of the K loads coalesced across the team). Vector layout (VEC, V = Vec<T>::N): elements q*V .. q*V+V-1
// are the V columns of vector base/V + l + q * size, one 16-byte access. VEC needs rows_vectorizable: with cols a
// multiple of V a vector lies wholly inside or outside the row.
template <bool VEC, typename T> __device__ __forceinline__ int team_col(int j, int base, const RowTeam& t) {
    constexpr int V = VEC ? Vec<T>::N : 1;
    return base + (t.lane + (j / V) * t.size) * V + j % V;
}

// Storage E (float, double, bf16, f16) is widened to its math type M on load and narrowed on store; K counts
// elements, so for bf16 / f16 (V = 8) K = 8 is one 16-byte vector a thread.
template <bool VEC, typename M, typename E, int K>
__device__ __forceinline__ void team_load(M (&v)[K], const E* __restrict__ row, int base, M fill, const RowTeam& t) {
    constexpr int V = VEC ? Vec<E>::N : 1;
    static_assert(K % V == 0, "a row chunk holds whole vectors");
#pragma unroll
    for (int q = 0; q < K / V; ++q) {
        const int c = team_col<VEC, E>(q * V, base, t);
        if (c < t.cols) {
            E e[V];
            load_pack<V>(e, row + c);
#pragma unroll
            for (int j = 0; j < V; ++j) v[q * V + j] = load_math(e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[q * V + j] = fill;
        }
    }
}

template <bool VEC, typename E, typename M, int K>
__device__ __forceinline__ void team_store(E* __restrict__ row, const M (&v)[K], int base, const RowTeam& t) {
    constexpr int V = VEC ? Vec<E>::N : 1;
#pragma unroll
    for (int q = 0; q < K / V; ++q) {
        const int c = team_col<VEC, E>(q * V, base, t);
        if (c < t.cols) {
            E e[V];
#pragma unroll
            for (int j = 0; j < V; ++j) e[j] = store_math<E>(v[q * V + j]);
            store_pack<V>(row + c, e);
        }
    }
}

// log-sum-exp of the team's row; chunk 0 stays in `v0` for the caller's output pass (later chunks are re-read).
template <bool VEC, typename M, typename E, int K>
__device__ __forceinline__ void team_row_lse(const E* __restrict__ row, M (&v0)[K], M& m, M& s, const RowTeam& t) {
    const int step = K * t.size;
    m = -inf<M>();
    s = M(0);
    team_load<VEC>(v0, row, 0, -inf<M>(), t);
    lse_add_chunk(m, s, v0);
    for (int base = step; base < t.cols; base += step) {
        M v[K];
        team_load<VEC>(v, row, base, -inf<M>(), t);
        lse_add_chunk(m, s, v);
    }
    team_reduce_lse(m, s, t);
}

// ---- a block owns one row (grid.x = rows, any blockDim): the scalar team of the whole block, for kernels that
// launch one block per row (loss.cu). Thread t takes columns base + t + j*B (j < K), coalesced per j.
__device__ __forceinline__ RowTeam block_team(int cols) {
    RowTeam t;
    t.warp = false, t.active = true;
    t.size = (int)blockDim.x, t.lane = (int)threadIdx.x, t.cols = cols;
    t.row = blockIdx.x, t.off = (long long)blockIdx.x * cols;
    return t;
}

template <typename M, typename E, int K>
__device__ __forceinline__ void load_chunk(M (&v)[K], const E* __restrict__ row, int base, int cols, M fill) {
    team_load<false>(v, row, base, fill, block_team(cols));
}

// log-sum-exp of one row; chunk 0 stays in `v0` for the caller's output pass (later chunks are re-read).
template <typename M, typename E, int K>
__device__ __forceinline__ void row_lse(const E* __restrict__ row, int cols, M (&v0)[K], M& m, M& s) {
    team_row_lse<false>(row, v0, m, s, block_team(cols));
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

// acc in the math type M, out in storage E (a low-precision sum is rounded once, after the 8 partials are added).
template <typename E, typename M>
__device__ __forceinline__ void column_tile_store(M acc, E* __restrict__ out, long long c, long long cols) {
    __shared__ M tile[COL_TILE_Y][COL_TILE_X + 1];  // +1: no bank conflicts for doubles either
    __syncthreads();  // NOTE: a kernel may call this twice (LayerNorm gw and gb): the first readers must be done
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        M s = tile[0][threadIdx.x];
#pragma unroll
        for (int k = 1; k < COL_TILE_Y; ++k) s += tile[k][threadIdx.x];
        out[c] = store_math<E>(s);
    }
}

}  // namespace gg

// ---- device-side checks and grid completion (gpugrad/backend/deferred.py owns the status words) --------------
// Each device has one persistent array of STATUS_WORDS int64, zero between launches:
//   [STATUS_SITE] id of the first failed range check since the host last looked (0: none), [STATUS_LO] and
//   [STATUS_HI] the min and max of the ids that check saw, [STATUS_DONE] blocks finished in the running launch
//   (low 32 bits) plus a per-launch flag count (high 32 bits); the launch's last block sets it back to 0.
// NOTE: a kernel reports instead of trapping: __trap() would kill the CUDA context, and a host check would need
// a sync. The host reads the words at the next value it copies off the device and raises the op's error then.
namespace gg {
enum { STATUS_SITE = 0, STATUS_LO = 1, STATUS_HI = 2, STATUS_DONE = 3, STATUS_WORDS = 4 };
constexpr long long LL_MAX = 0x7fffffffffffffffLL, LL_MIN = -LL_MAX - 1;  // no <limits.h> under NVRTC

// Called by every thread of every block (1-D grid) once the block's results are stored; true in the block that
// finishes last, whose threads may then read every other block's results. `flag` (0/1 per block) is summed over
// the grid into `flags`. The standard threadfence reduction: stores, fence, count; count, fence, loads.
__device__ __forceinline__ bool last_block(long long* status, unsigned flag, unsigned long long& flags) {
    __shared__ unsigned long long seen;
    __threadfence();  // this thread's stores reach device scope before the count says the block is done
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long* done = reinterpret_cast<unsigned long long*>(status + STATUS_DONE);
        const unsigned long long mine = ((unsigned long long)flag << 32) | 1ull;
        seen = atomicAdd(done, mine) + mine;
        if ((unsigned)seen == gridDim.x) atomicExch(done, 0ull);  // every block has counted: ready for the next launch
    }
    __syncthreads();
    flags = seen >> 32;
    const bool last = (unsigned)seen == gridDim.x;
    if (last) __threadfence();  // the other blocks' stores are visible to the loads that follow
    return last;
}

// min and max over the block (every thread gets both).
__device__ __forceinline__ void block_reduce_minmax(long long& lo, long long& hi) {
    __shared__ long long plo[32], phi[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const long long l = __shfl_xor_sync(0xffffffffu, lo, o), h = __shfl_xor_sync(0xffffffffu, hi, o);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
    }
    __syncthreads();
    if (lane == 0) { plo[warp] = lo; phi[warp] = hi; }
    __syncthreads();
    lo = lane < nwarps ? plo[lane] : plo[0];
    hi = lane < nwarps ? phi[lane] : phi[0];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const long long l = __shfl_xor_sync(0xffffffffu, lo, o), h = __shfl_xor_sync(0xffffffffu, hi, o);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
    }
}

// Record a failed range check (one thread per launch): the first failure since the host last looked is kept,
// later ones leave it, so the error names the earliest bad op in stream order.
__device__ __forceinline__ void report_range(long long* status, long long site, long long lo, long long hi) {
    unsigned long long* first = reinterpret_cast<unsigned long long*>(status + STATUS_SITE);
    if (atomicCAS(first, 0ull, (unsigned long long)site) == 0ull) {
        status[STATUS_LO] = lo;
        status[STATUS_HI] = hi;
    }
}
}  // namespace gg
