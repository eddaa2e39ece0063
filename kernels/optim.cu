// kernels/optim.cu: fused optimizer steps, in place over flat C-contiguous buffers of n elements (any shape, same
// for p, g and the state), T in {float, double}. Launch: grid-stride, block 256, grid min(ceil(n / 256), 4096).
// Scalars arrive as double and are rounded to T once, as torch does for its float kernels (opmath = T here).
// Runtime flags (momentum != 0, nesterov, ...) are uniform branches: one instantiation per dtype.
#include "common.cuh"

// SGD, torch.optim.SGD semantics (maximize=False): d = g + wd * p; with momentum: buf = d on the first step, else
// buf = momentum * buf + (1 - dampening) * d; d = nesterov ? d + momentum * buf : buf; then p = p - lr * d.
// buf is not read or written when momentum == 0 (the launcher passes p in its place). Op: optim.SGD.step.
template <typename T>
__global__ void __launch_bounds__(256)
sgd_update_(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, long long n, double lr, double momentum,
            double dampening, double weight_decay, long long nesterov, long long first_step) {
    const T neg_lr = T(-lr), mom = T(momentum), keep = T(1.0 - dampening), wd = T(weight_decay);
    GG_GRID_STRIDE_LOOP(i, n) {
        const T pi = p[i];
        T d = g[i];
        if (weight_decay != 0.0) d = d + wd * pi;
        if (momentum != 0.0) {
            const T b = first_step ? d : mom * buf[i] + keep * d;
            buf[i] = b;
            d = nesterov ? d + mom * b : b;
        }
        p[i] = pi + neg_lr * d;
    }
}

// Adam / AdamW, torch.optim.Adam(W) semantics (amsgrad=False, maximize=False), step already incremented:
// L2 (decoupled = 0): g = g + wd * p;  AdamW (decoupled = 1): p = p * (1 - lr * wd);
// m = lerp(m, g, 1 - beta1) (torch's two-sided lerp formula); v = v * beta2 + (1 - beta2) * g * g;
// p = p - step_size * (m / (sqrt(v) / sqrt(bc2) + eps)), step_size = lr / bc1, bc_k = 1 - beta_k^step (host side).
// Op: optim.Adam.step / optim.AdamW.step.
template <typename T>
__global__ void __launch_bounds__(256)
adam_update_(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, long long n,
             double beta1, double beta2, double eps, double weight_decay, double decay, long long decoupled,
             double step_size, double bc2_sqrt) {
    const T w1 = T(1.0 - beta1), b2 = T(beta2), w2 = T(1.0 - beta2), e = T(eps), wd = T(weight_decay);
    const T dec = T(decay), neg_step = T(-step_size), bc2s = T(bc2_sqrt);
    GG_GRID_STRIDE_LOOP(i, n) {
        T pi = p[i], gi = g[i], mi = m[i], vi = v[i];
        if (weight_decay != 0.0) {
            if (decoupled) pi = pi * dec;
            else gi = gi + wd * pi;
        }
        mi = w1 < T(0.5) ? mi + w1 * (gi - mi) : gi - (gi - mi) * (T(1) - w1);
        vi = vi * b2 + w2 * gi * gi;
        p[i] = pi + neg_step * (mi / (gg::sqrt_(vi) / bc2s + e));
        m[i] = mi;
        v[i] = vi;
    }
}
