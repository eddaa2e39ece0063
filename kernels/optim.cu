// kernels/optim.cu: fused optimizer steps, in place, T in {float, double}. Two launch forms share the element math:
// - per tensor (sgd_update_, adam_update_): one C-contiguous buffer of n elements, the hyperparameters by value;
// - multi-tensor (sgd_multi_update_, adam_multi_update_), PyTorch's fused-optimizer design: up to GG_MT_SLOTS
//   tensors per launch, their pointers and sizes passed as kernel arguments (as torch's multi_tensor_apply does), so
//   nothing is copied to the device when a gradient buffer is new (zero_grad() to None) and a captured CUDA graph
//   holds everything the step needs; the hyperparameters are read from a small device array (`hyper`) and Adam's
//   step counts live on the device and are advanced by the kernel, so a graph replay sees LR schedules and counts.
// Launch: block 256, grid min(ceil(total / 256), 4096) (at least 1), total = the elements of all tensors; each thread
// grid-strides over the tensors laid end to end (slot_start), so all threads get the same share whatever the sizes.
// Scalars are rounded to T once, as torch does for its float kernels (opmath = T here); runtime flags (momentum,
// nesterov, ...) are uniform branches: one instantiation per dtype.
#include "common.cuh"

// Tensors per multi-tensor launch: = kernels.py _MT_SLOTS. Each slot is 5 (SGD) or 6 (Adam) 8-byte arguments, so 16
// slots stay far below the 4 KB parameter limit; models with more parameters take ceil(n / 16) launches.
#define GG_MT_SLOTS 16
#define GG_MT_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define GG_MT_LIST(X) \
    X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15)

// This thread's first element of a tensor whose elements are [offset, offset + n) of the concatenation: the grid-stride
// loop over the concatenation, restricted to one tensor.
__device__ __forceinline__ long long slot_start(long long offset) {
    const long long stride = (long long)blockDim.x * gridDim.x, tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long r = (tid - offset) % stride;
    return r < 0 ? r + stride : r;
}

// ---- SGD, torch.optim.SGD semantics (maximize=False) ----------------------------------------------------------
// d = g + wd * p (wd != 0); with a momentum buffer b: b = d on the first step, else momentum * b + (1 - dampening) * d,
// d = nesterov ? d + momentum * b : b; then p = p - lr * d.
template <typename T> struct SgdScalars {
    T neg_lr, mom, keep, wd;
    bool decay, nesterov;
};

template <typename T>
__device__ __forceinline__ SgdScalars<T> sgd_scalars(double lr, double momentum, double dampening, double weight_decay,
                                                     bool nesterov) {
    return SgdScalars<T>{T(-lr), T(momentum), T(1.0 - dampening), T(weight_decay), weight_decay != 0.0, nesterov};
}

// One element; b is null without momentum. Returns the new p.
template <typename T>
__device__ __forceinline__ T sgd_elem(T pi, T d, T* b, bool first, const SgdScalars<T>& s) {
    if (s.decay) d = d + s.wd * pi;
    if (b != nullptr) {
        const T bi = first ? d : s.mom * *b + s.keep * d;
        *b = bi;
        d = s.nesterov ? d + s.mom * bi : bi;
    }
    return pi + s.neg_lr * d;
}

// buf is not read or written when momentum == 0 (the launcher passes p in its place). Op: none in the library (the
// optimizers use sgd_multi_update_); kept as the one-buffer form for benchmarks and layout tests.
template <typename T>
__global__ void __launch_bounds__(256)
sgd_update_(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, long long n, double lr, double momentum,
            double dampening, double weight_decay, long long nesterov, long long first_step) {
    const SgdScalars<T> s = sgd_scalars<T>(lr, momentum, dampening, weight_decay, nesterov != 0);
    const bool use_buf = momentum != 0.0;
    GG_GRID_STRIDE_LOOP(i, n) p[i] = sgd_elem(p[i], g[i], use_buf ? buf + i : nullptr, first_step != 0, s);
}

// hyper = [lr, momentum, dampening, weight_decay, nesterov (0/1)] (double, on the device). Slot k: parameter p,
// gradient g, momentum buffer b (null: no momentum in this launch), n elements, first (b = d: the tensor's first step).
// Unused slots have n = 0. Op: optim.SGD.step.
#define GG_SGD_SLOT(k) \
    T* __restrict__ p##k, const T* __restrict__ g##k, T* __restrict__ b##k, long long n##k, long long first##k
template <typename T>
__global__ void __launch_bounds__(256)
sgd_multi_update_(const double* __restrict__ hyper, GG_MT_LIST(GG_SGD_SLOT)) {
    const SgdScalars<T> s = sgd_scalars<T>(hyper[0], hyper[1], hyper[2], hyper[3], hyper[4] != 0.0);
    long long offset = 0;
#define GG_SGD_RUN(k)                                                                                  \
    for (long long i = slot_start(offset); i < n##k; i += (long long)blockDim.x * gridDim.x)           \
        p##k[i] = sgd_elem(p##k[i], g##k[i], b##k ? b##k + i : nullptr, first##k != 0, s);           \
    offset += n##k;
    GG_MT_EACH(GG_SGD_RUN)
#undef GG_SGD_RUN
}
#undef GG_SGD_SLOT

// ---- Adam / AdamW, torch.optim.Adam(W) semantics (amsgrad=False, maximize=False) ------------------------------
// L2 (decoupled = 0): g = g + wd * p;  AdamW (decoupled = 1): p = p * (1 - lr * wd);
// m = lerp(m, g, 1 - beta1) (torch's two-sided lerp formula); v = v * beta2 + (1 - beta2) * g * g;
// p = p - step_size * (m / (sqrt(v) / sqrt(bc2) + eps)), step_size = lr / bc1, bc_k = 1 - beta_k^step (step >= 1).
template <typename T> struct AdamScalars {
    T w1, b2, w2, eps, wd, decay, neg_step, bc2_sqrt;
    bool use_wd, decoupled;
};

template <typename T>
__device__ __forceinline__ AdamScalars<T> adam_scalars(double beta1, double beta2, double eps, double weight_decay,
                                                       double decay, bool decoupled, double step_size,
                                                       double bc2_sqrt) {
    return AdamScalars<T>{T(1.0 - beta1), T(beta2),    T(1.0 - beta2), T(eps), T(weight_decay), T(decay),
                          T(-step_size),  T(bc2_sqrt), weight_decay != 0.0, decoupled};
}

template <typename T>
__device__ __forceinline__ void adam_elem(T& p, T g, T& m, T& v, const AdamScalars<T>& s) {
    T pi = p, mi = m, vi = v;
    if (s.use_wd) {
        if (s.decoupled) pi = pi * s.decay;
        else g = g + s.wd * pi;
    }
    mi = s.w1 < T(0.5) ? mi + s.w1 * (g - mi) : g - (g - mi) * (T(1) - s.w1);
    vi = vi * s.b2 + s.w2 * g * g;
    p = pi + s.neg_step * (mi / (gg::sqrt_(vi) / s.bc2_sqrt + s.eps));
    m = mi;
    v = vi;
}

// Bias corrections from the step count in double, as the host computes them for adam_update_.
template <typename T>
__device__ __forceinline__ void adam_corrections(AdamScalars<T>& s, double lr, double beta1, double beta2,
                                                 long long step) {
    const double t = (double)step;
    s.neg_step = T(-(lr / (1.0 - pow(beta1, t))));
    s.bc2_sqrt = T(sqrt(1.0 - pow(beta2, t)));
}

// step already incremented; decay = 1 - lr * wd, step_size and bc2_sqrt computed on the host. Op: none in the library
// (the optimizers use adam_multi_update_); kept as the one-buffer form for benchmarks and layout tests.
template <typename T>
__global__ void __launch_bounds__(256)
adam_update_(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, long long n,
             double beta1, double beta2, double eps, double weight_decay, double decay, long long decoupled,
             double step_size, double bc2_sqrt) {
    const AdamScalars<T> s =
        adam_scalars<T>(beta1, beta2, eps, weight_decay, decay, decoupled != 0, step_size, bc2_sqrt);
    GG_GRID_STRIDE_LOOP(i, n) adam_elem(p[i], g[i], m[i], v[i], s);
}

// hyper = [lr, beta1, beta2, eps, weight_decay] (double, on the device). Slot k: parameter p, gradient g, moments m
// and v, its step count (int64, the steps taken so far: this step is *step + 1), n elements; unused slots have n = 0
// and a null step. Every tensor's count is advanced by one, by the last block to finish: each block reads the counts
// before it takes its ticket, so none can see a count that is already advanced. `ticket` (uint32) is 0 between
// launches: atomicInc wraps it back to 0 at the last block, so a graph replay finds it ready. Op: optim.Adam(W).step.
#define GG_ADAM_SLOT(k)                                                                                     \
    T* __restrict__ p##k, const T* __restrict__ g##k, T* __restrict__ m##k, T* __restrict__ v##k,           \
        long long* __restrict__ step##k, long long n##k
template <typename T>
__global__ void __launch_bounds__(256)
adam_multi_update_(const double* __restrict__ hyper, unsigned int* __restrict__ ticket, long long decoupled,
                   GG_MT_LIST(GG_ADAM_SLOT)) {
    const double lr = hyper[0], beta1 = hyper[1], beta2 = hyper[2];
    const double weight_decay = hyper[4];
    // decay = 1 - lr * wd in double, as the host computes it for adam_update_; step_size and bc2_sqrt per tensor below
    AdamScalars<T> s = adam_scalars<T>(beta1, beta2, hyper[3], weight_decay, 1.0 - lr * weight_decay, decoupled != 0,
                                       0.0, 1.0);
    long long offset = 0;
    // the corrections (two pow) only for tensors this thread has elements of
#define GG_ADAM_RUN(k)                                                                                 \
    {                                                                                                  \
        long long i = slot_start(offset);                                                              \
        if (i < n##k) adam_corrections(s, lr, beta1, beta2, *step##k + 1);                             \
        for (; i < n##k; i += (long long)blockDim.x * gridDim.x)                                       \
            adam_elem(p##k[i], g##k[i], m##k[i], v##k[i], s);                                          \
        offset += n##k;                                                                                \
    }
    GG_MT_EACH(GG_ADAM_RUN)
#undef GG_ADAM_RUN
    __shared__ bool last;
    __syncthreads();  // every thread of this block is done reading the step counts
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
#define GG_ADAM_COUNT(k) \
    if (step##k) *step##k += 1;
        GG_MT_EACH(GG_ADAM_COUNT)
#undef GG_ADAM_COUNT
    }
}
#undef GG_ADAM_SLOT
