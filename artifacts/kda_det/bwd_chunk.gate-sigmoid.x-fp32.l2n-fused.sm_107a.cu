// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/bwd_chunk.cu.j2
// record: kda_det/bwd_chunk.gate-sigmoid.x-fp32.l2n-fused  program: kda_det.bwd_chunk.gate-sigmoid.x-fp32.l2n-fused.sm_107a
// identity: sha256:f66badc4246682e191f000e758eae4ac286eebea7f11d6fdb7bb7c545825e9eb
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
// ---- begin cake/bf16_tile.cuh ----
// The [64][128] bf16 tiles of kda_fwd_chunk and kda_bwd_chunk (q, k, v; dO in bwd_chunk), one
// layout in both: a row's 4-element (8-byte) units u = 0..31 XOR-swizzled by cake_sw_bf16(r),
// which reads r's low 4 bits only, so rows r + 16 j keep row r's swizzle.

__device__ __forceinline__ int cake_sw_bf16(int r) { return ((r ^ (r >> 2)) & 3) << 2; }

// Unit u of row r, as an element offset.
__device__ __forceinline__ int cake_at_bf16(int r, int u) {
    return r * 128 + ((u ^ cake_sw_bf16(r)) << 2);
}

// Element (r, d), widened.
__device__ __forceinline__ float cake_ld1_bf16(const unsigned short* s, int r, int d) {
    return cake_bf16_to_f32(s[cake_at_bf16(r, d >> 2) + (d & 3)]);
}

// The unit at offset off (a cake_at_bf16 offset or one derived from it), widened: one 8-byte load.
__device__ __forceinline__ float4 cake_ld4_bf16_at(const unsigned short* s, int off) {
    const uint2 p = *reinterpret_cast<const uint2*>(s + off);
    return make_float4(cake_bf16_lo(p.x), cake_bf16_hi(p.x), cake_bf16_lo(p.y), cake_bf16_hi(p.y));
}
// ---- end cake/bf16_tile.cuh ----
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
// ---- begin cake/fmath.cuh ----

#define CAKE_LOG2E 1.4426950408889634f
#define CAKE_LN2 0.6931471805599453f

// MUFU.EX2: about 2 ulp, flushes results below 2^-126 to zero. Every caller passes a non-positive
// exponent (a bounded difference of cumulative log gates), so flushing only drops terms that are
// negligible against the ones kept.
__device__ __forceinline__ float cake_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float cake_sigmoid_ex2(float x) {
    return 1.0f / (1.0f + cake_ex2(-x * CAKE_LOG2E));
}

// rcp.approx.ftz.f32 (MUFU.RCP, about 1 ulp; +0 for +inf).
__device__ __forceinline__ float cake_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The logistic sigmoid from MUFU.EX2 and MUFU.RCP, a few ulp: for the backward's derivatives,
// which need its value, not the forward's bits (4 instructions instead of expf's and an IEEE
// division's ~20 with a branch).
__device__ __forceinline__ float cake_sigmoid_fast(float x) {
    return cake_rcp(1.0f + cake_ex2(-x * CAKE_LOG2E));
}

// lg2.approx.ftz.f32 (MUFU.LG2, about 2^-22 absolute error; subnormal inputs flush to zero: -inf).
__device__ __forceinline__ float cake_lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// ---- end cake/fmath.cuh ----
// ---- begin cake/beta.cuh ----
// beta and dbeta in beta's own dtype (the host passes no fp32 copy): the `beta_flags` argument of
// kda_fwd_chunk / kda_bwd_chunk. Needs cake/bf16.cuh and cake/fmath.cuh.

#define CAKE_BETA_SIGMOID 1  // beta holds logits: beta = sigmoid(beta) in-kernel
#define CAKE_BETA_BF16 2     // beta (and dbeta) are bf16 [T, H]; else fp32

__device__ __forceinline__ float cake_load_beta(const void* beta, long long i, int flags) {
    float b = (flags & CAKE_BETA_BF16)
        ? cake_bf16_to_f32(static_cast<const unsigned short*>(beta)[i])
        : static_cast<const float*>(beta)[i];
    return (flags & CAKE_BETA_SIGMOID) ? cake_sigmoid_ex2(b) : b;
}

// Rounded to nearest even, as torch's .to(torch.bfloat16).
__device__ __forceinline__ void cake_store_beta(void* dbeta, long long i, float s, int flags) {
    if (flags & CAKE_BETA_BF16)
        static_cast<unsigned short*>(dbeta)[i] = cake_f32_to_bf16(s);
    else
        static_cast<float*>(dbeta)[i] = s;
}
// ---- end cake/beta.cuh ----
// ---- begin cake/gate.cuh ----
// KDA gate activations and Gamma's per-row step, shared by the gate stage and the chunk programs.

__device__ __forceinline__ float cake_bf16_bits_to_float(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// softplus with torch's threshold (above 20 it is the identity to fp32 rounding), from MUFU.EX2,
// MUFU.LG2 and MUFU.RCP: log1p(y) = log(u) y / (u - 1) with u = 1 + y cancels the rounding of u
// (a few ulp where y = e^x is tiny, where ln(u) alone would keep none of y's bits). About 9
// instructions against log1pf(expf(x))'s ~40 with a branch.
__device__ __forceinline__ float cake_softplus(float x) {
    if (x > 20.f) return x;
    const float y = cake_ex2(x * CAKE_LOG2E), u = 1.f + y;
    return u == 1.f ? y : CAKE_LN2 * cake_lg2(u) * (y * cake_rcp(u - 1.f));
}

// The logistic sigmoid, a few ulp (cake_sigmoid_fast: 4 instructions against expf's and an IEEE
// division's ~20 with a branch).
__device__ __forceinline__ float cake_sigmoid(float x) {
    return cake_sigmoid_fast(x);
}

// Four consecutive gate inputs (dims 4c..4c+3 of one token) as fp32, from fp32 or bf16 storage.
__device__ __forceinline__ float4 cake_load_gate4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}

__device__ __forceinline__ float4 cake_load_gate4(const unsigned short* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    return make_float4(cake_bf16_bits_to_float((unsigned short)(u.x & 0xffffu)),
                       cake_bf16_bits_to_float((unsigned short)(u.x >> 16)),
                       cake_bf16_bits_to_float((unsigned short)(u.y & 0xffffu)),
                       cake_bf16_bits_to_float((unsigned short)(u.y >> 16)));
}

// Gamma's level 1 (the gate stage, kda_fwd_chunk and kda_bwd_chunk, which must agree to the
// bit): one row's log gate added to its 8-row group's running sum. kGate 0: x is the log gate g;
// 1: -ea softplus(x + bias); 2: lower_bound sigmoid(ea (x + bias)); ea = exp(A_log[h]). The raw
// forms add with one explicit fma, so no program's bits depend on its compiler contracting.
template <int kGate>
__device__ __forceinline__ float cake_gamma_step(float acc, float x, float bias, float ea, float lower_bound) {
    if (kGate == 0) return acc + x;
    if (kGate == 1) return __fmaf_rn(-ea, cake_softplus(x + bias), acc);
    return __fmaf_rn(lower_bound, cake_sigmoid(ea * (x + bias)), acc);
}

// The same, four dims at a time.
template <int kGate>
__device__ __forceinline__ float4 cake_gamma_add(float4 acc, float4 x, float4 bias, float ea, float lower_bound) {
    return make_float4(cake_gamma_step<kGate>(acc.x, x.x, bias.x, ea, lower_bound),
                       cake_gamma_step<kGate>(acc.y, x.y, bias.y, ea, lower_bound),
                       cake_gamma_step<kGate>(acc.z, x.z, bias.z, ea, lower_bound),
                       cake_gamma_step<kGate>(acc.w, x.w, bias.w, ea, lower_bound));
}
// ---- end cake/gate.cuh ----
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
// ---- begin cake/warp_halve.cuh ----
// Sums over lanes by recursive halving. A lane holds 2 N values; at partner lane ^ B it sends the
// half that the partner keeps (the upper half when its own bit B is clear, the lower when set) and
// adds the partner's copy of the half it keeps, which then lies in v[0 .. N). Each value meets the
// same partner as in a butterfly over the same lane bits, in the same order, so every sum has the
// bits of that butterfly. Halving 2 N values down to one takes N + N / 2 + ... + 1 = 2 N - 1 SHFL,
// where butterflies over the same levels take 2 N each (SHFL issues at one warp instruction a
// clock an SM).
// After levels at bits B1, B2, ... a lane keeps the value whose index has, from its top bit down,
// the lane's bits B1, B2, ...
template <int N, int B, int M>
__device__ __forceinline__ void cake_halve(float (&v)[M], int lane) {
    static_assert(2 * N <= M, "cake_halve: the lane holds 2 N values");
    const bool up = lane & B;
#pragma unroll
    for (int x = 0; x < N; ++x) {
        const float send = up ? v[x] : v[x + N];
        const float keep = up ? v[x + N] : v[x];
        v[x] = keep + __shfl_xor_sync(0xffffffffu, send, B);
    }
}
// ---- end cake/warp_halve.cuh ----

namespace {

constexpr bool kL2Norm = true;
constexpr int kGate = 2;
typedef float x_t;
__device__ __forceinline__ float load_x(const x_t* p) { return *p; }
__device__ __forceinline__ void store_dx(x_t* p, float v) { *p = v; }

// ---- shared-memory tile layouts -------------------------------------------------------------
// fp32 tiles of width 64 or 128 with their 16-byte chunks XOR-swizzled per row by
// swz(r) = 2((r >> 2) & 3) ^ 4(r & 1). The four fragment reads used here are conflict-free:
//  - natural float4 reads (lane (g, t) -> row n0 + g, chunk c0 + t): rows 2q, 2q+1 of a
//    quarter-warp differ in bit 2 of the swizzle;
//  - transposed scalar gathers (lane (g, t) -> row k0 + 4t + e, column n0 + g, e fixed): the four
//    t take distinct (r >> 2) & 3, so the two 16-byte chunks of the 8 columns spread over 8 chunks.
__device__ __forceinline__ int swz(int r) { return (((r >> 2) & 3) << 1) ^ ((r & 1) << 2); }
template <int W>
__device__ __forceinline__ int fx(int r, int c) { return r * W + ((((c >> 2) ^ swz(r))) << 2) + (c & 3); }

// Row cursors: the float4 at (row r, column 16 kp + 4 t) of a W-wide tile is at
// fx<W>(r, 16 kp + 4 t) = (kp even ? ev : od) + 32 (kp >> 1), since swz(r) flips bit 1 of the
// chunk's low part (t) and bit 0 of kp only. Row r + 8 swaps ev and od (swz flips bit 2), row
// r + 16 keeps them (+ 16 W): one cursor serves rows r + 8 a, and the loop's loads take immediate
// offsets instead of recomputing the swizzle per load.
struct FxRow { int ev, od; };
template <int W>
__device__ __forceinline__ FxRow fx_row(int r, int t) {
    const int s = swz(r), q = t ^ (s & 3), p = s >> 2;
    return {r * W + 4 * q + 16 * p, r * W + 4 * q + 16 - 16 * p};
}
template <int W>
__device__ __forceinline__ FxRow fx_row_plus(FxRow a, int a8) {  // row r + 8 a8 (a8 a constant)
    return (a8 & 1) ? FxRow{a.od + 8 * a8 * W, a.ev + 8 * a8 * W} : FxRow{a.ev + 8 * a8 * W, a.od + 8 * a8 * W};
}
__device__ __forceinline__ int fx_at(FxRow a, int kp) { return ((kp & 1) ? a.od : a.ev) + 32 * (kp >> 1); }
// Transposed gathers (ldt4<W>(s, 16 kp + 4 t, m)): row 16 kp + 4 t + e has swz = 2 t ^ 4 (e & 1)
// whatever kp, so element e of column m is at tg_col(W, t, m, e & 1) + e W + 16 W kp.
__device__ __forceinline__ int tg_col(int W, int t, int m, int par) {
    return 4 * t * W + ((((m >> 2) ^ (2 * t) ^ (4 * par))) << 2) + (m & 3);
}
// The bf16 element (16 J + 4 t + e, d) of a [64][128] bf16 tile (cake/bf16_tile.cuh): its swizzle
// cake_sw_bf16 depends on (e ^ t) only, so it is at bf_col(t, d, e) + 2048 J.
__device__ __forceinline__ int bf_col(int t, int d, int e) {
    return (4 * t + e) * 128 + ((((d >> 2) ^ (4 * ((e ^ t) & 3)))) << 2) + (d & 3);
}
template <int W>
__device__ __forceinline__ float4 ldt4_at(const float* s, int q0, int q1, int kp) {
    const float* b = s + 16 * W * kp;
    return make_float4(b[q0], b[q1 + W], b[q0 + 2 * W], b[q1 + 3 * W]);
}

// Pair-interleaved A tile [64][128] (Y = T^T dVn): rows r and r + 8 of a 16-row block share a
// 256-float pair row (pair 8 (r >> 4) + (r & 7)); element (r, k) at 2 k + ((r >> 3) & 1), its
// 16-byte chunk k >> 1 XOR-ed by 5 (r & 1). One float4 at chunk 2 t (+ 1) is then exactly the A
// quad {A[g][4t], A[g+8][4t], A[g][4t+1], A[g+8][4t+1]} of mma_k16's first (second) mma, so no
// register moves assemble it; the mma accumulator's (i0, i1) x (col, col + 1) is one float4 store.
// Quarter-warp accesses (g = 2q, 2q + 1; t = 0..3) of both are conflict-free: chunks 2 t ^ 5 and
// t ^ 5 differ in bit 0 / bit 2 from the even row's.
// dS_end's halves (value columns 64 h .. 64 h + 63, [128 d][64 v]): thread tid copies row ds_row(tid)'s
// 16-value block ds_blk(tid) (four 16-byte chunks, chunk i at sd_at(tid) ^ 4 i). Eight consecutive
// threads hold four rows and two blocks of one panel half, so their chunks fall on 8 distinct bank
// groups on sm_90a (the swizzle XORs the row's low 3 bits).
__device__ __forceinline__ int ds_row(int tid) { return 4 * (tid >> 4) + (tid & 3); }
__device__ __forceinline__ int ds_blk(int tid) { return (tid >> 2) & 3; }
__device__ __forceinline__ int sd_at(int tid) { return fx<64>(ds_row(tid), 16 * ds_blk(tid)); }
__device__ __forceinline__ void ds_copy(float* tile, const float* half_src, int tid) {
    const int own = sd_at(tid);
    const float* src = half_src + 128 * ds_row(tid) + 16 * ds_blk(tid);
#pragma unroll
    for (int i = 0; i < 4; ++i) cake_cp_async16(tile + (own ^ (4 * i)), src + 4 * i, 16);
}
// dgl[d] = sum_v S_c[d][v] dS_end[d][v] is formed in phase 5 from those copies as they land (before
// sm_90a rounds them in place), so dS_end crosses L2 once (session 28: -4..-6 % of this kernel
// against phase 3's reads of it from L2). S_c's values for them come from its 16-bit record
// (cake/state16.cuh) in global memory: a thread's block is group G = 4 h + ds_blk, 32 bytes at
// 256 row + 32 G; its value 4 c + j is word j of the group's 16-byte chunk c & 1, its high half when
// c & 2.
__device__ __forceinline__ void dgl_load(uint4 (&w)[2], const unsigned char* rec, int tid, int half) {
    const uint4* src = reinterpret_cast<const uint4*>(rec + 256 * ds_row(tid) + 32 * (4 * half + ds_blk(tid)));
    w[0] = src[0];
    w[1] = src[1];
}
// s += the thread's 16 products, v ascending (a: its four chunks, natural order).
__device__ __forceinline__ float dgl_dot(float s, const uint4 (&w)[2], const float4 (&a)[4], const unsigned char* SE,
                                         int tid, int half) {
    const float f = cake_s16_up(SE[(4 * half + ds_blk(tid)) * 128 + ds_row(tid)]);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const uint4 wc = w[c & 1];
        const int hs = 8 * (c & 2);
        s = fmaf(cake_f16x2_to_f32(wc.x >> hs).x * f, a[c].x, s);
        s = fmaf(cake_f16x2_to_f32(wc.y >> hs).x * f, a[c].y, s);
        s = fmaf(cake_f16x2_to_f32(wc.z >> hs).x * f, a[c].z, s);
        s = fmaf(cake_f16x2_to_f32(wc.w >> hs).x * f, a[c].w, s);
    }
    return s;
}
// A row's total over its four blocks (lane bits 2 and 3), written by block 0's lane.
__device__ __forceinline__ void dgl_reduce(float s, float* out, int tid) {
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    s += __shfl_xor_sync(0xffffffffu, s, 8);
    if (ds_blk(tid) == 0) out[ds_row(tid)] = s;
}
__device__ __forceinline__ int px_pair(int r) { return 8 * (r >> 4) + (r & 7); }
__device__ __forceinline__ int px_chunk(int r, int c) { return px_pair(r) * 256 + ((c ^ (5 * (r & 1))) << 2); }

// A thread's accumulator elements (rows i0 + 8 h, columns 32 cq + 8 m + 2 t + x; e = 2 h + x) as
// offsets from one base per tile, so that an epilogue computes no swizzle: column block m flips
// chunk bits 1-2 (offset bits 3-4), row + 8 adds 8 rows and flips swz's bit 2 (fp32: offset bit 4)
// or cake_sw_bf16's bit 3 (bf16: offset bit 5). fp32 W-wide: base fx<W>(i0, 32 cq + 2 t); any
// other row r (h = 0) from its own base fx<W>(r, 32 cq + 2 t). bf16: base
// cake_at_bf16(i0, 8 cq + (t >> 1)) + 2 (t & 1). k-loops likewise: cake_at_bf16(r, 4 kp + t) =
// cake_at_bf16(r, t) ^ 16 kp and fx<W>(r, 16 kp + 4 t) = fx<W>(r, 4 t) ^ 16 kp (kp's bits lie
// above both swizzles' and t's).
template <int W = 128>
__device__ __forceinline__ int fx_el(int base, int m, int e) {
    return ((base ^ (8 * m) ^ (16 * (e >> 1))) + 8 * W * (e >> 1)) + (e & 1);
}
__device__ __forceinline__ int bf_base(int r, int cq, int t) { return cake_at_bf16(r, 8 * cq + (t >> 1)) + 2 * (t & 1); }
__device__ __forceinline__ int bf_el(int base, int m, int h) { return (base ^ (8 * m) ^ (32 * h)) + 1024 * h; }
// Elements (r, d) and (r, d + 1), d even, at offset off of (r, d): one 32-bit load.
__device__ __forceinline__ float2 ld2_bf16_at(const unsigned short* s, int off) {
    const unsigned int p = *reinterpret_cast<const unsigned int*>(s + off);
    return make_float2(cake_bf16_lo(p), cake_bf16_hi(p));
}
// An accumulator's four elements e = 0..3 of column block m: (i0, d), (i0, d + 1), (i1, d), (i1, d + 1).
__device__ __forceinline__ float4 ldq_bf16_el(const unsigned short* s, int base, int m) {
    const float2 a = ld2_bf16_at(s, bf_el(base, m, 0)), b = ld2_bf16_at(s, bf_el(base, m, 1));
    return make_float4(a.x, a.y, b.x, b.y);
}

__device__ __forceinline__ float rtf32(float x) { return __uint_as_float(cake_tf32(x)); }
__device__ __forceinline__ float4 r4(float4 a) { return make_float4(rtf32(a.x), rtf32(a.y), rtf32(a.z), rtf32(a.w)); }
__device__ __forceinline__ float4 ldf4(const float* s, int idx) { return *reinterpret_cast<const float4*>(s + idx); }
// An accumulator's element pair (e, e + 1), e even: columns d, d + 1 of one row, one 8-byte access.
__device__ __forceinline__ float2 ldf2(const float* s, int idx) { return *reinterpret_cast<const float2*>(s + idx); }
__device__ __forceinline__ void stf2(float* s, int idx, float a, float b) {
    *reinterpret_cast<float2*>(s + idx) = make_float2(a, b);
}
__device__ __forceinline__ float g4(const float4& a, int e) { return e == 0 ? a.x : e == 1 ? a.y : e == 2 ? a.z : a.w; }
__device__ __forceinline__ float& e4(float4& a, int e) { return e == 0 ? a.x : e == 1 ? a.y : e == 2 ? a.z : a.w; }
__device__ __forceinline__ float g2(const float2& a, int x) { return x ? a.y : a.x; }
__device__ __forceinline__ float& e2(float2& a, int x) { return x ? a.y : a.x; }
// One half of dS_end, landed: the thread's four chunks into a, its dgl terms into s; sm_90a rounds
// them to TF32 in place in Vn's block order (a 4 x 4 transpose of the thread's own chunks).
__device__ __forceinline__ float ds_land(float* Bs, const unsigned char* rec, const unsigned char* SE, float s,
                                         int tid, int half) {
    uint4 w[2];
    dgl_load(w, rec, tid, half);
    const int own = sd_at(tid);
    float4 a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(Bs + (own ^ (4 * i)));
    s = dgl_dot(s, w, a, SE, tid, half);
    return s;
}

// The four entries of a (u = u0..u0+3) with u < i (keep_below), u <= i (keep_upto) or u > i
// (keep_above); others 0.
__device__ __forceinline__ float4 keep_below(float4 a, int u0, int i) {
    return make_float4(u0 < i ? a.x : 0.f, u0 + 1 < i ? a.y : 0.f, u0 + 2 < i ? a.z : 0.f, u0 + 3 < i ? a.w : 0.f);
}
__device__ __forceinline__ float4 keep_upto(float4 a, int u0, int i) {
    return make_float4(u0 <= i ? a.x : 0.f, u0 + 1 <= i ? a.y : 0.f, u0 + 2 <= i ? a.z : 0.f, u0 + 3 <= i ? a.w : 0.f);
}
__device__ __forceinline__ float4 keep_above(float4 a, int u0, int i) {
    return make_float4(u0 > i ? a.x : 0.f, u0 + 1 > i ? a.y : 0.f, u0 + 2 > i ? a.z : 0.f, u0 + 3 > i ? a.w : 0.f);
}

// {s[k0][m], s[k0+1][m], s[k0+2][m], s[k0+3][m]} of a [k][m] fp32 tile of width W.
template <int W>
__device__ __forceinline__ float4 ldt4(const float* s, int k0, int m) {
    return make_float4(s[fx<W>(k0, m)], s[fx<W>(k0 + 1, m)], s[fx<W>(k0 + 2, m)], s[fx<W>(k0 + 3, m)]);
}

// A 16x8 by 16-deep product step; lane (g, t) holds reduction indices 4t..4t+3 of the 16 (first
// mma 4t, 4t+1; second 4t+2, 4t+3; the same map for A and B). Operands must be TF32 already.
__device__ __forceinline__ void mma_k16(float (&d)[4], const float4& a_lo, const float4& a_hi, const float4& b) {
    cake_mma_tf32(d, __float_as_uint(a_lo.x), __float_as_uint(a_hi.x), __float_as_uint(a_lo.y),
                  __float_as_uint(a_hi.y), __float_as_uint(b.x), __float_as_uint(b.y));
    cake_mma_tf32(d, __float_as_uint(a_lo.z), __float_as_uint(a_hi.z), __float_as_uint(a_lo.w),
                  __float_as_uint(a_hi.w), __float_as_uint(b.z), __float_as_uint(b.w));
}

// The same 16-deep step with the two A quads as stored in a pair-interleaved tile (px_chunk):
// q0 = {a_lo.x, a_hi.x, a_lo.y, a_hi.y}, q1 = {a_lo.z, a_hi.z, a_lo.w, a_hi.w} of mma_k16 (phases
// 3a and 4 of the mma.sync programs; sm_90a runs them on wgmma).
__device__ __forceinline__ void mma_k16q(float (&d)[4], const float4& q0, const float4& q1, const float4& b) {
    cake_mma_tf32(d, __float_as_uint(q0.x), __float_as_uint(q0.y), __float_as_uint(q0.z),
                  __float_as_uint(q0.w), __float_as_uint(b.x), __float_as_uint(b.y));
    cake_mma_tf32(d, __float_as_uint(q1.x), __float_as_uint(q1.y), __float_as_uint(q1.z),
                  __float_as_uint(q1.w), __float_as_uint(b.z), __float_as_uint(b.w));
}

// Compiler-only fence: shared-memory loads after it are not hoisted above it, which bounds how many
// elements' operands an unrolled epilogue keeps in flight (register pressure). No instruction.
__device__ __forceinline__ void cake_sched_fence() { asm volatile("" ::: "memory"); }

__device__ __forceinline__ void zero16(float (&a)[4][4]) {
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int x = 0; x < 4; ++x) a[n][x] = 0.f;
}

// Shared-memory map (bytes).
constexpr int OFF_Q = 0, OFF_K = 16384, OFF_V = 32768, OFF_O = 49152;  // bf16 [64][128]
constexpr int OFF_G = 65536;    // fp32 [64][128]: Gamma * log2(e), rows >= L repeat row L-1
constexpr int OFF_AK = 98304;   // fp32 [64][64]: TA (Akk above the diagonal), later dAkk = beta * dM below
constexpr int OFF_T = 114688;   // fp32 [64][64]: TA (T on and below the diagonal), later dA1 = scale * dAqk
                                // (lower, incl. diagonal)
constexpr int OFF_C = 131072;   // fp32 [64][128]: dVn, then Y = T^T dVn (TF32); [128][64] dS_end v 64..127;
                                // after phase 5's mma: the dq accumulator [64][128]
constexpr int OFF_D = 163840;   // 64 KB: S_c [128][128]; then [beta X^T [128][64] | Vn [64][128]];
                                // then [dS_end v 0..63 [128][64] | Vn]; after phase 5's mma:
                                // [dGamma accumulator [64][128] | dk accumulator (DK) [64][128]]
constexpr int OFF_S = 229376;   // beta[64], rq[64], rk[64], dbeta slots [4][64]
constexpr int OFF_E = 231168;   // u8 [8][128]: S_c's exponent bytes (cake/state16.cuh)
constexpr int SMEM_BYTES = OFF_E + 1024;
static_assert(SMEM_BYTES == 232192, "dynamic shared memory in the header comment");
// After X (phase 3) the v tile is dead; its 16 KB hold small fp32 scratch (float offsets):
constexpr int SC_DGL = 0;      // [128]  dgl = rowsum_v(S_c * dS_end)
constexpr int SC_COL = 128;    // [4][128] per row block: sum over rows < L-1 of Kd * dKd
constexpr int SC_SEG = 1152;   // [4][128] reverse-cumsum segment totals ([640, 1152) unused)
constexpr int SC_BIAS = 1664;  // [4][128] ddt_bias segment partials
constexpr int SC_DA = 2176;    // [16] dA_log warp partials

// A diagonal 16x16 block goes through the tensor-core factorisation when its decay span (log2
// units) is below this: every factor then lies in [2^-96, 2^96], normal fp32 / TF32.
constexpr float kFastSpan = 96.f;

}  // namespace

extern "C" __global__ void __launch_bounds__(512, 1) kda_bwd_chunk(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
    const unsigned short* __restrict__ v, const unsigned short* __restrict__ dout,
    const void* __restrict__ beta, const float* __restrict__ G, const x_t* __restrict__ xin,
    const float* __restrict__ A_log, const float* __restrict__ dt_bias,
    const int* __restrict__ chunks, const float* __restrict__ states,
    const float* __restrict__ TA, const float* __restrict__ Rn,
    const float* __restrict__ dS_end, const float* __restrict__ dVn,
    unsigned short* __restrict__ dq_out, unsigned short* __restrict__ dk_out,
    unsigned short* __restrict__ dv_out, x_t* __restrict__ dg_out, void* __restrict__ dbeta_out,
    float* __restrict__ dA_part, float* __restrict__ dbias_part, int H, int beta_flags,
    float scale, float lower_bound)
{
    extern __shared__ __attribute__((aligned(16))) unsigned char smem[];
    unsigned short* qs = reinterpret_cast<unsigned short*>(smem + OFF_Q);
    unsigned short* ks = reinterpret_cast<unsigned short*>(smem + OFF_K);
    unsigned short* vs = reinterpret_cast<unsigned short*>(smem + OFF_V);
    unsigned short* os = reinterpret_cast<unsigned short*>(smem + OFF_O);
    float* gs = reinterpret_cast<float*>(smem + OFF_G);
    float* AK = reinterpret_cast<float*>(smem + OFF_AK);
    float* TT = reinterpret_cast<float*>(smem + OFF_T);
    float* RC = reinterpret_cast<float*>(smem + OFF_C);
    float* RD = reinterpret_cast<float*>(smem + OFF_D);
    float* bs = reinterpret_cast<float*>(smem + OFF_S);
    unsigned char* SE = smem + OFF_E;
    float* rq = bs + 64;
    float* rk = rq + 64;
    float* dbs = rk + 64;
    float* sc = reinterpret_cast<float*>(smem + OFF_V);  // scratch once v is dead
    float* DK = RD + 8192;  // after phase 5's mma (Vn dead): dk's accumulator; RC dq's, RD dGamma's

    const int c = blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int t0 = chunks[2 * c], L = chunks[2 * c + 1];
    const long long tok_stride = (long long)H * 128;
    const long long in_base = (long long)t0 * tok_stride + (long long)h * 128;
    const long long ws = (long long)c * H + h;

    // Output tiling of every [64 x 128] product: warp (rb, cq) owns rows 16 rb + g (+8) and
    // columns 32 cq + 8 ni + 2t (+1), ni = 0..3, in the mma accumulator layout. Phases 2-5 number
    // the warps rb = warp & 3, cq = warp >> 2 (a warpgroup is a column quarter: an m64n32 wgmma's
    // accumulator layout); phases 6-7 rb = warp >> 2, cq = warp & 3 (6 (a) runs for rb > 0, (b) for
    // rb < 3: warp & 3 = cq spreads both over the SM's sub-partitions). Registers that cross from
    // 5 to 6 (Dq, Dk, db0, db1) are stored at the end of phase 5.
    const int rb = warp >> 2, cq = warp & 3;
    // Each phase re-derives its indices through an opaque copy (CAKE_REIDX; CAKE_REIDX_WG in phases
    // 2-5), so the compiler cannot keep one phase's shared-memory addresses alive for the next
    // (register pressure, spills).
    const int g_top = g, t_top = t, rb_top = rb, cq_top = cq, rb_wg = warp & 3, cq_wg = warp >> 2;
#define CAKE_REIDX_AS(RB, CQ)                                                                   \
    const int g = cake_opaque(g_top), t = cake_opaque(t_top), rb = cake_opaque(RB),              \
              cq = cake_opaque(CQ), i0 = 16 * rb + g, i1 = i0 + 8;                              \
    (void)g; (void)t; (void)rb; (void)cq; (void)i0; (void)i1
#define CAKE_REIDX CAKE_REIDX_AS(rb_top, cq_top)
#define CAKE_REIDX_WG CAKE_REIDX_AS(rb_wg, cq_wg)

    // ---- phase 0: loads, in the order the phases read them. group 0: v, T's copy of TA (TT's lower
    // part is read as T), dVn (rows >= L zero-filled), waited for here; group 1: S_c, waited for
    // in phase 2; group 2: k, dO, q, Akk's copy of TA (AK's upper part; it comes from L2), rq / rk,
    // waited for before phase 3a, so they land while phase 2 runs.
    {
        // G's rows first (into registers, stored into G's tile after the copies are issued): the
        // barrier below waits for them, and issued after the copies they queued behind all of them
        float4 gv[4];
        const int gr0 = tid >> 5, gc4 = tid & 31;  // rows gr0 + 16 i (past L: row L - 1's values)
        {
            const float* g0 = G + in_base + (long long)gr0 * tok_stride + 4 * gc4;
            const float* glast = G + in_base + (long long)(L - 1) * tok_stride + 4 * gc4;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                gv[i] = *reinterpret_cast<const float4*>(gr0 + 16 * i < L ? g0 + 16 * i * tok_stride : glast);
        }
        // Each thread copies the same rows and 16-byte piece of every tile, a constant apart: rows
        // r + 16 and r + 32 keep the swizzles (cake_sw_bf16, swz depend on r's low 4 bits), so
        // every copy's addresses are the thread's first ones plus a constant (the index arithmetic
        // of each copy was ~80 % of phase 0's instructions).
        {
            const int r0 = tid >> 4, ch = tid & 15;  // bf16 tiles and TA: rows r0, r0 + 32
            const bool ok0 = r0 < L, ok1 = r0 + 32 < L;
            const long long o0 = in_base + (long long)r0 * tok_stride + ch * 8, o1 = o0 + 32 * tok_stride;
            const int d0 = cake_at_bf16(r0, 2 * ch);
            // group 0, phase 2's inputs: v's tile and T's copy of TA (dVn below)
            {
                const unsigned short* src = v + (ok0 ? o0 : in_base);
                cake_cp_async16(vs + d0, src, ok0 ? 16 : 0);
                src = v + (ok1 ? o1 : in_base);
                cake_cp_async16(vs + d0 + 4096, src, ok1 ? 16 : 0);
            }
            const float* ta = TA + ws * 4096 + r0 * 64 + 4 * ch;
            const int t0f = fx<64>(r0, 4 * ch);
            cake_cp_async16(TT + t0f, ta, 16);
            cake_cp_async16(TT + t0f + 2048, ta + 2048, 16);
            {
                const int dr0 = tid >> 5, c4 = tid & 31;  // dVn: rows dr0 + 16 i
                const float* dv = dVn + ws * 8192;
                const int f0 = fx<128>(dr0, 4 * c4), s0 = dr0 * 128 + 4 * c4;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const bool ok = dr0 + 16 * i < L;
                    cake_cp_async16(RC + f0 + 2048 * i, dv + (ok ? s0 + 2048 * i : 0), ok ? 16 : 0);
                }
            }
            cake_cp_async_commit();
            {  // group 1: S_c's 16-bit record (cake/state16.cuh): the fp16 values into RD's second half, E into SE
                const unsigned char* rec = reinterpret_cast<const unsigned char*>(states) + ws * CAKE_S16_BYTES;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int idx = tid + 512 * i;
                    cake_cp_async16(reinterpret_cast<unsigned char*>(RD + 8192) + 16 * idx, rec + 16 * idx, 16);
                }
                if (tid < 64) cake_cp_async16(SE + 16 * tid, rec + CAKE_S16_EXP + 16 * tid, 16);
            }
            cake_cp_async_commit();
            // group 2, read from phase 3a on (k, dO, rq, rk), phase 4 (Akk's copy) and 5 (q): they
            // land while phase 2 runs
#pragma unroll
            for (int i = 0; i < 6; ++i) {
                const int which = i >> 1, hf = i & 1;  // 0: k, 1: dO, 2: q
                const bool ok = hf ? ok1 : ok0;
                const unsigned short* src = (which == 0 ? k : which == 1 ? dout : q) +
                                            (ok ? (hf ? o1 : o0) : in_base);
                unsigned short* dst = which == 0 ? ks : which == 1 ? os : qs;
                cake_cp_async16(dst + d0 + 4096 * hf, src, ok ? 16 : 0);
            }
            cake_cp_async16(AK + t0f, ta, 16);
            cake_cp_async16(AK + t0f + 2048, ta + 2048, 16);
        }
        // The forward's L2-norm reciprocals (rq, rk adjacent), the same bits it used.
        if (kL2Norm && tid < 32) cake_cp_async16(rq + 4 * tid, Rn + ws * 128 + 4 * tid, 16);
        cake_cp_async_commit();
        // dS_end (64 KB, a 128-byte line per thread) into L2 now: phase 5 copies it in.
        cake_prefetch_l2(dS_end + ws * 16384 + 32 * tid);
        const int gf0 = fx<128>(gr0, 4 * gc4);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float4 x4 = gv[i];
            x4.x *= CAKE_LOG2E; x4.y *= CAKE_LOG2E; x4.z *= CAKE_LOG2E; x4.w *= CAKE_LOG2E;
            *reinterpret_cast<float4*>(gs + gf0 + 2048 * i) = x4;
        }
        if (tid < 64) {
            float b = 0.f;
            if (tid < L) {
                b = cake_load_beta(beta, (long long)(t0 + tid) * H + h, beta_flags);
            }
            bs[tid] = b;
        }
        cake_cp_async_wait<2>();  // group 0
        __syncthreads();
    }
    auto rqf = [&](int r) { return kL2Norm ? rq[r] : 1.f; };
    auto rkf = [&](int r) { return kL2Norm ? rk[r] : 1.f; };

    // ---- phase 1 (kda_fwd_chunk's): Akk and T = (I + diag(beta) Akk)^-1 came with group 0. TT
    // holds Akk above the diagonal, so the products that read T's diagonal blocks (phases 2 and
    // 3c) mask what lies above it.

    // Gradient accumulators of this thread's 32 (row, dim) elements, fp32. Registers (Dq, Dk)
    // only from phase 3a to phase 5 (register pressure: no spills with 512 threads); after phase
    // 5's mma they move to shared memory (dq -> RC, dk -> DK, dGamma -> RD, each thread its own
    // elements, the same adds in the same order, so the bits are those of register accumulators).
    // dGamma's only term before phase 5 is Qg dQg + Kg dKg = qn dq + kn dk of phase 3a, formed
    // there from Dq, Dk (which hold exactly dqa, dka until then).
    float Dq[4][4], Dk[4][4];
    zero16(Dq); zero16(Dk);
    float db0 = 0.f, db1 = 0.f;  // dbeta partials of rows i0, i1 (this thread's columns)

    // ---- phase 2: Y = T^T dVn (rows i, value columns); dv = beta Y; dbeta += rowsum(V Y).
    // Y = dVn + (T - I)^T dVn: the accumulator starts at the fp32 dVn and the unit diagonal of T
    // is zeroed in the A fragment, so the identity part never goes through TF32. At fast decay
    // T ~ I and Y ~ dVn; a TF32 dVn operand was the whole dbeta error (docs/kernel-notes.md,
    // 2026-11-29).
    {
        CAKE_REIDX_WG;
        const int fe = fx<128>(i0, 32 * cq + 2 * t), be = bf_base(i0, cq, t);
        float acc[4][4];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const float2 ya = ldf2(RC, fx_el(fe, ni, 0));
            const float2 yb = ldf2(RC, fx_el(fe, ni, 2));
            acc[ni][0] = ya.x; acc[ni][1] = ya.y; acc[ni][2] = yb.x; acc[ni][3] = yb.y;
        }
        const int a00 = tg_col(64, t, i0, 0), a01 = tg_col(64, t, i0, 1);
        const int a10 = tg_col(64, t, i1, 0), a11 = tg_col(64, t, i1, 1);
        int bq[4][2];  // dVn gathers of the four n-tiles' columns
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int par = 0; par < 2; ++par) bq[ni][par] = tg_col(128, t, 32 * cq + 8 * ni + g, par);
        for (int kp = rb; kp < 4; ++kp) {  // T^T[i][j] = T[j][i] is zero for j < i
            float4 alo = r4(ldt4_at<64>(TT, a00, a01, kp)), ahi = r4(ldt4_at<64>(TT, a10, a11, kp));
            if (kp == rb) {  // drop T[i][i] = 1 and keep T[j][i] = 0 for j < i (TA holds Akk there):
                // rows 16 kp + e0 + e against columns i0 = 16 rb + g, i1 = i0 + 8
                const int e0 = 4 * t;
                if (e0 + 0 <= g) alo.x = 0.f; if (e0 + 1 <= g) alo.y = 0.f;
                if (e0 + 2 <= g) alo.z = 0.f; if (e0 + 3 <= g) alo.w = 0.f;
                if (e0 + 0 <= g + 8) ahi.x = 0.f; if (e0 + 1 <= g + 8) ahi.y = 0.f;
                if (e0 + 2 <= g + 8) ahi.z = 0.f; if (e0 + 3 <= g + 8) ahi.w = 0.f;
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
                mma_k16(acc[ni], alo, ahi, r4(ldt4_at<128>(RC, bq[ni][0], bq[ni][1], kp)));
        }
        const float b0 = bs[i0], b1 = bs[i1];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int col = 32 * cq + 8 * ni + 2 * t;
            const float2 va = ld2_bf16_at(vs, bf_el(be, ni, 0)), vb = ld2_bf16_at(vs, bf_el(be, ni, 1));
            db0 = fmaf(va.x, acc[ni][0], db0); db0 = fmaf(va.y, acc[ni][1], db0);
            db1 = fmaf(vb.x, acc[ni][2], db1); db1 = fmaf(vb.y, acc[ni][3], db1);
            if (i0 < L)
                *reinterpret_cast<unsigned int*>(dv_out + in_base + (long long)i0 * tok_stride + col) =
                    cake_pack_bf16x2(b0 * acc[ni][0], b0 * acc[ni][1]);
            if (i1 < L)
                *reinterpret_cast<unsigned int*>(dv_out + in_base + (long long)i1 * tok_stride + col) =
                    cake_pack_bf16x2(b1 * acc[ni][2], b1 * acc[ni][3]);
        }
        cake_cp_async_wait<1>();  // S_c (issued in phase 0: landed by now); group 2 may still fly
        __syncthreads();  // every read of dVn done; every thread's copies of S_c landed
        const int pe = px_chunk(i0, 16 * cq + t);  // column block ni: chunk bits 2-3
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            *reinterpret_cast<float4*>(RC + (pe ^ (16 * ni))) =
                make_float4(rtf32(acc[ni][0]), rtf32(acc[ni][2]), rtf32(acc[ni][1]), rtf32(acc[ni][3]));
        }
    }
    // S_c to fp32 [128 d][128 v] in RD, in place. A warp instruction takes key rows r and r + 4
    // (lanes 0-15, 16-31; their swizzles differ in bit 1, so the 16-byte chunks written spread
    // over all 32 banks), lane l one 16-byte fp16 chunk c = l & 15 of its row: positions 8 q .. 8 q
    // + 7 (q = c & 1) of group G = c >> 1, i.e. values 16 G + 4 q + e and + 8 (e = 0..3,
    // cake/state16.cuh's in-group order), two float4 chunks. Warp w's rows: b, b + 4, b + 1, b + 5 with b = 8 (w >> 1)
    // + 2 (w & 1), and the same + 64. Rows 0..63 land in RD's first half, which no fp16 value
    // occupies; rows 64..127 overwrite the fp16 values, so they are read first (8 registers) and
    // written after the barrier that ends phase 2 (one barrier more).
    {
        const unsigned char* sh = reinterpret_cast<const unsigned char*>(RD + 8192);
        const int c = lane & 15, grp = c >> 1, col = 16 * grp + 4 * (c & 1);
        const int r0 = 8 * (warp >> 1) + 2 * (warp & 1) + ((lane >> 4) << 2);
        auto out = [&](int d, uint4 p) {  // columns col + 8: chunk bit 1 (col's is 0)
            const float f = cake_s16_up(SE[grp * 128 + d]);
            const float2 a = cake_f16x2_to_f32(p.x), b = cake_f16x2_to_f32(p.y);
            const float2 e = cake_f16x2_to_f32(p.z), h = cake_f16x2_to_f32(p.w);
            const int o = fx<128>(d, col);
            *reinterpret_cast<float4*>(RD + o) = make_float4(a.x * f, b.x * f, e.x * f, h.x * f);
            *reinterpret_cast<float4*>(RD + (o ^ 8)) = make_float4(a.y * f, b.y * f, e.y * f, h.y * f);
        };
        uint4 late[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int d = r0 + k;
            late[k] = *reinterpret_cast<const uint4*>(sh + (64 + d) * 256 + 16 * c);
            out(d, *reinterpret_cast<const uint4*>(sh + d * 256 + 16 * c));
        }
        __syncthreads();  // Y stored; every fp16 value read
#pragma unroll
        for (int k = 0; k < 2; ++k) out(64 + r0 + k, late[k]);
    }
    cake_cp_async_wait<0>();  // group 2: k, dO, q, Akk's copy, rq, rk
    __syncthreads();

    // ---- phase 3a: [dO; Y] S_c^T -> dQg, Z (rows i, key dims d), consumed at once:
    // dq += s e^G dQg, dk += -beta e^G Z, dbeta -= rowsum(Kg Z); dGamma += Qg dQg + Kg dKg is
    // added in phase 5 from Dq, Dk (which hold exactly these terms until then).
    {
        CAKE_REIDX_WG;
        float aO[4][4], aY[4][4];
        zero16(aO); zero16(aY);
        const FxRow bb = fx_row<128>(32 * cq + g, t);
        // chunks 8 kp + 2 t (+ 1) of pair row i0: + 32 kp (the XOR with 5 (g & 1) keeps bit 3 up)
        const float* yq0 = RC + px_chunk(i0, 2 * t);
        const float* yq1 = RC + px_chunk(i0, 2 * t + 1);
        const int o0 = cake_at_bf16(i0, t), o1 = cake_at_bf16(i1, t);  // units 4 kp + t: XOR 16 kp
#pragma unroll 1
        for (int k2 = 0; k2 < 4; ++k2) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int kp = 2 * k2 + j;
                const float4 olo = cake_ld4_bf16_at(os, o0 ^ (16 * kp)), ohi = cake_ld4_bf16_at(os, o1 ^ (16 * kp));
                const float4 y0 = *reinterpret_cast<const float4*>(yq0 + 32 * kp);
                const float4 y1 = *reinterpret_cast<const float4*>(yq1 + 32 * kp);
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    const float4 b4 = r4(ldf4(RD, fx_at(fx_row_plus<128>(bb, ni), kp)));
                    mma_k16(aO[ni], olo, ohi, b4);
                    mma_k16q(aY[ni], y0, y1, b4);
                }
            }
        }
        const float rq0 = rqf(i0), rq1 = rqf(i1), rk0 = rkf(i0), rk1 = rkf(i1);
        const float b0 = bs[i0], b1 = bs[i1];
        const int fe = fx<128>(i0, 32 * cq + 2 * t), be = bf_base(i0, cq, t);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            cake_sched_fence();
            const float4 k4 = ldq_bf16_el(ks, be, ni);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float eg = cake_ex2(gs[fx_el(fe, ni, e)]);
                const float kn = g4(k4, e) * (e < 2 ? rk0 : rk1);
                const float kg = kn * eg;
                const float dqa = scale * eg * aO[ni][e];
                const float dka = -(e < 2 ? b0 : b1) * eg * aY[ni][e];
                Dq[ni][e] += dqa;
                Dk[ni][e] += dka;
                if (e < 2) db0 = fmaf(-kg, aY[ni][e], db0);
                else db1 = fmaf(-kg, aY[ni][e], db1);
            }
        }
    }
    // ---- phase 3b: X = V - Kg S_c (rows i, value columns), reduction over d.
    float X[4][4];
    {
        CAKE_REIDX_WG;
        const int be = bf_base(i0, cq, t);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const float4 v4 = ldq_bf16_el(vs, be, ni);
            X[ni][0] = v4.x; X[ni][1] = v4.y; X[ni][2] = v4.z; X[ni][3] = v4.w;
        }
        const float rk0 = rkf(i0), rk1 = rkf(i1);
        int bq[4][2];  // S_c^T gathers of the four n-tiles' columns
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int par = 0; par < 2; ++par) bq[ni][par] = tg_col(128, t, 32 * cq + 8 * ni + g, par);
        // units 4 kp + t of rows i0, i1 (bf16), columns 16 kp + 4 t (fp32): XOR 16 kp
        const int o0 = cake_at_bf16(i0, t), o1 = cake_at_bf16(i1, t), f0 = fx<128>(i0, 4 * t), f1 = fx<128>(i1, 4 * t);
#pragma unroll 2
        for (int kp = 0; kp < 8; ++kp) {
            const float4 ka = cake_ld4_bf16_at(ks, o0 ^ (16 * kp)), kb = cake_ld4_bf16_at(ks, o1 ^ (16 * kp));
            const float4 ga = ldf4(gs, f0 ^ (16 * kp)), gb = ldf4(gs, f1 ^ (16 * kp));
            float4 alo, ahi;  // -Kg, TF32
            alo.x = -rtf32(ka.x * rk0 * cake_ex2(ga.x)); alo.y = -rtf32(ka.y * rk0 * cake_ex2(ga.y));
            alo.z = -rtf32(ka.z * rk0 * cake_ex2(ga.z)); alo.w = -rtf32(ka.w * rk0 * cake_ex2(ga.w));
            ahi.x = -rtf32(kb.x * rk1 * cake_ex2(gb.x)); ahi.y = -rtf32(kb.y * rk1 * cake_ex2(gb.y));
            ahi.z = -rtf32(kb.z * rk1 * cake_ex2(gb.z)); ahi.w = -rtf32(kb.w * rk1 * cake_ex2(gb.w));
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
                mma_k16(X[ni], alo, ahi, r4(ldt4_at<128>(RD, bq[ni][0], bq[ni][1], kp)));
        }
    }
    __syncthreads();  // S_c and v dead
    {
        CAKE_REIDX_WG;
        // beta X, transposed [v][j], TF32, into the first half of RD. Element (row 32 cq + 8 ni +
        // 2 t + x, column i0 + 8 h) from one base: swz of the row is 4 ((ni ^ x) & 1) ^ 2 (t >> 1),
        // column + 8 flips chunk bit 1.
        const float b0 = bs[i0], b1 = bs[i1];
        const int xb = fx<64>(32 * cq + 2 * t, i0);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int o = 512 * ni, s0 = 16 * (ni & 1), s1 = 16 * ((ni & 1) ^ 1);
            RD[(xb ^ s0) + o] = rtf32(b0 * X[ni][0]);
            RD[(xb ^ s1) + o + 64] = rtf32(b0 * X[ni][1]);
            RD[(xb ^ s0 ^ 8) + o] = rtf32(b1 * X[ni][2]);
            RD[(xb ^ s1 ^ 8) + o + 64] = rtf32(b1 * X[ni][3]);
        }
    }
    __syncthreads();
    // ---- phase 3c: Vn = T (beta X): T is lower triangular, so row block rb reads j-blocks <= rb.
    // Its operands and result are in shared memory, so it takes phases 6-7's numbering (rb = warp
    // >> 2): each sub-partition then holds one warp of every row block and the triangle's work
    // is spread evenly over them (with rb = warp & 3, sub-partition 3 had 16 of the 40 k steps).
    {
        CAKE_REIDX;
        float acc[4][4];
        zero16(acc);
        // columns 16 kp + 4 t: XOR 16 kp from the rows' offsets at kp = 0
        const int a0 = fx<64>(i0, 4 * t), a1 = fx<64>(i1, 4 * t);
        const FxRow bb = fx_row<64>(32 * cq + g, t);
        for (int kp = 0; kp <= rb; ++kp) {
            const int j0 = 16 * kp + 4 * t;
            float4 alo = r4(ldf4(TT, a0 ^ (16 * kp))), ahi = r4(ldf4(TT, a1 ^ (16 * kp)));
            if (kp == rb) {  // the diagonal block: T[i][j] for j <= i (TA holds Akk above)
                alo = keep_upto(alo, j0, i0);
                ahi = keep_upto(ahi, j0, i1);
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
                mma_k16(acc[ni], alo, ahi, ldf4(RD, fx_at(fx_row_plus<64>(bb, ni), kp)));
        }
        __syncthreads();  // T and beta X dead
        float* Vn = RD + 8192;
        const int fe = fx<128>(i0, 32 * cq + 2 * t);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            stf2(Vn, fx_el(fe, ni, 0), rtf32(acc[ni][0]), rtf32(acc[ni][1]));
            stf2(Vn, fx_el(fe, ni, 2), rtf32(acc[ni][2]), rtf32(acc[ni][3]));
        }
        // dS_end value columns 0..63 -> RD[0 .. 32 KB) as [128 d][64 v] (group 2)
        ds_copy(RD, dS_end + ws * 16384, tid);
        cake_cp_async_commit();
    }
    __syncthreads();
    const float* Vn = RD + 8192;

    // ---- phase 4: [dO; Y] Vn^T. Warp (rb, cq): which = cq >> 1 (0: dAqk from dO, 1: dM from Y),
    // columns j in 32 (cq & 1) + [0, 32); only blocks on or below the diagonal.
    {
        CAKE_REIDX_WG;
        const int which = cq >> 1, jb = 32 * (cq & 1);
        float acc[4][4];
        zero16(acc);
        const int nact = min(4, max(0, (16 * rb + 16 - jb) >> 3));  // n-tiles with columns <= row block end
        const FxRow vb = fx_row<128>(jb + g, t);
        // One loop per A source (which is warp-uniform): the A quads from the bf16 dO rows
        // (converted into place) or from the pair-interleaved Y, with no branch inside.
        auto product = [&](auto quads) {
#pragma unroll 1
            for (int k2 = 0; k2 < 4; ++k2) {
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int kp = 2 * k2 + j;
                    float4 q0, q1;
                    quads(kp, q0, q1);
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni)
                        if (ni < nact) mma_k16q(acc[ni], q0, q1, ldf4(Vn, fx_at(fx_row_plus<128>(vb, ni), kp)));
                }
            }
        };
        if (which == 0) {
            const int o0 = cake_at_bf16(i0, t), o1 = cake_at_bf16(i1, t);  // units 4 kp + t: XOR 16 kp
            product([&](int kp, float4& q0, float4& q1) {
                const float4 alo = cake_ld4_bf16_at(os, o0 ^ (16 * kp)), ahi = cake_ld4_bf16_at(os, o1 ^ (16 * kp));
                q0 = make_float4(alo.x, ahi.x, alo.y, ahi.y);
                q1 = make_float4(alo.z, ahi.z, alo.w, ahi.w);
            });
        } else {
            const float* yq0 = RC + px_chunk(i0, 2 * t);  // Y quads as in phase 3a
            const float* yq1 = RC + px_chunk(i0, 2 * t + 1);
            product([&](int kp, float4& q0, float4& q1) {
                q0 = *reinterpret_cast<const float4*>(yq0 + 32 * kp);
                q1 = *reinterpret_cast<const float4*>(yq1 + 32 * kp);
            });
        }
        const int fa = fx<64>(i0, jb + 2 * t);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            if (ni >= nact) continue;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e < 2 ? i0 : i1, j = jb + 8 * ni + 2 * t + (e & 1), o = fx_el<64>(fa, ni, e);
                if (which == 0) {
                    // below the diagonal TF32 already: phase 6's products take dA as stored (every
                    // load of it there had rounded it again); the diagonal stays fp32 (its epilogue)
                    const float a = scale * acc[ni][e];
                    TT[o] = j < i ? rtf32(a) : j == i ? a : 0.f;
                } else {
                    const float dm = j < i ? -acc[ni][e] : 0.f;
                    if (j < i) {  // Akk[i][j] is TA's (63 - i, 63 - j), above the diagonal: only read
                        // here; fx<64>(63 - i, 63 - j) = fx<64>(i, j) ^ 4087 (row and chunk mirrored)
                        const float akk = AK[o ^ 4087];
                        if (e < 2) db0 = fmaf(dm, akk, db0);
                        else db1 = fmaf(dm, akk, db1);
                        AK[o] = rtf32(bs[i] * dm);
                    }
                }
            }
        }
    }
    __syncthreads();  // Y dead; dA1 (TT), dA2 (AK) ready
    // dS_end value columns 64..127 -> RC as [128 d][64 v] (group 3), as group 2.
    ds_copy(RC, dS_end + ws * 16384 + 64, tid);
    cake_cp_async_commit();

    // ---- phase 5: dKd = Vn dS_end^T (rows i, key dims d); dk += e^(G_{L-1} - G) dKd;
    // dGamma -= Kd dKd on rows < L-1, whose column sums go to the last valid row.
    {
        CAKE_REIDX_WG;
        float acc[4][4];
        const unsigned char* rec = reinterpret_cast<const unsigned char*>(states) + ws * CAKE_S16_BYTES;
        float dgls = 0.f;  // this thread's part of dgl[ds_row] (the dS_end halves as they land)
        zero16(acc);
        cake_cp_async_wait<1>();
        dgls = ds_land(RD, rec, SE, dgls, tid, 0);
        __syncthreads();
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
            if (half == 1) {
                cake_cp_async_wait<0>();
                dgls = ds_land(RC, rec, SE, dgls, tid, 1);
                dgl_reduce(dgls, sc + SC_DGL, tid);
                __syncthreads();
            }
            const float* Bs = half == 0 ? RD : RC;
            const FxRow va = fx_row<128>(i0, t), vb = fx_row_plus<128>(va, 1);
            const FxRow bb = fx_row<64>(32 * cq + g, t);
#pragma unroll
            for (int kp = 0; kp < 4; ++kp) {
                const float4 alo = ldf4(Vn, fx_at(va, 4 * half + kp)), ahi = ldf4(Vn, fx_at(vb, 4 * half + kp));
#pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma_k16(acc[ni], alo, ahi, r4(ldf4(Bs, fx_at(fx_row_plus<64>(bb, ni), kp))));
            }
        }
        __syncthreads();  // every read of RD / RC (dS_end, Vn) done: RD takes dGamma
        const float rq0 = rqf(i0), rq1 = rqf(i1), rk0 = rkf(i0), rk1 = rkf(i1);
        const int fe = fx<128>(i0, 32 * cq + 2 * t), fl = fx<128>(L - 1, 32 * cq + 2 * t), be = bf_base(i0, cq, t);
        // The column sums of the chunk-end decay over the warp's 8 g: cs[2 n + x] is column 32 cq
        // + 8 ni + 2 t + x (ni = kNi np + n) summed over this thread's rows. sm_90a: all 8 halved
        // at lane bits 2, 3, 4 after the loop (cake/warp_halve.cuh: a butterfly's bits in 7 SHFL,
        // not 24). The mma.sync programs keep one n-tile's butterflies a pass: 8 sums live across
        // the loop spilled there (4-16 bytes), two passes of 4 as well.
        constexpr int kNi = 1;
#pragma unroll
        for (int np = 0; np < 4 / kNi; ++np) {
            float cs[2 * kNi];
#pragma unroll
            for (int x = 0; x < 2 * kNi; ++x) cs[x] = 0.f;
#pragma unroll
            for (int n = 0; n < kNi; ++n) {
                const int ni = kNi * np + n;
                const float4 q4 = ldq_bf16_el(qs, be, ni);
                const float4 k4 = ldq_bf16_el(ks, be, ni);
                const float2 gend = ldf2(gs, fx_el(fl, ni, 0));  // the chunk-end row's pair
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {  // row i0, then i1: elements 2 hr, 2 hr + 1
                    const int i = hr == 0 ? i0 : i1, o = fx_el(fe, ni, 2 * hr);
                    const float2 gi = ldf2(gs, o);
                    float dgv[2];
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        const int e = 2 * hr + x;
                        const float fd = cake_ex2(g2(gend, x) - g2(gi, x));
                        const float D = fd * acc[ni][e];
                        const float qn = g4(q4, e) * (e < 2 ? rq0 : rq1);
                        const float kn = g4(k4, e) * (e < 2 ? rk0 : rk1);
                        dgv[x] = 0.f;
                        dgv[x] += qn * Dq[ni][e] + kn * Dk[ni][e];  // phase 3a's Qg dQg + Kg dKg
                        const float xx = kn * D;
                        Dk[ni][e] += D;
                        if (i < L - 1) {
                            dgv[x] -= xx;
                            cs[2 * n + x] += xx;
                        }
                    }
                    stf2(RD, o, dgv[0], dgv[1]);
                    stf2(RC, o, Dq[ni][2 * hr], Dq[ni][2 * hr + 1]);  // dq's and dk's accumulators move
                    stf2(DK, o, Dk[ni][2 * hr], Dk[ni][2 * hr + 1]);  // to RC and DK for phases 6-7
                }
            }
            if constexpr (kNi == 4) {
                // lane (g, t) ends with sum 4 (g & 1) + 2 ((g >> 1) & 1) + (g >> 2)
                cake_halve<4, 4>(cs, lane);
                cake_halve<2, 8>(cs, lane);
                cake_halve<1, 16>(cs, lane);
                const int v = 4 * (g & 1) + 2 * ((g >> 1) & 1) + (g >> 2);
                sc[SC_COL + 128 * rb + 32 * cq + 8 * (v >> 1) + 2 * t + (v & 1)] = cs[0];
            } else {
#pragma unroll
                for (int m = 4; m <= 16; m <<= 1) {
                    cs[0] += __shfl_xor_sync(0xffffffffu, cs[0], m);
                    cs[1] += __shfl_xor_sync(0xffffffffu, cs[1], m);
                }
                if (g == 0) {
                    sc[SC_COL + 128 * rb + 32 * cq + 8 * np + 2 * t] = cs[0];
                    sc[SC_COL + 128 * rb + 32 * cq + 8 * np + 2 * t + 1] = cs[1];
                }
            }
        }
        // dbeta partials -> slots (this numbering's rows and columns; read after phase 6)
#pragma unroll
        for (int m = 1; m <= 2; m <<= 1) {
            db0 += __shfl_xor_sync(0xffffffffu, db0, m);
            db1 += __shfl_xor_sync(0xffffffffu, db1, m);
        }
        if (t == 0) {
            dbs[64 * cq + i0] = db0;
            dbs[64 * cq + i1] = db1;
        }
    }
    __syncthreads();  // phase 6's threads read RC / DK / RD elements that other threads wrote in 5

    // ---- phase 6: intra-chunk gradients of Aqk (dA1 = s dAqk) and Akk (dA2 = dAkk).
    {
        CAKE_REIDX;
        if (kGate != 0) {
            // The raw gate input x of the chunk's rows into L2 now, for the epilogue's dx loop: its
            // loads are one per row, and from DRAM each took a full latency (raw forms +1.0 ms on
            // 1doc, session 6). One 128-byte line per thread, sizeof(x_t) lines per row.
            constexpr int kLines = (int)sizeof(x_t);
            const int r = tid / kLines;
            if (r < L)
                cake_prefetch_l2(xin + in_base + (long long)r * tok_stride + (tid % kLines) * (128 / kLines));
        }
        const float rq0 = rqf(i0), rq1 = rqf(i1), rk0 = rkf(i0), rk1 = rkf(i1);
        // (a), (b) and (c) below all add to this thread's own elements of dq (RC), dk (DK) and
        // dGamma (RD): rows i0, i1 and, per n-tile pair nh, the 8 elements (n, e) of columns
        // 32 cq + 8 (2 nh + n) + 2 t + (e & 1). Per pair, their products go into three shared
        // accumulators and one epilogue adds them to each element: one shared-memory round trip
        // of RC, DK and RD per element, and each decay factor formed once (the program is closest
        // to the shared-memory pipe and issue-bound: sessions 13, 32).
        const int r = 16 * rb, er = r + 15;  // (a)'s reference row, (b)'s; (c) uses both
        // (c)'s tensor-core path: when this warp's dims have a decay span below kFastSpan (the
        // choice is per n-tile pair below and depends only on this chunk's own data).
        float span = 0.f;
        {
            const int fr = fx<128>(r, 32 * cq + 2 * t), fq = fx<128>(er, 32 * cq + 2 * t);
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int x = 0; x < 2; ++x) span = fmaxf(span, gs[fx_el(fr, ni, x)] - gs[fx_el(fq, ni, x)]);
        }
        const bool fast_span = __all_sync(0xffffffffu, span < kFastSpan);
#pragma unroll 1
        for (int nh = 0; nh < 2; ++nh) {
            // One set of accumulators per n-tile pair for all three parts: the row terms of (a) and
            // (c) share the reference r (out_i = 2^(G_i - G_r) acc), the column terms of (b) and (c)
            // the reference er (out_i = 2^(G_er - G_i) acc), so every element takes one epilogue:
            // aq / ak the row terms through dAqk / dAkk, ac the column terms through both.
            // Elements of column block 2 nh + n: fx_el / bf_el of block n from bases XOR-ed by 16 nh.
            float aq[2][4], ak[2][4], ac[2][4];
            auto clear = [&]() {
#pragma unroll
                for (int n = 0; n < 2; ++n)
#pragma unroll
                    for (int x = 0; x < 4; ++x) aq[n][x] = ak[n][x] = ac[n][x] = 0.f;
            };
            clear();
            // (c) diagonal block rb, first. For each own row i and every row u of the block: u < i
            // is a row-gradient term of i, u > i a column-gradient term of i (as j), u = i the
            // diagonal pair, which goes to dq / dk but never to dGamma. On the fast span: tensor
            // cores, rows as in (a) (u < i kept by masking dA), columns as in (b) (u > i kept); if
            // the span is wide or a product overflowed, the accumulators are cleared and the block
            // runs in exact elementwise fp32 after the epilogue.
            bool fast = fast_span;
            if (fast) {
                CAKE_REIDX;
                const int j0 = 16 * rb + 4 * t;
                // A: dA[i][u], u < i (rows); dA[u][i], u > i (columns); TF32 (the column operands
                // from per-column offsets, as in (b)).
                const int a0 = fx<64>(i0, 4 * t) ^ (16 * rb), a1 = fx<64>(i1, 4 * t) ^ (16 * rb);  // columns j0
                const float4 a1lo = keep_below(ldf4(TT, a0), j0, i0);
                const float4 a1hi = keep_below(ldf4(TT, a1), j0, i1);
                const float4 a2lo = keep_below(ldf4(AK, a0), j0, i0);
                const float4 a2hi = keep_below(ldf4(AK, a1), j0, i1);
                const int a00 = tg_col(64, t, i0, 0), a01 = tg_col(64, t, i0, 1);
                const int a10 = tg_col(64, t, i1, 0), a11 = tg_col(64, t, i1, 1);
                const float4 c1lo = keep_above(ldt4_at<64>(TT, a00, a01, rb), j0, i0);
                const float4 c1hi = keep_above(ldt4_at<64>(TT, a10, a11, rb), j0, i1);
                const float4 c2lo = keep_above(ldt4_at<64>(AK, a00, a01, rb), j0, i0);
                const float4 c2hi = keep_above(ldt4_at<64>(AK, a10, a11, rb), j0, i1);
                // The B gathers (rows u = 16 rb + 4 t + e) from per-column offsets, as in (a), (b).
                const float* gR = gs + 2048 * rb;
                const unsigned short* kR = ks + 2048 * rb;
                const unsigned short* qR = qs + 2048 * rb;
                const int mx = 16 * nh, dg = 32 * cq + g;  // as in (a)
                const int fr = fx<128>(r, dg) ^ mx, fq = fx<128>(er, dg) ^ mx, tq = tg_col(128, t, dg, 0) ^ mx;
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const float gr = gs[fr ^ (8 * n)], ge = gs[fq ^ (8 * n)];
                    const int gq0 = tq ^ (8 * n), gq1 = gq0 ^ 16;
                    // B = hi + lo, both TF32 (error ~2^-22): the row and column terms of a pair
                    // enter dGamma with opposite signs and cancel in dg's reverse cumsum, so
                    // their factors must not carry independent TF32 errors. dA's rounding is
                    // shared by both terms (the same rtf32 of the same value) and cancels.
                    float4 bkh, bkl, bqh, bql, bch, bcl;
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int u = j0 + e, bq = bf_col(t, dg, e) ^ mx ^ (8 * n);
                        const float gu = gR[((e & 1) ? gq1 : gq0) + 128 * e];
                        const float ku = cake_bf16_to_f32(kR[bq]) * rkf(u), qu = cake_bf16_to_f32(qR[bq]) * rqf(u);
                        const float f = cake_ex2(gu - ge);
                        cake_split_tf32(ku * cake_ex2(gr - gu), e4(bkh, e), e4(bkl, e));
                        cake_split_tf32(qu * f, e4(bqh, e), e4(bql, e));
                        cake_split_tf32(ku * f, e4(bch, e), e4(bcl, e));
                    }
                    mma_k16(aq[n], a1lo, a1hi, bkl);
                    mma_k16(aq[n], a1lo, a1hi, bkh);
                    mma_k16(ak[n], a2lo, a2hi, bkl);
                    mma_k16(ak[n], a2lo, a2hi, bkh);
                    mma_k16(ac[n], c1lo, c1hi, bql);
                    mma_k16(ac[n], c2lo, c2hi, bcl);
                    mma_k16(ac[n], c1lo, c1hi, bqh);
                    mma_k16(ac[n], c2lo, c2hi, bch);
                }
                bool finite = true;
#pragma unroll
                for (int n = 0; n < 2; ++n)
#pragma unroll
                    for (int x = 0; x < 4; ++x)
                        finite = finite && isfinite(aq[n][x]) && isfinite(ak[n][x]) && isfinite(ac[n][x]);
                fast = __all_sync(0xffffffffu, finite);
                if (!fast) clear();
            }
            // (a) row gradients, off-diagonal blocks J < rb, reference r = 16 rb:
            // out_I = 2^(G_I - G_r) (dA_IJ @ (k_J 2^(G_r - G_J))).
            if (rb > 0) {
                CAKE_REIDX;
                int gq[2][2], kq[2][4];  // gathers of G and k rows 16 J + 4 t + e, columns d
                float grn[2];
                {
                    // column d = 32 cq + 8 m + g, m = 2 nh + n: every offset below is m = 0's ^ 8 m
                    const int mx = 16 * nh, dg = 32 * cq + g;
                    const int fr = fx<128>(r, dg) ^ mx, tq = tg_col(128, t, dg, 0) ^ mx;
#pragma unroll
                    for (int n = 0; n < 2; ++n) {
                        grn[n] = gs[fr ^ (8 * n)];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            if (e < 2) gq[n][e] = tq ^ (8 * n) ^ (16 * e);
                            kq[n][e] = bf_col(t, dg, e) ^ mx ^ (8 * n);
                        }
                    }
                }
                const int a0 = fx<64>(i0, 4 * t), a1 = fx<64>(i1, 4 * t);  // columns 16 J + 4 t: XOR 16 J
                for (int J = 0; J < rb; ++J) {
                    const int j0 = 16 * J + 4 * t;
                    const float4 q1lo = ldf4(TT, a0 ^ (16 * J)), q1hi = ldf4(TT, a1 ^ (16 * J));
                    const float4 k1lo = ldf4(AK, a0 ^ (16 * J)), k1hi = ldf4(AK, a1 ^ (16 * J));
                    const float* gJ = gs + 2048 * J;
                    const unsigned short* kJ = ks + 2048 * J;
#pragma unroll
                    for (int n = 0; n < 2; ++n) {
                        const float gr = grn[n];
                        float4 bh, bl;  // hi + lo: see (c)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int j = j0 + e;
                            cake_split_tf32(cake_bf16_to_f32(kJ[kq[n][e]]) * rkf(j) * cake_ex2(gr - gJ[gq[n][e & 1] + 128 * e]), e4(bh, e), e4(bl, e));
                        }
                        mma_k16(aq[n], q1lo, q1hi, bl);
                        mma_k16(aq[n], q1lo, q1hi, bh);
                        mma_k16(ak[n], k1lo, k1hi, bl);
                        mma_k16(ak[n], k1lo, k1hi, bh);
                    }
                }
            }
            // (b) column gradients, off-diagonal blocks I > rb, reference er = last row of block rb:
            // out_J = 2^(G_er - G_J) (dA_IJ^T @ (a_I 2^(G_I - G_er))), the dAqk and dAkk terms in
            // one accumulator (dq takes none of them; dk and dGamma their sum).
            if (rb < 3) {
                CAKE_REIDX;
                // gathers: dA^T rows (columns i0, i1 of T / Akk), G / q / k rows 16 I + 4 t + e
                const int a00 = tg_col(64, t, i0, 0), a01 = tg_col(64, t, i0, 1);
                const int a10 = tg_col(64, t, i1, 0), a11 = tg_col(64, t, i1, 1);
                int gq[2][2], bq[2][4];
                float gen[2];
                {
                    const int mx = 16 * nh, dg = 32 * cq + g;  // as in (a)
                    const int fq = fx<128>(er, dg) ^ mx, tq = tg_col(128, t, dg, 0) ^ mx;
#pragma unroll
                    for (int n = 0; n < 2; ++n) {
                        gen[n] = gs[fq ^ (8 * n)];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            if (e < 2) gq[n][e] = tq ^ (8 * n) ^ (16 * e);
                            bq[n][e] = bf_col(t, dg, e) ^ mx ^ (8 * n);
                        }
                    }
                }
                for (int I = rb + 1; I < 4; ++I) {
                    const int k0 = 16 * I + 4 * t;
                    const float4 q1lo = ldt4_at<64>(TT, a00, a01, I), q1hi = ldt4_at<64>(TT, a10, a11, I);
                    const float4 k1lo = ldt4_at<64>(AK, a00, a01, I), k1hi = ldt4_at<64>(AK, a10, a11, I);
                    const float* gI = gs + 2048 * I;
                    const unsigned short* qI = qs + 2048 * I;
                    const unsigned short* kI = ks + 2048 * I;
#pragma unroll
                    for (int n = 0; n < 2; ++n) {
                        const float ge = gen[n];
                        float4 bqh, bql, bkh, bkl;  // hi + lo: see (c)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int i = k0 + e;
                            const float f = cake_ex2(gI[gq[n][e & 1] + 128 * e] - ge);
                            cake_split_tf32(cake_bf16_to_f32(qI[bq[n][e]]) * rqf(i) * f, e4(bqh, e), e4(bql, e));
                            cake_split_tf32(cake_bf16_to_f32(kI[bq[n][e]]) * rkf(i) * f, e4(bkh, e), e4(bkl, e));
                        }
                        mma_k16(ac[n], q1lo, q1hi, bql);
                        mma_k16(ac[n], k1lo, k1hi, bkl);
                        mma_k16(ac[n], q1lo, q1hi, bqh);
                        mma_k16(ac[n], k1lo, k1hi, bkh);
                    }
                }
            }
            // The epilogue: each element of dq (RC), dk (DK) and dGamma (RD) loaded once, its terms
            // added, stored once. The diagonal pair (s dAqk_ii) here on the fast span, else in the
            // exact pass below.
            {
                CAKE_REIDX;
                // s dAqk_ii, loaded on both paths and selected (a conditional load spilled on the sm_90 twins)
                const float td0 = TT[fx<64>(i0, i0)], td1 = TT[fx<64>(i1, i1)];
                const float dd0 = fast ? td0 : 0.f, dd1 = fast ? td1 : 0.f;
                const int fe = fx<128>(i0, 32 * cq + 2 * t) ^ (16 * nh), be = bf_base(i0, cq, t) ^ (16 * nh);
                const int fr = fx<128>(r, 32 * cq + 2 * t) ^ (16 * nh), fq = fx<128>(er, 32 * cq + 2 * t) ^ (16 * nh);
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const float4 q4 = ldq_bf16_el(qs, be, n);
                    const float4 k4 = ldq_bf16_el(ks, be, n);
                    const float2 gref = ldf2(gs, fx_el(fr, n, 0)), gend = ldf2(gs, fx_el(fq, n, 0));
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int o = fx_el(fe, n, 2 * hr);
                        const float2 g_i = ldf2(gs, o);
                        float2 rc = ldf2(RC, o), sk = ldf2(DK, o), sg = ldf2(RD, o);
#pragma unroll
                        for (int x = 0; x < 2; ++x) {
                            const int e = 2 * hr + x;
                            const float gi = g2(g_i, x);
                            const float erf = cake_ex2(gi - g2(gref, x));
                            const float fc = cake_ex2(g2(gend, x) - gi);
                            const float rq_ = erf * aq[n][e], rk_ = erf * ak[n][e], col = fc * ac[n][e];
                            const float qi = g4(q4, e) * (e < 2 ? rq0 : rq1);
                            const float ki = g4(k4, e) * (e < 2 ? rk0 : rk1);
                            const float dd = e < 2 ? dd0 : dd1;
                            e2(rc, x) += rq_ + dd * ki;
                            e2(sk, x) += rk_ + col + dd * qi;
                            e2(sg, x) += qi * rq_ + ki * rk_ - ki * col;
                        }
                        stf2(RC, o, rc.x, rc.y);
                        stf2(DK, o, sk.x, sk.y);
                        stf2(RD, o, sg.x, sg.y);
                    }
                }
            }
            if (!fast) {  // (c) in exact elementwise fp32, n-tiles 2 nh, 2 nh + 1, on shared memory (rare)
                CAKE_REIDX;
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int i = hr == 0 ? i0 : i1;
                    const float rqi = hr == 0 ? rq0 : rq1, rki = hr == 0 ? rk0 : rk1;
                    float qi[4], ki[4], gi[4], rq_[4], rk_[4], cq_[4], ck_[4];
#pragma unroll
                    for (int x = 0; x < 4; ++x) {
                        const int d = 32 * cq + 8 * (2 * nh + (x >> 1)) + 2 * t + (x & 1);
                        qi[x] = cake_ld1_bf16(qs, i, d) * rqi;
                        ki[x] = cake_ld1_bf16(ks, i, d) * rki;
                        gi[x] = gs[fx<128>(i, d)];
                        rq_[x] = rk_[x] = cq_[x] = ck_[x] = 0.f;
                    }
#pragma unroll 2
                    for (int uu = 0; uu < 16; ++uu) {
                        const int u = 16 * rb + uu;
                        const bool lo = u < i, hi = u > i;
                        // u < i: dA[i][u] (row terms);  u > i: dA[u][i] (column terms)
                        const int ra = hi ? u : i, ca = hi ? i : u;
                        const float a1 = TT[fx<64>(ra, ca)], a2 = AK[fx<64>(ra, ca)];
                        const float rqu = rqf(u), rku = rkf(u);
#pragma unroll
                        for (int x = 0; x < 4; ++x) {
                            const int d = 32 * cq + 8 * (2 * nh + (x >> 1)) + 2 * t + (x & 1);
                            const float gu = gs[fx<128>(u, d)];
                            const float ku = cake_ld1_bf16(ks, u, d) * rku;
                            if (lo) {
                                const float E = cake_ex2(gi[x] - gu);
                                rq_[x] = fmaf(a1 * ku, E, rq_[x]);
                                rk_[x] = fmaf(a2 * ku, E, rk_[x]);
                            } else if (hi) {
                                const float qu = cake_ld1_bf16(qs, u, d) * rqu;
                                const float E = cake_ex2(gu - gi[x]);
                                cq_[x] = fmaf(a1 * qu, E, cq_[x]);
                                ck_[x] = fmaf(a2 * ku, E, ck_[x]);
                            }
                        }
                    }
                    const float dd = TT[fx<64>(i, i)];  // s dAqk_ii: the diagonal pair, kept out of dGamma
#pragma unroll
                    for (int x = 0; x < 4; ++x) {
                        const int n = x >> 1, e = 2 * hr + (x & 1);
                        const float col = cq_[x] + ck_[x];
                        const int d = 32 * cq + 8 * (2 * nh + n) + 2 * t + (e & 1);
                        RC[fx<128>(i, d)] += rq_[x] + dd * ki[x];
                        DK[fx<128>(i, d)] += rk_[x] + col + dd * qi[x];
                        RD[fx<128>(i, d)] += qi[x] * rq_[x] + ki[x] * rk_[x] - ki[x] * col;
                    }
                }
            }
        }
    }
    __syncthreads();  // column sums (phase 5) visible

    // ---- phase 7: epilogue.
    {
        CAKE_REIDX;
        // Raw gates: the chunk's x (in L2 since phase 6) into the Akk / T tiles, dead now, as
        // [64][128] x_t; waited for before the dx loop, which then reads shared memory (one load
        // per row from L2 had left each row waiting on the previous one's: session 7).
        x_t* xs = reinterpret_cast<x_t*>(smem + OFF_AK);
        (void)xs;
        if (kGate != 0) {
            constexpr int kPieces = 128 * (int)sizeof(x_t) / 16;  // 16-byte pieces per row
            constexpr int kPer = 16 / (int)sizeof(x_t);
#pragma unroll 1
            for (int j = tid; j < 64 * kPieces; j += 512) {
                const int r = j / kPieces, p = j % kPieces;
                if (r < L)
                    cake_cp_async16(xs + r * 128 + p * kPer, xin + in_base + (long long)r * tok_stride + p * kPer, 16);
            }
            cake_cp_async_commit();
        }
        // The chunk-end decay: last valid row += sum_{i < L-1} Kd dKd + gl dgl.
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int i = hr == 0 ? i0 : i1;
            if (i == L - 1) {
#pragma unroll
                for (int x = 0; x < 8; ++x) {
                    const int d = 32 * cq + 8 * (x >> 1) + 2 * t + (x & 1);
                    const float s4 = ((sc[SC_COL + d] + sc[SC_COL + 128 + d]) + sc[SC_COL + 256 + d]) + sc[SC_COL + 384 + d];
                    RD[fx<128>(i, d)] += s4 + cake_ex2(gs[fx<128>(L - 1, d)]) * sc[SC_DGL + d];
                }
            }
        }
        // dq, dk (through the L2 norm: r (dy - y (y . dy))), bf16, row by row: task = (row i, four
        // columns 4 u .. 4 u + 3), a warp one whole row (32 conflict-free 16-byte reads of RC and
        // of DK, two 256-byte runs of stores) where each thread's 2 x 2-column pieces of 8 rows had
        // each warp store 16 bytes into 8 rows at a time. The same operations on each element.
        // The norm's row dots y . dy are the warp's: its 4-element partials summed by a butterfly
        // (every lane the same bits), not a pass of their own through shared-memory slots and a
        // barrier (docs/notes.md, session 30).
        // Row m (0..3) of a warp is warp + 16 m, which keeps row warp's swizzles: its offsets are +
        // 2048 m. The four rows go together, their dots reduced side by side; rows past L are
        // computed (on whatever their tiles hold: each row is its own warp's chain) and not stored,
        // so no branch keeps the rows' shuffle chains apart (with a `continue` per row they ran
        // one after another).
        const int fw = fx<128>(warp, 4 * lane), bw = cake_at_bf16(warp, lane);
        float a[4][4], b[4][4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const float4 dq4 = ldf4(RC, fw + 2048 * m), dk4 = ldf4(DK, fw + 2048 * m);
            a[m][0] = dq4.x; a[m][1] = dq4.y; a[m][2] = dq4.z; a[m][3] = dq4.w;
            b[m][0] = dk4.x; b[m][1] = dk4.y; b[m][2] = dk4.z; b[m][3] = dk4.w;
        }
        if (kL2Norm) {
            // dot[m] = y_q . dy_q and dot[4 + m] = y_k . dy_k of row m, this lane's 4 columns
            float yq[4][4], yk[4][4], dot[8], r_q[4], r_k[4];
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const int i = warp + 16 * m;
                r_q[m] = rq[i];
                r_k[m] = rk[i];
                const float4 y4 = cake_ld4_bf16_at(qs, bw + 2048 * m), z4 = cake_ld4_bf16_at(ks, bw + 2048 * m);
                dot[m] = 0.f;
                dot[4 + m] = 0.f;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    yq[m][e] = g4(y4, e) * r_q[m];
                    yk[m][e] = g4(z4, e) * r_k[m];
                    dot[m] = fmaf(yq[m][e], a[m][e], dot[m]);
                    dot[4 + m] = fmaf(yk[m][e], b[m][e], dot[4 + m]);
                }
            }
            // The 8 dots over the warp: halved at lane bits 0, 1, 2 (cake/warp_halve.cuh: a
            // butterfly's bits), the last two levels on the one sum left, then each dot from a lane
            // that holds it (dot v is on lanes whose bits 0, 1, 2 are v's bits 2, 1, 0): 17 SHFL,
            // not 40.
            cake_halve<4, 1>(dot, lane);
            cake_halve<2, 2>(dot, lane);
            cake_halve<1, 4>(dot, lane);
            dot[0] += __shfl_xor_sync(0xffffffffu, dot[0], 8);
            dot[0] += __shfl_xor_sync(0xffffffffu, dot[0], 16);
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const int src = 2 * (m >> 1) + 4 * (m & 1);
                const float dq_ = __shfl_sync(0xffffffffu, dot[0], src), dk_ = __shfl_sync(0xffffffffu, dot[0], src + 1);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    a[m][e] = r_q[m] * (a[m][e] - yq[m][e] * dq_);
                    b[m][e] = r_k[m] * (b[m][e] - yk[m][e] * dk_);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const int i = warp + 16 * m;
            if (i >= L) continue;  // warp-uniform: i is the warp's row
            const long long o = in_base + (long long)i * tok_stride + 4 * lane;
            *reinterpret_cast<uint2*>(dq_out + o) = make_uint2(cake_pack_bf16x2(a[m][0], a[m][1]), cake_pack_bf16x2(a[m][2], a[m][3]));
            *reinterpret_cast<uint2*>(dk_out + o) = make_uint2(cake_pack_bf16x2(b[m][0], b[m][1]), cake_pack_bf16x2(b[m][2], b[m][3]));
        }
        if (tid < L) {
            float s = ((dbs[tid] + dbs[64 + tid]) + dbs[128 + tid]) + dbs[192 + tid];
            if (beta_flags & CAKE_BETA_SIGMOID) s *= bs[tid] * (1.f - bs[tid]);
            cake_store_beta(dbeta_out, (long long)(t0 + tid) * H + h, s, beta_flags);
        }
        __syncthreads();  // the chunk-end row of RD written
        // Reverse cumsum of dGamma over the valid rows: column d, segment sg = rows 16 sg..16 sg+15;
        // local suffix sums, then the totals of the later segments in fixed order. The 16 loads go
        // first (rows past L too: in the tile, unused) and the sums stay in registers for the dx
        // loop (RD is not read again): in place, each load had waited on the previous row's store.
        const int d = tid & 127, sg = tid >> 7, r0 = 16 * sg;
        int nv = L - r0;  // the segment's valid rows: j < nv
        float cs[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) cs[j] = RD[fx<128>(r0 + j, d)];
        float run = 0.f;  // rows past L come first: +0 added to +0, the bits of skipping them
#pragma unroll
        for (int j = 15; j >= 0; --j) {
            run += j < nv ? cs[j] : 0.f;
            cs[j] = run;
        }
        sc[SC_SEG + 128 * sg + d] = run;
        if (kGate != 0) cake_cp_async_wait<0>();  // x in xs, visible to all after the barrier
        __syncthreads();
        float off = 0.f;
#pragma unroll
        for (int s2 = 3; s2 >= 1; --s2)
            if (s2 > sg) off += sc[SC_SEG + 128 * s2 + d];
        float bias_acc = 0.f, a_acc = 0.f;
        const float a_exp = expf(A_log[h]), bias_d = dt_bias[h * 128 + d];
        x_t* po = dg_out + in_base + (long long)r0 * tok_stride + d;  // row r0's dg / dx
        nv = cake_opaque(nv);  // compared anew: 16 predicates kept across the barrier went to P2R
        {
            // One row's dx, its store and its sums; rows past L (ok false) run on x's stale words
            // and drop out by selects, not branches. Constants folded: the sigmoid form's dx = dg
            // s (1 - s) (lower_bound a) with s (1 - s) = fma(-s, s, s), dA_log's term dx z; the
            // softplus form's dx = dg (-a sigmoid(z)), dA_log's dg g.
            const float ca = -a_exp * CAKE_LOG2E, la = lower_bound * a_exp;
            auto dx_row = [&](float xj, float cj, bool ok, x_t* p) {
                const float dgv = cj + off;
                const float z = xj + bias_d;
                // g = lb sigmoid(u), u = a z: dg/dz = lb s (1 - s) a, dg/dA_log = lb s (1 - s) u
                const float sv = cake_rcp(1.f + cake_ex2(__fmul_rn(z, ca)));
                const float dx = __fmul_rn(__fmul_rn(dgv, __fmaf_rn(-sv, sv, sv)), la);
                const float dA = __fmul_rn(dx, z);
                if (ok) store_dx(p, dx);
                bias_acc += ok ? dx : 0.f;
                a_acc += ok ? dA : 0.f;
            };
            if (nv >= 16) {
                // all 16 rows valid (every segment of a full chunk): unrolled, no guards (a rolled
                // loop spent ~half its instructions shifting cs, on 64-bit row addresses and on
                // predicates); 4 rows' loads in flight at a time (registers)
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    dx_row(load_x(xs + (r0 + j) * 128 + d), cs[j], true, po + j * tok_stride);
                    if ((j & 3) == 3) cake_sched_fence();
                }
            } else {
                // the segment that holds row L - 1: 4 rows a pass, rolled (cs shifts down 4 a pass:
                // registers, no indexing)
#pragma unroll 1
                for (int j0 = 0; j0 < nv; j0 += 4, po += 4 * tok_stride) {
                    float xv[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j) xv[j] = load_x(xs + (r0 + j0 + j) * 128 + d);
#pragma unroll
                    for (int j = 0; j < 4; ++j) dx_row(xv[j], cs[j], j0 + j < nv, po + j * tok_stride);
#pragma unroll
                    for (int j = 0; j < 12; ++j) cs[j] = cs[j + 4];
                }
            }
        }
        if (kGate != 0) {
            sc[SC_BIAS + 128 * sg + d] = bias_acc;
#pragma unroll
            for (int m = 16; m >= 1; m >>= 1) a_acc += __shfl_xor_sync(0xffffffffu, a_acc, m);
            if (lane == 0) sc[SC_DA + warp] = a_acc;
            __syncthreads();
            if (tid < 128)
                dbias_part[ws * 128 + tid] = ((sc[SC_BIAS + tid] + sc[SC_BIAS + 128 + tid]) + sc[SC_BIAS + 256 + tid]) + sc[SC_BIAS + 384 + tid];
            if (warp == 4) {
                // the 16 warp partials in a tree of 4 shuffles (a serial sum on one thread was 16
                // dependent shared-memory loads at the block's very end)
                float s = lane < 16 ? sc[SC_DA + lane] : 0.f;
#pragma unroll
                for (int m = 8; m >= 1; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
                if (lane == 0) dA_part[ws] = s;
            }
        }
    }
#undef CAKE_REIDX_WG
#undef CAKE_REIDX
#undef CAKE_REIDX_AS
}
