// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.fwd_state_local.sm_90a by cake migrate
// record: kda_cp/fwd_state_local  program: kda_cp.fwd_state_local.sm_90a
// identity: sha256:fb6f595ef5433f0ca7cbec8465395bbcc3853173a8ce5c42d8bfdfb344cef4ce
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
// ---- begin cake/state16.cuh ----

// ---- begin cake/f16.cuh ----

// fp16 conversions and the 16-bit SIMD max: kda's 16-bit chunk-start states (cake/state16.cuh)
// and cake/mma_f16.cuh's tensor-core operands.

// Two floats to one f16x2 register, round to nearest even: lo in bits 0-15 (the lower k or column
// index of a fragment pair, the lower address in memory), hi in bits 16-31. Out of range: +-inf;
// below 2^-14: subnormal.
__device__ __forceinline__ unsigned int cake_f16x2(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The two halves of an f16x2 register as floats (exact).
__device__ __forceinline__ float2 cake_f16x2_to_f32(unsigned int h) {
    float lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi) : "r"(h));
    return make_float2(lo, hi);
}

// The larger of each 16-bit lane, unsigned (max.u16x2: sm_90+, one instruction).
__device__ __forceinline__ unsigned int cake_max_u16x2(unsigned int a, unsigned int b) {
    unsigned int r;
    asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
// ---- end cake/f16.cuh ----

// kda's chunk-start states in 16 bits (kda_fwd_state / _local write them, kda_bwd_chunk reads them;
// docs/notes.md, session 20). One record per (chunk, head), CAKE_S16_BYTES bytes:
//   fp16 [128 keys d][128 values v]  TF32(S[d][v]) * 2^(141 - E), exact: TF32 (cvt.rn, what every
//                                    product of S rounds it to) keeps fp16's 11 significant bits;
//                                    within each group of 16 values (32 bytes) value 16 G + r sits
//                                    at position 2 (r & 7) + (r >> 3), the order
//                                    in which kda_fwd_state's wgmma accumulators hold them (a
//                                    lane's rows g and g + 8 make one 4-byte word)
//   u8 E [8 groups][128 keys d]      at CAKE_S16_EXP: group v / 16; E = max(15, the biased fp32
//                                    exponent of the group's largest |TF32(S)|), so that the
//                                    largest scaled value lies in [2^14, 2^15)
// Half the bytes of fp32 states, and the reader gets back exactly the TF32 values its tensor-core
// products use; only its fp32 use of S_c (dgl) sees 11 significant bits instead of 24.
constexpr int CAKE_S16_BYTES = 33792;
constexpr int CAKE_S16_EXP = 32768;

// The exponent byte E of a group from its largest |value| m (m >= 0): max(15, m's biased exponent).
__device__ __forceinline__ unsigned int cake_s16_exp(float m) {
    const unsigned int e = __float_as_uint(m) >> 23;
    return e < 15u ? 15u : e;
}
// The writer's factor 2^(141 - E) and the reader's 2^(E - 141) (E in [15, 255]: both normal floats).
__device__ __forceinline__ float cake_s16_down(unsigned int e) { return __uint_as_float((268u - e) << 23); }
__device__ __forceinline__ float cake_s16_up(unsigned int e) { return __uint_as_float((e - 14u) << 23); }
// ---- end cake/state16.cuh ----
// ---- begin cake/chunk_image.cuh ----
// Where kda_fwd_chunk (sm_90a) stores each chunk tile that the state passes read: in kda_fwd_state's
// shared-memory image of that tile, so that fwd_state copies a tile whole with one bulk copy (one
// thread, a transaction mbarrier) where it took 16-byte cp.async pieces from 128 threads
// (docs/notes.md, session 22). Float offsets inside one chunk-head's tile; every map is a
// permutation of 16-byte pieces, so a row-major 128-byte run of a row lands on one 128-byte line.
// Plain C++ (the CPU emulator compiles it as it is).
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
// ---- begin cake/bar.cuh ----
// Named barriers (bar.sync / bar.arrive; ids 1..15, 0 is __syncthreads): n threads of the block, a
// multiple of 32, take part. bar.arrive counts the caller and goes on; bar.sync waits until all n
// have arrived. A producer warpgroup arrives where its consumer syncs: one-way hand-offs.
__device__ __forceinline__ void cake_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void cake_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}
// ---- end cake/bar.cuh ----
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

// A block's precise-rows setting as a type: the chain is compiled once for each.
template <bool B>
struct Precise {
    static constexpr bool value = B;
};

// fwd_state_local (kda_cp): the local passes of long sequences; fwd_state: everything else.
constexpr bool kLocal = true;

// 16-byte column chunks XOR-swizzled per row. Rows 2q and 2q+1 differ in bit 2, so the
// mma-fragment reads (lane (g, t) -> row g, chunk c0 + t) are conflict-free; rows 0, 2, 4, 6 take
// distinct even values, so the transposed scalar stores of S and Vnew are conflict-free too.
__device__ __forceinline__ int sw(int r) { return cake_sw64(r); }
__device__ __forceinline__ int at64(int r, int c) { return r * 64 + ((c ^ sw(r)) << 2); }
__device__ __forceinline__ int el64(int r, int col) { return at64(r, col >> 2) + (col & 3); }

// Chunk wsi's inputs into L2 (128-byte lines, the two value blocks vb of a head taking every other
// one): W, U, Qg, Kd (256 lines each), Aqk (128), gl (4); the local program skips Qg and Aqk, and U
// when it is null. Only the local program's two-pass launches (has_h0 = 3) prefetch: measured on
// the H200 (docs/notes.md, session 18), every other launch ran 3-13 % faster without it (1doc
// fwd_state -6.2 %, m2 -12.9 %), the two-pass ones 6-10 % slower (R2, long, long4).
__device__ __forceinline__ void prefetch_chunk_l2(const float* W, const float* U, const float* Qg,
                                                  const float* Kd, const float* Aqk, const float* gl,
                                                  long long wsi, int tid, int nthreads, int vb) {
    for (int j = 2 * tid + vb; j < 1156; j += 2 * nthreads) {
        if (kLocal && U == nullptr && j >= 256 && j < 512) continue;
        if (kLocal && ((j >= 512 && j < 768) || (j >= 1024 && j < 1152))) continue;
        const float* p = j < 1024 ? (j < 256 ? W : j < 512 ? U : j < 768 ? Qg : Kd) + wsi * 8192 + (j & 255) * 32
                       : j < 1152 ? Aqk + wsi * 4096 + (j - 1024) * 32
                                  : gl + wsi * 128 + (j - 1152) * 32;
        cake_prefetch_l2(p);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256, 1) kda_fwd_state(
    const float* __restrict__ W, const float* __restrict__ U_arg, const float* __restrict__ Qg,
    const float* __restrict__ Kd, const float* __restrict__ Aqk, const float* __restrict__ gl,
    const int* __restrict__ chunks, const int* __restrict__ seq_chunks,
    const int* __restrict__ precise, const float* __restrict__ h0, unsigned short* __restrict__ o, float* __restrict__ ht_arg,
    float* __restrict__ states_out_arg, int H, int has_h0_arg, int store_ht)
{
    // The local program's two passes in one launch (has_h0 = 3): grid.z = 2 R; blocks z < R run
    // row z's offset pass (from 0, with U; end state to ht[z]), blocks z >= R row z - R's
    // transition pass (from I, U = 0; end state to states_out[z - R]). Block-uniform.
    const bool both = has_h0_arg == 3;
    const bool trans = both && blockIdx.z >= gridDim.z / 2;
    const float* __restrict__ const U = trans ? nullptr : U_arg;
    float* __restrict__ const ht = trans ? states_out_arg : ht_arg;
    float* __restrict__ const states_out = both ? nullptr : states_out_arg;
    const int has_h0 = both ? (trans ? 2 : 0) : has_h0_arg;
    const int n = trans ? blockIdx.z - gridDim.z / 2 : blockIdx.z;  // the row of seq_chunks
    const bool pf = both;  // chunk inputs prefetched into L2 (prefetch_chunk_l2)
    // ---- sm_90a: the chain in registers (docs/kernel-notes.md, session 10). Warpgroup 0 keeps S^T
    // (64 value rows x 128 keys) as wgmma accumulators and runs the chain transposed,
    //   Vnew^T = U^T - S^T W^T,   S^T = S^T diag(gl) + Vnew^T Kd,
    // each product's A operand from registers: the previous product's accumulators, as they are.
    // That works because of the row order of the B tiles: accumulator column n of an m64nNk8
    // product is B's row n, and thread (g, t) holds columns 8j + 2t, 8j + 2t + 1 where its A
    // fragment of k8 step j needs the indices 8j + t, 8j + t + 4; so W's rows (tokens) and Kd^T's
    // rows (keys) are stored in the order pk (pk(8j + 2t + e) = 8j + t + 4e), and accumulator x of a
    // thread holds index pcol(x). The chain then needs no shared-memory round trip and no block
    // barrier. Warpgroup 1 computes O = Qg S + Aqk Vnew (as before) from the TF32 copies of S^T and
    // Vnew^T that warpgroup 0 stores for it (FULL / EMPTY pairs: mbarriers for S^T, named barriers
    // for Vnew^T).
    // kda_fwd_state_lean: the chain's warpgroup alone, issuing its own copies (as fwd_state's
    // does), and only the chain's tiles in shared memory (115 328 bytes): two blocks an SM.
    constexpr bool kLean = false;
    constexpr bool kSelfCopy = !kLocal || kLean;  // warpgroup 0 issues the chain's copies
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* Ws = reinterpret_cast<float*>(smem);  // W [64 tok, rows in pk order][128 K]
    float* Ks = Ws + 8192;                       // Kd^T [128 K, rows in pk order][64 tok], 2 buffers
    float* Qs = Ks + 16384;                      // Qg [64 tok][128 K]
    float* St = Qs + 8192;                       // S^T [64 v][128 K], TF32 (O's B operand)
    float* As = St + 8192;                       // Aqk [64][64]
    float* Vt = As + 4096;                       // Vnew^T [64 v][64 tok], TF32 (O's B operand)
    float* Us = Vt + 4096;                       // U[:, vblock] [64 tok][64 v] (el64 layout)
    float* Gs = Us + 4096;                       // gl [128]
    // Hand-offs around data read with ordinary loads, as mbarriers (a named barrier's one-way
    // hand-off of such data fails racecheck, cake/mbar.cuh): fwd_state's St (warpgroup 1 reads it
    // for the states) and the local program's release of Us and Gs (the chain's reads of them done,
    // warpgroup 1 may copy the next chunk's).
    unsigned long long* const mbFullS = reinterpret_cast<unsigned long long*>(Gs + 128);
    unsigned long long* const mbEmptyS = mbFullS + 1;
    unsigned long long* const mbEmptyUG = mbFullS + 2;
    // The chunk inputs' bulk copies complete on transaction mbarriers (one arrival: the issuing
    // thread's expect_tx): Kd^T's two buffers, W, U and gl, Qg, Aqk.
    unsigned long long* const mbK = mbFullS + 3;
    unsigned long long* const mbW = mbFullS + 5;
    unsigned long long* const mbUG = mbFullS + 6;
    unsigned long long* const mbQ = mbFullS + 7;
    unsigned long long* const mbA = mbFullS + 8;
    const unsigned int dsm = cake_wg_desc_lo(cake_smem_addr(smem));
    auto dlo = [&](const float* tile) { return dsm + (unsigned int)((tile - Ws) >> 2); };

    const int vb = blockIdx.x, h = blockIdx.y;
    // wg and split through a warp shuffle: ptxas then knows them warp-uniform, and a wgmma under a
    // branch on them is not serialized (C7518 / C7519 "divergent path" otherwise).
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), w = (tid >> 5) & 3;
    const int g = (tid & 31) >> 2, t = tid & 3;
    const int c0 = seq_chunks[2 * n], nc = seq_chunks[2 * n + 1];
    const long long state_base = ((long long)n * H + h) * 16384 + vb * 64;
    const bool split_rows = __shfl_sync(0xffffffffu, int(precise != nullptr && precise[n] != 0), 0) != 0;  // block-uniform
    // S^T's TF32 copy St goes to warpgroup 1, which writes the chunk-start states from it (and, in
    // fwd_state, computes O): the local program's only when it writes states.
    const bool st_copy = !kLocal || states_out != nullptr;
    // Accumulator x of an m64n64 product: row 16 w + g (+ 8 for x & 2), column 8 (x >> 2) + 2 t +
    // (x & 1); the column holds index pcol(x) of a pk-ordered B (that column of a naturally ordered one).
    auto row_of = [&](int x) { return 16 * w + g + ((x & 2) << 2); };
    auto pcol = [&](int x) { return 8 * (x >> 2) + t + 4 * (x & 1); };
    // Named barriers: warpgroup 0 / 1 internal, and warpgroup 0 -> 1 hand-off of Vnew^T.
    constexpr int kBarWg0 = 1, kBarWg1 = 2, kFullV = 5, kEmptyV = 6;  // (S^T's: the mbarriers above)
    // the local program's: W / Kd^T buffer free (a Kd^T buffer per id: warpgroup 0 frees each
    // buffer every other chunk, so that it cannot arrive twice at one barrier before warpgroup 1
    // has synced once, which would complete the barrier without warpgroup 1 and deadlock the next
    // phase). These one-way hand-offs (arrive -> sync) order only wgmma's reads before a bulk copy's
    // writes; a one-way named-barrier hand-off of data written by ordinary stores and read by
    // ordinary loads is reported by compute-sanitizer's racecheck, and a bar.sync on both sides at
    // different places by its synccheck (a probe, docs/notes.md, session 11), so such hand-offs
    // (St, Us and Gs) are mbarriers, which both tools accept (session 21).
    constexpr int kEmptyW = 8, kEmptyK0 = 10, kEmptyK1 = 11;

    // Chunk inputs of the chain (W, U, gl, Kd^T) are issued by warpgroup 0 itself; in the local
    // program (no O) by warpgroup 1. kda_fwd_chunk stores every tile in its shared-memory image
    // here (cake/chunk_image.cuh), so the issuing warpgroup's thread 0 copies each whole with one
    // bulk copy that completes on the tile's transaction mbarrier, and its readers wait on that
    // (against 16-byte cp.async pieces from 128 threads, each waiting for its own: -7 % of the
    // 1doc replay pass, -12 % R2, -17 % 64K x 4 in a timing ablation; docs/notes.md, session 22).
    const int tw = tid & 127;  // within the warpgroup that issues the loads
    const bool issuer = tw == 0;
    auto bulk = [&](unsigned long long* mb, float* dst, const float* src, unsigned int bytes) {
        cake_mbar_expect_tx(mb, bytes);
        cake_bulk_load(dst, src, bytes, mb);
    };
    auto issue_w = [&](int ci) {
        if (issuer) bulk(mbW, Ws, W + ((long long)ci * H + h) * 8192, 32768);
    };
    auto issue_ug = [&](int ci) {  // this block's half of U (the transition pass: U = 0, Us zeroed once)
        const long long wsi = (long long)ci * H + h;
        if (!issuer) return;
        const bool u = !kLocal || U != nullptr;
        cake_mbar_expect_tx(mbUG, u ? 16384 + 512 : 512);
        if (u) cake_bulk_load(Us, U + wsi * 8192 + vb * 4096, 16384, mbUG);
        cake_bulk_load(Gs, gl + wsi * 128, 512, mbUG);
    };
    auto issue_k = [&](int ci) {
        const int b = (ci - c0) & 1;
        if (issuer) bulk(mbK + b, Ks + 8192 * b, Kd + ((long long)ci * H + h) * 8192, 32768);
    };

    auto prefetch_chunk = [&](int ci) { prefetch_chunk_l2(W, U, Qg, Kd, Aqk, gl, (long long)ci * H + h, tw, 128, vb); };

    if (tid == 0) {
        cake_mbar_init(mbFullS, 128);   // warpgroup 0's threads, St stored
        cake_mbar_init(mbEmptyS, 128);  // warpgroup 1's threads, St read
        if (kLocal) cake_mbar_init(mbEmptyUG, 128);  // warpgroup 0's threads, Us and Gs read
        for (unsigned long long* mb = mbK; mb <= mbA; ++mb) cake_mbar_init(mb, 1);
        cake_mbar_init_fence();
    }
    if (kLocal && U == nullptr)  // the transition pass: U = 0 (no copy of U ever writes Us)
        for (int i = tid; i < 4096; i += 256) Us[i] = 0.f;
    __syncthreads();
    // The chunk-start state S(i) out in 16 bits (cake/state16.cuh) from St, its TF32 copy (the
    // values of warpgroup 0's A fragments, hi parts for precise rows), right after Qg S, so that
    // St goes back to warpgroup 0 before Aqk Vnew waits for Vnew^T (after it: +3 % 1doc, +6 %
    // R2, +8 % 64K x 4), and 5.5 % faster than with warpgroup 0 writing them (1doc). Of what
    // the states still cost (~17 %), ~10 % is their stores and the rest this work; staging the
    // record for a bulk copy took as long, and storing it only after St's release (every
    // value in registers) took 10 % longer (docs/notes.md, sessions 21-22). A lane pair takes
    // one key d and one group of 16 values (one 32-byte sector of the record), lane p the
    // format's positions 8 p .. 8 p + 7, i.e. values r = 4 p + j and 8 + 4 p + j (j = 0..3) as
    // its four words: eight rounds of 16 keys and one group a warp. Rows r and r + 4 of St
    // differ in its swizzle's bit 2 and the 16 keys fill four 16-byte chunks, so the loads are
    // conflict-free; the stores are whole sectors.
    const int lane = tw & 31, wq = tw >> 5, p = lane & 1;
    auto write_states = [&](unsigned char* rec) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const int gl4 = q >> 1, d = 32 * wq + 16 * (q & 1) + (lane >> 1), v0 = 16 * gl4 + 4 * p;
            float sv[8];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                sv[2 * j] = St[cake_wg_idx<64>(v0 + j, d)];
                sv[2 * j + 1] = St[cake_wg_idx<64>(v0 + 8 + j, d)];
            }
            float m = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(sv[j]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            const unsigned int e = cake_s16_exp(m);
            const float sc = cake_s16_down(e);
            const int grp = 4 * vb + gl4;
            *reinterpret_cast<uint4*>(rec + d * 256 + 32 * grp + 16 * p) =
                make_uint4(cake_f16x2(sv[0] * sc, sv[1] * sc), cake_f16x2(sv[2] * sc, sv[3] * sc),
                           cake_f16x2(sv[4] * sc, sv[5] * sc), cake_f16x2(sv[6] * sc, sv[7] * sc));
            if (p == 0) rec[CAKE_S16_EXP + grp * 128 + d] = (unsigned char)e;
        }
    };
    if (wg == 0) {
        float ST[2][32];  // S^T: value row row_of(x), key 64 hf + pcol(x)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
            for (int x = 0; x < 32; ++x) {
                const int d = 64 * hf + pcol(x), v = row_of(x);
                float s = 0.f;
                if (has_h0 == 1) s = h0[state_base + (long long)d * 128 + v];
                else if (kLocal && has_h0 == 2) s = d == vb * 64 + v ? 1.f : 0.f;  // S = I
                ST[hf][x] = s;
            }
        // A fragments of S^T and of Vnew^T: TF32(x) (hi); precise rows then also lo = TF32(x - hi)
        // in the same registers, a second pass after the first has read them (x to ~2^-22). Every
        // A operand is a TF32 value: what the tensor cores do with other bits is not relied on.
        unsigned int FS[2][32];
        auto frag_s = [&]() {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int x = 0; x < 32; ++x) FS[hf][x] = cake_tf32(ST[hf][x]);
        };
        auto store_global = [&](float* dst) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int x = 0; x < 32; ++x) dst[(long long)(64 * hf + pcol(x)) * 128 + row_of(x)] = ST[hf][x];
        };
        // Three copies a chunk, issued in the order the chain needs them: Kd^T (a chunk ahead, at
        // the top of the chunk before), W (once the chunk before's W S is done), U and gl (once its
        // Vnew and gl scaling have read them). W S waits only for the first two; U and gl are
        // waited for after it, which gives their copies the product's time to land.
        if (kSelfCopy && nc > 0) {
            issue_k(c0);
            issue_w(c0);
            issue_ug(c0);
        }
        frag_s();

        // The chain, compiled once per precise-rows setting (split: S and Vnew as TF32 hi + lo): the
        // common program then keeps no lo fragments live, and fits 255 registers without spills
        // under NVRTC 13.0 too (it spilled 176 bytes there; docs/notes.md, session 19).
        auto chain = [&](auto precise_rows) {
            constexpr bool split = decltype(precise_rows)::value;
#pragma unroll 1
            for (int i = 0; i < nc; ++i) {
                const int ci = c0 + i;
                const float* Kc = Ks + 8192 * (i & 1);
                cake_mbar_wait(mbK + (i & 1), (i >> 1) & 1);  // Kd^T(i)
                cake_mbar_wait(mbW, i & 1);                    // W(i)
                if (kSelfCopy) {
                    cake_bar_sync(kBarWg0, 128);
                    if (i + 1 < nc) issue_k(ci + 1);  // the other buffer: its last reader (chunk i-1) is done
                }

                // Vnew^T = U^T - S^T W^T: acc = S^T W^T first (precise rows: hi, then lo).
                float VA[32];
#pragma unroll
                for (int x = 0; x < 32; ++x) VA[x] = 0.f;
                auto product_sw = [&](int acc0) {
                    cake_wgmma_fence();
#pragma unroll
                    for (int s = 0; s < 16; ++s) {
                        const unsigned int* f = FS[s >> 3] + 4 * (s & 7);
                        const unsigned int a[4] = {f[0], f[2], f[1], f[3]};
                        cake_wgmma_n64_rs(VA, a, cake_wg_desc_at<64>(dlo(Ws), 0, s), s > 0 || acc0);
                    }
                    cake_wgmma_commit();
                };
                product_sw(0);
                if (split) {  // FS may change only once the hi pass has read it
                    cake_wgmma_wait<0>();
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int x = 0; x < 32; ++x) FS[hf][x] = cake_tf32(ST[hf][x] - __uint_as_float(FS[hf][x]));
                    product_sw(1);
                }
                // While it runs: S^T's TF32 copy for warpgroup 1 (O and the states; the local
                // program's, the states only).
                if (st_copy) {
                    // Precise rows: S^T's copy only once the lo pass is done. Stored while it ran, ptxas
                    // gave the copy's conversions the registers of the lo pass's A operands, still
                    // being read by the tensor cores: o came out wrong on the H200 (docs/notes.md,
                    // session 10; tests/test_compile.py scans the SASS for such writes). The hi-only
                    // rows overlap it safely: their A registers stay live (the copy reads them).
                    if (split) cake_wgmma_wait<0>();
                    if (i > 0) cake_mbar_wait(mbEmptyS, (i - 1) & 1);  // warpgroup 1 is done with St(i-1)
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int x = 0; x < 32; ++x)
                            St[cake_wg_idx<64>(row_of(x), 64 * hf + pcol(x))] = __uint_as_float(split ? cake_tf32(ST[hf][x]) : FS[hf][x]);
                    cake_fence_proxy_async();
                    cake_mbar_arrive(mbFullS);
                }
                cake_wgmma_wait<0>();
                if (!kSelfCopy) {
                    if (i + 1 < nc) cake_bar_arrive(kEmptyW, 256);  // this warp's W S is done
                } else {
                    cake_bar_sync(kBarWg0, 128);  // every warp's W S is done: Ws is free
                    if (i + 1 < nc) issue_w(ci + 1);
                }
                cake_mbar_wait(mbUG, i & 1);  // U(i), gl(i) (waited for only now)

                // Vnew and its A fragments (hi; precise rows: then lo, a second pass), S^T scaled by gl.
                unsigned int FV[32];
#pragma unroll
                for (int x = 0; x < 32; ++x) {
                    VA[x] = Us[el64(pcol(x), row_of(x))] - VA[x];
                    FV[x] = cake_tf32(VA[x]);
                }
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                    for (int x = 0; x < 32; ++x) ST[hf][x] *= Gs[64 * hf + pcol(x)];
                if (!kLocal) {
                    if (i > 0) cake_bar_sync(kEmptyV, 256);  // warpgroup 1's Aqk Vnew of chunk i-1 is done
#pragma unroll
                    for (int x = 0; x < 32; ++x) Vt[cake_wg_idx<64>(row_of(x), pcol(x))] = __uint_as_float(FV[x]);
                    cake_fence_proxy_async();
                    cake_bar_arrive(kFullV, 256);
                }

                // S^T = S^T diag(gl) + Vnew^T Kd: two m64n64 halves of the keys (precise rows: hi, then
                // lo from registers of their own, one group; a wait between the passes, as for S^T's
                // fragments, makes ptxas serialize the local program's wgmma, C7512).
                unsigned int FV2[32];
#pragma unroll
                for (int x = 0; x < 32; ++x) FV2[x] = split ? cake_tf32(VA[x] - __uint_as_float(FV[x])) : 0u;
                auto product_vk = [&](const unsigned int (&F)[32]) {
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int j = 0; j < 8; ++j) {
                            const unsigned int a[4] = {F[4 * j], F[4 * j + 2], F[4 * j + 1], F[4 * j + 3]};
                            cake_wgmma_n64_rs(ST[hf], a, cake_wg_desc_at<128>(dlo(Kc), 64 * hf, j), 1);
                        }
                };
                cake_wgmma_fence();
                product_vk(FV);
                if (split) product_vk(FV2);
                cake_wgmma_commit();
                if (!kSelfCopy) {
                    if (i + 1 < nc) cake_mbar_arrive(mbEmptyUG);  // this thread's reads of Us and Gs are done
                } else {
                    cake_bar_sync(kBarWg0, 128);  // every warp's reads of Us and Gs are done
                    if (i + 1 < nc) issue_ug(ci + 1);
                }
                cake_wgmma_wait<0>();
                if (!kSelfCopy && i + 2 < nc) cake_bar_arrive((i & 1) ? kEmptyK1 : kEmptyK0, 256);  // Kd^T buffer i & 1 is free
                frag_s();
            }
        };
        if (split_rows) chain(Precise<true>{});
        else chain(Precise<false>{});
        if (store_ht) store_global(ht + state_base);
    } else if (!kLocal) {
        // ---- warpgroup 1: O = Qg S + Aqk Vnew (rows = tokens, columns = this block's values).
        auto issue_q = [&](int ci) {
            if (issuer) bulk(mbQ, Qs, Qg + ((long long)ci * H + h) * 8192, 32768);
        };
        auto issue_aqk = [&](int ci) {
            if (issuer) bulk(mbA, As, Aqk + ((long long)ci * H + h) * 4096, 16384);
        };
        // Q(0), A(0), then per chunk i Q(i+1) once Qg S is done, A(i+1) once o has left As
        if (nc > 0) {
            issue_q(c0);
            issue_aqk(c0);
        }
        int2 tl = nc > 0 ? *reinterpret_cast<const int2*>(chunks + 2 * c0) : make_int2(0, 0);
#pragma unroll 1
        for (int i = 0; i < nc; ++i) {
            const int ci = c0 + i;
            const int t0 = tl.x, L = tl.y;
            if (i + 1 < nc) tl = *reinterpret_cast<const int2*>(chunks + 2 * (ci + 1));
            float acc[32];
#pragma unroll
            for (int x = 0; x < 32; ++x) acc[x] = 0.f;
            cake_mbar_wait(mbQ, i & 1);      // Qg(i)
            cake_mbar_wait(mbFullS, i & 1);  // S^T(i) stored by warpgroup 0
            cake_wgmma_fence();
#pragma unroll
            for (int s = 0; s < 16; ++s)
                cake_wgmma_n64(acc, cake_wg_desc_at<64>(dlo(Qs), 0, s), cake_wg_desc_at<64>(dlo(St), 0, s), s > 0);
            cake_wgmma_commit();
            cake_wgmma_wait<0>();
            cake_bar_sync(kBarWg1, 128);  // every warp's Qg S is done: Qs is free
            if (i + 1 < nc) issue_q(ci + 1);
            if (states_out != nullptr)
                write_states(reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES);
            if (i + 1 < nc) cake_mbar_arrive(mbEmptyS);  // St read (Qg S and the states)
            cake_mbar_wait(mbA, i & 1);   // Aqk(i)
            cake_bar_sync(kFullV, 256);  // Vnew^T(i)
            cake_wgmma_fence();
#pragma unroll
            for (int s = 0; s < 8; ++s)
                cake_wgmma_n64(acc, cake_wg_desc_at<64>(dlo(As), 0, s), cake_wg_desc_at<64>(dlo(Vt), 0, s), 1);
            cake_wgmma_commit();
            cake_wgmma_wait<0>();
            if (i + 1 < nc) cake_bar_arrive(kEmptyV, 256);
            // o through As (free once every warp's Aqk Vnew is done): each thread's bf16 pairs in
            // (columns 8 (x >> 2) + 2 t, + 1: word t of 16-byte chunk x >> 2), chunk c4 of row r at
            // c4 ^ (r & 7) (conflict-free both ways), then whole 128-byte rows out, four 16-byte
            // stores a thread where it took sixteen 4-byte ones over eight rows each (docs/notes.md,
            // session 18). Aqk(i+1) is issued after.
            unsigned int* const ostage = reinterpret_cast<unsigned int*>(As);
            cake_bar_sync(kBarWg1, 128);
#pragma unroll
            for (int x = 0; x < 32; x += 2) {
                const int r = row_of(x);
                ostage[r * 32 + 4 * ((x >> 2) ^ (r & 7)) + t] = cake_pack_bf16x2(acc[x], acc[x + 1]);
            }
            cake_bar_sync(kBarWg1, 128);
            const long long orow = (long long)H * 128;
            unsigned short* ob = o + (long long)t0 * orow + h * 128 + vb * 64;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int c = tw + 128 * k, r = c >> 3, part = c & 7;
                if (r < L)
                    *reinterpret_cast<uint4*>(ob + r * orow + 8 * part) =
                        *reinterpret_cast<const uint4*>(ostage + r * 32 + 4 * (part ^ (r & 7)));
            }
            cake_fence_proxy_async();  // the staged o's ordinary accesses -> the bulk copy's writes
            cake_bar_sync(kBarWg1, 128);  // every read of the staged o is done: As is free
            if (i + 1 < nc) issue_aqk(ci + 1);
        }
    } else if (!kLean) {
        // ---- warpgroup 1 of the local program: the chain's loads, a chunk ahead (Kd^T two), each
        // tile's copy waited for by warpgroup 0 on its own mbarrier (U and gl only after W S), and
        // the chunk-start states from St (warpgroup 0 wrote them from its fragments until session
        // 22).
        if (pf && nc > 1) prefetch_chunk(c0 + 1);
        if (nc > 0) {
            issue_k(c0);
            if (nc > 1) issue_k(c0 + 1);
            issue_w(c0);
            issue_ug(c0);
        }
#pragma unroll 1
        for (int i = 0; i < nc; ++i) {
            const int ci = c0 + i;
            if (pf && i + 2 < nc) prefetch_chunk(ci + 2);
            if (i + 1 < nc) {  // chunk i+1's W, U, gl (its Kd^T is in flight since chunk i-1)
                cake_bar_sync(kEmptyW, 256);
                issue_w(ci + 1);
                cake_mbar_wait(mbEmptyUG, i & 1);
                issue_ug(ci + 1);
            }
            // chunk i's start state out once the next chunk's W, U and gl are on their way (so the
            // chain does not wait for them), before Kd^T of chunk i+2 (not needed before then)
            if (states_out != nullptr) {
                cake_mbar_wait(mbFullS, i & 1);  // S^T(i) stored by warpgroup 0
                write_states(reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES);
                if (i + 1 < nc) cake_mbar_arrive(mbEmptyS);
            }
            if (i + 2 < nc) {  // Kd^T of chunk i+2, into chunk i's buffer once its product is done
                cake_bar_sync((i & 1) ? kEmptyK1 : kEmptyK0, 256);
                issue_k(ci + 2);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(128, 2) kda_fwd_state_lean(
    const float* __restrict__ W, const float* __restrict__ U_arg, const float* __restrict__ Qg,
    const float* __restrict__ Kd, const float* __restrict__ Aqk, const float* __restrict__ gl,
    const int* __restrict__ chunks, const int* __restrict__ seq_chunks,
    const int* __restrict__ precise, const float* __restrict__ h0, unsigned short* __restrict__ o, float* __restrict__ ht_arg,
    float* __restrict__ states_out_arg, int H, int has_h0_arg, int store_ht)
{
    // The local program's two passes in one launch (has_h0 = 3): grid.z = 2 R; blocks z < R run
    // row z's offset pass (from 0, with U; end state to ht[z]), blocks z >= R row z - R's
    // transition pass (from I, U = 0; end state to states_out[z - R]). Block-uniform.
    if (has_h0_arg != 3) __trap();  // kda_fwd_state_lean runs the two-pass launch only
    constexpr bool both = true;
    const bool trans = both && blockIdx.z >= gridDim.z / 2;
    const float* __restrict__ const U = trans ? nullptr : U_arg;
    float* __restrict__ const ht = trans ? states_out_arg : ht_arg;
    float* __restrict__ const states_out = both ? nullptr : states_out_arg;
    const int has_h0 = both ? (trans ? 2 : 0) : has_h0_arg;
    const int n = trans ? blockIdx.z - gridDim.z / 2 : blockIdx.z;  // the row of seq_chunks
    const bool pf = both;  // chunk inputs prefetched into L2 (prefetch_chunk_l2)
    // ---- sm_90a: the chain in registers (docs/kernel-notes.md, session 10). Warpgroup 0 keeps S^T
    // (64 value rows x 128 keys) as wgmma accumulators and runs the chain transposed,
    //   Vnew^T = U^T - S^T W^T,   S^T = S^T diag(gl) + Vnew^T Kd,
    // each product's A operand from registers: the previous product's accumulators, as they are.
    // That works because of the row order of the B tiles: accumulator column n of an m64nNk8
    // product is B's row n, and thread (g, t) holds columns 8j + 2t, 8j + 2t + 1 where its A
    // fragment of k8 step j needs the indices 8j + t, 8j + t + 4; so W's rows (tokens) and Kd^T's
    // rows (keys) are stored in the order pk (pk(8j + 2t + e) = 8j + t + 4e), and accumulator x of a
    // thread holds index pcol(x). The chain then needs no shared-memory round trip and no block
    // barrier. Warpgroup 1 computes O = Qg S + Aqk Vnew (as before) from the TF32 copies of S^T and
    // Vnew^T that warpgroup 0 stores for it (FULL / EMPTY pairs: mbarriers for S^T, named barriers
    // for Vnew^T).
    // kda_fwd_state_lean: the chain's warpgroup alone, issuing its own copies (as fwd_state's
    // does), and only the chain's tiles in shared memory (115 328 bytes): two blocks an SM.
    constexpr bool kLean = true;
    constexpr bool kSelfCopy = !kLocal || kLean;  // warpgroup 0 issues the chain's copies
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* Ws = reinterpret_cast<float*>(smem);  // W [64 tok, rows in pk order][128 K]
    float* Ks = Ws + 8192;                       // Kd^T [128 K, rows in pk order][64 tok], 2 buffers
    float* Us = Ks + 16384;                      // U[:, vblock] [64 tok][64 v] (el64 layout)
    float* Gs = Us + 4096;                       // gl [128], then the mbarriers
    float* const Qs = nullptr;                   // (O's and the states' tiles: none)
    float* const St = nullptr;
    float* const As = nullptr;
    float* const Vt = nullptr;
    // Hand-offs around data read with ordinary loads, as mbarriers (a named barrier's one-way
    // hand-off of such data fails racecheck, cake/mbar.cuh): fwd_state's St (warpgroup 1 reads it
    // for the states) and the local program's release of Us and Gs (the chain's reads of them done,
    // warpgroup 1 may copy the next chunk's).
    unsigned long long* const mbFullS = reinterpret_cast<unsigned long long*>(Gs + 128);
    unsigned long long* const mbEmptyS = mbFullS + 1;
    unsigned long long* const mbEmptyUG = mbFullS + 2;
    // The chunk inputs' bulk copies complete on transaction mbarriers (one arrival: the issuing
    // thread's expect_tx): Kd^T's two buffers, W, U and gl, Qg, Aqk.
    unsigned long long* const mbK = mbFullS + 3;
    unsigned long long* const mbW = mbFullS + 5;
    unsigned long long* const mbUG = mbFullS + 6;
    unsigned long long* const mbQ = mbFullS + 7;
    unsigned long long* const mbA = mbFullS + 8;
    const unsigned int dsm = cake_wg_desc_lo(cake_smem_addr(smem));
    auto dlo = [&](const float* tile) { return dsm + (unsigned int)((tile - Ws) >> 2); };

    const int vb = blockIdx.x, h = blockIdx.y;
    // wg and split through a warp shuffle: ptxas then knows them warp-uniform, and a wgmma under a
    // branch on them is not serialized (C7518 / C7519 "divergent path" otherwise).
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), w = (tid >> 5) & 3;
    const int g = (tid & 31) >> 2, t = tid & 3;
    const int c0 = seq_chunks[2 * n], nc = seq_chunks[2 * n + 1];
    const long long state_base = ((long long)n * H + h) * 16384 + vb * 64;
    const bool split_rows = __shfl_sync(0xffffffffu, int(precise != nullptr && precise[n] != 0), 0) != 0;  // block-uniform
    // S^T's TF32 copy St goes to warpgroup 1, which writes the chunk-start states from it (and, in
    // fwd_state, computes O): the local program's only when it writes states.
    const bool st_copy = !kLocal || states_out != nullptr;
    // Accumulator x of an m64n64 product: row 16 w + g (+ 8 for x & 2), column 8 (x >> 2) + 2 t +
    // (x & 1); the column holds index pcol(x) of a pk-ordered B (that column of a naturally ordered one).
    auto row_of = [&](int x) { return 16 * w + g + ((x & 2) << 2); };
    auto pcol = [&](int x) { return 8 * (x >> 2) + t + 4 * (x & 1); };
    // Named barriers: warpgroup 0 / 1 internal, and warpgroup 0 -> 1 hand-off of Vnew^T.
    constexpr int kBarWg0 = 1, kBarWg1 = 2, kFullV = 5, kEmptyV = 6;  // (S^T's: the mbarriers above)
    // the local program's: W / Kd^T buffer free (a Kd^T buffer per id: warpgroup 0 frees each
    // buffer every other chunk, so that it cannot arrive twice at one barrier before warpgroup 1
    // has synced once, which would complete the barrier without warpgroup 1 and deadlock the next
    // phase). These one-way hand-offs (arrive -> sync) order only wgmma's reads before a bulk copy's
    // writes; a one-way named-barrier hand-off of data written by ordinary stores and read by
    // ordinary loads is reported by compute-sanitizer's racecheck, and a bar.sync on both sides at
    // different places by its synccheck (a probe, docs/notes.md, session 11), so such hand-offs
    // (St, Us and Gs) are mbarriers, which both tools accept (session 21).
    constexpr int kEmptyW = 8, kEmptyK0 = 10, kEmptyK1 = 11;

    // Chunk inputs of the chain (W, U, gl, Kd^T) are issued by warpgroup 0 itself; in the local
    // program (no O) by warpgroup 1. kda_fwd_chunk stores every tile in its shared-memory image
    // here (cake/chunk_image.cuh), so the issuing warpgroup's thread 0 copies each whole with one
    // bulk copy that completes on the tile's transaction mbarrier, and its readers wait on that
    // (against 16-byte cp.async pieces from 128 threads, each waiting for its own: -7 % of the
    // 1doc replay pass, -12 % R2, -17 % 64K x 4 in a timing ablation; docs/notes.md, session 22).
    const int tw = tid & 127;  // within the warpgroup that issues the loads
    const bool issuer = tw == 0;
    auto bulk = [&](unsigned long long* mb, float* dst, const float* src, unsigned int bytes) {
        cake_mbar_expect_tx(mb, bytes);
        cake_bulk_load(dst, src, bytes, mb);
    };
    auto issue_w = [&](int ci) {
        if (issuer) bulk(mbW, Ws, W + ((long long)ci * H + h) * 8192, 32768);
    };
    auto issue_ug = [&](int ci) {  // this block's half of U (the transition pass: U = 0, Us zeroed once)
        const long long wsi = (long long)ci * H + h;
        if (!issuer) return;
        const bool u = !kLocal || U != nullptr;
        cake_mbar_expect_tx(mbUG, u ? 16384 + 512 : 512);
        if (u) cake_bulk_load(Us, U + wsi * 8192 + vb * 4096, 16384, mbUG);
        cake_bulk_load(Gs, gl + wsi * 128, 512, mbUG);
    };
    auto issue_k = [&](int ci) {
        const int b = (ci - c0) & 1;
        if (issuer) bulk(mbK + b, Ks + 8192 * b, Kd + ((long long)ci * H + h) * 8192, 32768);
    };

    auto prefetch_chunk = [&](int ci) { prefetch_chunk_l2(W, U, Qg, Kd, Aqk, gl, (long long)ci * H + h, tw, 128, vb); };

    if (tid == 0) {
        cake_mbar_init(mbFullS, 128);   // warpgroup 0's threads, St stored
        cake_mbar_init(mbEmptyS, 128);  // warpgroup 1's threads, St read
        if (kLocal) cake_mbar_init(mbEmptyUG, 128);  // warpgroup 0's threads, Us and Gs read
        for (unsigned long long* mb = mbK; mb <= mbA; ++mb) cake_mbar_init(mb, 1);
        cake_mbar_init_fence();
    }
    if (kLocal && U == nullptr)  // the transition pass: U = 0 (no copy of U ever writes Us)
        for (int i = tid; i < 4096; i += 128) Us[i] = 0.f;
    __syncthreads();
    // The chunk-start state S(i) out in 16 bits (cake/state16.cuh) from St, its TF32 copy (the
    // values of warpgroup 0's A fragments, hi parts for precise rows), right after Qg S, so that
    // St goes back to warpgroup 0 before Aqk Vnew waits for Vnew^T (after it: +3 % 1doc, +6 %
    // R2, +8 % 64K x 4), and 5.5 % faster than with warpgroup 0 writing them (1doc). Of what
    // the states still cost (~17 %), ~10 % is their stores and the rest this work; staging the
    // record for a bulk copy took as long, and storing it only after St's release (every
    // value in registers) took 10 % longer (docs/notes.md, sessions 21-22). A lane pair takes
    // one key d and one group of 16 values (one 32-byte sector of the record), lane p the
    // format's positions 8 p .. 8 p + 7, i.e. values r = 4 p + j and 8 + 4 p + j (j = 0..3) as
    // its four words: eight rounds of 16 keys and one group a warp. Rows r and r + 4 of St
    // differ in its swizzle's bit 2 and the 16 keys fill four 16-byte chunks, so the loads are
    // conflict-free; the stores are whole sectors.
    const int lane = tw & 31, wq = tw >> 5, p = lane & 1;
    auto write_states = [&](unsigned char* rec) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const int gl4 = q >> 1, d = 32 * wq + 16 * (q & 1) + (lane >> 1), v0 = 16 * gl4 + 4 * p;
            float sv[8];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                sv[2 * j] = St[cake_wg_idx<64>(v0 + j, d)];
                sv[2 * j + 1] = St[cake_wg_idx<64>(v0 + 8 + j, d)];
            }
            float m = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(sv[j]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            const unsigned int e = cake_s16_exp(m);
            const float sc = cake_s16_down(e);
            const int grp = 4 * vb + gl4;
            *reinterpret_cast<uint4*>(rec + d * 256 + 32 * grp + 16 * p) =
                make_uint4(cake_f16x2(sv[0] * sc, sv[1] * sc), cake_f16x2(sv[2] * sc, sv[3] * sc),
                           cake_f16x2(sv[4] * sc, sv[5] * sc), cake_f16x2(sv[6] * sc, sv[7] * sc));
            if (p == 0) rec[CAKE_S16_EXP + grp * 128 + d] = (unsigned char)e;
        }
    };
    if (wg == 0) {
        float ST[2][32];  // S^T: value row row_of(x), key 64 hf + pcol(x)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
            for (int x = 0; x < 32; ++x) {
                const int d = 64 * hf + pcol(x), v = row_of(x);
                float s = 0.f;
                if (has_h0 == 1) s = h0[state_base + (long long)d * 128 + v];
                else if (kLocal && has_h0 == 2) s = d == vb * 64 + v ? 1.f : 0.f;  // S = I
                ST[hf][x] = s;
            }
        // A fragments of S^T and of Vnew^T: TF32(x) (hi); precise rows then also lo = TF32(x - hi)
        // in the same registers, a second pass after the first has read them (x to ~2^-22). Every
        // A operand is a TF32 value: what the tensor cores do with other bits is not relied on.
        unsigned int FS[2][32];
        auto frag_s = [&]() {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int x = 0; x < 32; ++x) FS[hf][x] = cake_tf32(ST[hf][x]);
        };
        auto store_global = [&](float* dst) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int x = 0; x < 32; ++x) dst[(long long)(64 * hf + pcol(x)) * 128 + row_of(x)] = ST[hf][x];
        };
        // Three copies a chunk, issued in the order the chain needs them: Kd^T (a chunk ahead, at
        // the top of the chunk before), W (once the chunk before's W S is done), U and gl (once its
        // Vnew and gl scaling have read them). W S waits only for the first two; U and gl are
        // waited for after it, which gives their copies the product's time to land.
        if (kSelfCopy && nc > 0) {
            issue_k(c0);
            issue_w(c0);
            issue_ug(c0);
        }
        frag_s();

        // The chain, compiled once per precise-rows setting (split: S and Vnew as TF32 hi + lo): the
        // common program then keeps no lo fragments live, and fits 255 registers without spills
        // under NVRTC 13.0 too (it spilled 176 bytes there; docs/notes.md, session 19).
        auto chain = [&](auto precise_rows) {
            constexpr bool split = decltype(precise_rows)::value;
#pragma unroll 1
            for (int i = 0; i < nc; ++i) {
                const int ci = c0 + i;
                const float* Kc = Ks + 8192 * (i & 1);
                cake_mbar_wait(mbK + (i & 1), (i >> 1) & 1);  // Kd^T(i)
                cake_mbar_wait(mbW, i & 1);                    // W(i)
                if (kSelfCopy) {
                    cake_bar_sync(kBarWg0, 128);
                    if (i + 1 < nc) issue_k(ci + 1);  // the other buffer: its last reader (chunk i-1) is done
                }

                // Vnew^T = U^T - S^T W^T: acc = S^T W^T first (precise rows: hi, then lo).
                float VA[32];
#pragma unroll
                for (int x = 0; x < 32; ++x) VA[x] = 0.f;
                auto product_sw = [&](int acc0) {
                    cake_wgmma_fence();
#pragma unroll
                    for (int s = 0; s < 16; ++s) {
                        const unsigned int* f = FS[s >> 3] + 4 * (s & 7);
                        const unsigned int a[4] = {f[0], f[2], f[1], f[3]};
                        cake_wgmma_n64_rs(VA, a, cake_wg_desc_at<64>(dlo(Ws), 0, s), s > 0 || acc0);
                    }
                    cake_wgmma_commit();
                };
                product_sw(0);
                if (split) {  // FS may change only once the hi pass has read it
                    cake_wgmma_wait<0>();
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int x = 0; x < 32; ++x) FS[hf][x] = cake_tf32(ST[hf][x] - __uint_as_float(FS[hf][x]));
                    product_sw(1);
                }
                // While it runs: S^T's TF32 copy for warpgroup 1 (O and the states; the local
                // program's, the states only).
                if (st_copy) {
                    // Precise rows: S^T's copy only once the lo pass is done. Stored while it ran, ptxas
                    // gave the copy's conversions the registers of the lo pass's A operands, still
                    // being read by the tensor cores: o came out wrong on the H200 (docs/notes.md,
                    // session 10; tests/test_compile.py scans the SASS for such writes). The hi-only
                    // rows overlap it safely: their A registers stay live (the copy reads them).
                    if (split) cake_wgmma_wait<0>();
                    if (i > 0) cake_mbar_wait(mbEmptyS, (i - 1) & 1);  // warpgroup 1 is done with St(i-1)
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int x = 0; x < 32; ++x)
                            St[cake_wg_idx<64>(row_of(x), 64 * hf + pcol(x))] = __uint_as_float(split ? cake_tf32(ST[hf][x]) : FS[hf][x]);
                    cake_fence_proxy_async();
                    cake_mbar_arrive(mbFullS);
                }
                cake_wgmma_wait<0>();
                if (!kSelfCopy) {
                    if (i + 1 < nc) cake_bar_arrive(kEmptyW, 256);  // this warp's W S is done
                } else {
                    cake_bar_sync(kBarWg0, 128);  // every warp's W S is done: Ws is free
                    if (i + 1 < nc) issue_w(ci + 1);
                }
                cake_mbar_wait(mbUG, i & 1);  // U(i), gl(i) (waited for only now)

                // Vnew and its A fragments (hi; precise rows: then lo, a second pass), S^T scaled by gl.
                unsigned int FV[32];
#pragma unroll
                for (int x = 0; x < 32; ++x) {
                    VA[x] = Us[el64(pcol(x), row_of(x))] - VA[x];
                    FV[x] = cake_tf32(VA[x]);
                }
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                    for (int x = 0; x < 32; ++x) ST[hf][x] *= Gs[64 * hf + pcol(x)];
                if (!kLocal) {
                    if (i > 0) cake_bar_sync(kEmptyV, 256);  // warpgroup 1's Aqk Vnew of chunk i-1 is done
#pragma unroll
                    for (int x = 0; x < 32; ++x) Vt[cake_wg_idx<64>(row_of(x), pcol(x))] = __uint_as_float(FV[x]);
                    cake_fence_proxy_async();
                    cake_bar_arrive(kFullV, 256);
                }

                // S^T = S^T diag(gl) + Vnew^T Kd: two m64n64 halves of the keys (precise rows: hi, then
                // lo from registers of their own, one group; a wait between the passes, as for S^T's
                // fragments, makes ptxas serialize the local program's wgmma, C7512).
                unsigned int FV2[32];
#pragma unroll
                for (int x = 0; x < 32; ++x) FV2[x] = split ? cake_tf32(VA[x] - __uint_as_float(FV[x])) : 0u;
                auto product_vk = [&](const unsigned int (&F)[32]) {
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int j = 0; j < 8; ++j) {
                            const unsigned int a[4] = {F[4 * j], F[4 * j + 2], F[4 * j + 1], F[4 * j + 3]};
                            cake_wgmma_n64_rs(ST[hf], a, cake_wg_desc_at<128>(dlo(Kc), 64 * hf, j), 1);
                        }
                };
                cake_wgmma_fence();
                product_vk(FV);
                if (split) product_vk(FV2);
                cake_wgmma_commit();
                if (!kSelfCopy) {
                    if (i + 1 < nc) cake_mbar_arrive(mbEmptyUG);  // this thread's reads of Us and Gs are done
                } else {
                    cake_bar_sync(kBarWg0, 128);  // every warp's reads of Us and Gs are done
                    if (i + 1 < nc) issue_ug(ci + 1);
                }
                cake_wgmma_wait<0>();
                if (!kSelfCopy && i + 2 < nc) cake_bar_arrive((i & 1) ? kEmptyK1 : kEmptyK0, 256);  // Kd^T buffer i & 1 is free
                frag_s();
            }
        };
        if (split_rows) chain(Precise<true>{});
        else chain(Precise<false>{});
        if (store_ht) store_global(ht + state_base);
    } else if (!kLocal) {
        // ---- warpgroup 1: O = Qg S + Aqk Vnew (rows = tokens, columns = this block's values).
        auto issue_q = [&](int ci) {
            if (issuer) bulk(mbQ, Qs, Qg + ((long long)ci * H + h) * 8192, 32768);
        };
        auto issue_aqk = [&](int ci) {
            if (issuer) bulk(mbA, As, Aqk + ((long long)ci * H + h) * 4096, 16384);
        };
        // Q(0), A(0), then per chunk i Q(i+1) once Qg S is done, A(i+1) once o has left As
        if (nc > 0) {
            issue_q(c0);
            issue_aqk(c0);
        }
        int2 tl = nc > 0 ? *reinterpret_cast<const int2*>(chunks + 2 * c0) : make_int2(0, 0);
#pragma unroll 1
        for (int i = 0; i < nc; ++i) {
            const int ci = c0 + i;
            const int t0 = tl.x, L = tl.y;
            if (i + 1 < nc) tl = *reinterpret_cast<const int2*>(chunks + 2 * (ci + 1));
            float acc[32];
#pragma unroll
            for (int x = 0; x < 32; ++x) acc[x] = 0.f;
            cake_mbar_wait(mbQ, i & 1);      // Qg(i)
            cake_mbar_wait(mbFullS, i & 1);  // S^T(i) stored by warpgroup 0
            cake_wgmma_fence();
#pragma unroll
            for (int s = 0; s < 16; ++s)
                cake_wgmma_n64(acc, cake_wg_desc_at<64>(dlo(Qs), 0, s), cake_wg_desc_at<64>(dlo(St), 0, s), s > 0);
            cake_wgmma_commit();
            cake_wgmma_wait<0>();
            cake_bar_sync(kBarWg1, 128);  // every warp's Qg S is done: Qs is free
            if (i + 1 < nc) issue_q(ci + 1);
            if (states_out != nullptr)
                write_states(reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES);
            if (i + 1 < nc) cake_mbar_arrive(mbEmptyS);  // St read (Qg S and the states)
            cake_mbar_wait(mbA, i & 1);   // Aqk(i)
            cake_bar_sync(kFullV, 256);  // Vnew^T(i)
            cake_wgmma_fence();
#pragma unroll
            for (int s = 0; s < 8; ++s)
                cake_wgmma_n64(acc, cake_wg_desc_at<64>(dlo(As), 0, s), cake_wg_desc_at<64>(dlo(Vt), 0, s), 1);
            cake_wgmma_commit();
            cake_wgmma_wait<0>();
            if (i + 1 < nc) cake_bar_arrive(kEmptyV, 256);
            // o through As (free once every warp's Aqk Vnew is done): each thread's bf16 pairs in
            // (columns 8 (x >> 2) + 2 t, + 1: word t of 16-byte chunk x >> 2), chunk c4 of row r at
            // c4 ^ (r & 7) (conflict-free both ways), then whole 128-byte rows out, four 16-byte
            // stores a thread where it took sixteen 4-byte ones over eight rows each (docs/notes.md,
            // session 18). Aqk(i+1) is issued after.
            unsigned int* const ostage = reinterpret_cast<unsigned int*>(As);
            cake_bar_sync(kBarWg1, 128);
#pragma unroll
            for (int x = 0; x < 32; x += 2) {
                const int r = row_of(x);
                ostage[r * 32 + 4 * ((x >> 2) ^ (r & 7)) + t] = cake_pack_bf16x2(acc[x], acc[x + 1]);
            }
            cake_bar_sync(kBarWg1, 128);
            const long long orow = (long long)H * 128;
            unsigned short* ob = o + (long long)t0 * orow + h * 128 + vb * 64;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int c = tw + 128 * k, r = c >> 3, part = c & 7;
                if (r < L)
                    *reinterpret_cast<uint4*>(ob + r * orow + 8 * part) =
                        *reinterpret_cast<const uint4*>(ostage + r * 32 + 4 * (part ^ (r & 7)));
            }
            cake_fence_proxy_async();  // the staged o's ordinary accesses -> the bulk copy's writes
            cake_bar_sync(kBarWg1, 128);  // every read of the staged o is done: As is free
            if (i + 1 < nc) issue_aqk(ci + 1);
        }
    } else if (!kLean) {
        // ---- warpgroup 1 of the local program: the chain's loads, a chunk ahead (Kd^T two), each
        // tile's copy waited for by warpgroup 0 on its own mbarrier (U and gl only after W S), and
        // the chunk-start states from St (warpgroup 0 wrote them from its fragments until session
        // 22).
        if (pf && nc > 1) prefetch_chunk(c0 + 1);
        if (nc > 0) {
            issue_k(c0);
            if (nc > 1) issue_k(c0 + 1);
            issue_w(c0);
            issue_ug(c0);
        }
#pragma unroll 1
        for (int i = 0; i < nc; ++i) {
            const int ci = c0 + i;
            if (pf && i + 2 < nc) prefetch_chunk(ci + 2);
            if (i + 1 < nc) {  // chunk i+1's W, U, gl (its Kd^T is in flight since chunk i-1)
                cake_bar_sync(kEmptyW, 256);
                issue_w(ci + 1);
                cake_mbar_wait(mbEmptyUG, i & 1);
                issue_ug(ci + 1);
            }
            // chunk i's start state out once the next chunk's W, U and gl are on their way (so the
            // chain does not wait for them), before Kd^T of chunk i+2 (not needed before then)
            if (states_out != nullptr) {
                cake_mbar_wait(mbFullS, i & 1);  // S^T(i) stored by warpgroup 0
                write_states(reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES);
                if (i + 1 < nc) cake_mbar_arrive(mbEmptyS);
            }
            if (i + 2 < nc) {  // Kd^T of chunk i+2, into chunk i's buffer once its product is done
                cake_bar_sync((i & 1) ? kEmptyK1 : kEmptyK0, 256);
                issue_k(ci + 2);
            }
        }
    }
}

