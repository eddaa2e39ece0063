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
