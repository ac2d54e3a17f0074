// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.fwd_state.sm_103a by cake migrate
// record: kda_cp/fwd_state  program: kda_cp.fwd_state.sm_103a
// identity: sha256:8a5a01d10ba2eca5833e25a76d8184415f2645e46038f0b754280753fe820124
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

namespace {

// fwd_state_local (kda_cp): the local passes of long sequences; fwd_state: everything else.
constexpr bool kLocal = false;

// 16-byte column chunks XOR-swizzled per row. Rows 2q and 2q+1 differ in bit 2, so the
// mma-fragment reads (lane (g, t) -> row g, chunk c0 + t) are conflict-free; rows 0, 2, 4, 6 take
// distinct even values, so the transposed scalar stores of S and Vnew are conflict-free too.
__device__ __forceinline__ int sw(int r) { return cake_sw64(r); }
__device__ __forceinline__ int at64(int r, int c) { return r * 64 + ((c ^ sw(r)) << 2); }
__device__ __forceinline__ int el64(int r, int col) { return at64(r, col >> 2) + (col & 3); }
// The mma.sync program's own helpers (the sm_90a program has its operands on wgmma).
__device__ __forceinline__ int at128(int r, int c) { return r * 128 + ((c ^ sw(r)) << 2); }
__device__ __forceinline__ int el128(int r, int col) { return at128(r, col >> 2) + (col & 3); }

__device__ __forceinline__ float4 ld4(const float* s, int idx) {
    return *reinterpret_cast<const float4*>(s + idx);
}

// A 16x8 (rows) by 16-deep (two k8 steps) product step. Lane (g, t) holds reduction indices
// 4t..4t+3 of the 16: the first mma takes 4t, 4t+1, the second 4t+2, 4t+3 (same map for A and B).
// Every operand in shared memory is already TF32 (kda_fwd_chunk rounds W, Qg, Kd, Aqk; this
// kernel rounds S and Vnew when it stores them), so the bits go to the tensor cores unconverted.
__device__ __forceinline__ void mma_k16(float (&d)[4], const float4& a_lo, const float4& a_hi,
                                        const float4& b) {
    cake_mma_tf32(d, __float_as_uint(a_lo.x), __float_as_uint(a_hi.x), __float_as_uint(a_lo.y),
                  __float_as_uint(a_hi.y), __float_as_uint(b.x), __float_as_uint(b.y));
    cake_mma_tf32(d, __float_as_uint(a_lo.z), __float_as_uint(a_hi.z), __float_as_uint(a_lo.w),
                  __float_as_uint(a_hi.w), __float_as_uint(b.z), __float_as_uint(b.w));
}

__device__ __forceinline__ float rtf32(float x) { return __uint_as_float(cake_tf32(x)); }

// hi = TF32(x) to `a`; with `split`, also lo = TF32(x - hi) to `b` (x = hi + lo to ~2^-22).
__device__ __forceinline__ void split_store(bool split, float* a, float* b, int idx, float x) {
    const float hi = rtf32(x);
    a[idx] = hi;
    if (split) b[idx] = rtf32(x - hi);
}

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
    const float* __restrict__ W, const float* __restrict__ U, const float* __restrict__ Qg,
    const float* __restrict__ Kd, const float* __restrict__ Aqk, const float* __restrict__ gl,
    const int* __restrict__ chunks, const int* __restrict__ seq_chunks,
    const int* __restrict__ precise, const float* __restrict__ h0, unsigned short* __restrict__ o, float* __restrict__ ht,
    float* __restrict__ states_out, int H, int has_h0, int store_ht)
{
    constexpr bool pf = false;
    extern __shared__ __attribute__((aligned(16))) unsigned char smem[];
    float* Ws = reinterpret_cast<float*>(smem);  // [64 tok][128 K]
    float* Qs = Ws + 64 * 128;                   // [64 tok][128 K]
    float* Ks = Qs + 64 * 128;                   // Kd^T [128 K][64 tok]
    float* As = Ks + 128 * 64;                   // Aqk [64][64]
    float* Us = As + 64 * 64;                    // U[:, vblock] [64 tok][64 v]
    float* Gs = Us + 64 * 64;                    // gl [128]
    float* St = Gs + 128;                        // S^T [64 v][128 K], TF32 hi part
    float* Vt = St + 64 * 128;                   // Vnew^T [64 v][64 tok], TF32 hi part
    float* St2 = Vt + 64 * 64;                   // S^T lo part (S - hi, TF32)
    float* Vt2 = St2 + 64 * 128;                 // Vnew^T lo part

    const int vb = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int c0 = seq_chunks[2 * n], nc = seq_chunks[2 * n + 1];
    const long long state_base = ((long long)n * H + h) * 16384 + vb * 64;
    const bool split = precise != nullptr && precise[n] != 0;  // block-uniform

    // State tile owned in registers (mma accumulator layout): K rows kr0 + 16 mi + g (+8),
    // value columns vc0 + 8 ni + 2t (+1), within this block's 64 columns.
    const int kr0 = 32 * (warp >> 1), vc0 = 32 * (warp & 1);
    float S[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int r = kr0 + 16 * mi + g, col = vc0 + 8 * ni + 2 * t;
            float2 lo = make_float2(0.f, 0.f), hi = make_float2(0.f, 0.f);
            if (has_h0 == 1) {
                lo = *reinterpret_cast<const float2*>(h0 + state_base + (long long)r * 128 + col);
                hi = *reinterpret_cast<const float2*>(h0 + state_base + (long long)(r + 8) * 128 + col);
            } else if (kLocal && has_h0 == 2) {  // S = I: value column vb*64 + col of row r
                const int c = vb * 64 + col;
                lo = make_float2(r == c ? 1.f : 0.f, r == c + 1 ? 1.f : 0.f);
                hi = make_float2(r + 8 == c ? 1.f : 0.f, r + 8 == c + 1 ? 1.f : 0.f);
            }
            S[mi][ni][0] = lo.x; S[mi][ni][1] = lo.y; S[mi][ni][2] = hi.x; S[mi][ni][3] = hi.y;
        }

    // Two load groups per chunk, each issued as soon as its buffers are free: group A (W, Qg)
    // lands while the previous chunk finishes, group B (U, Aqk, Kd, gl) while Phase 1 runs.
    // Per-thread parts of the cp.async addresses are chunk-invariant (a row's swizzle depends on
    // row % 8 only), so each issue is a base pointer plus immediate offsets.
    const int ra = tid >> 5, ca = tid & 31, rb16 = tid >> 4, cb16 = tid & 15;
    const int dst_a = at128(ra, ca), src_a = ra * 128 + ca * 4;
    const int dst_b = at64(rb16, cb16), src_b = rb16 * 64 + cb16 * 4;
    const int src_u = rb16 * 128 + vb * 64 + cb16 * 4;
    auto issue_a = [&](int ci) {
        const long long base = ((long long)ci * H + h) * 8192;
        const float* w = W + base + src_a;
        const float* qg = Qg + base + src_a;
#pragma unroll
        for (int i = 0; i < 8; ++i) cake_cp_async16(Ws + dst_a + 1024 * i, w + 1024 * i, 16);
        if (!kLocal)  // Qg and Aqk feed O only
#pragma unroll
            for (int i = 0; i < 8; ++i) cake_cp_async16(Qs + dst_a + 1024 * i, qg + 1024 * i, 16);
    };
    auto issue_b = [&](int ci) {
        const long long wsi = (long long)ci * H + h;
        const float* kd = Kd + wsi * 8192 + src_b;
        const float* aq = Aqk + wsi * 4096 + src_b;
#pragma unroll
        for (int i = 0; i < 8; ++i) cake_cp_async16(Ks + dst_b + 1024 * i, kd + 1024 * i, 16);
        if (!kLocal)
#pragma unroll
            for (int i = 0; i < 4; ++i) cake_cp_async16(As + dst_b + 1024 * i, aq + 1024 * i, 16);
        if (!kLocal || U != nullptr) {  // else Us holds the zeros written before the loop
            const float* u = U + wsi * 8192 + src_u;
#pragma unroll
            for (int i = 0; i < 4; ++i) cake_cp_async16(Us + dst_b + 1024 * i, u + 2048 * i, 16);
        }
        if (tid < 32) cake_cp_async16(Gs + 4 * tid, gl + wsi * 128 + 4 * tid, 16);
    };
    auto store_st = [&]() {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int r = kr0 + 16 * mi + g, col = vc0 + 8 * ni + 2 * t;
                split_store(split, St, St2, el128(col, r), S[mi][ni][0]);
                split_store(split, St, St2, el128(col + 1, r), S[mi][ni][1]);
                split_store(split, St, St2, el128(col, r + 8), S[mi][ni][2]);
                split_store(split, St, St2, el128(col + 1, r + 8), S[mi][ni][3]);
            }
    };
    auto store_global = [&](float* dst) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int r = kr0 + 16 * mi + g, col = vc0 + 8 * ni + 2 * t;
                *reinterpret_cast<float2*>(dst + (long long)r * 128 + col) = make_float2(S[mi][ni][0], S[mi][ni][1]);
                *reinterpret_cast<float2*>(dst + (long long)(r + 8) * 128 + col) = make_float2(S[mi][ni][2], S[mi][ni][3]);
            }
    };

    auto prefetch_chunk = [&](int ci) { prefetch_chunk_l2(W, U, Qg, Kd, Aqk, gl, (long long)ci * H + h, tid, 256, vb); };

    if (kLocal && U == nullptr)
        for (int j = tid; j < 64 * 64; j += 256) Us[j] = 0.f;  // visible after the loop's first barrier
    if (pf && nc > 1) prefetch_chunk(c0 + 1);
    if (nc > 0) {
        issue_a(c0);
        cake_cp_async_commit();
        issue_b(c0);
        cake_cp_async_commit();
    }
    store_st();

    // Phase-1 roles: warp rows rb..rb+31 of W (warps 0-3) or Qg (warps 4-7), columns vc0..vc0+31.
    // The local program has no O (no Qg S, no Phase 3a; Qg and Aqk are not loaded): the chain's
    // W S is split over all 8 warps instead, each taking the 16-row half `only_mi` of its 32 rows.
    // Every element is summed in the same order either way, so the results are the same bits.
    const bool is_o = warp >= 4, want_o = !kLocal;
    const bool chain = !is_o || kLocal;
    const int only_mi = kLocal ? warp >> 2 : -1;
    const int rb = 32 * ((warp >> 1) & 1);
    const float* Asrc = chain ? Ws : Qs;

#pragma unroll 1
    for (int i = 0; i < nc; ++i) {
        const int ci = c0 + i;
        const int t0 = chunks[2 * ci], L = chunks[2 * ci + 1];
        // The two-pass local launches pull chunk i+2 into L2 now (prefetch_chunk_l2).
        if (pf && i + 2 < nc) prefetch_chunk(ci + 2);
        cake_cp_async_wait<1>();
        __syncthreads();
        // The chunk's start state in 16 bits (cake/state16.cuh) goes out two 8-byte stores every other
        // kp step of Phase 1, so the store queue drains under the mma instead of stalling every warp here
        // (ncu, session 4: 22 % of the pass's stall samples were this store queue when it was issued
        // in one burst). A key's 16 values of group (vc0 + 16 ng) / 16 lie with the four lanes of
        // one g (n-tiles 2 ng, 2 ng + 1): the exponents of rows r and r + 8 in one word, two shuffles.
        unsigned char* const st_rec =
            states_out != nullptr ? reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES : nullptr;
        unsigned int sx[2][2];  // [mi][ng]: E of key rows kr0 + 16 mi + g (bits 0-15) and + 8 (16-31)
        if (st_rec != nullptr) {
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ng = 0; ng < 2; ++ng) {
                    float m0 = 0.f, m1 = 0.f;
#pragma unroll
                    for (int ni = 2 * ng; ni < 2 * ng + 2; ++ni) {
                        m0 = fmaxf(m0, fmaxf(fabsf(rtf32(S[mi][ni][0])), fabsf(rtf32(S[mi][ni][1]))));
                        m1 = fmaxf(m1, fmaxf(fabsf(rtf32(S[mi][ni][2])), fabsf(rtf32(S[mi][ni][3]))));
                    }
                    unsigned int e = cake_s16_exp(m0) | (cake_s16_exp(m1) << 16);
                    e = cake_max_u16x2(e, __shfl_xor_sync(0xffffffffu, e, 1));
                    e = cake_max_u16x2(e, __shfl_xor_sync(0xffffffffu, e, 2));
                    sx[mi][ng] = e;
                    if (t == 0) {
                        unsigned char* ex = st_rec + CAKE_S16_EXP + ((vb * 64 + vc0) / 16 + ng) * 128 + kr0 + 16 * mi + g;
                        ex[0] = (unsigned char)(e & 0xffffu);
                        ex[8] = (unsigned char)(e >> 16);
                    }
                }
        }

        // Phase 1: acc = W S (warps 0-3) or Qg S (warps 4-7), K = 128.
        float acc[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int x = 0; x < 4; ++x) acc[mi][ni][x] = 0.f;
#pragma unroll
        for (int kp = 0; kp < 8; ++kp) {
            if (st_rec != nullptr && (kp & 1)) {  // n-tiles ni - 1, ni: group ng's 4 values of rows r, r + 8
                const int mi = kp >> 2, ni = kp & 3, ng = ni >> 1;
                const int r = kr0 + 16 * mi + g, grp = vb * 64 + vc0 + 16 * ng;
                // values 2 t + e of tile ni - 1 and 8 + 2 t + e of tile ni: positions 4 t + 2 e, 4 t + 2 e + 1
                const unsigned int e = sx[mi][ng];
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const float f = cake_s16_down(hr ? e >> 16 : e & 0xffffu);
                    const float* a = S[mi][ni - 1] + 2 * hr;
                    const float* b = S[mi][ni] + 2 * hr;
                    *reinterpret_cast<uint2*>(reinterpret_cast<unsigned short*>(st_rec) + (r + 8 * hr) * 128 + grp + 4 * t) =
                        make_uint2(cake_f16x2(rtf32(a[0]) * f, rtf32(b[0]) * f), cake_f16x2(rtf32(a[1]) * f, rtf32(b[1]) * f));
                }
            }
            float4 b4[4];
            if (split && chain) {  // W S feeds the chain: S's lo part too (O takes hi only)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) b4[ni] = ld4(St2, at128(vc0 + 8 * ni + g, 4 * kp + t));
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    if (only_mi >= 0 && mi != only_mi) continue;  // warp-uniform
                    const float4 alo = ld4(Asrc, at128(rb + 16 * mi + g, 4 * kp + t));
                    const float4 ahi = ld4(Asrc, at128(rb + 16 * mi + g + 8, 4 * kp + t));
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni) mma_k16(acc[mi][ni], alo, ahi, b4[ni]);
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) b4[ni] = ld4(St, at128(vc0 + 8 * ni + g, 4 * kp + t));
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                if (only_mi >= 0 && mi != only_mi) continue;
                const float4 alo = ld4(Asrc, at128(rb + 16 * mi + g, 4 * kp + t));
                const float4 ahi = ld4(Asrc, at128(rb + 16 * mi + g + 8, 4 * kp + t));
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) mma_k16(acc[mi][ni], alo, ahi, b4[ni]);
            }
        }
        __syncthreads();
        if (i + 1 < nc) issue_a(ci + 1);
        cake_cp_async_commit();
        cake_cp_async_wait<1>();
        __syncthreads();

        // Phase 2: Vnew = U - W S, stored transposed for use as the B operand.
        if (chain) {
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    if (only_mi >= 0 && mi != only_mi) continue;
                    const int r = rb + 16 * mi + g, col = vc0 + 8 * ni + 2 * t;
                    const float2 ulo = *reinterpret_cast<const float2*>(Us + el64(r, col));
                    const float2 uhi = *reinterpret_cast<const float2*>(Us + el64(r + 8, col));
                    split_store(split, Vt, Vt2, el64(col, r), ulo.x - acc[mi][ni][0]);
                    split_store(split, Vt, Vt2, el64(col + 1, r), ulo.y - acc[mi][ni][1]);
                    split_store(split, Vt, Vt2, el64(col, r + 8), uhi.x - acc[mi][ni][2]);
                    split_store(split, Vt, Vt2, el64(col + 1, r + 8), uhi.y - acc[mi][ni][3]);
                }
        }
        __syncthreads();

        // Phase 3a: O = Qg S + Aqk Vnew (lower triangular: rows rb.. need tokens < rb + 32).
        if (is_o && want_o) {
#pragma unroll
            for (int kp = 0; kp < 4; ++kp) {
                if (16 * kp < rb + 32) {
                    float4 b4[4];
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni) b4[ni] = ld4(Vt, at64(vc0 + 8 * ni + g, 4 * kp + t));
#pragma unroll
                    for (int mi = 0; mi < 2; ++mi) {
                        const float4 alo = ld4(As, at64(rb + 16 * mi + g, 4 * kp + t));
                        const float4 ahi = ld4(As, at64(rb + 16 * mi + g + 8, 4 * kp + t));
#pragma unroll
                        for (int ni = 0; ni < 4; ++ni) mma_k16(acc[mi][ni], alo, ahi, b4[ni]);
                    }
                }
            }
            const long long orow = (long long)H * 128;
            unsigned short* ob = o + (long long)t0 * orow + h * 128 + vb * 64;
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    const int r = rb + 16 * mi + g, col = vc0 + 8 * ni + 2 * t;
                    if (r < L)
                        *reinterpret_cast<unsigned int*>(ob + r * orow + col) = cake_pack_bf16x2(acc[mi][ni][0], acc[mi][ni][1]);
                    if (r + 8 < L)
                        *reinterpret_cast<unsigned int*>(ob + (r + 8) * orow + col) = cake_pack_bf16x2(acc[mi][ni][2], acc[mi][ni][3]);
                }
        }

        // Phase 3b: S = diag(gl) S + Kd^T Vnew (every warp, its own 32x32 tile).
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            const float ga = Gs[kr0 + 16 * mi + g], gb = Gs[kr0 + 16 * mi + g + 8];
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                S[mi][ni][0] *= ga; S[mi][ni][1] *= ga;
                S[mi][ni][2] *= gb; S[mi][ni][3] *= gb;
            }
        }
#pragma unroll
        for (int kp = 0; kp < 4; ++kp) {
            float4 b4[4];
            if (split) {
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) b4[ni] = ld4(Vt2, at64(vc0 + 8 * ni + g, 4 * kp + t));
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    const float4 alo = ld4(Ks, at64(kr0 + 16 * mi + g, 4 * kp + t));
                    const float4 ahi = ld4(Ks, at64(kr0 + 16 * mi + g + 8, 4 * kp + t));
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni) mma_k16(S[mi][ni], alo, ahi, b4[ni]);
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) b4[ni] = ld4(Vt, at64(vc0 + 8 * ni + g, 4 * kp + t));
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const float4 alo = ld4(Ks, at64(kr0 + 16 * mi + g, 4 * kp + t));
                const float4 ahi = ld4(Ks, at64(kr0 + 16 * mi + g + 8, 4 * kp + t));
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) mma_k16(S[mi][ni], alo, ahi, b4[ni]);
            }
        }
        store_st();
        __syncthreads();
        if (i + 1 < nc) issue_b(ci + 1);
        cake_cp_async_commit();
    }
    cake_cp_async_wait<0>();
    if (store_ht) store_global(ht + state_base);
}

