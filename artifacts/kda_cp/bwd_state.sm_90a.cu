// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.bwd_state.sm_90a by cake migrate
// record: kda_cp/bwd_state  program: kda_cp.bwd_state.sm_90a
// identity: sha256:2d43d6858c2b2a444371d7856866c581e42fccb141e990eaf696642c984a8641
// ---- begin cake/bf16.cuh ----

// bf16 is the top half of an fp32, so widening is a shift: exact and free of toolkit headers.
__device__ __forceinline__ float cake_bf16_lo(unsigned int packed) {
    return __uint_as_float(packed << 16);
}

__device__ __forceinline__ float cake_bf16_hi(unsigned int packed) {
    return __uint_as_float(packed & 0xffff0000u);
}

__device__ __forceinline__ float cake_bf16_to_f32(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// Round to nearest even, as torch does; PTX packs the first source into the upper half.
__device__ __forceinline__ unsigned int cake_pack_bf16x2(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// One value rounded to nearest even (torch's .to(torch.bfloat16)), as bf16 bits.
__device__ __forceinline__ unsigned short cake_f32_to_bf16(float x) {
    return (unsigned short)(cake_pack_bf16x2(x, 0.f) & 0xffffu);
}
// ---- end cake/bf16.cuh ----
// ---- begin cake/mma.cuh ----

// Round to nearest, ties to even: the same half-ulp bound the TF32 error budget in
// docs/kernel-notes.md assumes; feeding raw fp32 bits to the tensor core would truncate instead.
// cvt.rn (PTX 7.8, sm_90+: every arch cake builds) is one native instruction (F2FP.TF32); cvt.rna
// was three (an Inf/NaN guard, an add, a mask), ~10 % of kda_bwd_chunk's instructions.
__device__ __forceinline__ unsigned int cake_tf32(float x) {
    unsigned int r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// x = hi + lo, both TF32 (each cake_tf32): |x - hi - lo| <= 2^-22 |x|. Three tensor-core products
// (hi hi, hi lo, lo hi) of two split operands then carry ~fp32 precision ("3xTF32").
__device__ __forceinline__ void cake_split_tf32(float x, unsigned int& hi, unsigned int& lo) {
    hi = cake_tf32(x);
    lo = cake_tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ void cake_split_tf32(float x, float& hi, float& lo) {
    unsigned int h, l;
    cake_split_tf32(x, h, l);
    hi = __uint_as_float(h);
    lo = __uint_as_float(l);
}

// D += A(16x8, row) * B(8x8, col), fp32 accumulate. Fragment ownership, g = lane / 4, t = lane % 4:
// a0 (g, k0) a1 (g+8, k0) a2 (g, k1) a3 (g+8, k1); b0 (k0, g) b1 (k1, g);
// d0,d1 (g, 2t..2t+1) d2,d3 (g+8, 2t..2t+1). Callers choose the pair (k0, k1) a lane covers; any
// bijection onto the 8 reduction slots is valid as long as A and B use the same one.
__device__ __forceinline__ void cake_mma_tf32(float (&d)[4], unsigned int a0, unsigned int a1,
                                              unsigned int a2, unsigned int a3, unsigned int b0,
                                              unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// ---- end cake/mma.cuh ----
// ---- begin cake/cp_async.cuh ----

__device__ __forceinline__ unsigned int cake_smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

// 16-byte global->shared copy that bypasses L1 (every byte is read once per block). src_bytes < 16
// zero-fills the rest, which is how rows past a short chunk become exact zeros.
__device__ __forceinline__ void cake_cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(cake_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
}

// 8-byte global->shared copy (the .cg form above takes 16 bytes only, so this one goes through L1).
__device__ __forceinline__ void cake_cp_async8(void* smem_dst, const void* gmem_src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;"
                 :: "r"(cake_smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cake_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cake_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

// Pull the 128-byte line holding p into L2 (no register result, nothing waits on it): a later
// load of it then pays L2 latency, not DRAM's.
__device__ __forceinline__ void cake_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}
// ---- end cake/cp_async.cuh ----
// ---- begin cake/opaque.cuh ----
// x through an empty asm: the compiler cannot see through it, so what a thread derives from x
// (its shared-memory offsets) is computed once where written, not recomputed from tid at every
// use nor kept live across a phase or a loop that re-derives it (register pressure). No
// instruction.
__device__ __forceinline__ int cake_opaque(int x) {
    asm volatile("" : "+r"(x));
    return x;
}
// ---- end cake/opaque.cuh ----
// ---- begin cake/wgmma.cuh ----
// Warpgroup matrix multiply (wgmma, sm_90a only) on tf32 operands in shared memory; the layout,
// descriptors and fragment map are docs/wgmma-plan.md's, checked alone by tests/cuda/wgmma_probe.cu.
//
// Operand layout: K-major (tf32 wgmma has no transpose), 128-byte swizzle. A tile of ROWS rows is
// stored as K panels of 32 elements: panel p = ROWS x 128 bytes, row r at r * 128, its 16-byte
// chunk c at chunk c ^ (r % 8). Tiles start on 1024-byte boundaries (descriptor base offset 0).
// Accumulators (m64nNk8, f32): warp w of the warpgroup holds rows 16 w + g, 16 w + g + 8; n8 block
// j holds columns 8 j + 2 t, 8 j + 2 t + 1 as d[4 j], d[4 j + 1] (row 16 w + g) and d[4 j + 2],
// d[4 j + 3] (row 16 w + g + 8), with g = lane / 4, t = lane % 4.
// ---- begin cake/wgmma_layout.cuh ----
// The K-major, 128-byte-swizzled shared-memory layout of wgmma's tf32 operands and their
// descriptors (docs/wgmma-plan.md): plain C++, so the CPU emulator compiles this header as it is
// (cake/wgmma.cuh, the instructions, has a CPU twin).

// Float index of element (row, k) of a ROWS-row tile in that layout.
template <int ROWS>
__device__ __forceinline__ int cake_wg_idx(int row, int k) {
    return (k >> 5) * (ROWS * 32) + row * 32 + ((((k >> 2) & 7) ^ (row & 7)) << 2) + (k & 3);
}

// Descriptor of rows row0..row0+63 (row0 a multiple of 8) and k8 step s of a ROWS-row tile: panel
// s / 4, +32 bytes per step inside the swizzled rows; SBO 1024 bytes (8 rows), LBO unused (1),
// 128-byte swizzle (mode 1 in bits 62-63).
// The descriptor is split in two words: the low word holds the start address / 16 (bits 0-13) and
// LBO, the high word is the constant SBO and swizzle mode. cake_wg_desc_lo(addr) is the low word of
// a tile starting at shared-memory byte address addr; cake_wg_desc_at adds a step's byte offset / 16
// to it, which cannot carry out of the address field (shared-memory addresses are below 2^18), so
// a loop's descriptors cost one add each from a low word computed once.
__device__ __forceinline__ unsigned int cake_wg_desc_lo(unsigned int addr) {
    return ((addr & 0x3FFFF) >> 4) | (1u << 16);
}
template <int ROWS>
__device__ __forceinline__ unsigned long long cake_wg_desc_at(unsigned int lo, int row0, int s) {
    // the high word, a constant here: at namespace scope it was unreferenced (NVRTC warning 177)
    // in the programs that include this header for its layout only (kda_fwd_chunk sm_90a, the
    // portable fwd_state and fwd_state_local programs)
    constexpr unsigned int hi = 64u | (1u << 30);
    const int bytes = (s >> 2) * (ROWS * 128) + row0 * 128 + (s & 3) * 32;
    return ((unsigned long long)hi << 32) | (lo + (unsigned int)(bytes >> 4));
}
template <int ROWS>
__device__ __forceinline__ unsigned long long cake_wg_desc(const float* tile, int row0, int s) {
    return cake_wg_desc_at<ROWS>(cake_wg_desc_lo(cake_smem_addr(tile)), row0, s);
}
// ---- end cake/wgmma_layout.cuh ----

// d (+)= A B for one k8 step: m64n64k8, f32 accumulators, tf32 operands. acc = 0: d = A B.
__device__ __forceinline__ void cake_wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}

// The same with A from registers: a = A(16 w + g, t), A(16 w + g + 8, t), A(16 w + g, t + 4),
// A(16 w + g + 8, t + 4) of this k8 step (w = warp in the warpgroup), already TF32.
__device__ __forceinline__ void cake_wgmma_n64_rs(float (&d)[32], const unsigned int (&a)[4], unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

// m64n32k8 with A from registers (the same a as cake_wgmma_n64_rs); B rows (n) from the
// descriptor's row0 on, d[4 j + x] for n8 blocks j = 0..3.
__device__ __forceinline__ void cake_wgmma_n32_rs(float (&d)[16], const unsigned int (&a)[4], unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

// m64n32k8 with A and B from shared memory (descriptors as cake_wgmma_n64's); d as cake_wgmma_n32_rs.
__device__ __forceinline__ void cake_wgmma_n32(float (&d)[16], unsigned long long da, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(acc));
}

// x through an empty asm: a copy of an accumulator that ptxas does not trace back to it. Reading
// an accumulator of the state pass (say, to shuffle it) between a wgmma's issue and its wait made
// ptxas serialize every wgmma (C7514); reading the copy does not.
__device__ __forceinline__ float cake_wg_opaque(float x) {
    asm volatile("" : "+f"(x));
    return x;
}

// Before the first wgmma that reads accumulators written by other instructions.
__device__ __forceinline__ void cake_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void cake_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cake_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// Shared memory written by ordinary stores, made visible to wgmma's (async proxy) reads.
__device__ __forceinline__ void cake_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// ---- end cake/wgmma.cuh ----
// ---- begin cake/chunk_image.cuh ----
// Where kda_fwd_chunk (sm_90a) stores each chunk tile that the state passes read: in kda_fwd_state's
// shared-memory image of that tile, so that fwd_state copies a tile whole with one bulk copy (one
// thread, a transaction mbarrier) where it took 16-byte cp.async pieces from 128 threads
// (docs/notes.md, session 22). Float offsets inside one chunk-head's tile; every map is a
// permutation of 16-byte pieces, so a row-major 128-byte run of a row lands on one 128-byte line.
// Plain C++ (the CPU emulator compiles it as it is).

// fwd_state's chain keeps W's rows (tokens) and Kd^T's rows (keys) in the order pk,
// pk(8j + 2t + e) = 8j + t + 4e: row r is stored at position pkinv(r).
__device__ __forceinline__ int cake_pkinv(int r) { return (r & ~7) + 2 * (r & 3) + ((r >> 2) & 1); }
__device__ __forceinline__ int cake_pk(int q) { return (q & ~7) + 4 * (q & 1) + ((q >> 1) & 3); }

// U's 16-byte chunks XOR-swizzled per row (fwd_state's el64): rows 2q, 2q + 1 differ in bit 2.
__device__ __forceinline__ int cake_sw64(int r) { return (r & 6) ^ ((r & 1) << 2); }

// W [64 tok][128 K]: wgmma B operand of W S, rows in pk order.
__device__ __forceinline__ int cake_img_w(int r, int k) { return cake_wg_idx<64>(cake_pkinv(r), k); }
// Kd^T [128 K][64 tok]: B operand of Vnew^T Kd, rows (keys) in pk order.
__device__ __forceinline__ int cake_img_kd(int d, int r) { return cake_wg_idx<128>(cake_pkinv(d), r); }
// Qg [64 tok][128 K] and Aqk [64][64]: A operands of O, rows as they are.
__device__ __forceinline__ int cake_img_qg(int r, int k) { return cake_wg_idx<64>(r, k); }
__device__ __forceinline__ int cake_img_aqk(int r, int c) { return cake_wg_idx<64>(r, c); }
// U [64 tok][128 v]: the two 64-value halves one after the other (one per value block of
// fwd_state), each [64 tok][64 v] with its 16-byte chunks swizzled by cake_sw64.
__device__ __forceinline__ int cake_img_u(int r, int v) {
    return (v >> 6) * 4096 + r * 64 + ((((v & 63) >> 2) ^ cake_sw64(r)) << 2) + (v & 3);
}
// ---- end cake/chunk_image.cuh ----
// ---- begin cake/mbar.cuh ----
// mbarriers (shared-memory barrier objects, 8 bytes each) as one-way hand-offs between
// warpgroups: n producer threads arrive (release), the consumers wait on the phase's parity
// (acquire). Unlike a named barrier's arrive -> sync, compute-sanitizer's racecheck orders
// ordinary shared-memory accesses through them, and synccheck accepts waits at any instruction
// (tools/barrier_probe.py, docs/notes.md, session 21), so data written by ordinary stores may be
// read by ordinary loads on the other side.

// One thread initialises; every thread of the block passes a __syncthreads() before first use.
__device__ __forceinline__ void cake_mbar_init(unsigned long long* b, int n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(cake_smem_addr(b)), "r"(n) : "memory");
}

// One of the n arrivals of the current phase; the last completes it (the parity flips).
__device__ __forceinline__ void cake_mbar_arrive(unsigned long long* b) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" :: "r"(cake_smem_addr(b)) : "memory");
}

// Wait until the phase of this parity (0 for the first, 1 for the second, ...) has completed.
__device__ __forceinline__ void cake_mbar_wait(unsigned long long* b, int parity) {
    asm volatile(
        "{\n\t.reg .pred p;\n"
        "CAKE_MBAR_WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n\t"
        "@!p bra CAKE_MBAR_WAIT_%=;\n}"
        :: "r"(cake_smem_addr(b)), "r"(parity) : "memory");
}

// After the inits, before any bulk copy completes on them: the mbarriers' initialisation made
// visible to the async proxy (the bulk-copy engine that signals them).
__device__ __forceinline__ void cake_mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One of the n arrivals that also expects `bytes` more transaction bytes in this phase: the phase
// completes once every arrival is in and every expected byte has landed.
__device__ __forceinline__ void cake_mbar_expect_tx(unsigned long long* b, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :: "r"(cake_smem_addr(b)), "r"(bytes) : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory by the
// bulk-copy engine, landing as transaction bytes of mbarrier b's phase in progress. One thread
// issues the copy of a whole tile; the readers wait on the mbarrier (acquire), which also makes
// the async proxy's writes visible to wgmma and to ordinary loads.
__device__ __forceinline__ void cake_bulk_load(void* dst, const void* src, unsigned int bytes,
                                               unsigned long long* b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(cake_smem_addr(dst)), "l"(src), "r"(bytes), "r"(cake_smem_addr(b)) : "memory");
}
// ---- end cake/mbar.cuh ----

namespace {

// dO staging, bf16 [64 tok][64 v]: 8-value (16-byte) chunks XOR-swizzled by the row's low 3 bits.
__device__ __forceinline__ int at_or(int r, int cc) { return r * 64 + ((cc ^ (r & 7)) << 3); }

__device__ __forceinline__ float rtf32(float x) { return __uint_as_float(cake_tf32(x)); }

}  // namespace
extern "C" __global__ void __launch_bounds__(256, 1) kda_bwd_state(
    const float* __restrict__ Qg, const float* __restrict__ W, const float* __restrict__ Kd,
    const float* __restrict__ Aqk, const float* __restrict__ gl,
    const unsigned short* __restrict__ dout, const int* __restrict__ chunks,
    const int* __restrict__ seq_chunks, const float* __restrict__ dht, float* __restrict__ dS_end,
    float* __restrict__ dVn, float* __restrict__ dh0, int H, int has_dht, int store_dh0)
{
    // ---- sm_90a: the products on wgmma with A from registers (its A operands are the transposes
    // of the stored layouts; tf32 wgmma has no transpose) and B from shared memory in the K-major
    // swizzled layout (docs/wgmma-plan.md). Each warpgroup computes 32 value columns of dVn and
    // updates its 64 key rows of dS. Kd^T, Aqk, Qg and W come in the image kda_fwd_chunk stores
    // them in (kda_fwd_state's, cake/chunk_image.cuh): in the bulk form (kda_bwd_state_bulk), one
    // bulk copy each, and the A fragments are gathered from that image; else in 16-byte cp.async
    // pieces into this program's gather layout.
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* Ks = reinterpret_cast<float*>(smem);  // Kd^T [128 d][64 tok]   (A, gathered)
    float* As = Ks + 128 * 64;                   // Aqk  [64][64]          (A, gathered)
    float* Qs = As + 64 * 64;                    // Qg   [64 tok][128 d]   (A, gathered)
    float* Ws = Qs + 64 * 128;                   // W    [64 tok][128 d]   (A, gathered)
    float* Ot = Ws + 64 * 128;                   // dO^T [64 v][64 tok]    (B, wgmma layout), two
                                                 // buffers: a chunk's, the next one's (converted ahead)
    float* St = Ot + 2 * 64 * 64;                // dS^T [64 v][128 d], TF32 (B)
    float* Vt = St + 64 * 128;                   // -dVn^T [64 v][64 tok], TF32 (B)
    float* Gs = Vt + 64 * 64;                    // gl [128]
    unsigned short* Or = reinterpret_cast<unsigned short*>(Gs + 128);  // dO staging [64 tok][64 v] bf16
    // Phase A's partial sums exchanged between the warpgroups: [2 senders][4][128 threads][4] floats,
    // 64 bytes past the dO staging (the bulk form's two mbarriers lie there; both forms alike).
    float* Xs = reinterpret_cast<float*>(Or + 64 * 64) + 16;
    // wgmma descriptors' low words from one shared-memory address (cake_wg_desc_at: one add a step)
    const unsigned int dsm = cake_wg_desc_lo(cake_smem_addr(smem));
    auto dlo = [&](const float* tile) { return dsm + (unsigned int)((tile - Ks) >> 2); };

    const int vb = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3;
    const int g = (tid & 31) >> 2, t = tid & 3;
    const int c0 = seq_chunks[2 * n], nc = seq_chunks[2 * n + 1];
    const long long state_base = ((long long)n * H + h) * 16384 + vb * 64;
    const long long tok_stride = (long long)H * 128;
    // A thread's element x: row row_of(x), column 8 (x >> 2) + 2t + (x & 1).
    auto row_of = [&](int x) { return 16 * w + g + ((x & 2) << 2); };
    const int kd0 = 64 * wg;  // this warpgroup's key rows of dS
    // cp.async form: A tiles stored [k][m] with the 16-byte chunks of row k XOR-ed by 2 (k % 4):
    // the register-A gathers (rows k0 + t, columns m0 + g, t = 0..3, g = 0..7) hit 32 distinct
    // banks.
    auto ag = [](int M, int k, int m) { return k * M + ((((m >> 2) ^ ((k & 3) << 1))) << 2) + (m & 3); };
    // A fragment of k8 step s: rows m0 + 16 w + g (+ 8), reduction indices 8 s + t (+ 4).
    // Rows 8 s + t (+ 4) keep k % 4 = t, so step s is step 0 plus 8 s rows: two swizzled offsets
    // (columns m, m + 8) per tile, the rest immediates.
    auto afrag = [&](const float* tile, int M, int m0, int s, unsigned int (&a)[4]) {
        const int m = m0 + 16 * w + g;
        const float* p = tile + 8 * s * M;
        const int o0 = ag(M, t, m), o1 = ag(M, t, m + 8);
        a[0] = __float_as_uint(p[o0]);
        a[1] = __float_as_uint(p[o1]);
        a[2] = __float_as_uint(p[o0 + 4 * M]);
        a[3] = __float_as_uint(p[o1 + 4 * M]);
    };

    // A thread's elements: x's bits 0, 1 and 2-4 add column 1, row 8 and columns 8 (x >> 2). In
    // the wgmma layout (cake_wg_idx) row 8 flips chunk bit 1 of every element here (^ 8), and the
    // 8-column steps keep the swizzle (+ 256), so each tile's offsets are two per thread (column
    // parity b) plus constants, where recomputing them per element cost registers and per-chunk
    // instructions (identities checked exhaustively).
    auto hx = [](int x) { return 8 * ((x >> 1) & 1); };  // the XOR of row + 8
    const int oS = cake_opaque((kd0 + 16 * w + g) * 128 + 2 * t);  // dS element (kd0 + row_of(0), 2t)
    float S[32];
#pragma unroll
    for (int x = 0; x < 32; ++x)
        S[x] = has_dht ? dht[state_base + oS + 128 * hx(x) + 8 * (x >> 2) + (x & 1)] : 0.f;

    // The tiles come as kda_fwd_chunk stored them (kda_fwd_state's image). Bulk form: thread 0
    // issues one bulk copy each, landing on the group's transaction mbarrier. cp.async form: the
    // image's 128-byte rows (in pk order for W and Kd^T) of 32-float panels, their 16-byte chunks
    // swizzled by row % 8; thread (row q = tid / 8, chunk u = tid % 8) copies chunk u of image
    // rows q + 32 j of each panel (a warp reads 512 contiguous bytes), element (row, 4 (u ^ q % 8))
    // of the panel with row = q or pk(q), to its place in the gather layout ag. dO's rows
    // (token-major in global memory) come in 16-byte cp.async pieces from every thread in both.
    const int q8 = tid >> 3, cq = 4 * ((tid & 7) ^ (q8 & 7)), gI = 32 * q8 + 4 * (tid & 7);
    const int sKd = ag(64, cake_pk(q8), cq), sA = ag(64, q8, cq);
    const int sQ = ag(128, q8, cq), sW = ag(128, cake_pk(q8), cq);
    const int rO = tid >> 3, sO = at_or(rO, tid & 7);
    const long long gO = (long long)rO * tok_stride + (tid & 7) * 8;
    auto issue_a = [&](int ci) {
        const long long wsi = (long long)ci * H + h;
#pragma unroll
        for (int j = 0; j < 8; ++j)  // Kd^T [128 d][64 tok]: two panels of 128 rows
            cake_cp_async16(Ks + sKd + 2048 * (j & 3) + 32 * (j >> 2), Kd + wsi * 8192 + gI + 1024 * (j & 3) + 4096 * (j >> 2), 16);
#pragma unroll
        for (int j = 0; j < 4; ++j)  // Aqk [64][64]: two panels of 64 rows
            cake_cp_async16(As + sA + 2048 * (j & 1) + 32 * (j >> 1), Aqk + wsi * 4096 + gI + 1024 * (j & 1) + 2048 * (j >> 1), 16);
        const int t0 = chunks[2 * ci], L = chunks[2 * ci + 1];
        const unsigned short* src = dout + (long long)t0 * tok_stride + h * 128 + vb * 64;
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // dO: rows rO, rO + 32 (at_or reads r's low 3 bits)
            const bool ok = rO + 32 * i < L;
            cake_cp_async16(Or + sO + 2048 * i, src + (ok ? gO + 32 * i * tok_stride : 0), ok ? 16 : 0);
        }
    };
    auto issue_b = [&](int ci) {  // cp.async form: committed by the caller
        const long long base = ((long long)ci * H + h) * 8192;
#pragma unroll
        for (int j = 0; j < 8; ++j) {  // Qg and W [64 tok][128 d]: four panels of 64 rows
            const int sj = 4096 * (j & 1) + 32 * (j >> 1), gj = 1024 * (j & 1) + 2048 * (j >> 1);
            cake_cp_async16(Qs + sQ + sj, Qg + base + gI + gj, 16);
            cake_cp_async16(Ws + sW + sj, W + base + gI + gj, 16);
        }
        if (tid < 32) cake_cp_async16(Gs + 4 * tid, gl + ((long long)ci * H + h) * 128 + 4 * tid, 16);
    };
    const int sT0 = cake_opaque(cake_wg_idx<64>(2 * t, kd0 + 16 * w + g)), sT1 = cake_opaque(cake_wg_idx<64>(2 * t + 1, kd0 + 16 * w + g));
    auto store_st = [&]() {
#pragma unroll
        for (int x = 0; x < 32; ++x) St[((x & 1 ? sT1 : sT0) ^ hx(x)) + 256 * (x >> 2)] = rtf32(S[x]);
    };
    auto store_global = [&](float* dst) {
#pragma unroll
        for (int x = 0; x < 32; x += 2)
            *reinterpret_cast<float2*>(dst + oS + 128 * hx(x) + 8 * (x >> 2)) = make_float2(S[x], S[x + 1]);
    };

    if (nc > 0) {
        issue_a(c0 + nc - 1);
        cake_cp_async_commit();
        issue_b(c0 + nc - 1);
        cake_cp_async_commit();
    }
    store_st();
    // dO conversion: staging chunk (tid & 63, tid >> 6) (+ 4: ^ 32); dO^T rows 8 (tid >> 6) + j
    // (row % 8 = j flips chunk bits: ^ 4j), column tid & 63.
    const int oR = cake_opaque(at_or(tid & 63, tid >> 6)), oT = cake_opaque(cake_wg_idx<64>(8 * (tid >> 6), tid & 63));
    // dO (bf16, rows >= L already zero) -> dO^T fp32 in the wgmma layout (bf16 is exact in TF32), into
    // buffer b: the staging tile's copy waited for by every thread, then a barrier, before the call.
    auto convert_do = [&](int b) {
        float* const dst = Ot + 4096 * b;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            const uint4 p = *reinterpret_cast<const uint4*>(Or + (oR ^ (32 * x)));
            const unsigned int w4[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                dst[(oT ^ (8 * e)) + 64 * e + 1024 * x] = cake_bf16_lo(w4[e]);
                dst[(oT ^ (8 * e + 4)) + 64 * e + 32 + 1024 * x] = cake_bf16_hi(w4[e]);
            }
        }
    };
    // The wait for a chunk's dO copy: the cp.async form's group A (group B, committed after it, may
    // stay in flight); the bulk form's only cp.async group.
    auto wait_do = [&]() {
        cake_cp_async_wait<1>();
    };
    if (nc > 0) {  // the first chunk's dO^T (each later one's is converted while phase B runs)
        wait_do();
        __syncthreads();
        convert_do(0);
    }
    // -dVn^T element (row vw + 8 (x >> 2) + 2t + (x & 1), column row_of(x)), dVn (row_of(0), vw + 2t).
    const int vw = 32 * __shfl_sync(0xffffffff, wg, 0);  // warp-uniform to ptxas: phase A's descriptors
    const int vT0 = cake_opaque(cake_wg_idx<64>(vw + 2 * t, 16 * w + g)), vT1 = cake_opaque(cake_wg_idx<64>(vw + 2 * t + 1, 16 * w + g));
    const int oV = cake_opaque((16 * w + g) * 128 + vw + 2 * t);

#pragma unroll 1
    for (int i = nc - 1; i >= 0; --i) {
        const int ci = c0 + i;
        const long long wsi = (long long)ci * H + h;
        // this chunk's dO^T buffer (and the mbarriers' phase); its copy group was waited for before
        // its dO^T was converted (before the loop, or in the chunk before's phase-B shadow)
        const int b = (nc - 1 - i) & 1;
        const float* const Oc = Ot + 4096 * b;
        cake_fence_proxy_async();  // dO^T and dS^T (generic stores) -> wgmma's reads
        __syncthreads();

        // Phase A: dVn = Aqk^T dO + Kd dS (64 tokens x 64 values), split over the reduction: the
        // warpgroups gather the same A rows (all 64 tokens), so each takes 12 of the 24 k8 steps at
        // n64 (warpgroup 0: Aqk's 8 and Kd's first 4; warpgroup 1: Kd's last 12), and the partial
        // sums P0, P1 meet in shared memory: dVn = P0 + P1, warpgroup wg keeping value columns
        // 32 wg + [0, 32). Half the gathered steps on each warpgroup's chain (their register-A
        // gathers are kda_bwd_state's largest stall: docs/notes.md, session 51 §2).
        // The gradient of this chunk's END state goes out first: dS (a wgmma accumulator) read
        // between phase A's issue and its wait made ptxas inject a wait there (C7517).
        if (dS_end != nullptr) store_global(dS_end + wsi * 16384 + vb * 64);
        float part[32];
#pragma unroll
        for (int x = 0; x < 32; ++x) part[x] = 0.f;
        cake_wgmma_fence();
        // Fully unrolled: ptxas then loads each step's A fragment ahead of the wgmma before it;
        // unrolled by 4, each group's first wgmma waited on its gathers (docs/notes.md, session 32:
        // kda_bwd_state -1.1..-1.5 %).
        if (vw == 0) {
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                unsigned int a[4];
afrag(As, 64, 0, s, a);                cake_wgmma_n64_rs(part, a, cake_wg_desc_at<64>(dlo(Oc), 0, s), s > 0);
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                unsigned int a[4];
afrag(Ks, 64, 0, s, a);                cake_wgmma_n64_rs(part, a, cake_wg_desc_at<64>(dlo(St), 0, s), 1);
            }
        } else {
#pragma unroll
            for (int s = 4; s < 16; ++s) {
                unsigned int a[4];
afrag(Ks, 64, 0, s, a);                cake_wgmma_n64_rs(part, a, cake_wg_desc_at<64>(dlo(St), 0, s), s > 4);
            }
        }
        cake_wgmma_commit();
        // Ks / As / Or are read into registers by the time the products issue (register A, dO
        // converted): the next chunk's group A is copied while phase A runs, not after it.
        __syncthreads();
        if (i > 0) issue_a(ci - 1);
        cake_cp_async_commit();
        cake_wgmma_wait<0>();
        // The exchange: each thread sends the half of its partial the other warpgroup keeps (its
        // elements x of columns 32 (1 - wg) + ..) to the thread of the same place there, as float4s
        // (a warp's store: 512 contiguous bytes), and adds the half it keeps, P0 first.
        float acc[16];
        {
            float4* const xs = reinterpret_cast<float4*>(Xs) + (tid & 127);
            if (vw == 0) {
#pragma unroll
                for (int q = 0; q < 4; ++q) xs[128 * q] = make_float4(part[16 + 4 * q], part[17 + 4 * q], part[18 + 4 * q], part[19 + 4 * q]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) xs[512 + 128 * q] = make_float4(part[4 * q], part[4 * q + 1], part[4 * q + 2], part[4 * q + 3]);
            }
            __syncthreads();
            if (vw == 0) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float4 r = xs[512 + 128 * q];  // P1 of columns 0-31
                    acc[4 * q] = part[4 * q] + r.x;
                    acc[4 * q + 1] = part[4 * q + 1] + r.y;
                    acc[4 * q + 2] = part[4 * q + 2] + r.z;
                    acc[4 * q + 3] = part[4 * q + 3] + r.w;
                }
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float4 r = xs[128 * q];  // P0 of columns 32-63
                    acc[4 * q] = r.x + part[16 + 4 * q];
                    acc[4 * q + 1] = r.y + part[17 + 4 * q];
                    acc[4 * q + 2] = r.z + part[18 + 4 * q];
                    acc[4 * q + 3] = r.w + part[19 + 4 * q];
                }
            }
        }
        {
            float* out = dVn + wsi * 8192 + vb * 64 + oV;
#pragma unroll
            for (int x = 0; x < 16; ++x) {
                if (dVn != nullptr && (x & 1) == 0)
                    *reinterpret_cast<float2*>(out + 128 * hx(x) + 8 * (x >> 2)) = make_float2(acc[x], acc[x + 1]);
                // Negated so that phase B only adds: -W^T dVn = W^T (-dVn), negation is exact.
                Vt[((x & 1 ? vT1 : vT0) ^ hx(x)) + 256 * (x >> 2)] = -rtf32(acc[x]);
            }
        }
        cake_cp_async_wait<1>();  // group B of this chunk
        cake_fence_proxy_async();  // -dVn^T -> wgmma's reads
        __syncthreads();

        // Phase B: dS = diag(gl) dS + Qg^T dO + W^T (-dVn) (each warpgroup its 64 key rows).
#pragma unroll
        for (int x = 0; x < 32; ++x) S[x] *= Gs[kd0 + row_of(x)];
        cake_wgmma_fence();
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            unsigned int a[4];
afrag(Qs, 128, kd0, s, a);            cake_wgmma_n64_rs(S, a, cake_wg_desc_at<64>(dlo(Oc), 0, s), 1);
        }
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            unsigned int a[4];
afrag(Ws, 128, kd0, s, a);            cake_wgmma_n64_rs(S, a, cake_wg_desc_at<64>(dlo(Vt), 0, s), 1);
        }
        cake_wgmma_commit();
        // Qs / Ws / Gs read (register A, S scaled): the next chunk's group B is copied while
        // phase B runs (docs/notes.md, session 31: bwd_state -2.3..-4.1 %)
        __syncthreads();
        if (i > 0) {
            issue_b(ci - 1);
            cake_cp_async_commit();
            // the next chunk's dO^T into the other buffer while phase B runs (it took a barrier
            // and the conversion at the top of every chunk: off the chain here)
            wait_do();
            __syncthreads();
            convert_do(b ^ 1);
        }
        cake_wgmma_wait<0>();
        store_st();  // read by the next chunk's phase A after its fence and barriers
    }
    cake_cp_async_wait<0>();
    if (store_dh0) store_global(dh0 + state_base);

}

// The second kernel's body in a device function that it inlines: rendered straight into the
// kernel, its presence took kda_bwd_state's registers from 237 to 246 on sm_90a (NVRTC 13.5).
// (The portable programs render the same body twice: inlined from one device function into
// both kernels, it moved kda_bwd_state's sm_100a code, 218 -> 220 registers.)
namespace {
__device__ __forceinline__ void bwd_state_bulk_pass(
    const float* __restrict__ Qg, const float* __restrict__ W, const float* __restrict__ Kd,
    const float* __restrict__ Aqk, const float* __restrict__ gl,
    const unsigned short* __restrict__ dout, const int* __restrict__ chunks,
    const int* __restrict__ seq_chunks, const float* __restrict__ dht, float* __restrict__ dS_end,
    float* __restrict__ dVn, float* __restrict__ dh0, int H, int has_dht, int store_dh0)
{
    // ---- sm_90a: the products on wgmma with A from registers (its A operands are the transposes
    // of the stored layouts; tf32 wgmma has no transpose) and B from shared memory in the K-major
    // swizzled layout (docs/wgmma-plan.md). Each warpgroup computes 32 value columns of dVn and
    // updates its 64 key rows of dS. Kd^T, Aqk, Qg and W come in the image kda_fwd_chunk stores
    // them in (kda_fwd_state's, cake/chunk_image.cuh): in the bulk form (kda_bwd_state_bulk), one
    // bulk copy each, and the A fragments are gathered from that image; else in 16-byte cp.async
    // pieces into this program's gather layout.
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* Ks = reinterpret_cast<float*>(smem);  // Kd^T [128 d][64 tok]   (A, gathered)
    float* As = Ks + 128 * 64;                   // Aqk  [64][64]          (A, gathered)
    float* Qs = As + 64 * 64;                    // Qg   [64 tok][128 d]   (A, gathered)
    float* Ws = Qs + 64 * 128;                   // W    [64 tok][128 d]   (A, gathered)
    float* Ot = Ws + 64 * 128;                   // dO^T [64 v][64 tok]    (B, wgmma layout), two
                                                 // buffers: a chunk's, the next one's (converted ahead)
    float* St = Ot + 2 * 64 * 64;                // dS^T [64 v][128 d], TF32 (B)
    float* Vt = St + 64 * 128;                   // -dVn^T [64 v][64 tok], TF32 (B)
    float* Gs = Vt + 64 * 64;                    // gl [128]
    unsigned short* Or = reinterpret_cast<unsigned short*>(Gs + 128);  // dO staging [64 tok][64 v] bf16
    // Phase A's partial sums exchanged between the warpgroups: [2 senders][4][128 threads][4] floats,
    // 64 bytes past the dO staging (the bulk form's two mbarriers lie there; both forms alike).
    float* Xs = reinterpret_cast<float*>(Or + 64 * 64) + 16;
    // transaction mbarriers of the bulk copies: group A (Kd^T, Aqk), group B (Qg, W, gl)
    unsigned long long* const mbA = reinterpret_cast<unsigned long long*>(Or + 64 * 64);
    unsigned long long* const mbB = mbA + 1;
    // wgmma descriptors' low words from one shared-memory address (cake_wg_desc_at: one add a step)
    const unsigned int dsm = cake_wg_desc_lo(cake_smem_addr(smem));
    auto dlo = [&](const float* tile) { return dsm + (unsigned int)((tile - Ks) >> 2); };

    const int vb = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3;
    const int g = (tid & 31) >> 2, t = tid & 3;
    const int c0 = seq_chunks[2 * n], nc = seq_chunks[2 * n + 1];
    const long long state_base = ((long long)n * H + h) * 16384 + vb * 64;
    const long long tok_stride = (long long)H * 128;
    // A thread's element x: row row_of(x), column 8 (x >> 2) + 2t + (x & 1).
    auto row_of = [&](int x) { return 16 * w + g + ((x & 2) << 2); };
    const int kd0 = 64 * wg;  // this warpgroup's key rows of dS
    // A fragment of k8 step s: A rows m = m0 + 16 w + g (+ 8), reduction indices 8 s + t (+ 4),
    // gathered from a tile image (cake_wg_idx<ROWS>(row, col)) whose ROW is the reduction index:
    // image row r0 + 8 s holds index 8 s + t and r1 + 8 s index 8 s + t + 4 (pk-ordered rows:
    // r0 = 2 t, r1 = 2 t + 1; natural rows: t, t + 4), its column is m. A row's swizzle reads
    // row % 8 only, so step s is step 0 plus 8 rows (256 floats): four offsets a tile, the rest
    // immediates. Banks: ((m / 4 % 8) ^ (row % 8)) * 4 + m % 4, so the pk-ordered tiles (Kd^T, W)
    // are conflict-free and the natural ones (Aqk, Qg) 2-way.
    auto afrag = [&](const float* tile, int rows, int m0, bool pk, int s, unsigned int (&a)[4]) {
        const int m = m0 + 16 * w + g;
        const int r0 = pk ? 2 * t : t, r1 = pk ? 2 * t + 1 : t + 4;
        const float* p = tile + 256 * s;
        auto at = [&](int r, int c) { return (c >> 5) * (rows * 32) + r * 32 + ((((c >> 2) & 7) ^ (r & 7)) << 2) + (c & 3); };
        a[0] = __float_as_uint(p[at(r0, m)]);
        a[1] = __float_as_uint(p[at(r0, m + 8)]);
        a[2] = __float_as_uint(p[at(r1, m)]);
        a[3] = __float_as_uint(p[at(r1, m + 8)]);
    };

    // A thread's elements: x's bits 0, 1 and 2-4 add column 1, row 8 and columns 8 (x >> 2). In
    // the wgmma layout (cake_wg_idx) row 8 flips chunk bit 1 of every element here (^ 8), and the
    // 8-column steps keep the swizzle (+ 256), so each tile's offsets are two per thread (column
    // parity b) plus constants, where recomputing them per element cost registers and per-chunk
    // instructions (identities checked exhaustively).
    auto hx = [](int x) { return 8 * ((x >> 1) & 1); };  // the XOR of row + 8
    const int oS = cake_opaque((kd0 + 16 * w + g) * 128 + 2 * t);  // dS element (kd0 + row_of(0), 2t)
    float S[32];
#pragma unroll
    for (int x = 0; x < 32; ++x)
        S[x] = has_dht ? dht[state_base + oS + 128 * hx(x) + 8 * (x >> 2) + (x & 1)] : 0.f;

    // The tiles come as kda_fwd_chunk stored them (kda_fwd_state's image). Bulk form: thread 0
    // issues one bulk copy each, landing on the group's transaction mbarrier. cp.async form: the
    // image's 128-byte rows (in pk order for W and Kd^T) of 32-float panels, their 16-byte chunks
    // swizzled by row % 8; thread (row q = tid / 8, chunk u = tid % 8) copies chunk u of image
    // rows q + 32 j of each panel (a warp reads 512 contiguous bytes), element (row, 4 (u ^ q % 8))
    // of the panel with row = q or pk(q), to its place in the gather layout ag. dO's rows
    // (token-major in global memory) come in 16-byte cp.async pieces from every thread in both.
    const int rO = tid >> 3, sO = at_or(rO, tid & 7);
    const long long gO = (long long)rO * tok_stride + (tid & 7) * 8;
    if (tid == 0) {
        cake_mbar_init(mbA, 1);
        cake_mbar_init(mbB, 1);
        cake_mbar_init_fence();
    }
    __syncthreads();
    auto issue_a = [&](int ci) {
        const long long wsi = (long long)ci * H + h;
        if (tid == 0) {
            cake_mbar_expect_tx(mbA, 32768 + 16384);
            cake_bulk_load(Ks, Kd + wsi * 8192, 32768, mbA);
            cake_bulk_load(As, Aqk + wsi * 4096, 16384, mbA);
        }
        const int t0 = chunks[2 * ci], L = chunks[2 * ci + 1];
        const unsigned short* src = dout + (long long)t0 * tok_stride + h * 128 + vb * 64;
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // dO: rows rO, rO + 32 (at_or reads r's low 3 bits)
            const bool ok = rO + 32 * i < L;
            cake_cp_async16(Or + sO + 2048 * i, src + (ok ? gO + 32 * i * tok_stride : 0), ok ? 16 : 0);
        }
    };
    auto issue_b = [&](int ci) {  // cp.async form: committed by the caller
        const long long wsi = (long long)ci * H + h;
        if (tid == 0) {
            cake_mbar_expect_tx(mbB, 32768 + 32768 + 512);
            cake_bulk_load(Qs, Qg + wsi * 8192, 32768, mbB);
            cake_bulk_load(Ws, W + wsi * 8192, 32768, mbB);
            cake_bulk_load(Gs, gl + wsi * 128, 512, mbB);
        }
    };
    const int sT0 = cake_opaque(cake_wg_idx<64>(2 * t, kd0 + 16 * w + g)), sT1 = cake_opaque(cake_wg_idx<64>(2 * t + 1, kd0 + 16 * w + g));
    auto store_st = [&]() {
#pragma unroll
        for (int x = 0; x < 32; ++x) St[((x & 1 ? sT1 : sT0) ^ hx(x)) + 256 * (x >> 2)] = rtf32(S[x]);
    };
    auto store_global = [&](float* dst) {
#pragma unroll
        for (int x = 0; x < 32; x += 2)
            *reinterpret_cast<float2*>(dst + oS + 128 * hx(x) + 8 * (x >> 2)) = make_float2(S[x], S[x + 1]);
    };

    if (nc > 0) {
        issue_a(c0 + nc - 1);
        cake_cp_async_commit();
        issue_b(c0 + nc - 1);
    }
    store_st();
    // dO conversion: staging chunk (tid & 63, tid >> 6) (+ 4: ^ 32); dO^T rows 8 (tid >> 6) + j
    // (row % 8 = j flips chunk bits: ^ 4j), column tid & 63.
    const int oR = cake_opaque(at_or(tid & 63, tid >> 6)), oT = cake_opaque(cake_wg_idx<64>(8 * (tid >> 6), tid & 63));
    // dO (bf16, rows >= L already zero) -> dO^T fp32 in the wgmma layout (bf16 is exact in TF32), into
    // buffer b: the staging tile's copy waited for by every thread, then a barrier, before the call.
    auto convert_do = [&](int b) {
        float* const dst = Ot + 4096 * b;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            const uint4 p = *reinterpret_cast<const uint4*>(Or + (oR ^ (32 * x)));
            const unsigned int w4[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                dst[(oT ^ (8 * e)) + 64 * e + 1024 * x] = cake_bf16_lo(w4[e]);
                dst[(oT ^ (8 * e + 4)) + 64 * e + 32 + 1024 * x] = cake_bf16_hi(w4[e]);
            }
        }
    };
    // The wait for a chunk's dO copy: the cp.async form's group A (group B, committed after it, may
    // stay in flight); the bulk form's only cp.async group.
    auto wait_do = [&]() {
        cake_cp_async_wait<0>();
    };
    if (nc > 0) {  // the first chunk's dO^T (each later one's is converted while phase B runs)
        wait_do();
        __syncthreads();
        convert_do(0);
    }
    // -dVn^T element (row vw + 8 (x >> 2) + 2t + (x & 1), column row_of(x)), dVn (row_of(0), vw + 2t).
    const int vw = 32 * __shfl_sync(0xffffffff, wg, 0);  // warp-uniform to ptxas: phase A's descriptors
    const int vT0 = cake_opaque(cake_wg_idx<64>(vw + 2 * t, 16 * w + g)), vT1 = cake_opaque(cake_wg_idx<64>(vw + 2 * t + 1, 16 * w + g));
    const int oV = cake_opaque((16 * w + g) * 128 + vw + 2 * t);

#pragma unroll 1
    for (int i = nc - 1; i >= 0; --i) {
        const int ci = c0 + i;
        const long long wsi = (long long)ci * H + h;
        // this chunk's dO^T buffer (and the mbarriers' phase); its copy group was waited for before
        // its dO^T was converted (before the loop, or in the chunk before's phase-B shadow)
        const int b = (nc - 1 - i) & 1;
        const int ph = b;
        const float* const Oc = Ot + 4096 * b;
        cake_fence_proxy_async();  // dO^T and dS^T (generic stores) -> wgmma's reads
        __syncthreads();

        // Phase A: dVn = Aqk^T dO + Kd dS (64 tokens x 64 values), split over the reduction: the
        // warpgroups gather the same A rows (all 64 tokens), so each takes 12 of the 24 k8 steps at
        // n64 (warpgroup 0: Aqk's 8 and Kd's first 4; warpgroup 1: Kd's last 12), and the partial
        // sums P0, P1 meet in shared memory: dVn = P0 + P1, warpgroup wg keeping value columns
        // 32 wg + [0, 32). Half the gathered steps on each warpgroup's chain (their register-A
        // gathers are kda_bwd_state's largest stall: docs/notes.md, session 51 §2).
        // The gradient of this chunk's END state goes out first: dS (a wgmma accumulator) read
        // between phase A's issue and its wait made ptxas inject a wait there (C7517).
        if (dS_end != nullptr) store_global(dS_end + wsi * 16384 + vb * 64);
        cake_mbar_wait(mbA, ph);  // Kd^T, Aqk of this chunk
        float part[32];
#pragma unroll
        for (int x = 0; x < 32; ++x) part[x] = 0.f;
        cake_wgmma_fence();
        // Fully unrolled: ptxas then loads each step's A fragment ahead of the wgmma before it;
        // unrolled by 4, each group's first wgmma waited on its gathers (docs/notes.md, session 32:
        // kda_bwd_state -1.1..-1.5 %).
        if (vw == 0) {
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                unsigned int a[4];
afrag(As, 64, 0, false, s, a);                cake_wgmma_n64_rs(part, a, cake_wg_desc_at<64>(dlo(Oc), 0, s), s > 0);
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                unsigned int a[4];
afrag(Ks, 128, 0, true, s, a);                cake_wgmma_n64_rs(part, a, cake_wg_desc_at<64>(dlo(St), 0, s), 1);
            }
        } else {
#pragma unroll
            for (int s = 4; s < 16; ++s) {
                unsigned int a[4];
afrag(Ks, 128, 0, true, s, a);                cake_wgmma_n64_rs(part, a, cake_wg_desc_at<64>(dlo(St), 0, s), s > 4);
            }
        }
        cake_wgmma_commit();
        // Ks / As / Or are read into registers by the time the products issue (register A, dO
        // converted): the next chunk's group A is copied while phase A runs, not after it.
        __syncthreads();
        if (i > 0) issue_a(ci - 1);
        cake_cp_async_commit();
        cake_wgmma_wait<0>();
        // The exchange: each thread sends the half of its partial the other warpgroup keeps (its
        // elements x of columns 32 (1 - wg) + ..) to the thread of the same place there, as float4s
        // (a warp's store: 512 contiguous bytes), and adds the half it keeps, P0 first.
        float acc[16];
        {
            float4* const xs = reinterpret_cast<float4*>(Xs) + (tid & 127);
            if (vw == 0) {
#pragma unroll
                for (int q = 0; q < 4; ++q) xs[128 * q] = make_float4(part[16 + 4 * q], part[17 + 4 * q], part[18 + 4 * q], part[19 + 4 * q]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) xs[512 + 128 * q] = make_float4(part[4 * q], part[4 * q + 1], part[4 * q + 2], part[4 * q + 3]);
            }
            __syncthreads();
            if (vw == 0) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float4 r = xs[512 + 128 * q];  // P1 of columns 0-31
                    acc[4 * q] = part[4 * q] + r.x;
                    acc[4 * q + 1] = part[4 * q + 1] + r.y;
                    acc[4 * q + 2] = part[4 * q + 2] + r.z;
                    acc[4 * q + 3] = part[4 * q + 3] + r.w;
                }
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float4 r = xs[128 * q];  // P0 of columns 32-63
                    acc[4 * q] = r.x + part[16 + 4 * q];
                    acc[4 * q + 1] = r.y + part[17 + 4 * q];
                    acc[4 * q + 2] = r.z + part[18 + 4 * q];
                    acc[4 * q + 3] = r.w + part[19 + 4 * q];
                }
            }
        }
        {
            float* out = dVn + wsi * 8192 + vb * 64 + oV;
#pragma unroll
            for (int x = 0; x < 16; ++x) {
                if (dVn != nullptr && (x & 1) == 0)
                    *reinterpret_cast<float2*>(out + 128 * hx(x) + 8 * (x >> 2)) = make_float2(acc[x], acc[x + 1]);
                // Negated so that phase B only adds: -W^T dVn = W^T (-dVn), negation is exact.
                Vt[((x & 1 ? vT1 : vT0) ^ hx(x)) + 256 * (x >> 2)] = -rtf32(acc[x]);
            }
        }
        cake_mbar_wait(mbB, ph);  // Qg, W, gl of this chunk
        cake_fence_proxy_async();  // -dVn^T -> wgmma's reads
        __syncthreads();

        // Phase B: dS = diag(gl) dS + Qg^T dO + W^T (-dVn) (each warpgroup its 64 key rows).
#pragma unroll
        for (int x = 0; x < 32; ++x) S[x] *= Gs[kd0 + row_of(x)];
        cake_wgmma_fence();
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            unsigned int a[4];
afrag(Qs, 64, kd0, false, s, a);            cake_wgmma_n64_rs(S, a, cake_wg_desc_at<64>(dlo(Oc), 0, s), 1);
        }
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            unsigned int a[4];
afrag(Ws, 64, kd0, true, s, a);            cake_wgmma_n64_rs(S, a, cake_wg_desc_at<64>(dlo(Vt), 0, s), 1);
        }
        cake_wgmma_commit();
        // Qs / Ws / Gs read (register A, S scaled): the next chunk's group B is copied while
        // phase B runs (docs/notes.md, session 31: bwd_state -2.3..-4.1 %)
        __syncthreads();
        if (i > 0) {
            issue_b(ci - 1);
            // the next chunk's dO^T into the other buffer while phase B runs (it took a barrier
            // and the conversion at the top of every chunk: off the chain here)
            wait_do();
            __syncthreads();
            convert_do(b ^ 1);
        }
        cake_wgmma_wait<0>();
        store_st();  // read by the next chunk's phase A after its fence and barriers
    }
    cake_cp_async_wait<0>();
    if (store_dh0) store_global(dh0 + state_base);

}
}  // namespace

extern "C" __global__ void __launch_bounds__(256, 1) kda_bwd_state_bulk(
    const float* __restrict__ Qg, const float* __restrict__ W, const float* __restrict__ Kd,
    const float* __restrict__ Aqk, const float* __restrict__ gl,
    const unsigned short* __restrict__ dout, const int* __restrict__ chunks,
    const int* __restrict__ seq_chunks, const float* __restrict__ dht, float* __restrict__ dS_end,
    float* __restrict__ dVn, float* __restrict__ dh0, int H, int has_dht, int store_dh0)
{
    bwd_state_bulk_pass(Qg, W, Kd, Aqk, gl, dout, chunks, seq_chunks, dht, dS_end, dVn, dh0, H, has_dht, store_dh0);
}
