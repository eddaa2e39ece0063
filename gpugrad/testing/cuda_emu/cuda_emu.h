// cuda_emu.h: the CUDA built-ins for running kernels/*.cu unchanged on the CPU. g++ force-includes it
// (`-include cuda_emu.h -x c++ -std=c++17`) before the kernel source; the scheduler, fibers and launch loop live
// in runtime.cpp, built once into a shared library, so each kernel module compiles in a fraction of a second.
//
// Model: every CUDA thread is a fiber; all fibers of a block run on one OS thread, switching only at
// __syncthreads and warp-level rendezvous. Hence `__shared__` can simply be `static thread_local`: the fibers of a
// block share their OS thread's copy, and blocks on other OS threads get their own. Per-fiber values (threadIdx)
// and per-block values (blockIdx, the dynamic shared buffer) are __thread globals that the scheduler rewrites on
// each switch; fibers never migrate between OS threads, so a cached TLS address stays valid across switches.
#pragma once
#define GG_EMULATION 1

#include <math.h>  // the C++ <math.h> also puts the float overloads of exp, log, ... in the global namespace
#include <assert.h>  // included first so that a later #include cannot undo our assert below
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include <utility>

// ---- qualifiers ---------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __shared__ static thread_local
// __restrict__ is already a g++ keyword.

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#define GG_EMU_VEC(T, N2, N4, A2, A4)                                                                      \
    struct __attribute__((aligned(A2))) N2 { T x, y; };                                                    \
    struct __attribute__((aligned(A4))) N4 { T x, y, z, w; };                                              \
    inline N2 make_##N2(T x, T y) { return N2{x, y}; }                                                     \
    inline N4 make_##N4(T x, T y, T z, T w) { return N4{x, y, z, w}; }
GG_EMU_VEC(float, float2, float4, 8, 16)
GG_EMU_VEC(double, double2, double4, 16, 16)
GG_EMU_VEC(int, int2, int4, 8, 16)
GG_EMU_VEC(unsigned int, uint2, uint4, 8, 16)
#undef GG_EMU_VEC

// ---- runtime interface (runtime.cpp) ------------------------------------------------------------------------
namespace gg_emu {
// initial-exec: a plain %fs-relative load instead of a __tls_get_addr call per threadIdx read. These few bytes
// fit the static TLS that glibc reserves for dlopen'ed libraries (the __shared__ arrays keep the default model).
#define GG_EMU_TLS __thread __attribute__((tls_model("initial-exec")))
extern GG_EMU_TLS uint3 tls_thread_idx, tls_block_idx;
extern GG_EMU_TLS dim3 tls_block_dim, tls_grid_dim;
extern GG_EMU_TLS unsigned char* tls_dynamic_smem;

enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, VOTE_ALL, VOTE_ANY, VOTE_BALLOT, SYNCWARP };
enum BarrierOp { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };
int barrier(int op, int pred, const char* file, int line);
uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);
unsigned active_mask();
[[noreturn]] void fail(const char* what);  // ends the calling fiber and fails the launch with `what`

typedef void (*Thunk)(void* ctx);
// cfg: grid xyz, block xyz, shared_mem, schedule (0-5: forward, reverse, random, then the same one warp at a
// time: warp-serial, warp-reverse, warp-random), seed, worker threads. Returns 0, or 1 with `err` filled.
int run_grid(const int64_t* cfg, Thunk thunk, void* ctx, const char* kernel, char* err, int errlen);

inline unsigned char* dynamic_smem() { return tls_dynamic_smem; }
}  // namespace gg_emu

#define threadIdx (static_cast<const ::uint3&>(::gg_emu::tls_thread_idx))
#define blockIdx (static_cast<const ::uint3&>(::gg_emu::tls_block_idx))
#define blockDim (static_cast<const ::dim3&>(::gg_emu::tls_block_dim))
#define gridDim (static_cast<const ::dim3&>(::gg_emu::tls_grid_dim))
static constexpr int warpSize = 32;
#define GG_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::gg_emu::dynamic_smem())

// Call sites (the default arguments are evaluated where the call is written) let the scheduler tell two
// different barriers apart (divergent-barrier check) and name them in errors.
#define GG_EMU_SITE const char* file_ = __builtin_FILE(), int line_ = __builtin_LINE()
inline void __syncthreads(GG_EMU_SITE) { ::gg_emu::barrier(::gg_emu::BAR_SYNC, 0, file_, line_); }
inline int __syncthreads_count(int p, GG_EMU_SITE) { return ::gg_emu::barrier(::gg_emu::BAR_COUNT, !!p, file_, line_); }
inline int __syncthreads_and(int p, GG_EMU_SITE) { return ::gg_emu::barrier(::gg_emu::BAR_AND, !!p, file_, line_); }
inline int __syncthreads_or(int p, GG_EMU_SITE) { return ::gg_emu::barrier(::gg_emu::BAR_OR, !!p, file_, line_); }

// ---- warp primitives: every lane in `mask` deposits a 64-bit payload; the runtime returns what it receives --
namespace gg_emu {
template <class T> inline T shfl(int op, unsigned mask, T v, int arg, int width, const char* f, int l) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of an unsupported type");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    b = warp_op(op, mask, b, arg, width, f, l);
    memcpy(&v, &b, sizeof(T));
    return v;
}
}  // namespace gg_emu
template <class T> inline T __shfl_sync(unsigned m, T v, int src, int width = 32, GG_EMU_SITE) { return ::gg_emu::shfl(::gg_emu::SHFL_IDX, m, v, src, width, file_, line_); }
template <class T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int width = 32, GG_EMU_SITE) { return ::gg_emu::shfl(::gg_emu::SHFL_UP, m, v, (int)d, width, file_, line_); }
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int width = 32, GG_EMU_SITE) { return ::gg_emu::shfl(::gg_emu::SHFL_DOWN, m, v, (int)d, width, file_, line_); }
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int lane_mask, int width = 32, GG_EMU_SITE) { return ::gg_emu::shfl(::gg_emu::SHFL_XOR, m, v, lane_mask, width, file_, line_); }
inline int __all_sync(unsigned m, int p, GG_EMU_SITE) { return (int)::gg_emu::warp_op(::gg_emu::VOTE_ALL, m, p != 0, 0, 32, file_, line_); }
inline int __any_sync(unsigned m, int p, GG_EMU_SITE) { return (int)::gg_emu::warp_op(::gg_emu::VOTE_ANY, m, p != 0, 0, 32, file_, line_); }
inline unsigned __ballot_sync(unsigned m, int p, GG_EMU_SITE) { return (unsigned)::gg_emu::warp_op(::gg_emu::VOTE_BALLOT, m, p != 0, 0, 32, file_, line_); }
inline void __syncwarp(unsigned m = 0xffffffffu, GG_EMU_SITE) { ::gg_emu::warp_op(::gg_emu::SYNCWARP, m, 0, 0, 32, file_, line_); }
inline unsigned __activemask() { return ::gg_emu::active_mask(); }
inline void __trap() { ::gg_emu::fail("__trap() called"); }
// A failed device assert fails the launch (EmulationError) instead of aborting the Python process.
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define GG_EMU_STR2(x) #x
#define GG_EMU_STR(x) GG_EMU_STR2(x)
#define assert(e) ((e) ? (void)0 : ::gg_emu::fail("assert(" #e ") failed at " __FILE__ ":" GG_EMU_STR(__LINE__)))
#endif
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#undef GG_EMU_SITE

// ---- atomics: blocks run on several OS threads at once, so these must be real atomics (relaxed, as in CUDA).
// Exactly CUDA's overload set, so a kernel that compiles here also compiles under NVRTC.
namespace gg_emu {
template <class T, class F> inline T atomic_rmw(T* p, F f) {  // CAS loop for what the ISA has no fetch-op for
    T old, next;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do { next = f(old); } while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
}  // namespace gg_emu
#define GG_EMU_ATOMIC_INT(T)                                                                                 \
    inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }                     \
    inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }                   \
    inline T atomicMin(T* p, T v) { return ::gg_emu::atomic_rmw(p, [v](T o) { return v < o ? v : o; }); }    \
    inline T atomicMax(T* p, T v) { return ::gg_emu::atomic_rmw(p, [v](T o) { return v > o ? v : o; }); }    \
    inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }                     \
    inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }                       \
    inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }                     \
    inline T atomicCAS(T* p, T cmp, T v) {                                                                   \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                  \
        return cmp;                                                                                          \
    }
GG_EMU_ATOMIC_INT(int)
GG_EMU_ATOMIC_INT(unsigned int)
GG_EMU_ATOMIC_INT(unsigned long long)
#undef GG_EMU_ATOMIC_INT
inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned int atomicSub(unsigned int* p, unsigned int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline long long atomicMin(long long* p, long long v) { return ::gg_emu::atomic_rmw(p, [v](long long o) { return v < o ? v : o; }); }
inline long long atomicMax(long long* p, long long v) { return ::gg_emu::atomic_rmw(p, [v](long long o) { return v > o ? v : o; }); }
inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
inline unsigned int atomicInc(unsigned int* p, unsigned int v) { return ::gg_emu::atomic_rmw(p, [v](unsigned o) { return o >= v ? 0u : o + 1; }); }
inline unsigned int atomicDec(unsigned int* p, unsigned int v) { return ::gg_emu::atomic_rmw(p, [v](unsigned o) { return (o == 0 || o > v) ? v : o - 1; }); }
inline float atomicAdd(float* p, float v) { return ::gg_emu::atomic_rmw(p, [v](float o) { return o + v; }); }
inline double atomicAdd(double* p, double v) { return ::gg_emu::atomic_rmw(p, [v](double o) { return o + v; }); }
inline float atomicExch(float* p, float v) { float o; __atomic_exchange(p, &v, &o, __ATOMIC_RELAXED); return o; }

// ---- math: the C library supplies expf, logf, tanhf, erff, fmaxf, ...; <math.h> the float/double overloads.
// Fast-math intrinsics map to the precise functions: results are at least as accurate as on the device.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned int __float_as_uint(float x) { unsigned int i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned int i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline float __int2float_rn(int i) { return (float)i; }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
template <class T> inline T __ldg(const T* p) { return *p; }
// CUDA's integer/float max and min: one template following the usual arithmetic conversions, as its overloads do.
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> max(A a, B b) { return a > b ? a : b; }
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }
#ifndef CUDART_INF_F
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN_F __builtin_nanf("")
#define CUDART_NAN __builtin_nan("")
#endif

// ---- launch: unpack the Python-side argument slots into the kernel's own parameter types -----------------
namespace gg_emu {
// One argument as Python packed it: `slot` holds a pointer, an int64 or a double; `tag` says which and what
// the Python value was (see _pack_args in __init__.py).
enum ArgKind { ARG_PTR = 1, ARG_INT = 2, ARG_FLOAT = 3, ARG_NULL = 4 };
// elem for arrays: 'f', 'i' (ints, bool), 'c', 'V' (other); big: an integer >= 2^63 (its slot holds the bits)
struct ArgTag { int kind, size, readonly, elem, big; };
inline ArgTag decode(int t) { return ArgTag{t & 15, (t >> 8) & 255, (t >> 4) & 1, (t >> 16) & 255, (t >> 5) & 1}; }

template <class T> inline T convert(void* slot) {
    if constexpr (std::is_pointer<T>::value) return reinterpret_cast<T>(*static_cast<void**>(slot));
    else if constexpr (std::is_floating_point<T>::value) return static_cast<T>(*static_cast<double*>(slot));
    else if constexpr (std::is_integral<T>::value || std::is_enum<T>::value)
        return static_cast<T>(*static_cast<int64_t*>(slot));
    else return T{};  // rejected by check() before any fiber runs
}

// CuPy hands the driver the bytes of each argument as Python gave them, and the kernel reads sizeof(P) of them.
// A mismatch is not an error there but a silent wrong value, so it is one here: reject exactly the arguments
// whose value under CuPy would differ from the intended one (float for a float param, -1 as int32 for int64...).
template <class T> inline const char* check(void* slot, ArgTag t) {
    if constexpr (std::is_pointer<T>::value) {
        using E = std::remove_pointer_t<T>;
        if (t.kind == ARG_NULL) return nullptr;
        if (t.kind != ARG_PTR) return "a scalar passed for a pointer parameter";
        if (!std::is_const<E>::value && t.readonly) return "read-only array passed for a non-const pointer";
        if constexpr (std::is_arithmetic<E>::value) {
            if (t.elem != (std::is_floating_point<E>::value ? 'f' : 'i') || t.size != (int)sizeof(E))
                return "array dtype does not match the pointer's element type";
        }
        return nullptr;
    } else if constexpr (std::is_floating_point<T>::value) {
        if (t.kind != ARG_FLOAT) return t.kind == ARG_INT ? "integer passed for a floating parameter (CuPy would pass its bytes)" : "array passed for a scalar parameter";
        if (t.size != (int)sizeof(T)) return sizeof(T) == 4 ? "8-byte float passed for a float parameter: under CuPy a Python float is a double; pass numpy.float32" : "4-byte float passed for a double parameter";
        return nullptr;
    } else if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
        if (t.kind != ARG_INT) return t.kind == ARG_FLOAT ? "float passed for an integer parameter" : "array passed for a scalar parameter";
        const int64_t v = *static_cast<int64_t*>(slot);
        if (t.big) return std::is_unsigned<T>::value && sizeof(T) == 8 ? nullptr : "integer >= 2^63 passed for a parameter that cannot hold it";
        unsigned char bytes[16] = {0};  // the argument's own bytes, zero-padded as CuPy's scalar storage is
        memcpy(bytes, &v, (size_t)t.size < 8 ? (size_t)t.size : 8);
        if constexpr (std::is_same<T, bool>::value) {
            return (v != 0) == (bytes[0] != 0) ? nullptr : "value does not fit the bool parameter's byte";
        } else {
            using I = typename std::conditional_t<std::is_enum<T>::value, std::underlying_type<T>, std::common_type<T>>::type;
            I seen;
            memcpy(&seen, bytes, sizeof(I));
            if ((int64_t)seen == v || (int64_t)(std::make_signed_t<I>)seen == v) return nullptr;  // -1 for unsigned: ok
            return "integer value does not survive CuPy's byte-level passing to this parameter type";
        }
    } else {
        return "unsupported parameter type (only pointers and arithmetic scalars)";
    }
}

template <class... P> struct Launch {
    void (*kernel)(P...);
    void** slots;
    template <size_t... I> void call(std::index_sequence<I...>) { kernel(convert<P>(slots[I])...); }
    static void thunk(void* self) { static_cast<Launch*>(self)->call(std::index_sequence_for<P...>{}); }
};

template <class... P>
int launch(void (*kernel)(P...), const char* name, const int64_t* cfg, void** slots, const int* tags, int nargs,
           char* err, int errlen) {
    if (nargs != (int)sizeof...(P)) {
        snprintf(err, errlen, "%s: takes %d arguments, got %d", name, (int)sizeof...(P), nargs);
        return 1;
    }
    int i = 0;
    const char* why = nullptr;
    // Left-to-right fold: stop at the first bad argument and report its position.
    ((why == nullptr ? (why = check<P>(slots[i], decode(tags[i])), ++i) : 0), ...);
    if (why) {
        snprintf(err, errlen, "%s: argument %d: %s", name, i - 1, why);
        return 2;
    }
    Launch<P...> l{kernel, slots};
    return run_grid(cfg, &Launch<P...>::thunk, &l, name, err, errlen);
}
}  // namespace gg_emu
