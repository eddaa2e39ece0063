// kernels/elementwise.cu: pointwise activations as __device__ functions, used two ways:
// - contiguous arrays: the raw kernel `pointwise<Op>` below, 16-byte vector loads and stores, several vectors per
//   thread, grid-stride (an Op functor per launcher calls the same device functions);
// - strided or broadcast arrays: cupy.ElementwiseKernel(preamble=source(...)), where CuPy does broadcasting, strides
//   and the T in {float, double} generics; the operation strings live in one table, names.py ELEMENTWISE.
// Backward functions take what the forward saved (named per function). Plus one more raw kernel, bias_act_bwd: the
// fused activation backward + bias-gradient column sum.
#include "common.cuh"

// One struct per pointwise op, pw::<op name> (gpugrad/ops/pointwise.py declares them, and generates the launchers,
// the ElementwiseKernel strings and the template instantiations from that table): fwd(x, p0, p1) is y = f(x), and
// bwd(s, g, p0, p1) is g * f'(x) from the value the op saves, s = x or s = y (named per struct). bwd is linear in g,
// so the same function is the VJP (g = gy) and the JVP (g = the tangent). p0, p1 are the op's parameters
// (leaky_relu's slope, softplus's beta and threshold), unused by the others. Their NumPy references are
// backend/reference/'s <op>_fwd / <op>_bwd.

namespace pw {  // (a namespace: struct sin beside the C library's sin() would be hidden by it)

// y = x (the bias-only Linear, copy_, and gpugrad bench's vectorized-copy peak). Not an op of its own.
struct identity {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return x; }
    template <typename T> static __device__ __forceinline__ T bwd(T, T g, T, T) { return g; }
};

// relu: y = max(x, 0) (NaN passes through, as torch); g * f' is a select on the saved y, as torch's
// threshold_backward: subgradient 0 at 0, an inf/NaN g is dropped where y <= 0, a NaN y passes g.
struct relu {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return x < T(0) ? T(0) : x; }
    template <typename T> static __device__ __forceinline__ T bwd(T y, T g, T, T) { return y <= T(0) ? T(0) : g; }
};

// gelu, tanh approximation (torch approximate='tanh'): y = x/2 * (1 + tanh(k (x + a x^3))), k = sqrt(2/pi),
// a = 0.044715; f' = 1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3 a x^2). Saves x.
struct gelu {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) {
        const T k = T(0.7978845608028654), a = T(0.044715);
        return T(0.5) * x * (T(1) + gg::tanh_(k * (x + a * x * x * x)));
    }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) {
        const T k = T(0.7978845608028654), a = T(0.044715);
        const T x2 = x * x, t = gg::tanh_(k * (x + a * x2 * x));
        return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * a * x2));
    }
};

// gelu_erf, exact (torch's default approximate='none'): y = x/2 (1 + erf(x / sqrt 2)) = x Phi(x), in torch's order;
// f' = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi), with Phi(x) = erfc(-x / sqrt 2) / 2 there (the same
// value; NOTE: double erf beside exp spills registers in the unrolled kernels, erfc does not). Saves x.
struct gelu_erf {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) {
        return x * T(0.5) * (T(1) + gg::erf_(x * T(0.7071067811865476)));
    }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) {
        const T cdf = T(0.5) * gg::erfc_(-x * T(0.7071067811865476));
        return g * (cdf + x * (gg::exp_(T(-0.5) * x * x) * T(0.3989422804014327)));
    }
};

// erf: f' = 2 / sqrt(pi) exp(-x^2). Saves x.
struct erf {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return gg::erf_(x); }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) {
        return g * (T(1.1283791670955126) * gg::exp_(-(x * x)));
    }
};

// sigmoid: y = 1 / (1 + exp(-x)) (exp overflow gives y = 0, no NaN); f' = y (1 - y). Saves y.
struct sigmoid {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return T(1) / (T(1) + gg::exp_(-x)); }
    template <typename T> static __device__ __forceinline__ T bwd(T y, T g, T, T) { return g * y * (T(1) - y); }
};

// tanh: f' = 1 - y^2. Saves y.
struct tanh {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return gg::tanh_(x); }
    template <typename T> static __device__ __forceinline__ T bwd(T y, T g, T, T) { return g * (T(1) - y * y); }
};

// softplus(beta, threshold), as torch: y = x where beta x > threshold (log1p(exp(beta x)) / beta would round to x
// there, or overflow), else log1p(exp(beta x)) / beta; f' = 1 there, else z / (z + 1) with z = exp(beta x). Saves x.
struct softplus {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T beta, T threshold) {
        return x * beta > threshold ? x : gg::log1p_(gg::exp_(x * beta)) / beta;
    }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T beta, T threshold) {
        const T z = gg::exp_(x * beta);
        return x * beta > threshold ? g : g * z / (z + T(1));
    }
};

// silu (swish): y = x sigmoid(x); f' = s (1 + x (1 - s)), s = sigmoid(x). Saves x.
struct silu {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return x / (T(1) + gg::exp_(-x)); }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) {
        const T s = T(1) / (T(1) + gg::exp_(-x));
        return g * s * (T(1) + x * (T(1) - s));
    }
};

// leaky_relu(negative_slope): y = x > 0 ? x : slope x; f' = 1 or slope (slope at 0, as torch). Saves x.
struct leaky_relu {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T slope, T) { return x > T(0) ? x : x * slope; }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T slope, T) {
        return x > T(0) ? g : g * slope;
    }
};

// elu(alpha): y = x > 0 ? x : alpha (e^x - 1) (expm1: exact near 0); f' = 1 or alpha e^x (alpha e^x at 0, as
// torch). Saves x.
struct elu {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T alpha, T) {
        return x > T(0) ? x : alpha * gg::expm1_(x);
    }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T alpha, T) {
        return x <= T(0) ? g * alpha * gg::exp_(x) : g;  // torch's branches: NaN takes g
    }
};

// sin, cos: f' = cos x, -sin x. Save x.
struct sin {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return gg::sin_(x); }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) { return g * gg::cos_(x); }
};
struct cos {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return gg::cos_(x); }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) { return -g * gg::sin_(x); }
};

// log1p: y = log(1 + x), exact near 0; f' = 1 / (1 + x). Saves x.
struct log1p {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return gg::log1p_(x); }
    template <typename T> static __device__ __forceinline__ T bwd(T x, T g, T, T) { return g / (T(1) + x); }
};

// expm1: y = e^x - 1, exact near 0; f' = e^x = y + 1. Saves y.
struct expm1 {
    template <typename T> static __device__ __forceinline__ T fwd(T x, T, T) { return gg::expm1_(x); }
    template <typename T> static __device__ __forceinline__ T bwd(T y, T g, T, T) { return g * (y + T(1)); }
};

}  // namespace pw

// bias_act backward, fused: gz = act'(saved) * gy (saved = z = x + b for an act that saves x, y otherwise) and the bias gradient
// partial[chunk, c] = sum of gz over this chunk's rows, in one pass (reads saved, gy; writes gz once).
// T in {float, double}; saved/gy/gz C-contiguous (rows, cols), b broadcast over the last axis.
// Launch: block (32, 8), grid (ceil(cols / 32), chunks), rows [chunk * rows_per_chunk, +rows_per_chunk);
// chunks > 1 are added by sum_rows. Op: bias_act (Linear + activation) backward.
// T float, double, gg::bf16 or gg::f16: the low types compute in float (M), store gz rounded and keep the column
// sums of the float values in float (partial is M), so the bias gradient is rounded once, after sum_rows' last pass.
template <typename T, class ACT>
__global__ void __launch_bounds__(256)
bias_act_bwd(const T* __restrict__ saved, const T* __restrict__ gy, T* __restrict__ gz,
             gg::math_t<T>* __restrict__ partial, long long rows, long long cols, long long rows_per_chunk, double p0,
             double p1) {
    using M = gg::math_t<T>;
    const auto [c, r0, r1] = gg::column_chunk(rows, rows_per_chunk);
    M acc = M(0);
    if (c < cols) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += gg::COL_TILE_Y) {
            const long long i = r * cols + c;
            const M g = ACT::bwd(gg::load_math(saved[i]), gg::load_math(gy[i]), M(p0), M(p1));
            gz[i] = gg::store_math<T>(g);
            acc += g;  // unrounded, as the float32 reference sums its float32 gz
        }
    }
    gg::column_tile_store(acc, partial + (long long)blockIdx.y * cols, c, cols);
}

// ---- pointwise<Op>: every contiguous elementwise launch ----------------------------------------------------------
// An Op names the element types of the kernel's four array slots (inputs a, b; outputs y, z), how many it uses,
// whether b is a bias broadcast over the last axis (b[i % cols]) and whether y is also read (in place); its
// static apply() is the scalar formula, calling the device functions above (as the ELEMENTWISE strings do).
// Unused slots get any array of type T (the launcher passes a or y again) and are never touched.
// kVecs, the 16-byte vectors (of Y) a thread handles per grid-stride step, gives each thread 64 bytes of loads in
// flight whatever the op reads per element: 4 for a float activation, 2 for a backward, 1 for float dropout with
// double randoms. More would only cost registers: 4 resident blocks per SM x 256 threads x 64 B is ~8.6 MB in
// flight on 132 SMs, past the ~3.5 MB that H200's bandwidth x latency needs. (= _launch_pointwise)
template <typename A_, typename B_, typename Y_, typename Z_, int INPUTS, int OUTPUTS, bool BIAS = false,
          bool IN_PLACE = false>
struct PointwiseOp {
    using A = A_;
    using B = B_;
    using Y = Y_;
    using Z = Z_;
    static constexpr int kInputs = INPUTS, kOutputs = OUTPUTS;
    static constexpr bool kBias = BIAS, kInPlace = IN_PLACE;
    static constexpr int kLoadBytes = sizeof(A) + (INPUTS > 1 ? sizeof(B) : 0) + (IN_PLACE ? sizeof(Y) : 0);
    static constexpr int kVecs0 = 64 / (16 / sizeof(Y) * kLoadBytes);
    static constexpr int kVecs = kVecs0 < 1 ? 1 : kVecs0 > 4 ? 4 : kVecs0;
};

// y = ACT::fwd(x); p0, p1 the op's parameters. T float, double or gg::bf16 (stored bfloat16, computed in float:
// M = gg::math_t<T>), here and in ActBwd and BiasActFwd.
template <typename T, class ACT> struct ActFwd : PointwiseOp<T, T, T, T, 1, 1> {
    using M = gg::math_t<T>;
    static __device__ __forceinline__ void apply(const T& x, const T&, T& y, T&, double p0, double p1) {
        y = gg::store_math<T>(ACT::template fwd<M>(gg::load_math(x), M(p0), M(p1)));
    }
};

// g * f' = ACT::bwd(saved, g): the VJP (g = gy) and the JVP (g = a tangent).
template <typename T, class ACT> struct ActBwd : PointwiseOp<T, T, T, T, 2, 1> {
    using M = gg::math_t<T>;
    static __device__ __forceinline__ void apply(const T& saved, const T& g, T& gx, T&, double p0, double p1) {
        gx = gg::store_math<T>(ACT::template bwd<M>(gg::load_math(saved), gg::load_math(g), M(p0), M(p1)));
    }
};

// z = x + b (b broadcast over the last axis), y = act(z); z is written only when the act's backward reads its input
// (SAVES_X), for everything else the backward reads y.
template <typename T, class ACT, bool SAVES_X>
struct BiasActFwd : PointwiseOp<T, T, T, T, 2, SAVES_X ? 2 : 1, true> {
    using M = gg::math_t<T>;
    static __device__ __forceinline__ void apply(const T& x, const T& b, T& y, T& z, double p0, double p1) {
        const M zm = gg::load_math(x) + gg::load_math(b);  // bfloat16: z and y both from the float sum
        z = gg::store_math<T>(zm);
        y = gg::store_math<T>(ACT::template fwd<M>(zm, M(p0), M(p1)));
    }
};

// mask = u >= p (p rounded to u's type), y = mask ? x * scale : 0; u may be float64 beside float32 x.
template <typename T, typename U> struct DropoutFwd : PointwiseOp<T, U, T, bool, 2, 2> {
    static __device__ __forceinline__ void apply(const T& x, const U& u, T& y, bool& mask, double p, double scale) {
        mask = u >= U(p);
        y = mask ? x * T(scale) : T(0);
    }
};

// gx = mask ? gy * scale : 0.
template <typename T> struct DropoutBwd : PointwiseOp<T, bool, T, T, 2, 1> {
    static __device__ __forceinline__ void apply(const T& gy, const bool& mask, T& gx, T&, double scale, double) {
        gx = mask ? gy * T(scale) : T(0);
    }
};

// acc += g, in place (y is acc); float16 / bfloat16 add in float and round once, as the float32 reference.
template <typename T> struct Accumulate : PointwiseOp<T, T, T, T, 1, 1, false, true> {
    static __device__ __forceinline__ void apply(const T& g, const T&, T& acc, T&, double, double) {
        acc = gg::store_math<T>(gg::load_math(acc) + gg::load_math(g));
    }
};

// Launch shape, shared with elementwise.py (_EW_BLOCK, _EW_MAX_GRID): 256-thread blocks; __launch_bounds__(256, 4)
// caps registers at 64, so the 4 blocks per SM of the launchers' largest grid are all resident at once.
enum { GG_EW_BLOCK = 256, GG_EW_MIN_BLOCKS = 4 };

// pointwise: for every i < n, Op::apply(a[i], b[i or i % cols], y[i], z[i], s0, s1). All arrays C-contiguous with
// n elements (b: cols < 2^31 when Op::kBias). Vector path when every used pointer is aligned to its Pack (and, for
// a bias, cols is a multiple of the vector width, so a vector never straddles two rows): thread t of block k
// handles the vectors k * U * B + u * B + t (u < U = Op::kVecs; coalesced per u) of each grid-stride step, then the
// n % N tail elements one each; otherwise every element on the scalar path (grid-stride). T float/double, and
// gg::bf16 for the activations and bias + activation (the Op types above). Launch: block GG_EW_BLOCK exactly (its
// offsets are compile-time constants), grid from elementwise.py _pointwise_grid. Ops: the activations, bias_act_fwd,
// dropout, accumulate_, copy_.
template <class Op>
__global__ void __launch_bounds__(GG_EW_BLOCK, GG_EW_MIN_BLOCKS)
pointwise(const typename Op::A* __restrict__ a, const typename Op::B* __restrict__ b, typename Op::Y* __restrict__ y,
          typename Op::Z* __restrict__ z, long long n, long long cols, double s0, double s1) {
    using A = typename Op::A;
    using B = typename Op::B;
    using Y = typename Op::Y;
    using Z = typename Op::Z;
    constexpr int N = gg::Vec<Y>::N, U = Op::kVecs, THREADS = GG_EW_BLOCK;
    const long long threads = (long long)gridDim.x * THREADS;
    const bool vec = gg::pack_aligned<N>(a) && gg::pack_aligned<N>(y) &&
                     (Op::kInputs < 2 || (gg::pack_aligned<N>(b) && (!Op::kBias || cols % N == 0))) &&
                     (Op::kOutputs < 2 || gg::pack_aligned<N>(z));
    long long done = 0;  // elements the vector loop covered
    if (vec) {
        const long long nvec = n / N, stride = threads * U;  // vectors per grid-stride step
        const long long first = (long long)blockIdx.x * THREADS * U + threadIdx.x;
        // bias: the column of each slot's first element, advanced by dcol per step (one % per thread, not per vector)
        unsigned col[U], dcol = 0;
        if constexpr (Op::kBias) {
            dcol = (unsigned)(stride * N % cols);
#pragma unroll
            for (int u = 0; u < U; ++u) col[u] = (unsigned)((first + u * THREADS) * N % cols);
        }
        for (long long v0 = first; v0 < nvec; v0 += stride) {
            A av[U][N];
            B bv[U][N];
            Y yv[U][N];
            Z zv[U][N];
#pragma unroll
            for (int u = 0; u < U; ++u) {  // all loads first: U independent 16-byte loads per array in flight
                const long long v = v0 + u * THREADS;
                if (v < nvec) {
                    gg::load_pack<N>(av[u], a + v * N);
                    if constexpr (Op::kBias) gg::load_pack<N>(bv[u], b + col[u]);
                    else if constexpr (Op::kInputs > 1) gg::load_pack<N>(bv[u], b + v * N);
                    if constexpr (Op::kInPlace) gg::load_pack<N>(yv[u], y + v * N);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long v = v0 + u * THREADS;
                if (v < nvec) {
#pragma unroll
                    for (int j = 0; j < N; ++j) Op::apply(av[u][j], bv[u][j], yv[u][j], zv[u][j], s0, s1);
                    gg::store_pack<N>(y + v * N, yv[u]);
                    if constexpr (Op::kOutputs > 1) gg::store_pack<N>(z + v * N, zv[u]);
                }
                if constexpr (Op::kBias) {
                    col[u] += dcol;  // < 2 * cols < 2^32
                    col[u] -= col[u] >= cols ? (unsigned)cols : 0u;
                }
            }
        }
        done = nvec * N;
    }
    // The tail (fewer than N elements) or, on the scalar path, everything.
    const long long i0 = done + (long long)blockIdx.x * THREADS + threadIdx.x;
    long long c = 0, dc = 0;
    if constexpr (Op::kBias) {
        c = i0 % cols;
        dc = threads % cols;
    }
    for (long long i = i0; i < n; i += threads) {
        A av = a[i];
        B bv;
        Y yv;
        Z zv;
        if constexpr (Op::kBias) bv = b[c];
        else if constexpr (Op::kInputs > 1) bv = b[i];
        if constexpr (Op::kInPlace) yv = y[i];
        Op::apply(av, bv, yv, zv, s0, s1);
        y[i] = yv;
        if constexpr (Op::kOutputs > 1) z[i] = zv;
        if constexpr (Op::kBias) {
            c += dc;
            c -= c >= cols ? cols : 0;
        }
    }
}
