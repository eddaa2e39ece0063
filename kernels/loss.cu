// kernels/loss.cu: softmax cross-entropy and the token log-probability, fused row kernels in a cupy.RawModule.
// x C-contiguous (rows, cols) logits, t int64 (rows,) class ids, w (cols,) class weights or null (all 1); one block
// per row (grid.x = rows, block 32..1024 from launch.py row_block). The two ops are one kernel pair with a sign: the
// loss is -log p[t] (sign = +1), the log-probability is +log p[t] (sign = -1); neither forks the other's math.
// Cross-entropy's options are torch's, as per-row and per-class terms: a row whose target equals `ignore` (when
// `ignoring`) is ignored (loss 0, gradient 0, weight 0); w scales row r by w[t[r]]; label smoothing e mixes in the
// uniform target: loss_r = (1 - e) w_t (-log p_t) + e / C * sum_c w_c (-log p_c).
// Storage T is float, double, gg::bf16 or gg::f16; the math runs in M = gg::math_t<T> (float for the two low types,
// torch's opmath). Only the logits, their gradient and the loss rows a caller sees are T; what the kernels save or
// take as parameters (w, lse, aux, the upstream gradient, the per-row losses the reduction adds) is M, so a
// low-precision result is rounded once, at its store, and class weights and the saved lse are never rounded.
// NOTE: a target outside [0, cols) (and not ignored) is never used as an index: its row's output (and gradient) is
// NaN, and the forward records the failed check in the device's status words (common.cuh), which the host raises
// at its next read of the device, so neither the launchers nor the op need a host sync.
#include "common.cuh"

// (weight of row r's target, 0 for an ignored or invalid row; whether the row is ignored; whether it is valid).
template <typename M> struct XentRow {
    M wt;
    bool ignored, valid;
};
template <typename M>
__device__ __forceinline__ XentRow<M> xent_row(long long tr, const M* __restrict__ w, int cols, long long ignoring,
                                               long long ignore) {
    XentRow<M> r;
    r.ignored = ignoring && tr == ignore;
    r.valid = r.ignored || (tr >= 0 && tr < cols);
    r.wt = r.valid && !r.ignored ? (w ? w[tr] : M(1)) : M(0);
    return r;
}

// forward: loss_r = sign * ((1 - e) w_t (ls - (x[r, t[r]] - m)) + e / C (W ls - sum_c w_c (x[r, c] - m))),
// W = sum_c w_c, with m the row max and ls = log(sum(exp(x[r] - m))) (torch's order of operations: x - lse would
// round ls to an ulp of m); the smoothing sums cost a second pass over the row (chunk 0 from registers) only when
// e != 0. lse[r] = m + ls (saved for backward), both (rows,). A row holding +inf is NaN (gg::softmax_sum), as in
// torch. reduce == 0 ('none'): total (rows,) gets loss_r and `loss` is not touched (null allowed). reduce > 0 ('sum'
// 1, 'mean' 2): loss (rows,) gets loss_r in M, and the last block to finish (gg::last_block) writes total[0] = sum_r
// loss_r ('sum') or that over den ('mean'), adding the rows in a fixed order, so the result does not depend on block
// timing (and a low-precision total is the float sum, rounded once). The last block also writes aux = (den, W), den
// the sum of the row weights w_t (the mean's divisor, as torch's: ignored rows count 0). If any t[r] is invalid, the
// last block records (site, min t, max t over the rows not ignored) in status. One pass over x (online
// log-sum-exp) without smoothing. Ops: cross_entropy (sign +1), token_logprob (sign -1, reduce 0, no weights,
// ignore or smoothing).
// NOTE: (1024, 1), not (1024): with no minimum of blocks given, ptxas (sm_90) held the f16 instantiation to 32
// registers and spilled; one 1024-thread block per SM is the budget that allows 64 a thread.
template <typename T>
__global__ void __launch_bounds__(1024, 1)
softmax_xent_fwd(const T* __restrict__ x, const long long* __restrict__ t, const gg::math_t<T>* __restrict__ w,
                 gg::math_t<T>* loss, gg::math_t<T>* __restrict__ lse, T* total, gg::math_t<T>* __restrict__ aux,
                 long long* status, long long ncols, double sign, long long reduce, long long ignoring,
                 long long ignore, double smoothing, long long site) {
    using M = gg::math_t<T>;
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols;
    const T* xr = x + (long long)blockIdx.x * ncols;
    const XentRow<M> row = xent_row(t[blockIdx.x], w, cols, ignoring, ignore);
    const long long tr = t[blockIdx.x];
    M xt = M(0);
    if (threadIdx.x == 0 && row.valid && !row.ignored) xt = gg::load_math(xr[tr]);  // early: overlaps the reduction
    M v[K], m, s;
    gg::row_lse(xr, cols, v, m, s);
    M sw = M(0), ws = M(0);  // sum_c w_c (x_c - m) and W = sum_c w_c: the uniform target's terms
    if (smoothing != 0.0) {  // uniform across the grid: every thread takes the reduction
        const int step = K * blockDim.x;
        for (int base = 0; base < cols; base += step) {
            if (base > 0) gg::load_chunk(v, xr, base, cols, M(0));
#pragma unroll
            for (int j = 0; j < K; ++j) {
                const int c = base + threadIdx.x + j * blockDim.x;
                const M wc = c < cols ? (w ? w[c] : M(1)) : M(0);
                if (c < cols) sw += wc * (v[j] - m), ws += wc;
            }
        }
        gg::block_reduce_sum2(sw, ws);
    }
    if (threadIdx.x == 0) {
        const M ls = gg::log_(gg::softmax_sum(m, s));
        lse[blockIdx.x] = m + ls;
        M l = M(1.0 - smoothing) * row.wt * (ls - (xt - m));  // (1 - 0) * 1 * d is d exactly: no smoothing, no w
        if (smoothing != 0.0) l += M(smoothing / (double)cols) * (ws * ls - sw);
        l = !row.valid ? gg::nan<M>() : row.ignored ? M(0) : M(sign) * l;
        if (reduce == 0) total[blockIdx.x] = gg::store_math<T>(l);
        else loss[blockIdx.x] = l;
    }
    unsigned long long invalid;
    if (!gg::last_block(status, row.valid ? 0u : 1u, invalid)) return;
    const long long rows = gridDim.x;
    M den = M(0), wsum = M(0);
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) den += xent_row(t[r], w, cols, ignoring, ignore).wt;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) wsum += w ? w[c] : M(1);
    gg::block_reduce_sum2(den, wsum);
    if (threadIdx.x == 0) aux[0] = den, aux[1] = wsum;
    if (reduce > 0) {
        const volatile M* rl = loss;  // written by other blocks: read past this SM's (non-coherent) L1
        M acc = M(0);
        for (long long r = threadIdx.x; r < rows; r += blockDim.x) acc += rl[r];
        acc = gg::block_reduce_sum(acc);
        if (threadIdx.x == 0) total[0] = gg::store_math<T>(reduce == 2 ? acc / den : acc);
    }
    if (invalid) {  // block-uniform: the error names the target range seen, as the CPU's message does
        long long lo = gg::LL_MAX, hi = gg::LL_MIN;
        for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
            const long long tr2 = t[r];
            if (ignoring && tr2 == ignore) continue;
            lo = tr2 < lo ? tr2 : lo;
            hi = tr2 > hi ? tr2 : hi;
        }
        gg::block_reduce_minmax(lo, hi);
        if (threadIdx.x == 0) gg::report_range(status, site, lo, hi);
    }
}

// backward: gx[r, c] = sign * g_r * (p_c a_r - (c == t[r]) b_r - e_r w_c), p = exp(x[r] - lse[r]), with
// b_r = (1 - e) w_t, e_r = e / C and a_r = b_r + e_r W (W = aux[1]): the gradient of the forward's loss_r, 0 * p for
// an ignored row (0, or NaN where its softmax is: torch's); g_r = gout[r] for 'none' (reduce 0, gout (rows,)),
// gout[0] for 'sum' (1) and gout[0] / aux[0] for 'mean' (2) (gout 0-d: the upstream gradient of the sum or mean,
// read on the device). x and gx are T; w, lse, gout and aux are M (for low T the launcher widens a low-precision
// gout, exactly). One pass, no reduction (lse and aux are saved). Ops: cross_entropy (sign +1), token_logprob (sign
// -1).
template <typename T>
__global__ void __launch_bounds__(1024)
softmax_xent_bwd(const T* __restrict__ x, const long long* __restrict__ t, const gg::math_t<T>* __restrict__ w,
                 const gg::math_t<T>* __restrict__ lse, const gg::math_t<T>* __restrict__ gout,
                 const gg::math_t<T>* __restrict__ aux, T* __restrict__ gx, long long ncols, double sign,
                 long long reduce, long long ignoring, long long ignore, double smoothing) {
    using M = gg::math_t<T>;
    constexpr int K = gg::RowCache<T>::K;
    const int cols = (int)ncols, step = K * blockDim.x;
    const long long off = (long long)blockIdx.x * ncols;
    x += off, gx += off;  // this block's row
    const long long tr = t[blockIdx.x];
    const XentRow<M> row = xent_row(tr, w, cols, ignoring, ignore);
    const M l = lse[blockIdx.x];
    const M gr = reduce == 0 ? gout[blockIdx.x] : reduce == 1 ? gout[0] : gout[0] / aux[0];
    const M g = row.valid ? M(sign) * gr : gg::nan<M>();
    const M b = M(1.0 - smoothing) * row.wt, e = row.ignored ? M(0) : M(smoothing / (double)cols);
    const M a = smoothing != 0.0 ? b + e * aux[1] : b;
    for (int base = 0; base < cols; base += step) {
        M v[K];
        gg::load_chunk(v, x, base, cols, M(0));
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int c = base + threadIdx.x + j * blockDim.x;
            if (c >= cols) continue;
            const M wc = smoothing != 0.0 && w ? w[c] : M(1);  // e = 0 without smoothing: - e wc is exact
            const M p = gg::exp_(v[j] - l);
            // an ignored row: 0 * p, as torch's log_softmax backward of a zero gradient (NaN where p is NaN)
            gx[c] = gg::store_math<T>(row.ignored ? p * M(0) : g * (p * a - (c == tr ? b : M(0)) - e * wc));
        }
    }
}
