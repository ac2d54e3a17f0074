// cake CUDA emulator runtime (tools/emu/README.md): the CUDA built-ins cake's programs use, on the
// CPU. Every CUDA thread of a block is a fiber (its own stack, switched by hand, never preempted);
// a block runs on one OS thread, blocks are spread over a few OS threads. A fiber runs until it
// reaches a synchronisation point (__syncthreads, a warp collective, mma.sync), parks there, and
// is released when every thread that must take part has arrived.
//
// This header is the first part of every emulated translation unit; the Python side appends the
// CPU twins of cake's device headers, the program body and one entry point per kernel.
#pragma once

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---- CUDA keywords -----------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)

// ---- vector types ------------------------------------------------------------------------------
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct uint3 { unsigned int x, y, z; };
typedef uint3 dim3;

inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
    return {x, y, z, w};
}

constexpr int warpSize = 32;

// ---- scalar intrinsics -------------------------------------------------------------------------
inline float __uint_as_float(unsigned int u) { return __builtin_bit_cast(float, u); }
inline unsigned int __float_as_uint(float f) { return __builtin_bit_cast(unsigned int, f); }
inline float __int_as_float(int i) { return __builtin_bit_cast(float, i); }
inline int __float_as_int(float f) { return __builtin_bit_cast(int, f); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline float __saturatef(float a) { return a < 0.f ? 0.f : (a > 1.f ? 1.f : a); }
// CUDA's min/max overloads
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

namespace emu {

constexpr int kWarp = 32;
constexpr size_t kCanary = 4096;           // bytes guarded on each side of the shared memory
constexpr unsigned char kCanaryByte = 0xA5;
constexpr size_t kMaxSmem = 232448;        // the per-block opt-in limit of sm_90 (227 KB)

struct Copy {
    unsigned char* dst;
    const unsigned char* src;
    int n;     // bytes read from src
    int size;  // bytes written to dst (the rest zero-filled)
};

struct Fiber {
    void* sp = nullptr;              // saved stack pointer while parked
    unsigned char* map = nullptr;    // its stack mapping: a guard page, then the stack
    size_t map_bytes = 0;
    int tid = 0;
    bool done = false;
    const char* waiting = nullptr;   // what it is parked on, for deadlock reports
    std::vector<Copy> copies;        // cp.async issued and not yet completed, oldest first
    std::vector<size_t> groups;      // committed groups: end index into copies, oldest first
    int wg_commits = 0;              // wgmma.commit_group calls so far
#if !defined(__x86_64__)
    ucontext_t ctx;
#endif
};

struct Warp;
typedef void (*WarpOp)(Warp&);

struct Warp {
    int arrived = 0;
    int live = 0;
    int kind = 0;
    int arg = 0;
    const char* what = "";
    WarpOp op = nullptr;
    const void* in[kWarp];
    void* out[kWarp];
};

// A warpgroup (4 consecutive warps, 128 threads) meeting at a wgmma.
constexpr int kGroup = 128;
struct Group;
typedef void (*GroupOp)(Group&);

// One thread's operands of a wgmma.mma_async.
struct WgmmaIn {
    unsigned long long da, db;  // shared-memory descriptors (da unused when a_regs)
    int acc;                    // scale-d: 0 gives d = A B
    int a_regs;                 // A from registers a[0..3]
    unsigned int a[4];
    int n;                      // 64 or 32 columns
};

// A wgmma issued and not yet performed: every thread's operands (copied at issue, as the hardware
// reads register A operands then), its accumulators (the threads' registers, read and written when
// it is performed) and its commit group (the issuing threads' commit count).
struct PendingWgmma {
    GroupOp op = nullptr;
    WgmmaIn in[kGroup];
    void* out[kGroup];
    int group = 0;
};

struct Group {
    int arrived = 0;
    const char* what = "";
    GroupOp op = nullptr;
    const void* in[kGroup];
    void* out[kGroup];
    std::vector<PendingWgmma> pending;  // issued, oldest first
};

// A named barrier (bar.sync / bar.arrive id, n): arrivals of the current phase, its thread count,
// and the threads parked at bar.sync until the phase completes.
struct NamedBar {
    int arrived = 0;
    int count = 0;
    std::vector<Fiber*> parked;
};
constexpr int kNamedBars = 16;

// An mbarrier's state, by its shared-memory offset (the 8 bytes themselves are not modelled).
struct MBar {
    int count = 0, pending = 0, phase = 0;  // phase: the parity of the phase in progress
    long long tx = 0;                       // transaction bytes expected and not landed
    std::vector<Copy> bulk;                 // bulk copies issued on it and not landed
    std::vector<Fiber*> parked;
};

struct Worker {
    // what is launched
    const char* kernel = "";
    void (*body)(const void*) = nullptr;
    const void* body_arg = nullptr;
    uint3 grid_dim{1, 1, 1}, block_dim{1, 1, 1}, block_idx{0, 0, 0};
    int nthreads = 0;
    long long schedule = 0;  // 0 forward, 1 reverse, >= 2 shuffled with that seed
    bool eager_copies = false;  // cp.async lands when issued (else at the wait that covers it)
    std::mt19937_64 rng;
    // the block's threads
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<Group> wgroups;
    NamedBar nbars[kNamedBars];
    std::map<unsigned int, MBar> mbars;
    std::vector<Fiber*> ring;  // runnable fibers (each at most once)
    size_t head = 0, count = 0;
    int bar_arrived = 0, live = 0;
    Fiber* cur = nullptr;
    void* sched_sp = nullptr;
#if !defined(__x86_64__)
    ucontext_t sched_ctx;
#endif
    size_t stack_bytes = 0;
    // shared memory, with canaries on both sides
    unsigned char* smem_map = nullptr;
    size_t smem_cap = 0;
    unsigned char* smem = nullptr;
    size_t smem_bytes = 0;
    // the first error of the block
    bool failed = false;
    char error[1024] = {0};
};

inline thread_local Worker* tl = nullptr;

// ---- context switching -------------------------------------------------------------------------
#if defined(__x86_64__)
extern "C" void emu_switch(void** save_sp, void* to_sp) __attribute__((visibility("hidden")));
extern "C" void emu_trampoline() __attribute__((visibility("hidden")));
// emu_switch saves the callee-saved registers on the current stack, stores the stack pointer in
// *save_sp and resumes the stack to_sp. A new fiber's stack holds r12 = its Fiber*, r13 = the
// entry function and emu_trampoline as the return address.
asm(R"(
    .text
    .p2align 4
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
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
    .size emu_switch, .-emu_switch
    .p2align 4
    .globl emu_trampoline
    .hidden emu_trampoline
    .type emu_trampoline, @function
emu_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size emu_trampoline, .-emu_trampoline
)");
#endif

inline void fiber_main(Fiber* f);

#if !defined(__x86_64__)
inline void fiber_main_uc() { fiber_main(tl->cur); }
#endif

inline void init_fiber(Worker* w, Fiber* f) {
    unsigned char* top = f->map + f->map_bytes;
    top -= reinterpret_cast<uintptr_t>(top) & 15;
#if defined(__x86_64__)
    void** sp = reinterpret_cast<void**>(top - 56);  // after the 7 pops, rsp is 16-aligned
    sp[0] = nullptr;                                 // r15
    sp[1] = nullptr;                                 // r14
    sp[2] = reinterpret_cast<void*>(&fiber_main);    // r13
    sp[3] = f;                                       // r12
    sp[4] = nullptr;                                 // rbx
    sp[5] = nullptr;                                 // rbp
    sp[6] = reinterpret_cast<void*>(&emu_trampoline);
    f->sp = sp;
#else
    (void)w;
    getcontext(&f->ctx);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    f->ctx.uc_stack.ss_sp = f->map + page;
    f->ctx.uc_stack.ss_size = f->map_bytes - page;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_main_uc, 0);
#endif
}

inline void to_fiber(Worker* w, Fiber* f) {
#if defined(__x86_64__)
    emu_switch(&w->sched_sp, f->sp);
#else
    swapcontext(&w->sched_ctx, &f->ctx);
#endif
}

inline void to_scheduler(Worker* w, Fiber* f) {
#if defined(__x86_64__)
    emu_switch(&f->sp, w->sched_sp);
#else
    swapcontext(&f->ctx, &w->sched_ctx);
#endif
}

// ---- errors ------------------------------------------------------------------------------------
inline void set_error(Worker* w, const char* fmt, va_list ap) {
    if (w->failed) return;
    w->failed = true;
    int n = snprintf(w->error, sizeof w->error, "%s block (%u,%u,%u)", w->kernel, w->block_idx.x,
                     w->block_idx.y, w->block_idx.z);
    if (w->cur != nullptr && n < (int)sizeof w->error)
        n += snprintf(w->error + n, sizeof w->error - n, " thread %d", w->cur->tid);
    if (n < (int)sizeof w->error - 2) {
        n += snprintf(w->error + n, sizeof w->error - n, ": ");
        vsnprintf(w->error + n, sizeof w->error - n, fmt, ap);
    }
}

inline void block_error(Worker* w, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void block_error(Worker* w, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(w, fmt, ap);
    va_end(ap);
}

// From a fiber: record the error and leave for good (the block is abandoned).
[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void fail(const char* fmt, ...) {
    Worker* w = tl;
    va_list ap;
    va_start(ap, fmt);
    set_error(w, fmt, ap);
    va_end(ap);
    to_scheduler(w, w->cur);
    __builtin_unreachable();
}

// ---- scheduling --------------------------------------------------------------------------------
inline void push_ready(Worker* w, Fiber* f) {
    w->ring[(w->head + w->count++) % w->ring.size()] = f;
}

inline void push_front(Worker* w, Fiber* f) {
    w->head = (w->head + w->ring.size() - 1) % w->ring.size();
    w->ring[w->head] = f;
    w->count += 1;
}

// Make fibers first..first+n-1 runnable, in the order the schedule asks for: ascending thread
// index (schedule 0), descending (1) or shuffled (>= 2). A block barrier queues them behind any
// runnable thread; a warp collective puts its warp in front, so that one warp runs on until the
// next __syncthreads() before the next warp starts (shuffled: front or back at random). Warps
// serialized between barriers, in both orders, make a missing barrier change the result.
inline void release(Worker* w, int first, int n, bool front) {
    int order[1024];
    for (int i = 0; i < n; ++i) order[i] = w->schedule == 1 ? n - 1 - i : i;
    if (w->schedule >= 2) {
        std::shuffle(order, order + n, w->rng);
        front = front && (w->rng() & 1);
    }
    if (front) {
        for (int i = n - 1; i >= 0; --i) push_front(w, &w->fibers[first + order[i]]);
    } else {
        for (int i = 0; i < n; ++i) push_ready(w, &w->fibers[first + order[i]]);
    }
}

inline void park(Worker* w, Fiber* f, const char* what) {
    f->waiting = what;
    to_scheduler(w, f);
    f->waiting = nullptr;
}

// ---- cp.async: queued per thread, performed at cp.async.wait_group -----------------------------
// One copy lands: its n bytes read, the rest of its size zero-filled.
inline void land(const Copy& c) {
    if (c.n > 0) memcpy(c.dst, c.src, (size_t)c.n);
    if (c.size > c.n) memset(c.dst + c.n, 0, (size_t)(c.size - c.n));
}

inline void do_copies(Fiber* f, size_t end) {
    for (size_t i = 0; i < end; ++i) land(f->copies[i]);
    f->copies.erase(f->copies.begin(), f->copies.begin() + (long)end);
}

inline unsigned int smem_offset(const void* p) {
    Worker* w = tl;
    const unsigned char* b = static_cast<const unsigned char*>(p);
    if (b < w->smem || b > w->smem + w->smem_bytes)
        fail("cvta.to.shared of %p, which is not in the block's %zu bytes of shared memory", p,
             w->smem_bytes);
    return (unsigned int)(b - w->smem);
}

inline void cp_async(void* dst, const void* src, int size, int src_bytes) {
    Worker* w = tl;
    unsigned char* d = static_cast<unsigned char*>(dst);
    if (d < w->smem || d + size > w->smem + w->smem_bytes)
        fail("cp.async to %p: not inside the block's %zu bytes of shared memory (offset %lld)", dst,
             w->smem_bytes, (long long)(d - w->smem));
    if (src_bytes < 0 || src_bytes > size)
        fail("cp.async of %d bytes with src-size %d", size, src_bytes);
    if ((d - w->smem) % size != 0 || (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % size))
        fail("cp.async of %d bytes with a misaligned address (shared offset %lld, global %p)", size,
             (long long)(d - w->smem), src);
    w->cur->copies.push_back({d, static_cast<const unsigned char*>(src), src_bytes, size});
    if (w->eager_copies) {  // lands now; the group bookkeeping stays, with nothing left to copy
        Fiber* f = w->cur;
        const Copy c = f->copies.back();
        f->copies.pop_back();
        land(c);
    }
}

inline void cp_async_commit() {
    Fiber* f = tl->cur;
    f->groups.push_back(f->copies.size());
}

// Complete every committed group but the newest n; copies not yet committed stay in flight.
inline void cp_async_wait(int n) {
    Fiber* f = tl->cur;
    if ((int)f->groups.size() <= n) return;
    const size_t k = f->groups.size() - (size_t)n;
    const size_t end = f->groups[k - 1];
    do_copies(f, end);
    f->groups.erase(f->groups.begin(), f->groups.begin() + (long)k);
    for (size_t& g : f->groups) g -= end;
}

// ---- block and warp synchronisation ------------------------------------------------------------
inline void syncthreads() {
    Worker* w = tl;
    Fiber* f = w->cur;
    if (w->live != w->nthreads)
        fail("__syncthreads() after %d thread(s) of the block exited (undefined in CUDA)",
             w->nthreads - w->live);
    if (++w->bar_arrived == w->nthreads) {
        w->bar_arrived = 0;
        release(w, 0, w->nthreads, false);
    }
    park(w, f, "__syncthreads()");
}

// The threads of a completed barrier phase made runnable, in the schedule's order.
inline void wake(Worker* w, std::vector<Fiber*>& go) {
    if (w->schedule == 1) std::reverse(go.begin(), go.end());
    else if (w->schedule >= 2) std::shuffle(go.begin(), go.end(), w->rng);
    for (Fiber* p : go) push_ready(w, p);
}

// bar.sync (wait) / bar.arrive id, n: the phase completes when n threads have arrived; the threads
// parked on it are then released in the schedule's order (the completing one with them).
inline void named_bar(int id, int n, bool wait) {
    Worker* w = tl;
    Fiber* f = w->cur;
    const char* what = wait ? "bar.sync" : "bar.arrive";
    if (id < 1 || id >= kNamedBars) fail("%s %d: ids 1..%d only (0 is __syncthreads)", what, id, kNamedBars - 1);
    if (n <= 0 || n % kWarp != 0 || n > w->nthreads)
        fail("%s %d with a thread count of %d (a multiple of 32, at most the block's %d)", what, id, n, w->nthreads);
    NamedBar& B = w->nbars[id];
    if (B.arrived == 0) B.count = n;
    else if (B.count != n) fail("%s %d: threads arrive with counts %d and %d", what, id, B.count, n);
    static const char* const kWhat[kNamedBars] = {
        "bar.sync 0", "bar.sync 1", "bar.sync 2",  "bar.sync 3",  "bar.sync 4",  "bar.sync 5",
        "bar.sync 6", "bar.sync 7", "bar.sync 8",  "bar.sync 9",  "bar.sync 10", "bar.sync 11",
        "bar.sync 12", "bar.sync 13", "bar.sync 14", "bar.sync 15"};
    if (++B.arrived < n) {
        if (wait) {
            B.parked.push_back(f);
            park(w, f, kWhat[id]);
        }
        return;
    }
    std::vector<Fiber*> go;
    go.swap(B.parked);
    B.arrived = 0;
    if (wait) go.push_back(f);
    wake(w, go);
    if (wait) park(w, f, kWhat[id]);
    else if (w->schedule != 0) {  // as an mbarrier's completing arrival (mbar_arrive): yield
        push_ready(w, f);
        park(w, f, "bar.arrive");
    }
}

// mbarrier.init b, n: a phase completes when n threads have arrived.
inline void mbar_init(void* b, int n) {
    Worker* w = tl;
    if (n <= 0) fail("mbarrier.init with a count of %d", n);
    MBar& M = w->mbars[smem_offset(b)];
    if (!M.parked.empty()) fail("mbarrier.init of an mbarrier that threads wait on");
    M = MBar();
    M.count = M.pending = n;
}

inline MBar& mbar_at(void* b, const char* what) {
    Worker* w = tl;
    auto it = w->mbars.find(smem_offset(b));
    if (it == w->mbars.end()) fail("%s on shared-memory offset %u, which no mbarrier.init set up", what, smem_offset(b));
    return it->second;
}

// A phase completes once its last arrival is in and its transaction bytes have landed: the parity
// flips and the phase's waiters are released in the schedule's order (the completing thread goes on).
inline void mbar_complete_if_done(Worker* w, MBar& M) {
    if (M.pending > 0 || M.tx != 0) return;
    M.phase ^= 1;
    M.pending = M.count;
    std::vector<Fiber*> go;
    go.swap(M.parked);
    wake(w, go);
}

inline void mbar_land(Worker* w, MBar& M);

// Once a phase's arrivals are in, its bulk copies land if a thread already waits on it (else at the
// first wait, or at issue with eager copies); a phase with nothing in flight completes.
inline void mbar_progress(Worker* w, MBar& M) {
    if (M.pending == 0 && !M.bulk.empty() && !M.parked.empty()) mbar_land(w, M);
    else mbar_complete_if_done(w, M);
}

// mbarrier.arrive: one of the phase's arrivals.
// The arrival that completes a phase, in the descending and shuffled orders, yields to the threads
// the phase released: what they do next (overwrite a tile that a wgmma of the arriving thread has
// not read yet, say, if it arrived before its wait) then happens before the arriving thread's next
// step, where the forward order runs it after.
inline void mbar_arrive(void* b) {
    Worker* w = tl;
    MBar& M = mbar_at(b, "mbarrier.arrive");
    if (M.pending == 0) fail("mbarrier.arrive on a phase whose arrivals are all in (its bytes pending)");
    M.pending -= 1;
    const int phase = M.phase;
    mbar_progress(w, M);
    if (w->schedule != 0 && M.phase != phase) {
        push_ready(w, w->cur);
        park(w, w->cur, "mbarrier.arrive");
    }
}

// mbarrier.arrive.expect_tx: an arrival that also expects `bytes` more transaction bytes.
inline void mbar_expect_tx(void* b, unsigned int bytes) {
    MBar& M = mbar_at(b, "mbarrier.arrive.expect_tx");
    M.tx += bytes;
    mbar_arrive(b);
}

// The bulk copies issued on M land (in issue order) and count their bytes off its phase.
inline void mbar_land(Worker* w, MBar& M) {
    std::vector<Copy> landing;
    landing.swap(M.bulk);
    for (const Copy& c : landing) {
        land(c);
        M.tx -= c.n;
    }
    mbar_complete_if_done(w, M);
}

// cp.async.bulk global -> shared, completing on mbarrier b: lands when issued with eager copies,
// else once the phase's arrivals are in and a thread waits on it (the latest the hardware could
// take), so a reader that does not wait on it reads what was there before.
inline void bulk_load(void* dst, const void* src, unsigned int bytes, void* b) {
    Worker* w = tl;
    unsigned char* d = static_cast<unsigned char*>(dst);
    if (bytes == 0 || bytes % 16 != 0) fail("cp.async.bulk of %u bytes (a positive multiple of 16)", bytes);
    if (d < w->smem || d + bytes > w->smem + w->smem_bytes)
        fail("cp.async.bulk to %p: not inside the block's %zu bytes of shared memory", dst, w->smem_bytes);
    if ((d - w->smem) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
        fail("cp.async.bulk with a misaligned address (shared offset %lld, global %p)",
             (long long)(d - w->smem), src);
    MBar& M = mbar_at(b, "cp.async.bulk's mbarrier");
    M.bulk.push_back({d, static_cast<const unsigned char*>(src), (int)bytes, (int)bytes});
    if (w->eager_copies) mbar_land(w, M);
    else mbar_progress(w, M);
}

// mbarrier.try_wait.parity in a loop: returns once the phase of that parity has completed, i.e.
// while the phase in progress has the other parity.
inline void mbar_wait(void* b, int parity) {
    Worker* w = tl;
    Fiber* f = w->cur;
    while (true) {
        MBar& M = mbar_at(b, "mbarrier.try_wait");
        if (M.phase != (parity & 1)) return;
        if (M.pending == 0 && !M.bulk.empty()) {
            mbar_land(w, M);
            continue;
        }
        M.parked.push_back(f);
        park(w, f, "mbarrier.try_wait");
    }
}

enum Kind { kShflIdx = 1, kShflUp, kShflDown, kShflXor, kAll, kAny, kBallot, kSyncwarp, kMma, kMmaF16 };

// Every lane of the warp arrives with its input and output; the last one runs op over all 32
// lanes (each output written before any lane continues), then the warp is released together.
inline void collective(int kind, int arg, unsigned int mask, const char* what, const void* in,
                       void* out, WarpOp op) {
    Worker* w = tl;
    Fiber* f = w->cur;
    const int wi = f->tid / kWarp, lane = f->tid % kWarp;
    if (mask != 0xffffffffu)
        fail("%s with mask 0x%08x: only full-warp masks are emulated", what, mask);
    if (w->nthreads - kWarp * wi < kWarp) fail("%s in a partial warp", what);
    Warp& W = w->warps[wi];
    if (W.live != kWarp)
        fail("%s after %d lane(s) of warp %d exited", what, kWarp - W.live, wi);
    if (W.arrived == 0) {
        W.kind = kind;
        W.arg = arg;
        W.what = what;
        W.op = op;
    } else if (W.kind != kind || W.arg != arg) {
        fail("lanes of warp %d meet at different warp collectives: %s (arg %d) and %s (arg %d)", wi,
             W.what, W.arg, what, arg);
    }
    W.in[lane] = in;
    W.out[lane] = out;
    if (++W.arrived == kWarp) {
        W.op(W);
        W.arrived = 0;
        release(w, kWarp * wi, kWarp, true);
    }
    park(w, f, what);
}

struct ShflIn {
    unsigned long long value;
    int param;  // srcLane, delta or laneMask
};

template <int Kind>
inline void op_shfl(Warp& W) {
    const int width = W.arg & 0xff, bytes = W.arg >> 8;
    for (int lane = 0; lane < kWarp; ++lane) {
        const ShflIn* in = static_cast<const ShflIn*>(W.in[lane]);
        const int base = lane & ~(width - 1);
        int src = lane;
        if (Kind == kShflIdx) src = base + (in->param & (width - 1));
        if (Kind == kShflUp) src = lane - in->param >= base ? lane - in->param : lane;
        if (Kind == kShflDown) src = lane + in->param < base + width ? lane + in->param : lane;
        if (Kind == kShflXor) src = (lane ^ in->param) < base + width ? lane ^ in->param : lane;
        src &= kWarp - 1;
        memcpy(W.out[lane], &static_cast<const ShflIn*>(W.in[src])->value, (size_t)bytes);
    }
}

template <int Kind, class T>
inline T shfl(unsigned int mask, T var, int param, int width, const char* what) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles move 4 or 8 bytes");
    if (width <= 0 || width > kWarp || (width & (width - 1)))
        fail("%s with width %d", what, width);
    ShflIn in{0, param};
    memcpy(&in.value, &var, sizeof(T));
    T out;
    collective(Kind, width | (int)(sizeof(T) << 8), mask, what, &in, &out, &op_shfl<Kind>);
    return out;
}

inline void op_vote(Warp& W) {
    unsigned int ballot = 0;
    for (int lane = 0; lane < kWarp; ++lane)
        if (*static_cast<const int*>(W.in[lane])) ballot |= 1u << lane;
    for (int lane = 0; lane < kWarp; ++lane) {
        unsigned int r = ballot;
        if (W.kind == kAll) r = ballot == 0xffffffffu;
        if (W.kind == kAny) r = ballot != 0;
        *static_cast<unsigned int*>(W.out[lane]) = r;
    }
}

inline unsigned int vote(int kind, unsigned int mask, int pred, const char* what) {
    int in = pred != 0;
    unsigned int out = 0;
    collective(kind, 0, mask, what, &in, &out, &op_vote);
    return out;
}

inline void op_none(Warp&) {}

// ---- mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 ------------------------------------------
struct MmaIn {
    unsigned int a[4], b[2];
};

// A tensor-core operand must already be a TF32 value (its low 13 bits zero): what the hardware does
// with other bits is not modelled. Truncation was assumed until session 10, and never checked on
// the hardware; every program hands the tensor cores rounded values, and this keeps it so.
inline float tf32_operand(unsigned int bits) {
    const bool nan = (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0u;
    if ((bits & 0x1fffu) != 0u && !nan)  // (NaN propagates: the poison of unwritten memory, say)
        fail("tensor-core operand 0x%08x is not a TF32 value (low 13 bits set): round it (cvt.rn)", bits);
    return __uint_as_float(bits);
}

// D = A B + C on the m16n8 accumulator every lane holds (c/d0,1 (g, 2t..2t+1), c/d2,3 (g+8,
// 2t..2t+1), g = lane / 4, t = lane % 4; C and D are the same registers, so C is gathered from
// every lane before any D is written): exact products, accumulated in fp32 from C in k order.
template <int K>
inline void mma_accumulate(Warp& W, const float (&A)[16][K], const float (&B)[K][8]) {
    float C[16][8];
    for (int lane = 0; lane < kWarp; ++lane) {
        const float* d = static_cast<const float*>(W.out[lane]);
        const int g = lane >> 2, t = lane & 3;
        C[g][2 * t] = d[0];
        C[g][2 * t + 1] = d[1];
        C[g + 8][2 * t] = d[2];
        C[g + 8][2 * t + 1] = d[3];
    }
    for (int lane = 0; lane < kWarp; ++lane) {
        float* d = static_cast<float*>(W.out[lane]);
        const int g = lane >> 2, t = lane & 3;
        for (int x = 0; x < 4; ++x) {
            const int i = g + 8 * (x >> 1), j = 2 * t + (x & 1);
            float acc = C[i][j];
            for (int k = 0; k < K; ++k) acc += A[i][k] * B[k][j];  // exact products
            d[x] = acc;
        }
    }
}

// D = A B + C with the TF32 operands (mma_accumulate). Fragments, g = lane / 4, t = lane % 4:
// a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4);
// b0 (t, g) b1 (t+4, g); c/d0,1 (g, 2t..2t+1), c/d2,3 (g+8, 2t..2t+1).
inline void op_mma(Warp& W) {
    float A[16][8], B[8][8];
    for (int lane = 0; lane < kWarp; ++lane) {
        const MmaIn* in = static_cast<const MmaIn*>(W.in[lane]);
        const int g = lane >> 2, t = lane & 3;
        A[g][t] = tf32_operand(in->a[0]);
        A[g + 8][t] = tf32_operand(in->a[1]);
        A[g][t + 4] = tf32_operand(in->a[2]);
        A[g + 8][t + 4] = tf32_operand(in->a[3]);
        B[t][g] = tf32_operand(in->b[0]);
        B[t + 4][g] = tf32_operand(in->b[1]);
    }
    mma_accumulate(W, A, B);
}

inline void mma_tf32(float (&d)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                     unsigned int a3, unsigned int b0, unsigned int b1) {
    MmaIn in{{a0, a1, a2, a3}, {b0, b1}};
    collective(kMma, 0, 0xffffffffu, "mma.sync", &in, d, &op_mma);
}

// ---- mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ------------------------------------------
// An fp16 value (bits 0-15 of h) as a float: exact, every fp16 value is one.
inline float f16_value(unsigned int h) {
    const unsigned int sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
    if (e != 0u) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
    const float v = ldexpf((float)m, -24);  // subnormal
    return sign != 0u ? -v : v;
}

// D = A B + C with the fp16 operands (mma_accumulate; 11 x 11 significant bits fit a float).
// Fragments, g = lane / 4, t = lane % 4, the lower index in
// bits 0-15: a0 (g, 2t..2t+1) a1 (g+8, 2t..2t+1) a2 (g, 2t+8..2t+9) a3 (g+8, 2t+8..2t+9);
// b0 (2t..2t+1, g) b1 (2t+8..2t+9, g).
inline void op_mma_f16(Warp& W) {
    float A[16][16], B[16][8];
    for (int lane = 0; lane < kWarp; ++lane) {
        const MmaIn* in = static_cast<const MmaIn*>(W.in[lane]);
        const int g = lane >> 2, t = lane & 3;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + h] = f16_value(in->a[0] >> (16 * h));
            A[g + 8][2 * t + h] = f16_value(in->a[1] >> (16 * h));
            A[g][2 * t + 8 + h] = f16_value(in->a[2] >> (16 * h));
            A[g + 8][2 * t + 8 + h] = f16_value(in->a[3] >> (16 * h));
            B[2 * t + h][g] = f16_value(in->b[0] >> (16 * h));
            B[2 * t + 8 + h][g] = f16_value(in->b[1] >> (16 * h));
        }
    }
    mma_accumulate(W, A, B);
}

inline void mma_f16(float (&d)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                    unsigned int a3, unsigned int b0, unsigned int b1) {
    MmaIn in{{a0, a1, a2, a3}, {b0, b1}};
    collective(kMmaF16, 0, 0xffffffffu, "mma.sync f16", &in, d, &op_mma_f16);
}

// ---- wgmma.mma_async (sm_90a): warpgroup collectives -----------------------------------------------
// Every thread of the warpgroup arrives with its operands and its accumulators; the last one queues
// the operation for the warpgroup (`queue`; a meeting that is not a wgmma, the wait, runs its op
// then) and the warpgroup is released together. A queued operation is performed when the
// warpgroup meets at the wgmma.wait_group that covers its commit group (wait_group N performs every
// operation of the groups older than the newest N): its shared-memory operands are read and its
// accumulators read and written then, not at issue. So a program that overwrites an operand
// tile or reads an accumulator between a wgmma and the wait that covers it gets other values
// (with other thread orders, other bits), and one that never waits is refused at the block's end.
// Register A operands are taken at issue (a program may not change them before the wait either:
// ptxas may reuse their registers, tests/test_compile.py's hazard scan covers that on the SASS).
inline void group_collective(const char* what, const void* in, void* out, GroupOp op, bool queue = true) {
    Worker* w = tl;
    Fiber* f = w->cur;
    const int gi = f->tid / kGroup, k = f->tid % kGroup;
    if (w->nthreads < kGroup * (gi + 1)) fail("%s in a partial warpgroup", what);
    for (int q = 0; q < 4; ++q)
        if (w->warps[4 * gi + q].live != kWarp)
            fail("%s after lanes of warp %d exited", what, 4 * gi + q);
    Group& G = w->wgroups[gi];
    if (G.arrived == 0) {
        G.what = what;
        G.op = op;
    } else if (G.op != op) {
        fail("threads of warpgroup %d meet at different collectives: %s and %s", gi, G.what, what);
    }
    G.in[k] = in;
    G.out[k] = out;
    if (++G.arrived == kGroup) {
        if (queue) {
            G.pending.emplace_back();
            PendingWgmma& P = G.pending.back();
            P.op = G.op;
            P.group = w->fibers[(size_t)(kGroup * gi)].wg_commits;
            for (int q = 0; q < kGroup; ++q) {
                if (w->fibers[(size_t)(kGroup * gi + q)].wg_commits != P.group)
                    fail("%s: the threads of warpgroup %d have committed different numbers of groups", what, gi);
                P.in[q] = *static_cast<const WgmmaIn*>(G.in[q]);
                P.out[q] = G.out[q];
            }
        } else {
            G.op(G);
        }
        G.arrived = 0;
        release(w, kGroup * gi, kGroup, true);
    }
    park(w, f, what);
}

// wgmma.commit_group: the thread's wgmmas issued since its last commit form a group.
inline void wgmma_commit() { tl->cur->wg_commits += 1; }

// wgmma.wait_group n (.sync.aligned: the warpgroup's threads meet there): every operation of the
// warpgroup's groups but the newest n is performed, when the last thread arrives.
inline void op_wgmma_wait(Group& G) {
    const int done = *static_cast<const int*>(G.in[0]);  // groups 0 .. done - 1 complete
    for (int q = 1; q < kGroup; ++q)
        if (*static_cast<const int*>(G.in[q]) != done)
            fail("wgmma.wait_group: the threads of a warpgroup wait for different groups");
    size_t i = 0;
    for (; i < G.pending.size() && G.pending[i].group < done; ++i) {
        PendingWgmma& P = G.pending[i];
        Group run;
        for (int q = 0; q < kGroup; ++q) {
            run.in[q] = &P.in[q];
            run.out[q] = P.out[q];
        }
        P.op(run);
    }
    G.pending.erase(G.pending.begin(), G.pending.begin() + (long)i);
}

inline void wgmma_wait(int n) {
    const int done = tl->cur->wg_commits - n;
    group_collective("wgmma.wait_group", &done, nullptr, &op_wgmma_wait, false);
}

// Element (row, k) of a K-major operand in shared memory through its descriptor: start address,
// SBO between 8-row groups, 128-byte rows, k in 0..7 (one k8 step of tf32), and the 128-byte swizzle
// (address bits 4-6 XOR bits 7-9), the only mode cake uses; anything else is refused.
inline float wgmma_smem(unsigned long long desc, int row, int k) {
    Worker* w = tl;
    const unsigned int start = (unsigned int)(desc & 0x3FFFu) << 4;
    const unsigned int sbo = (unsigned int)((desc >> 32) & 0x3FFFu) << 4;
    if ((desc >> 62) != 1u || ((desc >> 49) & 7u) != 0u)
        fail("wgmma descriptor 0x%016llx: only the 128-byte swizzle with base offset 0 is emulated", desc);
    unsigned int addr = start + (unsigned int)(row >> 3) * sbo + (unsigned int)(row & 7) * 128u + 4u * (unsigned int)k;
    addr ^= ((addr >> 7) & 7u) << 4;
    if (addr + 4 > w->smem_bytes)
        fail("wgmma operand at shared offset %u, outside the block's %zu bytes", addr, w->smem_bytes);
    unsigned int bits;
    memcpy(&bits, w->smem + addr, 4);
    return tf32_operand(bits);
}

// m64nNk8 tf32 (N = 64 or 32): D = A B (+ D) with exact products accumulated in fp32 from D in k order. Thread k
// of the group (warp q = k / 32, g = lane / 4, t = lane % 4) holds d[4 j + x] = D(16 q + g + 8 (x >> 1),
// 8 j + 2 t + (x & 1)); from registers, a = A(16 q + g, t), A(16 q + g + 8, t), A(16 q + g, t + 4),
// A(16 q + g + 8, t + 4).
inline void op_wgmma_n64(Group& G) {
    const WgmmaIn* in0 = static_cast<const WgmmaIn*>(G.in[0]);
    static thread_local float A[64][8], B[64][8], D[64][64];
    if (in0->n != 64 && in0->n != 32) fail("wgmma: n = %d is not emulated", in0->n);
    const int nb = in0->n / 8;
    for (int k = 1; k < kGroup; ++k) {
        const WgmmaIn* in = static_cast<const WgmmaIn*>(G.in[k]);
        if (in->db != in0->db || in->acc != in0->acc || in->a_regs != in0->a_regs || in->n != in0->n ||
            (!in0->a_regs && in->da != in0->da))
            fail("wgmma: the threads of a warpgroup pass different descriptors or scale-d");
    }
    for (int k = 0; k < kGroup; ++k) {
        const WgmmaIn* in = static_cast<const WgmmaIn*>(G.in[k]);
        const float* d = static_cast<const float*>(G.out[k]);
        const int q = k >> 5, g = (k & 31) >> 2, t = k & 3;
        for (int j = 0; j < nb; ++j)
            for (int x = 0; x < 4; ++x)
                D[16 * q + g + 8 * (x >> 1)][8 * j + 2 * t + (x & 1)] = in0->acc ? d[4 * j + x] : 0.f;
        if (in0->a_regs) {
            A[16 * q + g][t] = tf32_operand(in->a[0]);
            A[16 * q + g + 8][t] = tf32_operand(in->a[1]);
            A[16 * q + g][t + 4] = tf32_operand(in->a[2]);
            A[16 * q + g + 8][t + 4] = tf32_operand(in->a[3]);
        }
    }
    for (int r = 0; r < 64; ++r)
        for (int k = 0; k < 8; ++k) {
            if (!in0->a_regs) A[r][k] = wgmma_smem(in0->da, r, k);
            if (r < in0->n) B[r][k] = wgmma_smem(in0->db, r, k);
        }
    for (int k = 0; k < kGroup; ++k) {
        float* d = static_cast<float*>(G.out[k]);
        const int q = k >> 5, g = (k & 31) >> 2, t = k & 3;
        for (int j = 0; j < nb; ++j)
            for (int x = 0; x < 4; ++x) {
                const int m = 16 * q + g + 8 * (x >> 1), n = 8 * j + 2 * t + (x & 1);
                float acc = D[m][n];
                for (int kk = 0; kk < 8; ++kk) acc += A[m][kk] * B[n][kk];  // exact products
                d[4 * j + x] = acc;
            }
    }
}

inline void wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db, int acc) {
    WgmmaIn in{da, db, acc != 0, 0, {0, 0, 0, 0}, 64};
    group_collective("wgmma.mma_async", &in, d, &op_wgmma_n64);
}

inline void wgmma_n64_rs(float (&d)[32], const unsigned int (&a)[4], unsigned long long db, int acc) {
    WgmmaIn in{0, db, acc != 0, 1, {a[0], a[1], a[2], a[3]}, 64};
    group_collective("wgmma.mma_async", &in, d, &op_wgmma_n64);
}

inline void wgmma_n32(float (&d)[16], unsigned long long da, unsigned long long db, int acc) {
    WgmmaIn in{da, db, acc != 0, 0, {0, 0, 0, 0}, 32};
    group_collective("wgmma.mma_async", &in, d, &op_wgmma_n64);
}

inline void wgmma_n32_rs(float (&d)[16], const unsigned int (&a)[4], unsigned long long db, int acc) {
    WgmmaIn in{0, db, acc != 0, 1, {a[0], a[1], a[2], a[3]}, 32};
    group_collective("wgmma.mma_async", &in, d, &op_wgmma_n64);
}

// ---- conversions ---------------------------------------------------------------------------------
// cvt.rn.tf32.f32: round to 10 explicit mantissa bits, ties to even; NaN stays NaN.
inline unsigned int cvt_rn_tf32(float x) {
    const unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffffffu;
    return (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
}

// cvt.rn.bf16.f32: round to nearest even; NaN becomes the canonical 0x7fff.
inline unsigned int cvt_rn_bf16(float x) {
    const unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// cvt.rn.f16.f32 (one half of cvt.rn.f16x2.f32): round to nearest even, subnormals kept, at or
// above 65520 (halfway past 65504) +-inf; NaN becomes the canonical 0x7fff.
inline unsigned int cvt_rn_f16(float x) {
    const unsigned int u = __float_as_uint(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fffu;
    if (a >= 0x477ff000u) return sign | 0x7c00u;
    if (a >= 0x38800000u) return sign | ((a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13);
    return sign | (unsigned int)nearbyintf(ldexpf(__uint_as_float(a), 24));  // m 2^-24, m <= 1024
}

// ex2.approx.ftz.f32, modelled as exp2f with subnormal inputs and results flushed to zero.
inline float ex2_approx_ftz(float x) {
    if (fpclassify(x) == FP_SUBNORMAL) x = 0.f;
    const float y = exp2f(x);
    return fpclassify(y) == FP_SUBNORMAL ? copysignf(0.f, y) : y;
}

// ---- threads -----------------------------------------------------------------------------------
inline uint3 thread_idx() { return {(unsigned int)tl->cur->tid, 0u, 0u}; }
inline unsigned char* dynamic_smem() { return tl->smem; }

inline void fiber_main(Fiber* f) {
    Worker* w = tl;
    w->body(w->body_arg);
    do_copies(f, f->copies.size());  // in flight at exit: they land anyway
    f->groups.clear();
    f->done = true;
    w->live -= 1;
    w->warps[f->tid / kWarp].live -= 1;
    if (w->bar_arrived > 0)
        fail("exited while %d thread(s) wait at __syncthreads() (undefined in CUDA)",
             w->bar_arrived);
    const Warp& W = w->warps[f->tid / kWarp];
    if (W.arrived > 0) fail("exited while %d lane(s) of its warp wait at %s", W.arrived, W.what);
    to_scheduler(w, f);
    __builtin_unreachable();
}

// ---- fault reports -------------------------------------------------------------------------------
inline struct sigaction old_segv, old_bus;

inline void on_fault(int sig, siginfo_t* info, void* uctx) {
    Worker* w = tl;
    if (w != nullptr && w->cur != nullptr) {
        const Fiber* f = w->cur;
        const unsigned char* a = static_cast<const unsigned char*>(info->si_addr);
        const bool guard = a >= f->map && a < f->map + (size_t)sysconf(_SC_PAGESIZE);
        char buf[512];
        const int n = snprintf(
            buf, sizeof buf, "\ncake emu: %s at %p in %s, block (%u,%u,%u), thread %d: %s\n",
            sig == SIGBUS ? "bus error" : "segmentation fault", info->si_addr, w->kernel,
            w->block_idx.x, w->block_idx.y, w->block_idx.z, f->tid,
            guard ? "the thread's stack overflowed (raise tools.emu.Options.stack_kb)"
                  : "an out-of-bounds or misaligned access (an address 0 may be misalignment)");
        if (n > 0) (void)!write(2, buf, (size_t)std::min(n, (int)sizeof buf - 1));
    }
    struct sigaction& old = sig == SIGBUS ? old_bus : old_segv;
    if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction != nullptr) {
        old.sa_sigaction(sig, info, uctx);
    } else if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
        old.sa_handler(sig);
    } else {
        signal(sig, SIG_DFL);  // the access faults again and the process ends
    }
}

inline void install_fault_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = &on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &old_segv);
        sigaction(SIGBUS, &sa, &old_bus);
    });
}

// ---- blocks --------------------------------------------------------------------------------------
inline std::mutex pool_mutex;
inline std::vector<Worker*> pool;

inline Worker* acquire_worker() {
    std::lock_guard<std::mutex> lock(pool_mutex);
    if (pool.empty()) return new Worker();
    Worker* w = pool.back();
    pool.pop_back();
    return w;
}

// A worker goes back to the pool without its mappings: each program's library has a pool of its
// own, and a test process that ran ~60 programs with their fiber stacks (two mappings each, stack
// and guard page) kept passed vm.max_map_count (65 530) and could map no more ("cannot map fiber
// stacks"). Mapping them again at the next launch costs ~1 ms a worker.
inline void release_worker(Worker* w) {
    for (Fiber& f : w->fibers) munmap(f.map, f.map_bytes);
    w->fibers.clear();
    if (w->smem_map != nullptr) munmap(w->smem_map, w->smem_cap);
    w->smem_map = nullptr;
    w->smem_cap = 0;
    std::lock_guard<std::mutex> lock(pool_mutex);
    pool.push_back(w);
}

inline bool prepare(Worker* w, int nthreads, size_t smem_bytes, size_t stack_bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_bytes = (stack_bytes + page - 1) / page * page;
    if (stack_bytes != w->stack_bytes) {
        for (Fiber& f : w->fibers) munmap(f.map, f.map_bytes);
        w->fibers.clear();
        w->stack_bytes = stack_bytes;
    }
    if ((int)w->fibers.size() < nthreads) {
        const size_t old = w->fibers.size();
        w->fibers.resize((size_t)nthreads);
        for (size_t i = old; i < w->fibers.size(); ++i) {
            Fiber& f = w->fibers[i];
            f.map_bytes = page + stack_bytes;
            void* m = mmap(nullptr, f.map_bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) return false;
            f.map = static_cast<unsigned char*>(m);
            mprotect(f.map, page, PROT_NONE);  // guard page: an overflow faults
        }
    }
    if (smem_bytes + 2 * kCanary > w->smem_cap) {
        if (w->smem_map != nullptr) munmap(w->smem_map, w->smem_cap);
        w->smem_cap = smem_bytes + 2 * kCanary;
        void* m = mmap(nullptr, w->smem_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (m == MAP_FAILED) return false;
        w->smem_map = static_cast<unsigned char*>(m);
    }
    w->smem = w->smem_map + kCanary;
    w->smem_bytes = smem_bytes;
    w->nthreads = nthreads;
    w->warps.assign((size_t)(nthreads + kWarp - 1) / kWarp, Warp());
    w->wgroups.assign((size_t)(nthreads + kGroup - 1) / kGroup, Group());
    w->ring.assign((size_t)nthreads, nullptr);
    return true;
}

// Run one block to completion; false (with w->error set) on any error.
inline bool run_block(Worker* w) {
    memset(w->smem - kCanary, kCanaryByte, kCanary);
    memset(w->smem, 0xff, w->smem_bytes);  // poison: every fp32 read of unwritten memory is NaN
    memset(w->smem + w->smem_bytes, kCanaryByte, kCanary);
    w->failed = false;
    w->error[0] = 0;
    w->cur = nullptr;
    w->bar_arrived = 0;
    w->live = w->nthreads;
    for (size_t i = 0; i < w->warps.size(); ++i) {
        w->warps[i] = Warp();
        w->warps[i].live = std::min(kWarp, w->nthreads - kWarp * (int)i);
    }
    for (Group& G : w->wgroups) G = Group();
    for (NamedBar& B : w->nbars) B = NamedBar();
    w->mbars.clear();
    for (int i = 0; i < w->nthreads; ++i) {
        Fiber& f = w->fibers[(size_t)i];
        f.tid = i;
        f.done = false;
        f.waiting = nullptr;
        f.copies.clear();
        f.groups.clear();
        f.wg_commits = 0;
        init_fiber(w, &f);
    }
    w->head = w->count = 0;
    release(w, 0, w->nthreads, false);
    while (w->count > 0) {
        Fiber* f = w->ring[w->head];
        w->head = (w->head + 1) % w->ring.size();
        w->count -= 1;
        w->cur = f;
        to_fiber(w, f);
        w->cur = nullptr;
        if (w->failed) return false;
    }
    if (w->live > 0) {
        // Nothing can run but threads are unfinished: say where they wait.
        char where[512] = {0};
        int n = 0;
        std::vector<std::pair<const char*, int>> seen;
        for (int i = 0; i < w->nthreads; ++i) {
            const Fiber& f = w->fibers[(size_t)i];
            if (f.done) continue;
            const char* what = f.waiting != nullptr ? f.waiting : "?";
            auto it = std::find_if(seen.begin(), seen.end(),
                                   [&](const auto& p) { return strcmp(p.first, what) == 0; });
            if (it == seen.end()) seen.emplace_back(what, 1);
            else it->second += 1;
        }
        for (const auto& [what, k] : seen)
            if (n < (int)sizeof where)
                n += snprintf(where + n, sizeof where - n, "%s%d at %s", n ? ", " : "", k, what);
        block_error(w, "deadlock: %d thread(s) can never continue (%s)", w->live, where);
        return false;
    }
    for (size_t g = 0; g < w->wgroups.size(); ++g)
        if (!w->wgroups[g].pending.empty()) {
            block_error(w, "warpgroup %zu exited with %zu wgmma(s) never waited for", g, w->wgroups[g].pending.size());
            return false;
        }
    for (const auto& [at, M] : w->mbars)
        if (!M.bulk.empty() || M.tx != 0) {
            block_error(w, "the block exited with bulk copies in flight on the mbarrier at shared offset %u", at);
            return false;
        }
    for (size_t i = 0; i < kCanary; ++i) {
        if (w->smem[-1 - (long)i] != kCanaryByte) {
            block_error(w, "a write %zu byte(s) before the start of shared memory", i + 1);
            return false;
        }
        if (w->smem[w->smem_bytes + i] != kCanaryByte) {
            block_error(w, "a write at byte %zu past the end of the %zu bytes of shared memory", i,
                        w->smem_bytes);
            return false;
        }
    }
    return true;
}

// cfg: grid x, y, z, threads per block, dynamic shared memory bytes, worker OS threads,
// schedule (0 forward, 1 reverse, >= 2 shuffled with that seed), fiber stack bytes, eager cp.async.
inline int run_grid(const char* kernel, const long long* cfg, void (*body)(const void*),
                    const void* arg, char* err, int errlen) {
    const long long gx = cfg[0], gy = cfg[1], gz = cfg[2], threads = cfg[3], smem = cfg[4];
    const long long nblocks = gx * gy * gz;
    auto say = [&](const char* fmt, auto... a) {
        snprintf(err, (size_t)errlen, fmt, a...);
        return 1;
    };
    if (gx < 0 || gy < 0 || gz < 0 || gx > 0x7fffffff || gy > 65535 || gz > 65535)
        return say("%s: grid (%lld, %lld, %lld) is out of CUDA's range", kernel, gx, gy, gz);
    if (threads < 1 || threads > 1024)
        return say("%s: %lld threads per block (CUDA allows 1..1024)", kernel, threads);
    if (smem < 0 || (size_t)smem > kMaxSmem)
        return say("%s: %lld bytes of dynamic shared memory (sm_90 allows at most %zu)", kernel,
                   smem, kMaxSmem);
    if (nblocks == 0) return 0;
    install_fault_handler();
    const int nworkers = (int)std::max(1LL, std::min(cfg[5], nblocks));
    std::atomic<long long> next{0};
    std::atomic<bool> stop{false};
    std::mutex mutex;
    long long bad_block = -1;
    std::string message;
    auto work = [&] {
        const size_t alt_bytes = 64 * 1024;
        stack_t alt{};
        alt.ss_sp = malloc(alt_bytes);
        alt.ss_size = alt_bytes;
        sigaltstack(&alt, nullptr);
        Worker* w = acquire_worker();
        tl = w;
        if (!prepare(w, (int)threads, (size_t)smem, (size_t)cfg[7])) {
            std::lock_guard<std::mutex> lock(mutex);
            bad_block = 0;
            message = std::string(kernel) + ": cannot map fiber stacks or shared memory";
            stop = true;
        }
        w->kernel = kernel;
        w->body = body;
        w->body_arg = arg;
        w->grid_dim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
        w->block_dim = {(unsigned)threads, 1u, 1u};
        w->schedule = cfg[6];
        w->eager_copies = cfg[8] != 0;
        for (long long b; !stop && (b = next++) < nblocks;) {
            w->block_idx = {(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / (gx * gy))};
            w->rng.seed((unsigned long long)cfg[6] * 0x9e3779b97f4a7c15ull + (unsigned long long)b);
            if (!run_block(w)) {
                std::lock_guard<std::mutex> lock(mutex);
                if (bad_block < 0 || b < bad_block) {
                    bad_block = b;
                    message = w->error;
                }
                stop = true;
            }
        }
        tl = nullptr;
        release_worker(w);
        alt.ss_flags = SS_DISABLE;
        sigaltstack(&alt, nullptr);
        free(alt.ss_sp);
    };
    std::vector<std::thread> pool_threads;
    for (int i = 0; i < nworkers; ++i) pool_threads.emplace_back(work);
    for (std::thread& t : pool_threads) t.join();
    if (bad_block >= 0) return say("%s", message.c_str());
    return 0;
}

// ---- kernel entry points -----------------------------------------------------------------------
template <class T>
constexpr char arg_kind() {
    if constexpr (std::is_pointer_v<T>) return 'p';
    else if constexpr (std::is_same_v<T, float>) return 'f';
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 4) return 'i';
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 8) return 'l';
    else return '?';
}

template <class... P>
const char* signature(void (*)(P...)) {
    static const char kinds[] = {arg_kind<P>()..., 0};
    return kinds;
}

template <class... P>
struct Bound {
    void (*kernel)(P...);
    std::tuple<P...> args;
    static void run(const void* self) {
        const Bound* b = static_cast<const Bound*>(self);
        std::apply(b->kernel, b->args);
    }
};

// args[i] points at the value of argument i, as with cuLaunchKernel.
template <class... P, size_t... I>
int launch_impl(void (*kernel)(P...), const char* name, const long long* cfg, void** args,
                char* err, int errlen, std::index_sequence<I...>) {
    const Bound<P...> bound{kernel, std::tuple<P...>(*static_cast<P*>(args[I])...)};
    return run_grid(name, cfg, &Bound<P...>::run, &bound, err, errlen);
}

template <class... P>
int launch(void (*kernel)(P...), const char* name, const long long* cfg, void** args, char* err,
           int errlen) {
    return launch_impl(kernel, name, cfg, args, err, errlen, std::index_sequence_for<P...>{});
}

}  // namespace emu

// ---- CUDA built-ins that need the runtime --------------------------------------------------------
#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::tl->block_idx)
#define blockDim (::emu::tl->block_dim)
#define gridDim (::emu::tl->grid_dim)

inline void __syncthreads() { ::emu::syncthreads(); }
// The device trap: the launch fails with an error (the block is abandoned), as the GPU's does.
[[noreturn]] inline void __trap() { ::emu::fail("__trap() called"); }
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
    ::emu::collective(::emu::kSyncwarp, 0, mask, "__syncwarp", nullptr, nullptr, &::emu::op_none);
}
template <class T>
inline T __shfl_sync(unsigned int mask, T var, int src, int width = warpSize) {
    return ::emu::shfl<::emu::kShflIdx>(mask, var, src, width, "__shfl_sync");
}
template <class T>
inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
    return ::emu::shfl<::emu::kShflUp>(mask, var, (int)delta, width, "__shfl_up_sync");
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
    return ::emu::shfl<::emu::kShflDown>(mask, var, (int)delta, width, "__shfl_down_sync");
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = warpSize) {
    return ::emu::shfl<::emu::kShflXor>(mask, var, lane_mask, width, "__shfl_xor_sync");
}
inline int __all_sync(unsigned int mask, int pred) {
    return (int)::emu::vote(::emu::kAll, mask, pred, "__all_sync");
}
inline int __any_sync(unsigned int mask, int pred) {
    return (int)::emu::vote(::emu::kAny, mask, pred, "__any_sync");
}
inline unsigned int __ballot_sync(unsigned int mask, int pred) {
    return ::emu::vote(::emu::kBallot, mask, pred, "__ballot_sync");
}
