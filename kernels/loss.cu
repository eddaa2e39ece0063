// kernels/loss.cu: softmax cross-entropy and the token log-probability, fused row kernels in a cupy.RawModule.
// x C-contiguous (rows, cols) logits, t int64 (rows,) class ids; one block per row (grid.x = rows, block 32..1024
// from kernels.py row_block). The two ops are one kernel pair with a sign: the loss is -log p[t] (sign = +1),
// the log-probability is +log p[t] (sign = -1); neither forks the other's math.
// NOTE: a target outside [0, cols) is never used as an index: its row's output (and gradient) is NaN, so the
// launchers need no host sync and the op layer can check on the CPU when it reads the loss.
#include "common.cuh"

// forward: out[r] = sign * (lse[r] - x[r, t[r]]), lse[r] = log(sum(exp(x[r]))) (saved for backward), both (rows,).
// One pass over x (online log-sum-exp). T float/double. Ops: softmax_xent (sign +1), token_logprob (sign -1).
template <typename T>
__global__ void __launch_bounds__(1024)
softmax_xent_fwd(const T* __restrict__ x, const long long* __restrict__ t, T* __restrict__ out, T* __restrict__ lse,
                 long long ncols, double sign) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols;
    const T* xr = x + (long long)blockIdx.x * ncols;
    const long long tr = t[blockIdx.x];
    const bool valid = tr >= 0 && tr < cols;
    T xt = T(0);
    if (threadIdx.x == 0 && valid) xt = xr[tr];  // issued early: its latency overlaps the row reduction
    T v[K], m, s;
    gg::row_lse(xr, cols, v, m, s);
    if (threadIdx.x == 0) {
        const T l = m + gg::log_(s);
        lse[blockIdx.x] = l;
        out[blockIdx.x] = valid ? T(sign) * (l - xt) : gg::nan<T>();
    }
}

// backward: gx[r, c] = sign * g[r] * (exp(x[r, c] - lse[r]) - (c == t[r])), g the per-row output gradient (rows,);
// one pass, no reduction (lse is saved). T float/double. Ops: softmax_xent (sign +1), token_logprob (sign -1).
template <typename T>
__global__ void __launch_bounds__(1024)
softmax_xent_bwd(const T* __restrict__ x, const long long* __restrict__ t, const T* __restrict__ lse,
                 const T* __restrict__ gout, T* __restrict__ gx, long long ncols, double sign) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    x += off, gx += off;  // this block's row
    const long long tr = t[blockIdx.x];
    const T l = lse[blockIdx.x];
    const T g = (tr >= 0 && tr < cols) ? T(sign) * gout[blockIdx.x] : gg::nan<T>();
    for (int base = 0; base < cols; base += step) {
        T v[K];
        gg::load_chunk(v, x, base, cols, T(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c < cols) gx[c] = g * (gg::exp_(v[j] - l) - (c == tr ? T(1) : T(0)));
        }
    }
}
