// kernels/check.cu: range checks of integer ids on the device, for ops that index with them through CuPy (which
// wraps out-of-range indices around instead of failing). The check never syncs: a failure is recorded in the
// device's status words (common.cuh) and raised by the host at its next read of the device.
#include "common.cuh"

// check_index: lo, hi = min and max of ids[0, n_ids); when lo < 0 or hi >= n, record (site, lo, hi) in status
// (unless an earlier failure is recorded). I int or long long, ids C-contiguous. Grid-stride loop with
// gridDim.x <= blockDim.x (launcher: block 256, grid <= 256); each block stores its (min, max) in partial
// (2 * gridDim.x int64) and the last block to finish (gg::last_block) reduces them, one per thread.
// Ops: embedding, gather.
template <typename I>
__global__ void __launch_bounds__(256)
check_index(const I* __restrict__ ids, long long* partial, long long* status, long long n_ids, long long n,
            long long site) {
    long long lo = gg::LL_MAX, hi = gg::LL_MIN;
    GG_GRID_STRIDE_LOOP(i, n_ids) {
        const long long v = ids[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    gg::block_reduce_minmax(lo, hi);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = lo;
        partial[2 * blockIdx.x + 1] = hi;
    }
    unsigned long long unused;
    if (!gg::last_block(status, 0u, unused)) return;
    const volatile long long* p = partial;  // written by other blocks: read past this SM's (non-coherent) L1
    lo = threadIdx.x < gridDim.x ? p[2 * threadIdx.x] : gg::LL_MAX;
    hi = threadIdx.x < gridDim.x ? p[2 * threadIdx.x + 1] : gg::LL_MIN;
    gg::block_reduce_minmax(lo, hi);
    if (threadIdx.x == 0 && (lo < 0 || hi >= n)) gg::report_range(status, site, lo, hi);
}

// check_finite: whether any of up to GG_CF_SLOTS arrays holds a NaN or an infinity, recorded in row `node` of
// flags (int64, 2 per row) under `epoch` (> 0; one per backward, so the array is reused without being zeroed): for
// each slot k (p_k, n_k elements, output index o_k) holding a NaN, flags[2 * node] = max(itself, epoch * 2^32 +
// INT_MAX - o_k), which ends as the current epoch and INT_MAX minus the first such output, whatever ran before;
// flags[2 * node + 1] likewise for +-inf. T float or double; arrays C-contiguous (the launcher passes a dense view
// or a copy); unused slots have n = 0. Grid-stride per slot (block 256, grid <= 1024); after each slot one warp
// vote, so only a warp that saw a bad value issues an atomic, and finite gradients write nothing at all.
// Op: autograd anomaly mode (gpugrad/autograd/anomaly.py), once after each graph node's VJP.
#define GG_CF_SLOTS 8
#define GG_CF_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define GG_CF_LIST(X) X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7)
#define GG_CF_SLOT(k) const T* __restrict__ p##k, long long n##k, long long o##k

template <typename T>
__device__ __forceinline__ void finite_slot(const T* __restrict__ p, long long n, long long o, long long* row,
                                            long long epoch) {
    if (n == 0) return;  // uniform over the grid: every lane of a warp reaches the vote below or none does
    bool nan = false, inf = false;
    GG_GRID_STRIDE_LOOP(i, n) {
        const T v = p[i];
        nan |= v != v;
        inf |= fabs(v) == gg::inf<T>();  // NOTE: one comparison; with two (v == inf || v == -inf) doubles spill
    }
    nan = __any_sync(0xffffffffu, nan);
    inf = __any_sync(0xffffffffu, inf);
    const long long mark = epoch * 4294967296LL + 0x7fffffffLL - o;
    if ((threadIdx.x & 31) == 0) {
        if (nan) atomicMax(row, mark);
        if (inf) atomicMax(row + 1, mark);
    }
}

template <typename T>
__global__ void __launch_bounds__(256)
check_finite(long long* __restrict__ flags, long long node, long long epoch, GG_CF_LIST(GG_CF_SLOT)) {
#define GG_CF_RUN(k) finite_slot(p##k, n##k, o##k, flags + 2 * node, epoch);
    GG_CF_EACH(GG_CF_RUN)
#undef GG_CF_RUN
}
