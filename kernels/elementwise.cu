// kernels/elementwise.cu: pointwise activations, used through cupy.ElementwiseKernel(preamble=source(...)), so
// CuPy does broadcasting, strides and the T in {float, double} generics; the operation strings live in one table,
// gpugrad/backend/kernels.py ELEMENTWISE. Backward functions take what the forward saved (named per function).
// Plus one raw kernel, bias_act_bwd: the fused activation backward + bias-gradient column sum.
#include "common.cuh"

// relu: y = max(x, 0) (NaN passes through, as torch); gx = gy * (y > 0), subgradient 0 at 0 as torch.
// Ops: relu, bias_act(relu).
template <typename T> __device__ __forceinline__ T relu_fwd(T x) { return x < T(0) ? T(0) : x; }
template <typename T> __device__ __forceinline__ T relu_bwd(T y, T gy) { return y > T(0) ? gy : T(0); }

// gelu, tanh approximation (torch approximate='tanh'): y = x/2 * (1 + tanh(k (x + a x^3))), k = sqrt(2/pi),
// a = 0.044715; gx = gy * (1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3 a x^2)). Saves x (not y). Ops: gelu, bias_act.
template <typename T> __device__ __forceinline__ T gelu_fwd(T x) {
    const T k = T(0.7978845608028654), a = T(0.044715);
    return T(0.5) * x * (T(1) + gg::tanh_(k * (x + a * x * x * x)));
}
template <typename T> __device__ __forceinline__ T gelu_bwd(T x, T gy) {
    const T k = T(0.7978845608028654), a = T(0.044715);
    const T x2 = x * x, t = gg::tanh_(k * (x + a * x2 * x));
    return gy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * a * x2));
}

// sigmoid: y = 1 / (1 + exp(-x)) (exp overflow gives y = 0, no NaN); gx = gy * y * (1 - y). Saves y.
template <typename T> __device__ __forceinline__ T sigmoid_fwd(T x) { return T(1) / (T(1) + gg::exp_(-x)); }
template <typename T> __device__ __forceinline__ T sigmoid_bwd(T y, T gy) { return gy * y * (T(1) - y); }

// tanh: y = tanh(x); gx = gy * (1 - y^2). Saves y.
template <typename T> __device__ __forceinline__ T tanh_fwd(T x) { return gg::tanh_(x); }
template <typename T> __device__ __forceinline__ T tanh_bwd(T y, T gy) { return gy * (T(1) - y * y); }

// Activation ids shared with kernels.py ACT_IDS (template arguments of bias_act_bwd).
enum { GG_ACT_IDENTITY = 0, GG_ACT_RELU = 1, GG_ACT_GELU = 2, GG_ACT_SIGMOID = 3, GG_ACT_TANH = 4 };

template <int ACT, typename T> __device__ __forceinline__ T act_bwd(T saved, T gy) {
    if constexpr (ACT == GG_ACT_RELU) return relu_bwd(saved, gy);
    else if constexpr (ACT == GG_ACT_GELU) return gelu_bwd(saved, gy);
    else if constexpr (ACT == GG_ACT_SIGMOID) return sigmoid_bwd(saved, gy);
    else if constexpr (ACT == GG_ACT_TANH) return tanh_bwd(saved, gy);
    else return gy;
}

// bias_act backward, fused: gz = act'(saved) * gy (saved = z = x + b for gelu, y otherwise) and the bias gradient
// partial[chunk, c] = sum of gz over this chunk's rows, in one pass (reads saved, gy; writes gz once).
// T in {float, double}; saved/gy/gz C-contiguous (rows, cols), b broadcast over the last axis.
// Launch: block (32, 8), grid (ceil(cols / 32), chunks), rows [chunk * rows_per_chunk, +rows_per_chunk);
// chunks > 1 are added by sum_rows. Op: bias_act (Linear + activation) backward.
template <typename T, int ACT>
__global__ void __launch_bounds__(256)
bias_act_bwd(const T* __restrict__ saved, const T* __restrict__ gy, T* __restrict__ gz, T* __restrict__ partial,
             long long rows, long long cols, long long rows_per_chunk) {
    const auto [c, r0, r1] = gg::column_chunk(rows, rows_per_chunk);
    T acc = T(0);
    if (c < cols) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += gg::COL_TILE_Y) {
            const long long i = r * cols + c;
            const T g = act_bwd<ACT>(saved[i], gy[i]);
            gz[i] = g;
            acc += g;
        }
    }
    gg::column_tile_store(acc, partial + (long long)blockIdx.y * cols, c, cols);
}
