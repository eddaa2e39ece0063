// kernels/optim.cu: fused optimizer steps, in place, T in {float, double} (and float32 master weights of bfloat16
// and float16 parameters, below). Two launch forms share the element math:
// - per tensor (sgd_update_, adam_update_): one C-contiguous buffer of n elements, the hyperparameters by value;
// - multi-tensor (sgd_, adam_, rmsprop_, adagrad_multi_update_), PyTorch's fused-optimizer design: up to GG_MT_SLOTS
//   tensors per launch, their pointers and sizes passed as kernel arguments (as torch's multi_tensor_apply does), so
//   nothing is copied to the device when a gradient buffer is new (zero_grad() to None) and a captured CUDA graph
//   holds everything the step needs; the hyperparameters are read from a small device array (`hyper`) and Adam's
//   and Adagrad's step counts live on the device and are advanced by the kernel, so a graph replay sees LR schedules
//   and counts. `maximize` (the last hyper entry) negates the gradient first, as torch's maximize=True.
// Launch: block 256, grid min(ceil(total / 256), 4096) (at least 1), total = the elements of all tensors; each thread
// grid-strides over the tensors laid end to end (slot_start), so all threads get the same share whatever the sizes.
// Scalars are rounded to T once, as torch does for its float kernels (opmath = T here); runtime flags (momentum,
// nesterov, ...) are uniform branches: one instantiation per dtype.
// Master weights: the multi-tensor kernels are templates on G, the parameter's (and gradient's) storage type, and
// T = gg::math_t<G>, the type of the update's math, of the state and of p. For G = float or double (T = G) p is the
// parameter itself and q is null and never touched: those instantiations compute what they always did. For
// G = gg::bf16 or gg::f16 p is the parameter's float32 master copy, g is read in G and widened (exactly), and the new
// master is also written to q, the low-precision parameter, rounded to nearest even: an update below half an ulp of
// the parameter is not rounded away but accumulates in the master.
#include "common.cuh"

// Tensors per multi-tensor launch: = optim.py _MT_SLOTS. Each slot is at most 8 (Adam) 8-byte arguments, so 16
// slots stay far below the 4 KB parameter limit; models with more parameters take ceil(n / 16) launches.
#define GG_MT_SLOTS 16
#define GG_MT_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define GG_COUNT(k) \
    if (step##k) *step##k += 1;
#define GG_MT_LIST(X) \
    X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15)

// This thread's first element of a tensor whose elements are [offset, offset + n) of the concatenation: the grid-stride
// loop over the concatenation, restricted to one tensor.
__device__ __forceinline__ long long slot_start(long long offset) {
    const long long stride = (long long)blockDim.x * gridDim.x, tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long r = (tid - offset) % stride;
    return r < 0 ? r + stride : r;
}

// Whether this block is the last of the launch to finish: each block takes a ticket once all its threads are done
// reading the step counts, so the last one can advance them. `ticket` (uint32) is 0 between launches: atomicInc
// wraps it back to 0 at the last block, so a graph replay finds it ready. Call from every thread of the block.
__device__ __forceinline__ bool last_block(unsigned int* ticket) {
    __shared__ bool last;
    __syncthreads();  // every thread of this block is done reading the step counts
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1;
    }
    __syncthreads();
    return last && threadIdx.x == 0;
}

// The element's master value before the update. A parameter element whose value is no longer its master's rounding
// was changed outside the optimizer (p.data.copy_(), a model's load_state_dict, an init): the master restarts from
// it, so a step never writes back a value the user replaced. Checked here, per element and on every step (one
// 2-byte load), rather than from host-side version counters, which miss writes through .data and replays of a
// captured graph whose inputs were changed.
template <typename G, typename T>
__device__ __forceinline__ T master_in(const T* __restrict__ p, const G* __restrict__ q, long long i) {
    if constexpr (sizeof(G) < sizeof(T)) {
        const T m = p[i];
        const G v = q[i];
        return gg::store_math<G>(m).bits == v.bits ? m : gg::load_math(v);
    } else {
        return p[i];
    }
}

// The new value: into p, and rounded into the low-precision parameter q (master weights).
template <typename G, typename T>
__device__ __forceinline__ void master_out(T* __restrict__ p, G* __restrict__ q, long long i, T v) {
    p[i] = v;
    if constexpr (sizeof(G) < sizeof(T)) q[i] = gg::store_math<G>(v);
}

// ---- SGD, torch.optim.SGD semantics ----------------------------------------------------------------------------
// d = -g (maximize) or g; d = d + wd * p (wd != 0); with a momentum buffer b: b = d on the first step, else
// momentum * b + (1 - dampening) * d, d = nesterov ? d + momentum * b : b; then p = p - lr * d.
template <typename T> struct SgdScalars {
    T neg_lr, mom, keep, wd;
    bool decay, nesterov, maximize;
};

template <typename T>
__device__ __forceinline__ SgdScalars<T> sgd_scalars(double lr, double momentum, double dampening, double weight_decay,
                                                     bool nesterov, bool maximize = false) {
    return SgdScalars<T>{T(-lr), T(momentum), T(1.0 - dampening), T(weight_decay), weight_decay != 0.0, nesterov,
                         maximize};
}

// One element; b is null without momentum. Returns the new p.
template <typename T>
__device__ __forceinline__ T sgd_elem(T pi, T d, T* b, bool first, const SgdScalars<T>& s) {
    if (s.maximize) d = -d;
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

// hyper = [lr, momentum, dampening, weight_decay, nesterov (0/1), maximize (0/1)] (double, on the device). Slot k:
// parameter (or master) p, low-precision parameter q (null unless G is bf16 / f16), gradient g, momentum buffer b
// (null: no momentum in this launch), n elements, first (b = d: the tensor's first step, known on the host), and
// unwritten (null, or an int32 flag on the device: nonzero while b was made for a step that GradScaler may have
// skipped and no step has run since, so this step also starts b as d). A step that runs zeroes every flag, in its
// last block (`ticket`, as Adam's counts; null when no slot has a flag): torch makes the buffer at the first step
// that runs, so a skipped first step must leave the next one first. Unused slots have n = 0. Op: optim.SGD.step.
#define GG_SGD_SLOT(k)                                                                                     \
    T* __restrict__ p##k, G* __restrict__ q##k, const G* __restrict__ g##k, T* __restrict__ b##k, long long n##k, \
        long long first##k, int* __restrict__ unwritten##k
#define GG_SGD_WRITTEN(k) \
    if (unwritten##k) *unwritten##k = 0;
template <typename G, typename T = gg::math_t<G>>
__global__ void __launch_bounds__(256)
sgd_multi_update_(const double* __restrict__ hyper, const float* __restrict__ skip, unsigned int* __restrict__ ticket,
                  GG_MT_LIST(GG_SGD_SLOT)) {
    if (skip != nullptr && *skip != 0.0f) return;  // GradScaler found an inf or NaN: the whole step is skipped
    const SgdScalars<T> s = sgd_scalars<T>(hyper[0], hyper[1], hyper[2], hyper[3], hyper[4] != 0.0, hyper[5] != 0.0);
    long long offset = 0;
#define GG_SGD_RUN(k)                                                                                         \
    {                                                                                                         \
        const bool first = first##k != 0 || (unwritten##k != nullptr && *unwritten##k != 0);                  \
        for (long long i = slot_start(offset); i < n##k; i += (long long)blockDim.x * gridDim.x)              \
            master_out(p##k, q##k, i,                                                                          \
                       sgd_elem(master_in(p##k, q##k, i), gg::load_math(g##k[i]), b##k ? b##k + i : nullptr,  \
                                first, s));                                                                   \
        offset += n##k;                                                                                       \
    }
    GG_MT_EACH(GG_SGD_RUN)
#undef GG_SGD_RUN
    if (ticket != nullptr && last_block(ticket)) { GG_MT_EACH(GG_SGD_WRITTEN) }  // uniform: every thread or none
}
#undef GG_SGD_SLOT
#undef GG_SGD_WRITTEN

// ---- Adam / AdamW, torch.optim.Adam(W) semantics ---------------------------------------------------------------
// g = -g (maximize); L2 (decoupled = 0): g = g + wd * p;  AdamW (decoupled = 1): p = p * (1 - lr * wd);
// m = lerp(m, g, 1 - beta1) (torch's two-sided lerp formula); v = v * beta2 + (1 - beta2) * g * g;
// amsgrad: vmax = max(vmax, v), read in place of v below;
// p = p - step_size * (m / (sqrt(v) / sqrt(bc2) + eps)), step_size = lr / bc1, bc_k = 1 - beta_k^step (step >= 1).
template <typename T> struct AdamScalars {
    T w1, b2, w2, eps, wd, decay, neg_step, bc2_sqrt;
    bool use_wd, decoupled, maximize;
};

template <typename T>
__device__ __forceinline__ AdamScalars<T> adam_scalars(double beta1, double beta2, double eps, double weight_decay,
                                                       double decay, bool decoupled, double step_size,
                                                       double bc2_sqrt, bool maximize = false) {
    return AdamScalars<T>{T(1.0 - beta1), T(beta2),    T(1.0 - beta2),      T(eps),     T(weight_decay), T(decay),
                          T(-step_size),  T(bc2_sqrt), weight_decay != 0.0, decoupled, maximize};
}

// vmax: the element's amsgrad maximum, null without amsgrad.
template <typename T>
__device__ __forceinline__ void adam_elem(T& p, T g, T& m, T& v, T* vmax, const AdamScalars<T>& s) {
    T pi = p, mi = m, vi = v;
    if (s.maximize) g = -g;
    if (s.use_wd) {
        if (s.decoupled) pi = pi * s.decay;
        else g = g + s.wd * pi;
    }
    mi = s.w1 < T(0.5) ? mi + s.w1 * (g - mi) : g - (g - mi) * (T(1) - s.w1);
    vi = vi * s.b2 + s.w2 * g * g;
    T vd = vi;
    if (vmax != nullptr) *vmax = vd = (vi != vi || *vmax < vi) ? vi : *vmax;  // NaN propagates, as torch.maximum
    p = pi + s.neg_step * (mi / (gg::sqrt_(vd) / s.bc2_sqrt + s.eps));
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
    GG_GRID_STRIDE_LOOP(i, n) adam_elem(p[i], g[i], m[i], v[i], (T*)nullptr, s);
}

// hyper = [lr, beta1, beta2, eps, weight_decay, maximize] (double, on the device). Slot k: parameter (or master) p,
// low-precision parameter q (null unless G is bf16 / f16), gradient g, moments m and v, the amsgrad maximum vmax (null without amsgrad), its step count (int64, the steps taken so far:
// this step is *step + 1), n elements; unused slots have n = 0 and a null step. Every tensor's count is advanced by
// one, by the last block to finish (last_block). Op: optim.Adam(W).step.
#define GG_ADAM_SLOT(k)                                                                                       \
    T* __restrict__ p##k, G* __restrict__ q##k, const G* __restrict__ g##k, T* __restrict__ m##k,             \
        T* __restrict__ v##k, T* __restrict__ vmax##k, long long* __restrict__ step##k, long long n##k
template <typename G, typename T = gg::math_t<G>>
__global__ void __launch_bounds__(256)
adam_multi_update_(const double* __restrict__ hyper, const float* __restrict__ skip, unsigned int* __restrict__ ticket,
                   long long decoupled, GG_MT_LIST(GG_ADAM_SLOT)) {
    if (skip != nullptr && *skip != 0.0f) return;  // GradScaler found an inf or NaN: the whole step is skipped
    const double lr = hyper[0], beta1 = hyper[1], beta2 = hyper[2];
    const double weight_decay = hyper[4];
    // decay = 1 - lr * wd in double, as the host computes it for adam_update_; step_size and bc2_sqrt per tensor below
    AdamScalars<T> s = adam_scalars<T>(beta1, beta2, hyper[3], weight_decay, 1.0 - lr * weight_decay, decoupled != 0,
                                       0.0, 1.0, hyper[5] != 0.0);
    long long offset = 0;
    // the corrections (two pow) only for tensors this thread has elements of
#define GG_ADAM_RUN(k)                                                                                 \
    {                                                                                                  \
        long long i = slot_start(offset);                                                              \
        if (i < n##k) adam_corrections(s, lr, beta1, beta2, *step##k + 1);                             \
        for (; i < n##k; i += (long long)blockDim.x * gridDim.x) {                                     \
            T p = master_in(p##k, q##k, i);                                                            \
            adam_elem(p, gg::load_math(g##k[i]), m##k[i], v##k[i], vmax##k ? vmax##k + i : nullptr, s); \
            master_out(p##k, q##k, i, p);                                                              \
        }                                                                                              \
        offset += n##k;                                                                                \
    }
    GG_MT_EACH(GG_ADAM_RUN)
#undef GG_ADAM_RUN
    if (last_block(ticket)) { GG_MT_EACH(GG_COUNT) }
}
#undef GG_ADAM_SLOT

// ---- RMSprop, torch.optim.RMSprop semantics -------------------------------------------------------------------------
// g = -g (maximize); g = g + wd * p; sq = sq * alpha + (1 - alpha) * g * g;
// centered: ga = lerp(ga, g, 1 - alpha), avg = sqrt(sq - ga * ga) + eps; else avg = sqrt(sq) + eps;
// momentum buffer b: b = momentum * b + g / avg, p = p - lr * b; else p = p - lr * g / avg.
// hyper = [lr, alpha, eps, weight_decay, momentum, maximize] (double, on the device). Slot k: parameter (or master) p,
// low-precision parameter q (null unless G is bf16 / f16), gradient g, square average sq, gradient average ga (null
// unless centered), momentum buffer b (null without momentum), its step count (int64; torch keeps it, the math never
// reads it), n elements; unused slots have n = 0 and a null step. Counts advance as Adam's (last_block), so a step
// GradScaler skips on the device does not count, as in torch. Op: optim.RMSprop.step.
#define GG_RMSPROP_SLOT(k)                                                                                  \
    T* __restrict__ p##k, G* __restrict__ q##k, const G* __restrict__ g##k, T* __restrict__ sq##k,          \
        T* __restrict__ ga##k, T* __restrict__ b##k, long long* __restrict__ step##k, long long n##k
template <typename G, typename T = gg::math_t<G>>
__global__ void __launch_bounds__(256)
rmsprop_multi_update_(const double* __restrict__ hyper, const float* __restrict__ skip,
                      unsigned int* __restrict__ ticket, GG_MT_LIST(GG_RMSPROP_SLOT)) {
    if (skip != nullptr && *skip != 0.0f) return;  // GradScaler found an inf or NaN: the whole step is skipped
    const T neg_lr = T(-hyper[0]), alpha = T(hyper[1]), w = T(1.0 - hyper[1]), eps = T(hyper[2]), wd = T(hyper[3]);
    const T mom = T(hyper[4]);
    const bool decay = hyper[3] != 0.0, maximize = hyper[5] != 0.0;
    long long offset = 0;
#define GG_RMSPROP_RUN(k)                                                                                      \
    for (long long i = slot_start(offset); i < n##k; i += (long long)blockDim.x * gridDim.x) {                 \
        T g = gg::load_math(g##k[i]);                                                                          \
        const T p = master_in(p##k, q##k, i);                                                                  \
        if (maximize) g = -g;                                                                                  \
        if (decay) g = g + wd * p;                                                                             \
        const T sq = sq##k[i] * alpha + w * g * g;                                                             \
        sq##k[i] = sq;                                                                                         \
        T var = sq;                                                                                            \
        if (ga##k) {                                                                                           \
            const T gi = ga##k[i], ga = w < T(0.5) ? gi + w * (g - gi) : g - (g - gi) * (T(1) - w);            \
            ga##k[i] = ga;                                                                                     \
            var = sq - ga * ga;                                                                                \
        }                                                                                                      \
        const T avg = gg::sqrt_(var) + eps;                                                                    \
        if (b##k) {                                                                                            \
            const T b = b##k[i] * mom + g / avg;                                                               \
            b##k[i] = b;                                                                                       \
            master_out(p##k, q##k, i, p + neg_lr * b);                                                         \
        } else {                                                                                               \
            master_out(p##k, q##k, i, p + neg_lr * (g / avg));                                                 \
        }                                                                                                      \
    }                                                                                                          \
    offset += n##k;
    GG_MT_EACH(GG_RMSPROP_RUN)
#undef GG_RMSPROP_RUN
    if (last_block(ticket)) { GG_MT_EACH(GG_COUNT) }
}
#undef GG_RMSPROP_SLOT

// ---- Adagrad, torch.optim.Adagrad semantics -------------------------------------------------------------------------
// g = -g (maximize); g = g + wd * p; clr = lr / (1 + (step - 1) * lr_decay) (step >= 1, after the increment);
// sum = sum + g * g; p = p - clr * g / (sqrt(sum) + eps).
// hyper = [lr, lr_decay, weight_decay, eps, maximize] (double, on the device). Slot k: parameter (or master) p,
// low-precision parameter q (null unless G is bf16 / f16), gradient g, the sum of squares s, its step count (int64, the steps taken so far), n elements; unused slots have n = 0 and a null
// step. Counts advance as Adam's (last_block). Op: optim.Adagrad.step.
#define GG_ADAGRAD_SLOT(k)                                                                                  \
    T* __restrict__ p##k, G* __restrict__ q##k, const G* __restrict__ g##k, T* __restrict__ s##k,           \
        long long* __restrict__ step##k, long long n##k
template <typename G, typename T = gg::math_t<G>>
__global__ void __launch_bounds__(256)
adagrad_multi_update_(const double* __restrict__ hyper, const float* __restrict__ skip,
                      unsigned int* __restrict__ ticket, GG_MT_LIST(GG_ADAGRAD_SLOT)) {
    if (skip != nullptr && *skip != 0.0f) return;  // GradScaler found an inf or NaN: the whole step is skipped
    const double lr = hyper[0], lr_decay = hyper[1];
    const T wd = T(hyper[2]), eps = T(hyper[3]);
    const bool decay = hyper[2] != 0.0, maximize = hyper[4] != 0.0;
    long long offset = 0;
    T neg_clr = T(0);
    // clr only for tensors this thread has elements of (as Adam's corrections)
#define GG_ADAGRAD_RUN(k)                                                                                      \
    {                                                                                                          \
        long long i = slot_start(offset);                                                                      \
        if (i < n##k) neg_clr = T(-lr / (1.0 + (double)*step##k * lr_decay));                                  \
        for (; i < n##k; i += (long long)blockDim.x * gridDim.x) {                                             \
            T g = gg::load_math(g##k[i]);                                                                      \
            const T p = master_in(p##k, q##k, i);                                                              \
            if (maximize) g = -g;                                                                              \
            if (decay) g = g + wd * p;                                                                         \
            const T s = s##k[i] + g * g;                                                                       \
            s##k[i] = s;                                                                                       \
            master_out(p##k, q##k, i, p + neg_clr * (g / (gg::sqrt_(s) + eps)));                              \
        }                                                                                                      \
        offset += n##k;                                                                                        \
    }
    GG_MT_EACH(GG_ADAGRAD_RUN)
#undef GG_ADAGRAD_RUN
    if (last_block(ticket)) { GG_MT_EACH(GG_COUNT) }
}
#undef GG_ADAGRAD_SLOT

// ---- GradScaler, torch's _amp_foreach_non_finite_check_and_unscale_ -------------------------------------------------
// g = g * (1 / scale) in place (the reciprocal in double, rounded to float, as torch's inv_scale), and found_inf[0] = 1
// when any element of any slot was inf or NaN before the multiply. scale and found_inf: float32 on the device (the
// scaler's), so nothing is read back. Slot k: gradient g, n elements; unused slots have n = 0. Threads that saw no bad
// value write nothing (found_inf is zeroed by the caller); those that did all write 1, a benign race.
// Op: amp.GradScaler.unscale_.
#define GG_UNSCALE_SLOT(k) T* __restrict__ g##k, long long n##k
template <typename T>
__global__ void __launch_bounds__(256)
amp_unscale_multi_(const float* __restrict__ scale, float* __restrict__ found_inf, GG_MT_LIST(GG_UNSCALE_SLOT)) {
    using M = gg::math_t<T>;  // float16 / bfloat16 gradients: checked and unscaled in float, rounded once
    const M inv = M((float)(1.0 / (double)*scale));
    bool bad = false;
    long long offset = 0;
#define GG_UNSCALE_RUN(k)                                                                              \
    for (long long i = slot_start(offset); i < n##k; i += (long long)blockDim.x * gridDim.x) {         \
        const M v = gg::load_math(g##k[i]);                                                            \
        bad |= v != v || fabs(v) == gg::inf<M>();                                                      \
        g##k[i] = gg::store_math<T>(v * inv);                                                          \
    }                                                                                                  \
    offset += n##k;
    GG_MT_EACH(GG_UNSCALE_RUN)
#undef GG_UNSCALE_RUN
    if (bad) *found_inf = 1.0f;
}
#undef GG_UNSCALE_SLOT

// torch's _amp_update_scale_, one thread: after a step whose gradients held an inf or NaN (found_inf != 0) the scale
// backs off (scale * backoff) and the tracker resets; otherwise the tracker counts clean steps and at `interval` the
// scale grows (scale * growth, kept only if finite) and the tracker resets. scale: T (float32 for the scaler), tracker:
// int32, found_inf: float32, all on the device. Launch: grid 1, block 1. Op: amp.GradScaler.update.
template <typename T>
__global__ void amp_update_scale_(T* __restrict__ scale, int* __restrict__ tracker, const float* __restrict__ found_inf,
                                  double growth, double backoff, long long interval) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    if (*found_inf != 0.0f) {
        *scale = T(*scale * backoff);
        *tracker = 0;
        return;
    }
    const long long successful = (long long)*tracker + 1;
    if (successful == interval) {
        const T grown = T(*scale * growth);
        if (grown == grown && fabs(grown) != gg::inf<T>()) *scale = grown;
        *tracker = 0;
    } else {
        *tracker = (int)successful;
    }
}
