// kernels/loss.cu: softmax cross-entropy and the token log-probability, fused row kernels in a cupy.RawModule.
// x C-contiguous (rows, cols) logits, t int64 (rows,) class ids; one block per row (grid.x = rows, block 32..1024
// from kernels.py row_block). The two ops are one kernel pair with a sign: the loss is -log p[t] (sign = +1),
// the log-probability is +log p[t] (sign = -1); neither forks the other's math.
// NOTE: a target outside [0, cols) is never used as an index: its row's output (and gradient) is NaN, and the
// forward records the failed check in the device's status words (common.cuh), which the host raises at its next
// read of the device, so neither the launchers nor the op need a host sync.
#include "common.cuh"

// forward: loss[r] = sign * (ls - (x[r, t[r]] - m)) = -sign * log_softmax(x)[r, t[r]], with m the row max and
// ls = log(sum(exp(x[r] - m))) (torch's order of operations: x - lse would round ls to an ulp of m), and
// lse[r] = m + ls (saved for backward), both (rows,). A row holding +inf is NaN (gg::softmax_sum), as in torch.
// With divisor > 0 ('sum': 1, 'mean': rows) also total[0] = sum_r loss[r] / divisor, in one launch: the last block
// to finish (gg::last_block) adds the rows in a fixed order, so the result does not depend on block timing.
// divisor == 0 ('none'): total is not touched. If any t[r] is out of range, the last block records (site, min t,
// max t) in status. One pass over x (online log-sum-exp). T float/double. Ops: cross_entropy (sign +1),
// token_logprob (sign -1, divisor 0).
template <typename T>
__global__ void __launch_bounds__(1024)
softmax_xent_fwd(const T* __restrict__ x, const long long* __restrict__ t, T* loss, T* __restrict__ lse, T* total,
                 long long* status, long long ncols, double sign, double divisor, long long site) {
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
        const T ls = gg::log_(gg::softmax_sum(m, s));
        lse[blockIdx.x] = m + ls;
        loss[blockIdx.x] = valid ? T(sign) * (ls - (xt - m)) : gg::nan<T>();
    }
    unsigned long long invalid;
    if (!gg::last_block(status, valid ? 0u : 1u, invalid)) return;
    const long long rows = gridDim.x;
    if (divisor > 0) {
        const volatile T* rl = loss;  // written by other blocks: read past this SM's (non-coherent) L1
        T acc = T(0);
        for (long long r = threadIdx.x; r < rows; r += blockDim.x) acc += rl[r];
        acc = gg::block_reduce_sum(acc);
        if (threadIdx.x == 0) total[0] = acc / T(divisor);
    }
    if (invalid) {  // block-uniform: the error names the target range seen, as the CPU's message does
        long long lo = gg::LL_MAX, hi = gg::LL_MIN;
        for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
            lo = t[r] < lo ? t[r] : lo;
            hi = t[r] > hi ? t[r] : hi;
        }
        gg::block_reduce_minmax(lo, hi);
        if (threadIdx.x == 0) gg::report_range(status, site, lo, hi);
    }
}

// backward: gx[r, c] = sign * g_r * (exp(x[r, c] - lse[r]) - (c == t[r])) with g_r = gout[r] for 'none'
// (divisor 0, gout (rows,)), else g_r = gout[0] / divisor (gout 0-d: the upstream gradient of the sum or mean, read
// on the device). One pass, no reduction (lse is saved). T float/double. Ops: cross_entropy (sign +1),
// token_logprob (sign -1).
template <typename T>
__global__ void __launch_bounds__(1024)
softmax_xent_bwd(const T* __restrict__ x, const long long* __restrict__ t, const T* __restrict__ lse,
                 const T* __restrict__ gout, T* __restrict__ gx, long long ncols, double sign, double divisor) {
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    x += off, gx += off;  // this block's row
    const long long tr = t[blockIdx.x];
    const T l = lse[blockIdx.x];
    const T gr = divisor > 0 ? gout[0] / T(divisor) : gout[blockIdx.x];
    const T g = (tr >= 0 && tr < cols) ? T(sign) * gr : gg::nan<T>();
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
