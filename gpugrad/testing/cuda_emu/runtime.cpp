// runtime.cpp: fibers, the per-block scheduler, barriers, warp rendezvous and the block loop over OS threads.
// Built once per (this file, cuda_emu.h, compiler) into libggemu-<hash>.so, which every kernel module links.
//
// Scheduling: a block's fibers run cooperatively on one OS thread. A pass resumes every runnable fiber once, in
// the schedule's order, and each runs until it blocks (barrier, or a warp op whose lanes have not all arrived).
// When a pass finds nothing to run the block is quiescent: either every live fiber waits at one barrier (release
// it and start the next phase) or the kernel is wrong (divergent barrier, divergent warp op, deadlock) and the
// launch fails with a message instead of hanging. A thread runs alone between its yield points, so a missing
// __syncthreads shows up as a wrong result in at least one of the forward/reverse orders.
//
// Schedules (cfg[7]): 0 forward, 1 reverse, 2 random (seeded, redrawn each phase) order the block's threads. In
// those a warp op is a rendezvous that each pass completes for every warp, so all warps advance in lock-step and
// none gets more than about one warp op ahead of another. On a GPU warps are independent: warp 7 can finish one
// block reduction, start the next and write its partial into a reused __shared__ slot before warp 0 has read
// the first reduction's. 3 warp-serial, 4 warp-reverse, 5 warp-random run one warp at a time instead: in each
// barrier phase, warps in ascending, descending or shuffled order (lanes likewise within a warp), each warp run
// until all its lanes wait at a block barrier or have finished before the next starts. Lanes of the running warp
// keep the round-robin above, so their warp ops still rendezvous. warp-reverse is the one that catches reuse of
// a shared slot without a barrier between: warp 0, which usually writes the block's result, reads last.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_emu.h"

namespace gg_emu {
GG_EMU_TLS uint3 tls_thread_idx, tls_block_idx;
GG_EMU_TLS dim3 tls_block_dim, tls_grid_dim;
GG_EMU_TLS unsigned char* tls_dynamic_smem;

// ---- context switch -----------------------------------------------------------------------------------------
// Hand-rolled on x86-64: ucontext's swapcontext makes a sigprocmask syscall per switch, ~20x the cost of saving
// six callee-saved registers, and a 1024-thread block switches ~2000 times per warp-shuffle round.
#if defined(__x86_64__) && !defined(GG_EMU_UCONTEXT)
extern "C" void gg_emu_switch(void** save_sp, void* load_sp);
extern "C" void gg_emu_trampoline();
asm(R"(
    .text
    .globl gg_emu_switch
    .hidden gg_emu_switch
    .type gg_emu_switch, @function
gg_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size gg_emu_switch, .-gg_emu_switch

    .globl gg_emu_trampoline
    .hidden gg_emu_trampoline
    .type gg_emu_trampoline, @function
gg_emu_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq %r12, %rdi
    callq *%r13
    ud2
    .cfi_endproc
    .size gg_emu_trampoline, .-gg_emu_trampoline
)");
struct Context { void* sp = nullptr; };
static void context_init(Context& c, char* stack, size_t size, void (*fn)(void*), void* arg) {
    // Frame popped by the first switch: r15 r14 r13=fn r12=arg rbx rbp, then `ret` into the trampoline with
    // %rsp 16-byte aligned, so the call it makes sees the ABI's entry alignment.
    void** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t(15)) - 72);
    sp[0] = sp[1] = sp[4] = sp[5] = nullptr;
    sp[2] = reinterpret_cast<void*>(fn);
    sp[3] = arg;
    sp[6] = reinterpret_cast<void*>(&gg_emu_trampoline);
    c.sp = sp;
}
static inline void context_switch(Context& from, Context& to) { gg_emu_switch(&from.sp, to.sp); }
#else
}  // namespace gg_emu
#include <ucontext.h>
namespace gg_emu {
struct Context { ucontext_t uc; };
static void (*uc_fn)(void*);
static void uc_entry(unsigned hi, unsigned lo) {  // makecontext passes ints only: split the pointer
    uc_fn(reinterpret_cast<void*>((uintptr_t(hi) << 32) | lo));
}
static void context_init(Context& c, char* stack, size_t size, void (*fn)(void*), void* arg) {
    uc_fn = fn;
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    uintptr_t a = reinterpret_cast<uintptr_t>(arg);
    makecontext(&c.uc, reinterpret_cast<void (*)()>(uc_entry), 2, unsigned(a >> 32), unsigned(a));
}
static inline void context_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

// ---- fiber stacks: mapped once per OS-thread slot and reused by every block and launch ----------------------
static size_t stack_bytes() {
    static const size_t kb = [] {
        const char* e = getenv("GPUGRAD_EMU_STACK_KB");
        long v = e ? atol(e) : 64;
        return size_t(v >= 16 ? v : 16);
    }();
    return kb * 1024;
}
struct Stacks {
    char* base = nullptr;
    size_t count = 0, stride = 0;
    char* stack(size_t i) const { return base + i * stride + page(); }  // lowest page of each slot is a guard
    static size_t page() { return size_t(sysconf(_SC_PAGESIZE)); }
};
static std::mutex g_pool_mu;
static std::vector<Stacks> g_pool;

static Stacks acquire_stacks(size_t need) {
    Stacks s;
    {
        std::lock_guard<std::mutex> lock(g_pool_mu);
        if (!g_pool.empty()) { s = g_pool.back(); g_pool.pop_back(); }
    }
    if (s.count >= need && s.stride == stack_bytes() + Stacks::page()) return s;
    if (s.base) munmap(s.base, s.count * s.stride);
    size_t count = 32;
    while (count < need) count *= 2;
    s.stride = stack_bytes() + Stacks::page();
    void* p = mmap(nullptr, count * s.stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    s.base = static_cast<char*>(p);
    s.count = count;
    for (size_t i = 0; i < count; ++i) mprotect(s.base + i * s.stride, Stacks::page(), PROT_NONE);  // overflow faults
    return s;
}
static void release_stacks(const Stacks& s) {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    g_pool.push_back(s);
}

// ---- fibers and the per-OS-thread worker ----------------------------------------------------------------------
enum State : unsigned char { RUN, BAR, WARP, DONE };
struct Fiber {
    Context ctx;
    uint3 tid;
    int lin;
    State state;
    int op, pred, arg;  // barrier op/predicate, or warp op and its source lane
    const char* file;
    int line;
    unsigned mask;
    uint64_t value, result;
};
static const char* const kWarpOpNames[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                           "__all_sync", "__any_sync", "__ballot_sync", "__syncwarp"};
static const char* const kBarrierNames[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                            "__syncthreads_or"};

struct Worker {
    const int64_t* cfg;
    Thunk thunk;
    void* ctx;
    const char* kernel;
    Context scheduler;
    std::vector<Fiber> fibers;
    std::vector<int> order, warps, seg_end;  // this phase's thread order, warp order, and segment ends in order
    std::vector<unsigned> warp_waiting, warp_exited;  // per warp: lanes in a warp op / lanes that have finished
    std::vector<unsigned char> smem;
    Stacks stacks;
    Fiber* cur = nullptr;
    int n = 0, bar_result = 0;
    bool failed = false;
    std::string error;

    void set_error(const char* kind, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
};
static GG_EMU_TLS Worker* tls_worker;

void Worker::set_error(const char* kind, const char* fmt, ...) {
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char head[512];
    snprintf(head, sizeof head, "%s: %s in block (%u, %u, %u) of grid (%u, %u, %u), block (%u, %u, %u): ", kernel,
             kind, tls_block_idx.x, tls_block_idx.y, tls_block_idx.z, tls_grid_dim.x, tls_grid_dim.y,
             tls_grid_dim.z, tls_block_dim.x, tls_block_dim.y, tls_block_dim.z);
    error = std::string(head) + buf;
    failed = true;
}

// "0-4, 7, 9-31" over the linear thread ids (x + bx * (y + by * z)) for which `pick` holds.
template <class F> static std::string ranges(const Worker& w, F pick) {
    std::string s;
    int shown = 0;
    for (int i = 0; i < w.n;) {
        if (!pick(w.fibers[i])) { ++i; continue; }
        int j = i;
        while (j + 1 < w.n && pick(w.fibers[j + 1])) ++j;
        if (++shown > 8) { s += ", ..."; break; }
        if (!s.empty()) s += ", ";
        s += std::to_string(i);
        if (j > i) s += "-" + std::to_string(j);
        i = j + 1;
    }
    return s;
}
static std::string where(const Fiber& f) {
    const char* name = f.state == BAR ? kBarrierNames[f.op] : kWarpOpNames[f.op];
    return std::string(name) + " (" + f.file + ":" + std::to_string(f.line) + ")";
}
static bool same_site(const Fiber& a, const Fiber& b) {
    return a.op == b.op && a.line == b.line && (a.file == b.file || strcmp(a.file, b.file) == 0);
}

static void yield_to_scheduler(Worker& w) { context_switch(w.cur->ctx, w.scheduler); }

static void fiber_main(void* arg) {
    Fiber* f = static_cast<Fiber*>(arg);
    Worker& w = *tls_worker;
    try {
        w.thunk(w.ctx);
    } catch (const std::exception& e) {
        w.set_error("C++ exception", "thread %d threw: %s", f->lin, e.what());
    } catch (...) {
        w.set_error("C++ exception", "thread %d threw a non-std exception", f->lin);
    }
    f->state = DONE;
    w.warp_exited[f->lin >> 5] |= 1u << (f->lin & 31);
    yield_to_scheduler(w);
    abort();  // a finished fiber is never resumed
}

[[noreturn]] static void fail_as(const char* kind, const char* what) {
    Worker& w = *tls_worker;
    w.set_error(kind, "thread %d (threadIdx (%u, %u, %u)): %s", w.cur->lin, w.cur->tid.x, w.cur->tid.y,
                w.cur->tid.z, what);
    w.cur->state = DONE;
    yield_to_scheduler(w);
    abort();
}
void fail(const char* what) { fail_as("error", what); }

// ---- barrier and warp rendezvous (called on fiber stacks) ------------------------------------------------------
int barrier(int op, int pred, const char* file, int line) {
    Worker& w = *tls_worker;
    Fiber& me = *w.cur;
    me.state = BAR;
    me.op = op;
    me.pred = pred;
    me.file = file;
    me.line = line;
    yield_to_scheduler(w);  // the scheduler releases the barrier once every thread of the block waits here
    return w.bar_result;
}

unsigned active_mask() {
    Worker& w = *tls_worker;
    const int base = w.cur->lin & ~31;
    unsigned m = 0;
    for (int j = 0; j < 32 && base + j < w.n; ++j)
        if (w.fibers[base + j].state != DONE) m |= 1u << j;
    return m;
}

// Out of line and cold: a message buffer in warp_op's frame would be one more cache line per fiber per switch.
[[noreturn]] __attribute__((noinline, cold, format(printf, 2, 3))) static void fail_warp(const char* kind,
                                                                                       const char* fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_as(kind, msg);
}

uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
    Worker& w = *tls_worker;
    Fiber& me = *w.cur;
    const int lane = me.lin & 31, base = me.lin & ~31;
    if (!((mask >> lane) & 1))
        fail_warp("invalid warp op", "%s (%s:%d): mask 0x%08x does not include the calling lane %d",
                  kWarpOpNames[op], file, line, mask, lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail_warp("invalid warp op", "%s (%s:%d): width %d is not a power of two <= 32", kWarpOpNames[op], file,
                  line, width);
    // CUDA's width splits the warp into segments; a source outside the segment (or the warp) yields the own value.
    const int seg = lane & ~(width - 1), pos = lane - seg;
    const unsigned d = unsigned(arg);
    int src = lane;
    if (op == SHFL_IDX) src = seg + (arg & (width - 1));
    else if (op == SHFL_UP) src = d <= unsigned(pos) ? lane - int(d) : lane;
    else if (op == SHFL_DOWN) src = d < unsigned(width - pos) ? lane + int(d) : lane;
    else if (op == SHFL_XOR) src = (unsigned(lane) ^ d) < unsigned(seg + width) ? int(unsigned(lane) ^ d) : lane;
    me.state = WARP;
    me.op = op;
    me.mask = mask;
    me.value = value;
    me.arg = src;
    me.file = file;
    me.line = line;
    // Lanes past the end of a partial last warp do not exist on the device either: they are not waited for.
    const int nlanes = std::min(32, w.n - base);
    const unsigned group = mask & (nlanes == 32 ? ~0u : (1u << nlanes) - 1);
    if (const unsigned gone = w.warp_exited[base >> 5] & group)
        fail_warp("divergent warp op", "%s (%s:%d) with mask 0x%08x, but lane %d (thread %d) has exited",
                  kWarpOpNames[op], file, line, mask, __builtin_ctz(gone), base + __builtin_ctz(gone));
    unsigned& waiting = w.warp_waiting[base >> 5];
    waiting |= 1u << lane;
    bool complete = (waiting & group) == group;  // O(1) for all but the last arrival
    for (int j = 0; complete && j < nlanes; ++j) {
        const Fiber& g = w.fibers[base + j];
        complete = !((group >> j) & 1) || (g.op == op && g.mask == mask);
    }
    if (!complete) {
        yield_to_scheduler(w);  // the last lane to arrive computes everyone's result and wakes us
        return me.result;
    }
    // Last to arrive: every lane's deposit is in place, so compute all results at once; no second rendezvous is
    // needed because nobody can overwrite a deposit before the scheduler resumes them.
    uint64_t vote = 0;
    if (op == VOTE_ALL) vote = 1;
    for (int j = 0; j < nlanes; ++j) {
        if (!((group >> j) & 1)) continue;
        const uint64_t p = w.fibers[base + j].value;
        if (op == VOTE_ALL) vote &= p != 0;
        else if (op == VOTE_ANY) vote |= p != 0;
        else if (op == VOTE_BALLOT) vote |= uint64_t(p != 0) << j;
    }
    for (int j = 0; j < nlanes; ++j) {
        if (!((group >> j) & 1)) continue;
        Fiber& g = w.fibers[base + j];
        if (op <= SHFL_XOR) {  // a source outside the group is undefined on the device; we return the own value
            g.result = ((group >> g.arg) & 1) ? w.fibers[base + g.arg].value : g.value;
        } else {
            g.result = vote;
        }
        g.state = RUN;
    }
    waiting &= ~group;
    return me.result;
}

// ---- crash report: a wild pointer or a stack overflow in a kernel still kills the process (nothing can be
// recovered), but first say which kernel, block and thread, then hand over to the previous handler (Python's
// faulthandler prints the Python stack) by restoring it: the faulting instruction re-runs and faults again.
static struct sigaction g_prev_segv;
static void on_segv(int sig, siginfo_t* info, void*) {
    const Worker* w = tls_worker;
    if (w && w->cur) {
        const uintptr_t a = uintptr_t(info->si_addr), base = uintptr_t(w->stacks.base);
        const bool guard = a >= base && a < base + w->stacks.count * w->stacks.stride &&
                           (a - base) % w->stacks.stride < Stacks::page();
        char buf[640];
        const int n = snprintf(buf, sizeof buf, "cuda_emu: segmentation fault at %p in kernel %s, block (%u, %u, %u), "
                               "thread (%u, %u, %u)%s\n", info->si_addr, w->kernel, tls_block_idx.x, tls_block_idx.y,
                               tls_block_idx.z, w->cur->tid.x, w->cur->tid.y, w->cur->tid.z,
                               guard ? ": fiber stack overflow, raise GPUGRAD_EMU_STACK_KB (default 64)" : "");
        if (n > 0 && write(2, buf, size_t(n) < sizeof buf ? size_t(n) : sizeof buf - 1) < 0) {}
    }
    sigaction(sig, &g_prev_segv, nullptr);
}
static void install_crash_report() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;  // on the alternate stack: the fiber's own may be the one that overflowed
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_prev_segv);
    });
}

// ---- the block scheduler --------------------------------------------------------------------------------------
static void resume(Worker& w, Fiber& f) {
    tls_thread_idx = f.tid;
    w.cur = &f;
    context_switch(w.scheduler, f.ctx);
}

static void release_barrier(Worker& w) {
    const Fiber& f0 = w.fibers[0];
    for (int i = 1; i < w.n; ++i) {
        const Fiber& f = w.fibers[i];
        if (!same_site(f, f0)) {
            w.set_error("divergent barrier", "threads %s wait at %s but threads %s wait at %s",
                        ranges(w, [&](const Fiber& g) { return same_site(g, f0); }).c_str(), where(f0).c_str(),
                        ranges(w, [&](const Fiber& g) { return same_site(g, f); }).c_str(), where(f).c_str());
            return;
        }
    }
    int count = 0;
    for (int i = 0; i < w.n; ++i) count += w.fibers[i].pred;
    w.bar_result = f0.op == BAR_COUNT ? count : f0.op == BAR_AND ? count == w.n : f0.op == BAR_OR ? count > 0 : 0;
    for (int i = 0; i < w.n; ++i) w.fibers[i].state = RUN;
}

// Called when no fiber can run and some have not finished: say why.
static void diagnose(Worker& w) {
    auto done = [](const Fiber& g) { return g.state == DONE; };
    for (int i = 0; i < w.n; ++i) {  // a warp op waiting for a lane that has exited can never complete
        const Fiber& f = w.fibers[i];
        if (f.state != WARP) continue;
        const int base = f.lin & ~31;
        for (int j = 0; j < 32 && base + j < w.n; ++j)
            if (((f.mask >> j) & 1) && w.fibers[base + j].state == DONE) {
                w.set_error("divergent warp op", "threads %s wait in %s with mask 0x%08x, but lane %d (thread %d) has exited",
                            ranges(w, [&](const Fiber& g) { return g.state == WARP && same_site(g, f); }).c_str(),
                            where(f).c_str(), f.mask, j, base + j);
                return;
            }
    }
    int nbar = 0, nwarp = 0;
    const Fiber *bar = nullptr, *warp = nullptr;
    for (int i = 0; i < w.n; ++i) {
        const Fiber& f = w.fibers[i];
        if (f.state == BAR) { ++nbar; if (!bar) bar = &f; }
        if (f.state == WARP) { ++nwarp; if (!warp) warp = &f; }
    }
    if (nwarp == 0) {  // some threads exited while the rest wait at a barrier (undefined behaviour in CUDA)
        w.set_error("divergent barrier", "threads %s wait at %s but threads %s have exited",
                    ranges(w, [](const Fiber& g) { return g.state == BAR; }).c_str(), where(*bar).c_str(),
                    ranges(w, done).c_str());
        return;
    }
    std::string detail;
    for (int i = 0; i < w.n; ++i) {  // one line per distinct wait site
        const Fiber& f = w.fibers[i];
        if (f.state == DONE || f.state == RUN) continue;
        bool seen = false;
        for (int k = 0; k < i && !seen; ++k)
            seen = w.fibers[k].state == f.state && same_site(w.fibers[k], f) && w.fibers[k].mask == f.mask;
        if (seen) continue;
        char m[32] = "";
        if (f.state == WARP) snprintf(m, sizeof m, " with mask 0x%08x", f.mask);
        detail += "; threads " + ranges(w, [&](const Fiber& g) {
                      return g.state == f.state && same_site(g, f) && (f.state != WARP || g.mask == f.mask);
                  }) + " wait in " + where(f) + m;
    }
    const std::string gone = ranges(w, done);
    w.set_error("deadlock", "no thread can proceed%s%s%s", detail.c_str(), gone.empty() ? "" : "; exited: ",
                gone.c_str());
}

static bool run_block(Worker& w, int64_t b) {
    const int64_t* c = w.cfg;
    const unsigned bx = unsigned(c[3]), by = unsigned(c[4]);
    tls_block_idx = uint3{unsigned(b % c[0]), unsigned(b / c[0] % c[1]), unsigned(b / (c[0] * c[1]))};
    // Dynamic shared memory starts as 0xFF bytes (NaN floats, -1 ints) so reads before writes stand out.
    if (!w.smem.empty()) memset(w.smem.data(), 0xFF, w.smem.size());
    for (int i = 0; i < w.n; ++i) {
        Fiber& f = w.fibers[i];
        f.tid = uint3{unsigned(i) % bx, unsigned(i) / bx % by, unsigned(i) / (bx * by)};
        f.lin = i;
        f.state = RUN;
        // Stagger the stack tops by cache line: at a page-multiple stride every fiber's hot frames would
        // share one L1 set and each switch would miss (measured: 1024-thread softmax blocks 3.1 -> 1.8 ms).
        context_init(f.ctx, w.stacks.stack(i), stack_bytes() - size_t(i & 63) * 64, fiber_main, &f);
    }
    std::fill(w.warp_waiting.begin(), w.warp_waiting.end(), 0u);
    std::fill(w.warp_exited.begin(), w.warp_exited.end(), 0u);
    std::mt19937_64 rng(uint64_t(c[8]) * 0x9E3779B97F4A7C15ull + uint64_t(b));
    const int kind = int(c[7] % 3);  // 0 ascending, 1 descending, 2 shuffled
    const bool by_warp = c[7] >= 3;
    const int nwarps = (w.n + 31) / 32;
    for (;;) {
        // A new barrier phase: draw this phase's order, as segments of w.order each run until none can proceed.
        // Plain schedules: one segment, all threads. Warp schedules: one segment per warp, in the warp order.
        if (!by_warp) {
            for (int i = 0; i < w.n; ++i) w.order[i] = kind == 1 ? w.n - 1 - i : i;
            if (kind == 2) std::shuffle(w.order.begin(), w.order.begin() + w.n, rng);
            w.seg_end.assign(1, w.n);
        } else {
            w.seg_end.clear();
            for (int v = 0; v < nwarps; ++v) w.warps[v] = kind == 1 ? nwarps - 1 - v : v;
            if (kind == 2) std::shuffle(w.warps.begin(), w.warps.begin() + nwarps, rng);
            int k = 0;
            for (int v = 0; v < nwarps; ++v) {
                const int base = w.warps[v] * 32, lanes = std::min(32, w.n - base), start = k;
                for (int j = 0; j < lanes; ++j) w.order[k++] = base + (kind == 1 ? lanes - 1 - j : j);
                if (kind == 2) std::shuffle(w.order.begin() + start, w.order.begin() + k, rng);
                w.seg_end.push_back(k);
            }
        }
        // Each segment runs until none of its fibers can proceed; one sweep over the segments then leaves the
        // block quiescent, because only a warp op of the same warp or a barrier release (below, between phases)
        // makes a blocked fiber runnable again: a later segment never wakes an earlier one.
        for (size_t g = 0, start = 0; g < w.seg_end.size(); start = size_t(w.seg_end[g++])) {
            for (bool ran = true; ran;) {
                ran = false;
                for (int k = int(start); k < w.seg_end[g]; ++k) {
                    Fiber& f = w.fibers[w.order[k]];
                    if (f.state != RUN) continue;
                    resume(w, f);
                    ran = true;
                    if (w.failed) return false;
                }
            }
        }
        int nbar = 0, ndone = 0;
        for (int i = 0; i < w.n; ++i) {
            nbar += w.fibers[i].state == BAR;
            ndone += w.fibers[i].state == DONE;
        }
        if (ndone == w.n) return true;
        if (nbar != w.n) { diagnose(w); return false; }
        release_barrier(w);
        if (w.failed) return false;
    }
}

int run_grid(const int64_t* cfg, Thunk thunk, void* ctx, const char* kernel, char* err, int errlen) {
    const int64_t nthreads = cfg[3] * cfg[4] * cfg[5], nblocks = cfg[0] * cfg[1] * cfg[2];
    if (cfg[0] < 1 || cfg[1] < 1 || cfg[2] < 1 || cfg[0] > INT_MAX || cfg[1] > 65535 || cfg[2] > 65535 ||
        cfg[3] < 1 || cfg[4] < 1 || cfg[5] < 1 || cfg[5] > 64 || nthreads > 1024 || cfg[6] < 0) {
        snprintf(err, errlen, "%s: invalid launch configuration: grid (%lld, %lld, %lld), block (%lld, %lld, %lld), "
                 "shared_mem %lld (blocks hold at most 1024 threads)", kernel, (long long)cfg[0], (long long)cfg[1],
                 (long long)cfg[2], (long long)cfg[3], (long long)cfg[4], (long long)cfg[5], (long long)cfg[6]);
        return 1;
    }
    install_crash_report();
    std::atomic<int64_t> next{0};
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::string first_error;
    // Report the failing block that comes first in schedule order, not first in time: blocks before it were
    // all handed out already and run to completion, so the choice is the same with 1 or 2 OS threads.
    int64_t first_k = INT64_MAX;
    const int64_t kind = cfg[7] % 3;  // the warp schedules order blocks like their plain counterparts
    const int64_t offset = kind == 2 ? int64_t(uint64_t(cfg[8]) % uint64_t(nblocks)) : 0;
    auto work = [&] {
        Worker w;
        try {
            w.cfg = cfg;
            w.thunk = thunk;
            w.ctx = ctx;
            w.kernel = kernel;
            w.n = int(nthreads);
            w.fibers.resize(w.n);
            w.order.resize(w.n);
            w.warps.resize((w.n + 31) / 32);
            w.seg_end.reserve((w.n + 31) / 32);
            w.warp_waiting.resize((w.n + 31) / 32);
            w.warp_exited.resize((w.n + 31) / 32);
            w.smem.resize(size_t(cfg[6]));
            w.stacks = acquire_stacks(size_t(w.n));
        } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.empty()) first_error = std::string(kernel) + ": emulator setup failed: " + e.what();
            stop = true;
            return;
        }
        std::vector<char> altstack;  // give the handler a stack where this OS thread has none (std::threads)
        stack_t old_alt;
        sigaltstack(nullptr, &old_alt);
        if (old_alt.ss_flags & SS_DISABLE) {
            altstack.resize(64 * 1024);
            stack_t alt{altstack.data(), 0, altstack.size()};
            sigaltstack(&alt, nullptr);
        }
        Worker* outer = tls_worker;
        tls_worker = &w;
        tls_grid_dim = dim3(unsigned(cfg[0]), unsigned(cfg[1]), unsigned(cfg[2]));
        tls_block_dim = dim3(unsigned(cfg[3]), unsigned(cfg[4]), unsigned(cfg[5]));
        // 16-byte aligned like the device's dynamic shared memory (vector<unsigned char> is malloc-aligned).
        tls_dynamic_smem = w.smem.empty() ? nullptr : w.smem.data();
        while (!stop.load(std::memory_order_relaxed)) {
            const int64_t k = next.fetch_add(1);
            if (k >= nblocks) break;
            // Block order: forward, reverse, or rotated by the seed; with 2 OS threads, blocks also overlap in time.
            const int64_t b = kind == 1 ? nblocks - 1 - k : (k + offset) % nblocks;
            if (!run_block(w, b)) {
                std::lock_guard<std::mutex> lock(mu);
                if (k < first_k) { first_k = k; first_error = w.error; }
                w.failed = false;
                stop = true;
            }
        }
        tls_worker = outer;
        if (!altstack.empty()) {
            stack_t off{nullptr, SS_DISABLE, 0};
            sigaltstack(&off, nullptr);
        }
        release_stacks(w.stacks);
    };
    try {
        std::vector<std::thread> pool;
        const int64_t want = std::min<int64_t>(std::max<int64_t>(cfg[9], 1), nblocks);
        for (int64_t i = 1; i < want; ++i) {
            try { pool.emplace_back(work); } catch (const std::system_error&) { break; }  // fewer threads is fine
        }
        work();
        for (auto& t : pool) t.join();
    } catch (const std::exception& e) {
        first_error = std::string(kernel) + ": emulator failure: " + e.what();
    }
    if (first_error.empty()) return 0;
    snprintf(err, errlen, "%s", first_error.c_str());
    return 1;
}
}  // namespace gg_emu
