// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.fwd_chunk.gate-softplus.x-fp32.l2n-fused.sm_103a by cake migrate
// record: kda_cp/fwd_chunk.gate-softplus.x-fp32.l2n-fused  program: kda_cp.fwd_chunk.gate-softplus.x-fp32.l2n-fused.sm_103a
// identity: sha256:249dedc712ad8e27b4cc6a9dd040de9de70cd65ee060b97369261b7ad4702a71
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
// ---- begin cake/store.cuh ----
// A 16-byte store to global memory issued as one st.global.v4.f32. The C++ float4 store is not
// always one instruction: the compiler split kda_fwd_chunk's row-major float4 stores (G_out, TA_out,
// and until session 22 Qg, Aqk and Kd) into four 4-byte stores, depending only on how the address
// was formed (docs/notes.md, session 22), on a kernel near the shared-memory / LSU pipe's limit.
// p: 16-byte aligned, in global memory.
__device__ __forceinline__ void cake_st_global_v4(float* p, float4 v) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
}
// ---- end cake/store.cuh ----
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

// Where the state passes' tiles go inside a chunk-head's tile (float offsets): sm_90a's
// kda_fwd_state copies each whole into shared memory, so they are stored in its image of them
// (cake/chunk_image.cuh); the portable programs read them row-major.
__device__ __forceinline__ int out_w(int r, int k) { return r * 128 + k; }
__device__ __forceinline__ int out_u(int r, int v) { return r * 128 + v; }
__device__ __forceinline__ int out_qg(int r, int k) { return r * 128 + k; }
__device__ __forceinline__ int out_kd(int d, int r) { return d * 64 + r; }
__device__ __forceinline__ int out_aqk(int r, int c) { return r * 64 + c; }

constexpr bool kL2Norm = true;
constexpr int kGate = 1;

typedef float x_t;

// Shared-memory layouts. Every tile is stored unpadded with its 16-byte (fp32) or 8-byte (bf16)
// columns XOR-swizzled per row; the swizzles (these and cake_sw_bf16 of the bf16 [64][128] tiles,
// cake/bf16_tile.cuh) are the ones that make each access pattern of this kernel conflict-free
// (derivations in docs/kernel-notes.md).
__device__ __forceinline__ int sw_gam(int r) { return (((r >> 2) & 3) << 1) ^ ((r & 1) << 2); }
__device__ __forceinline__ int sw_sq(int r) { return (r & 6) ^ ((r & 1) << 2); }

// fp32 Gamma [64][128], c = float4 index (0..31)
__device__ __forceinline__ int at_gam(int r, int c) { return r * 128 + ((c ^ sw_gam(r)) << 2); }
// row r0 + i of Gamma at row r0's offset o0 = at_gam(r0, c), r0 % 8 = 0 (sw_gam(r0 + i) =
// sw_gam(r0) ^ sw_gam(i))
__device__ __forceinline__ int gam_row(int o0, int i) { return (o0 ^ (sw_gam(i) << 2)) + 128 * i; }
// fp32 [64][64] tiles (Aqk, M, T), c = float4 index (0..15)
__device__ __forceinline__ int at_sq(int r, int c) { return r * 64 + ((c ^ sw_sq(r)) << 2); }

// cake_ld4_bf16_at into an array: this kernel's loops index a unit's four elements.
__device__ __forceinline__ void ld4_bf16_at(const unsigned short* s, int idx, float (&x)[4]) {
    const float4 p = cake_ld4_bf16_at(s, idx);
    x[0] = p.x;
    x[1] = p.y;
    x[2] = p.z;
    x[3] = p.w;
}

__device__ __forceinline__ void ld4_bf16(const unsigned short* s, int r, int u, float (&x)[4]) {
    ld4_bf16_at(s, cake_at_bf16(r, u), x);
}

// The state pass feeds W, Qg, Kd and Aqk to tensor cores as TF32; storing them already rounded
// (cvt.rn, as the mma operand conversion would) removes every conversion from its serial loop and
// leaves its results bitwise unchanged.
__device__ __forceinline__ float rtf32(float x) { return __uint_as_float(cake_tf32(x)); }

// One gate row's four inputs of a thread into its 16-byte slot of Gamma's tile (bf16: the slot's
// first 8 bytes).
__device__ __forceinline__ void cp_gate(float* dst, const x_t* src) { cake_cp_async16(dst, src, 16); }

__device__ __forceinline__ float4 ld4_f32(const float* s, int idx) {
    return *reinterpret_cast<const float4*>(s + idx);
}

// acc += sum_e L[lrow][4 lc + e] * R[rrow0 + e][4 rc .. 4 rc + 3] ([64][64] fp32 tiles, at_sq): one
// step of the T solve's block products, in the order every level uses.
__device__ __forceinline__ void fma_row4(float4& acc, const float* L, int lrow, int lc, const float* R,
                                         int rrow0, int rc) {
    const float4 l4 = ld4_f32(L, at_sq(lrow, lc));
    const float lv[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float4 r4 = ld4_f32(R, at_sq(rrow0 + e, rc));
        acc.x = fmaf(lv[e], r4.x, acc.x);
        acc.y = fmaf(lv[e], r4.y, acc.y);
        acc.z = fmaf(lv[e], r4.z, acc.z);
        acc.w = fmaf(lv[e], r4.w, acc.w);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256, 2) kda_fwd_chunk(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
    const unsigned short* __restrict__ v, const void* __restrict__ beta,
    const x_t* __restrict__ x, const float* __restrict__ A_log, const float* __restrict__ dt_bias,
    const int* __restrict__ chunks, float* __restrict__ Aqk, float* __restrict__ W,
    float* __restrict__ U, float* __restrict__ Qg, float* __restrict__ Kd, float* __restrict__ gl,
    float* __restrict__ G_out, float* __restrict__ TA_out, float* __restrict__ R_out, int H,
    int beta_flags, float scale, float lower_bound)
{
    extern __shared__ __attribute__((aligned(16))) unsigned char smem[];
    unsigned short* qs = reinterpret_cast<unsigned short*>(smem);
    unsigned short* ks = qs + 64 * 128;
    unsigned short* vs = ks + 64 * 128;
    float* gs = reinterpret_cast<float*>(smem + 3 * 64 * 128 * 2);  // Gamma * log2(e)
    float* As = gs + 64 * 128;  // Aqk, later T = (I + M)^-1
    float* Ms = As + 64 * 64;   // Akk (M = diag(beta) Akk); its unused upper blocks: T-solve scratch
    float* bs = Ms + 64 * 64;
    float* rq = bs + 64;
    float* rk = rq + 64;

    // Heads fastest (grid (NC, H) read as one index): the blocks resident at once are every head
    // of a few chunks and together read whole token rows of q, k, v and the gate (H x 128
    // elements), where c = blockIdx.x had them read one head's 256 or 512 bytes of each row:
    // -2.5..-3.2 % on 1doc / 4doc (docs/notes.md, session 38). kda_bwd_chunk keeps c = blockIdx.x
    // (no gain on 1doc, +5.6 % on R2).
    const int lin = blockIdx.x + gridDim.x * blockIdx.y;
    const int c = lin / (int)gridDim.y, h = lin - c * (int)gridDim.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int t0 = chunks[2 * c], L = chunks[2 * c + 1];
    const long long tok_stride = (long long)H * 128;
    const long long in_base = (long long)t0 * tok_stride + (long long)h * 128;
    const long long ws = (long long)c * H + h;

    // ---- load: q, k, v rows >= L become zeros. Gamma, the chunk-local inclusive cumsum of the
    // log gate, in two levels (the gate stage, kda/gate.cu.j2, sums in the same order with the
    // same roundings, so the bits are its G): thread (warp w, lane) holds rows 8 w .. 8 w + 7 of
    // dims 4 lane .. 4 lane + 3 and sums them in order (level 1: the log gate g, or
    // -exp(A_log) softplus(x + dt_bias), or lower_bound sigmoid(exp(A_log) (x + dt_bias)), each
    // added with one fma as the gate stage's compiled form does, hence the explicit fmaf); after
    // the barrier, row r of group w is G_r = off_w + local_r with off_w = (((0 + t_0) + t_1) ...
    // + t_{w-1}), t_v group v's total (level 2). Rows >= L add nothing, so they repeat row L-1:
    // every exponent below stays a non-positive difference and padding rows multiply exact zeros.
    // The gate rows go first, by cp.async into Gamma's tile (a group of their own): Gamma heads
    // every later product, so they must not queue behind the tiles' 48 KB a block, and in shared
    // memory they hold no registers while the copies issue. The raw gates also load their
    // parameters and beta ahead of the copies, and their v's copies are a group of their own,
    // waited for just before [W | U], its only reader, so the activations and sums run while q
    // and k land (session 26: the rows into registers ahead of the copies, raw -4.3..-4.7 %;
    // session 27: the g programs' rows by cp.async, -2.5..-3.3 %; session 37: the raw programs'
    // too, -3.2 % raw off, -2.0 % raw fused against the register loads, same bits).
    float4 gv[8];  // this thread's gate rows, then their level-1 sums
    {
        const int c4 = lane, r0 = 8 * warp;
        const x_t* const xr = x + in_base + (long long)r0 * tok_stride + 4 * c4;  // row r0; row r0 + i: + i tok_stride
        // the gate rows into Gamma's tile at the places this thread later writes their Gamma (so
        // no barrier: a thread reads only its own copies)
        const int gs0 = at_gam(r0, c4);
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (r0 + i < L) cp_gate(gs + gam_row(gs0, i), xr + i * tok_stride);
        cake_cp_async_commit();
        const float4 bias = *reinterpret_cast<const float4*>(dt_bias + h * 128 + 4 * c4);
        const float ea = expf(A_log[h]);
        float b = 0.f;  // beta of row tid (threads 0-63)
        if (tid < 64 && tid < L) b = cake_load_beta(beta, (long long)(t0 + tid) * H + h, beta_flags);
        // Thread (cr0, ch) copies 16-byte piece ch of rows cr0 + 16 j of each tile: rows r + 16 j
        // keep the swizzle (cake_sw_bf16 depends on r's low 4 bits), so every copy's addresses are
        // its first ones plus a constant (with the index recomputed per copy, ~300 instructions).
        {
            const int cr0 = tid >> 4, ch = tid & 15;
            const long long o0 = in_base + (long long)cr0 * tok_stride + ch * 8;
            const int d0 = cake_at_bf16(cr0, 2 * ch);
#pragma unroll
            for (int i = 0; i < 12; ++i) {
                const int which = i >> 2, j = i & 3;
                const bool ok = cr0 + 16 * j < L;
                const unsigned short* src = (which == 0 ? q : which == 1 ? k : v) +
                                            (ok ? o0 + 16 * j * tok_stride : in_base);
                unsigned short* dst = which == 0 ? qs : which == 1 ? ks : vs;
                cake_cp_async16(dst + d0 + 2048 * j, src, ok ? 16 : 0);
                if (i == 7) cake_cp_async_commit();  // q and k: one group; v the next
            }
        }
        cake_cp_async_commit();
        cake_cp_async_wait<2>();  // the gate rows
#pragma unroll
        for (int i = 0; i < 8; ++i)
            gv[i] = r0 + i < L ? cake_load_gate4(reinterpret_cast<const x_t*>(gs + gam_row(gs0, i))) : make_float4(0.f, 0.f, 0.f, 0.f);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (r0 + i < L) acc = cake_gamma_add<kGate>(acc, gv[i], bias, ea, lower_bound);
            gv[i] = acc;
        }
        // the group totals t_w, in M's tile (free until the qk products)
        reinterpret_cast<float4*>(Ms)[32 * warp + c4] = acc;
        if (tid < 64) bs[tid] = b;
        cake_cp_async_wait<1>();  // q and k; v lands during the products and the solve
        __syncthreads();
    }

    {
        // Gamma, level 2; stored * log2(e). The loops of level 2 here, of the qk tiles (by two) and
        // of the T solve's second level are unrolled, their sums in the same order: together -0.7 %
        // raw off, -1.2 % raw fused (g off +0.4 %), where the T solve's alone cost +1.0..+1.2 %
        // (docs/notes.md, session 36: the gain is the three together, not any one)
        float4 off = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int v = 0; v < 7; ++v) {
            if (v >= warp) break;
            const float4 t4 = reinterpret_cast<const float4*>(Ms)[32 * v + lane];
            off.x = __fadd_rn(off.x, t4.x); off.y = __fadd_rn(off.y, t4.y);
            off.z = __fadd_rn(off.z, t4.z); off.w = __fadd_rn(off.w, t4.w);
        }
        // Row r0 + i lies i tok_stride past row r0 in G_out, and at gam_row(gs0, i) in Gamma.
        const int r0 = 8 * warp;
        const long long go0 = in_base + (long long)r0 * tok_stride + 4 * lane;
        const int gs0 = at_gam(r0, lane);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = r0 + i;
            const float4 G = make_float4(__fadd_rn(off.x, gv[i].x), __fadd_rn(off.y, gv[i].y),
                                         __fadd_rn(off.z, gv[i].z), __fadd_rn(off.w, gv[i].w));
            if (G_out != nullptr && r < L) cake_st_global_v4(G_out + go0 + i * tok_stride, G);
            *reinterpret_cast<float4*>(gs + gam_row(gs0, i)) =
                make_float4(G.x * CAKE_LOG2E, G.y * CAKE_LOG2E, G.z * CAKE_LOG2E, G.w * CAKE_LOG2E);
        }
    }
    if (kL2Norm) {
        // One warp per row, a fixed order: the norms are bitwise reproducible. A warp's 16 rows
        // (warp + 8 j) are summed together by halving (cake/warp_halve.cuh: a butterfly's bits in
        // 16 SHFL, not 80, whose issue was the norm's cost: docs/notes.md, session 31); lanes 2 j
        // and 2 j + 1 end with row j, and the even lanes take the 16 reciprocals side by side (on
        // lane 0, one IEEE square root and division after another, they had been the larger cost).
        float ss[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int rr = warp + 8 * j;
            float xv[4];
            ld4_bf16(rr < 64 ? qs : ks, rr & 63, lane, xv);
            ss[j] = xv[0] * xv[0] + xv[1] * xv[1] + xv[2] * xv[2] + xv[3] * xv[3];
        }
        cake_halve<8, 16>(ss, lane);
        cake_halve<4, 8>(ss, lane);
        cake_halve<2, 4>(ss, lane);
        cake_halve<1, 2>(ss, lane);
        ss[0] += __shfl_xor_sync(0xffffffffu, ss[0], 1);
        if ((lane & 1) == 0) {
            const int rr = warp + 8 * (lane >> 1);  // lane bits 4..1 name the row kept
            (rr < 64 ? rq : rk)[rr & 63] = 1.0f / sqrtf(ss[0] + 1e-6f);
        }
    }
    __syncthreads();
    if (kL2Norm && R_out != nullptr && tid < 128) R_out[ws * 128 + tid] = rq[tid];  // rk = rq + 64

    // ---- diagonal 16x16 blocks: a block whose decay span max_d |G_r[d] - G_{r+15}[d]| (r = its
    // first row, log2 units) is below kFastSpan goes through the tensor-core factorisation of the
    // off-diagonal blocks below (every factor lies in [2^-96, 2^96]: normal fp32/TF32, so each
    // product keeps TF32 relative precision; entries j > i are discarded by select). The others
    // (e.g. gates of -1000) take the exact elementwise path. The choice depends on the chunk's own
    // data only (deterministic, pack invariant); bit b of fastmask is block b's choice.
    constexpr float kFastSpan = 96.f;
    unsigned int fastmask = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        const float4 ga = ld4_f32(gs, at_gam(16 * b, lane)), gz = ld4_f32(gs, at_gam(16 * b + 15, lane));
        const float m = fmaxf(fmaxf(fabsf(ga.x - gz.x), fabsf(ga.y - gz.y)), fmaxf(fabsf(ga.z - gz.z), fabsf(ga.w - gz.w)));
        if (__all_sync(0xffffffffu, m < kFastSpan)) fastmask |= 1u << b;
    }

    // Exact path: elementwise with the exact exp(G_i - G_j).
    // A half-warp owns a 4x4 (i, j) sub-tile of one block; its 16 lanes split the 128 dims (8
    // each) and the partial sums are combined by recursive halving across the 16 lanes.
    // Warp-task wt covers sub-tiles 2wt, 2wt+1, both in block wt / 5.
    for (int wt = warp; wt < 20; wt += 8) {
        if ((fastmask >> (wt / 5)) & 1u) continue;
        const int gi = 2 * wt + (lane >> 4);
        const int b = gi / 10, sub = gi - 10 * b;
        const int si = (sub >= 1) + (sub >= 3) + (sub >= 6);
        const int sj = sub - (si * (si + 1)) / 2;
        const int s = lane & 7, hh = (lane >> 3) & 1;
        const int i0 = 16 * b + 4 * si, j0 = 16 * b + 4 * sj;
        // Row i0 + ii's swizzles are row i0's with ii's bits XORed in (cake_sw_bf16: 4 (si ^ ii),
        // sw_gam: 2 si ^ 4 (ii & 1)), and unit cu = 8 hh + 16 u + s is unit 8 hh + s XOR 16 u: so
        // each row's loads lie at its block row's offset XOR a constant, plus 128 ii.
        const int ob_i = i0 * 128 + (((8 * hh + s) ^ (4 * si)) << 2);
        const int ob_j = j0 * 128 + (((8 * hh + s) ^ (4 * sj)) << 2);
        const int og_i = i0 * 128 + (((8 * hh + s) ^ (2 * si)) << 2);
        const int og_j = j0 * 128 + (((8 * hh + s) ^ (2 * sj)) << 2);
        float acc[32];
#pragma unroll
        for (int x = 0; x < 32; ++x) acc[x] = 0.f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            float kj[4][4], gj[4][4];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                ld4_bf16_at(ks, (ob_j ^ (16 * jj) ^ (64 * u)) + 128 * jj, kj[jj]);
                const float4 gg = ld4_f32(gs, (og_j ^ (16 * (jj & 1)) ^ (64 * u)) + 128 * jj);
                gj[jj][0] = gg.x; gj[jj][1] = gg.y; gj[jj][2] = gg.z; gj[jj][3] = gg.w;
                if (kL2Norm) {
                    const float rn = rk[j0 + jj];
#pragma unroll
                    for (int e = 0; e < 4; ++e) kj[jj][e] *= rn;
                }
            }
#pragma unroll
            for (int ii = 0; ii < 4; ++ii) {
                float qi[4], ki[4];
                const int bo = (ob_i ^ (16 * ii) ^ (64 * u)) + 128 * ii;
                ld4_bf16_at(qs, bo, qi);
                ld4_bf16_at(ks, bo, ki);
                const float4 gg = ld4_f32(gs, (og_i ^ (16 * (ii & 1)) ^ (64 * u)) + 128 * ii);
                const float gi4[4] = {gg.x, gg.y, gg.z, gg.w};
                if (kL2Norm) {
                    const float rnq = rq[i0 + ii], rnk = rk[i0 + ii];
#pragma unroll
                    for (int e = 0; e < 4; ++e) { qi[e] *= rnq; ki[e] *= rnk; }
                }
#pragma unroll
                for (int e = 0; e < 4; ++e) {
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj) {
                        const float kje = kj[jj][e] * cake_ex2(gi4[e] - gj[jj][e]);
                        acc[4 * ii + jj] = fmaf(qi[e], kje, acc[4 * ii + jj]);
                        acc[16 + 4 * ii + jj] = fmaf(ki[e], kje, acc[16 + 4 * ii + jj]);
                    }
                }
            }
        }
        // Recursive halving over lane bits 3..0: each step keeps half of the values, so a lane
        // ends with two sums, at indices 16*b3 + 8*b2 + 4*b1 + 2*b0 + {0, 1}.
#pragma unroll
        for (int x = 0; x < 16; ++x) {
            const bool up = lane & 8;
            const float send = up ? acc[x] : acc[x + 16];
            const float keep = up ? acc[x + 16] : acc[x];
            acc[x] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
        }
#pragma unroll
        for (int x = 0; x < 8; ++x) {
            const bool up = lane & 4;
            const float send = up ? acc[x] : acc[x + 8];
            const float keep = up ? acc[x + 8] : acc[x];
            acc[x] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
        }
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            const bool up = lane & 2;
            const float send = up ? acc[x] : acc[x + 4];
            const float keep = up ? acc[x + 4] : acc[x];
            acc[x] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            const bool up = lane & 1;
            const float send = up ? acc[x] : acc[x + 2];
            const float keep = up ? acc[x + 2] : acc[x];
            acc[x] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
        }
        const int base = 16 * ((lane >> 3) & 1) + 8 * ((lane >> 2) & 1) + 4 * ((lane >> 1) & 1) + 2 * (lane & 1);
        const int p = base & 15;
        const int row = i0 + (p >> 2), col = j0 + (p & 3);
        float* dst = base < 16 ? As : Ms;
        const float mul = base < 16 ? scale : 1.f;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            const int cc = col + x;
            const bool keep = base < 16 ? cc <= row : cc < row;
            dst[at_sq(row, cc >> 2) + (cc & 3)] = keep ? mul * acc[x] : 0.f;
        }
    }

    // ---- blocks (bi, bj), bi >= bj, on tensor cores, reference row r = 16*bi:
    // (q_i exp(G_i - G_r)) . (k_j exp(G_r - G_j)); both factors <= 1 for i >= r > j (bi > bj); for
    // the diagonal block (bi == bj) the key factor is in [1, 2^kFastSpan) and j > i is masked.
    // qk_tiles computes nt (1 or 2) blocks (bi, bj0), (bi, bj0 + 1) of one row block: the row
    // factors (q_i, k_i against G_r) are formed once for both; each block's products and their
    // order are those of a block computed alone.
    // Rows 16 J + g and 16 J + g + 8 keep the swizzles of rows g and g + 8 (both swizzles repeat
    // every 16 rows), and unit 4 kp + t of a row lies at its unit t XOR 16 kp: so every row load
    // of the k-loop is one of these thread offsets plus 2048 J, XOR 16 kp.
    const int qk_ga = at_gam(g, t), qk_gb = at_gam(g + 8, t);
    const int qk_ba = cake_at_bf16(g, t), qk_bb = cake_at_bf16(g + 8, t);
    auto qk_tiles = [&](const int bi, const int bj0, const int nt) {
        const int r = 16 * bi;
        const int ia = r + g, ib = r + g + 8;
        const int o_gr = at_gam(r, t), o_ga = qk_ga + 2048 * bi, o_gb = qk_gb + 2048 * bi;
        const int o_ba = qk_ba + 2048 * bi, o_bb = qk_bb + 2048 * bi;
        const int o_gja = qk_ga + 2048 * bj0, o_gjb = qk_gb + 2048 * bj0;
        const int o_bja = qk_ba + 2048 * bj0, o_bjb = qk_bb + 2048 * bj0;
        float aq[2][2][4], am[2][2][4];  // [block][n][x]
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int x = 0; x < 4; ++x) { aq[u][n][x] = 0.f; am[u][n][x] = 0.f; }
        const float rqa = kL2Norm ? rq[ia] : 1.f, rqb = kL2Norm ? rq[ib] : 1.f;
        const float rka = kL2Norm ? rk[ia] : 1.f, rkb = kL2Norm ? rk[ib] : 1.f;
#pragma unroll 2
        for (int kp = 0; kp < 8; ++kp) {
            const int xk = 16 * kp;
            const float4 gr = ld4_f32(gs, o_gr ^ xk);
            const float4 g_a = ld4_f32(gs, o_ga ^ xk), g_b = ld4_f32(gs, o_gb ^ xk);
            float qa[4], qb[4], ka[4], kb[4];
            ld4_bf16_at(qs, o_ba ^ xk, qa); ld4_bf16_at(qs, o_bb ^ xk, qb);
            ld4_bf16_at(ks, o_ba ^ xk, ka); ld4_bf16_at(ks, o_bb ^ xk, kb);
            const float grv[4] = {gr.x, gr.y, gr.z, gr.w};
            const float gav[4] = {g_a.x, g_a.y, g_a.z, g_a.w}, gbv[4] = {g_b.x, g_b.y, g_b.z, g_b.w};
            unsigned int fq_a[4], fq_b[4], fk_a[4], fk_b[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float ea = cake_ex2(gav[e] - grv[e]), eb = cake_ex2(gbv[e] - grv[e]);
                fq_a[e] = cake_tf32(qa[e] * rqa * ea);
                fq_b[e] = cake_tf32(qb[e] * rqb * eb);
                fk_a[e] = cake_tf32(ka[e] * rka * ea);
                fk_b[e] = cake_tf32(kb[e] * rkb * eb);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                if (u < nt) {
                    const int ja = 16 * (bj0 + u) + g, jb = ja + 8;
                    const float rja = kL2Norm ? rk[ja] : 1.f, rjb = kL2Norm ? rk[jb] : 1.f;
                    const float4 g_ja = ld4_f32(gs, (o_gja ^ xk) + 2048 * u), g_jb = ld4_f32(gs, (o_gjb ^ xk) + 2048 * u);
                    float kja[4], kjb[4];
                    ld4_bf16_at(ks, (o_bja ^ xk) + 2048 * u, kja); ld4_bf16_at(ks, (o_bjb ^ xk) + 2048 * u, kjb);
                    const float gjav[4] = {g_ja.x, g_ja.y, g_ja.z, g_ja.w}, gjbv[4] = {g_jb.x, g_jb.y, g_jb.z, g_jb.w};
                    unsigned int fj_a[4], fj_b[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        fj_a[e] = cake_tf32(kja[e] * rja * cake_ex2(grv[e] - gjav[e]));
                        fj_b[e] = cake_tf32(kjb[e] * rjb * cake_ex2(grv[e] - gjbv[e]));
                    }
#pragma unroll
                    for (int hs = 0; hs < 2; ++hs) {
                        const int e0 = 2 * hs, e1 = 2 * hs + 1;
                        cake_mma_tf32(aq[u][0], fq_a[e0], fq_b[e0], fq_a[e1], fq_b[e1], fj_a[e0], fj_a[e1]);
                        cake_mma_tf32(aq[u][1], fq_a[e0], fq_b[e0], fq_a[e1], fq_b[e1], fj_b[e0], fj_b[e1]);
                        cake_mma_tf32(am[u][0], fk_a[e0], fk_b[e0], fk_a[e1], fk_b[e1], fj_a[e0], fj_a[e1]);
                        cake_mma_tf32(am[u][1], fk_a[e0], fk_b[e0], fk_a[e1], fk_b[e1], fj_b[e0], fj_b[e1]);
                    }
                }
            }
        }
        // (ia, col) lies at (row g, column 2 t)'s offset + 1024 bi, XOR 16 bj ^ 8 n (sw_sq repeats
        // every 8 rows and only XORs column bits 2-4); (ib, col) 512 past it.
        const int o_st = at_sq(g, t >> 1) + 2 * (t & 1) + 1024 * bi;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            if (u < nt) {
                const int bj = bj0 + u;
                const bool dg = bi == bj;
                const int o_bj = o_st ^ (16 * bj);
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const int col = 16 * bj + 8 * n + 2 * t;
                    float* pa = As + (o_bj ^ (8 * n));
                    float* pb = pa + 512;
                    pa[0] = !dg || col <= ia ? scale * aq[u][n][0] : 0.f;
                    pa[1] = !dg || col + 1 <= ia ? scale * aq[u][n][1] : 0.f;
                    pb[0] = !dg || col <= ib ? scale * aq[u][n][2] : 0.f;
                    pb[1] = !dg || col + 1 <= ib ? scale * aq[u][n][3] : 0.f;
                    float* ma = Ms + (o_bj ^ (8 * n));
                    float* mb = ma + 512;
                    ma[0] = !dg || col < ia ? am[u][n][0] : 0.f;
                    ma[1] = !dg || col + 1 < ia ? am[u][n][1] : 0.f;
                    mb[0] = !dg || col < ib ? am[u][n][2] : 0.f;
                    mb[1] = !dg || col + 1 < ib ? am[u][n][3] : 0.f;
                }
            }
        }
    };
    // The ten blocks by row block, two to a warp where they share one: warp 0 (0,0); 1 (1,0)
    // (1,1); 2 (2,0) (2,1); 3 (2,2); 4 (3,0) (3,1); 5 (3,2) (3,3). A diagonal block is computed
    // here only when it is fast (else the exact path above wrote it). Warps 6-7: Qg.
    if (warp < 6) {
        const int bi = warp == 0 ? 0 : warp == 1 ? 1 : warp < 4 ? 2 : 3;
        const int bj0 = warp == 3 || warp == 5 ? 2 : 0;
        const int blocks = warp == 0 || warp == 3 ? 1 : 2;
        // the run's last block, when it is the diagonal one and not fast, is left out
        const bool slow_diag = bj0 + blocks - 1 == bi && !((fastmask >> bi) & 1u);
        const int nt = blocks - (slow_diag ? 1 : 0);
        if (nt > 0) qk_tiles(bi, bj0, nt);
    }
    if (warp >= 6) {
        // Qg = scale * q * exp(G): one row per warp instruction, 16-byte coalesced stores.
        float* out = Qg + ws * 8192;
        for (int idx = tid - 192; idx < 64 * 32; idx += 64) {
            const int r = idx >> 5, c4 = idx & 31;
            float x[4];
            ld4_bf16(qs, r, c4, x);
            const float4 gg = ld4_f32(gs, at_gam(r, c4));
            const float m = kL2Norm ? scale * rq[r] : scale;
            float4 y;
            y.x = rtf32(m * x[0] * cake_ex2(gg.x));
            y.y = rtf32(m * x[1] * cake_ex2(gg.y));
            y.z = rtf32(m * x[2] * cake_ex2(gg.z));
            y.w = rtf32(m * x[3] * cake_ex2(gg.w));
            cake_st_global_v4(out + out_qg(r, 4 * c4), y);
        }
    }
    __syncthreads();

    // ---- warps 0-1: inverses of the four diagonal blocks of (I + M), one column per thread,
    // by forward substitution (x_k = 0 above the column's diagonal, so the sums run uniformly
    // from 0 and add exact zeros). Warps 2-7: write out Aqk, Kd and gl meanwhile; the inverses
    // end first, so warps 0-1 then take Kd's last tasks (kKdSplit: 6 of the 64 measured -0.5 %
    // raw off, -1.2 % g off, -0.7 % raw fused; 10 of them -0.1 / -0.2 / -1.1 %: docs/notes.md,
    // session 36).
    // Kd transposed: a warp writes two whole 256-byte rows (dims) of it per task.
    constexpr int kKdSplit = 58;
    auto kd_task = [&](const int task) {
        const int d = 2 * task + (lane >> 4), r0 = 4 * (lane & 15);
        const float gend = gs[at_gam(L - 1, d >> 2) + (d & 3)];
        float y[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = r0 + e;
            const float kv = cake_ld1_bf16(ks, r, d) * (kL2Norm ? rk[r] : 1.f);
            y[e] = rtf32(kv * cake_ex2(gend - gs[at_gam(r, d >> 2) + (d & 3)]));
        }
        cake_st_global_v4(Kd + ws * 8192 + out_kd(d, r0), make_float4(y[0], y[1], y[2], y[3]));
    };
    float tcol[16];
    if (warp < 2) {
        const int b = tid >> 4, cc = tid & 15;
        // row 16 b + i's units 4 b .. 4 b + 3 lie at 1040 b XOR (4 sw_sq(i) ^ column) plus 64 i
        // (sw_sq repeats every 8 rows and XORs column bits 2-4 only)
        const int m0 = 1040 * b;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            if (i == 0) {
                tcol[0] = cc == 0 ? 1.f : 0.f;
            } else {
                const int row = 16 * b + i;
                float s0 = 0.f, s1 = 0.f;
#pragma unroll
                for (int kk = 0; kk < i; kk += 4) {
                    const float4 m4 = ld4_f32(Ms, (m0 ^ kk ^ (4 * sw_sq(i))) + 64 * i);
                    const float mv[4] = {m4.x, m4.y, m4.z, m4.w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        if (kk + e < i) {
                            if (e & 1) s1 = fmaf(mv[e], tcol[kk + e], s1);
                            else s0 = fmaf(mv[e], tcol[kk + e], s0);
                        }
                    }
                }
                tcol[i] = i == cc ? 1.f : (i > cc ? -(bs[row] * (s0 + s1)) : 0.f);
            }
        }
        for (int task = kKdSplit + warp; task < 64; task += 2) kd_task(task);
    } else {
        float* aout = Aqk + ws * 4096;
        for (int idx = tid - 64; idx < 64 * 16; idx += 192) {
            const int r = idx >> 4, c4 = idx & 15;
            const float4 a = ld4_f32(As, at_sq(r, c4));
            float4 y;
            y.x = 4 * c4 + 0 <= r ? rtf32(a.x) : 0.f;
            y.y = 4 * c4 + 1 <= r ? rtf32(a.y) : 0.f;
            y.z = 4 * c4 + 2 <= r ? rtf32(a.z) : 0.f;
            y.w = 4 * c4 + 3 <= r ? rtf32(a.w) : 0.f;
            cake_st_global_v4(aout + out_aqk(r, 4 * c4), y);
        }
        for (int task = warp - 2; task < kKdSplit; task += 6) kd_task(task);
        if (tid >= 128) {
            const int d = tid - 128;
            gl[ws * 128 + d] = cake_ex2(gs[at_gam(L - 1, d >> 2) + (d & 3)]);
        }
    }
    __syncthreads();
    if (warp < 2) {
        const int b = tid >> 4, cc = tid & 15;
#pragma unroll
        for (int i = 0; i < 16; ++i) As[((1040 * b + cc) ^ (4 * sw_sq(i))) + 64 * i] = tcol[i];  // (16 b + i, 16 b + cc)
    }
    __syncthreads();

    // ---- off-diagonal blocks of T in two levels ([[A, 0], [C, D]]^-1 has the lower-left block
    // -D^-1 C A^-1): (1) the 16 x 16 blocks (1,0) and (3,2): X = M_ab T_bb, T_ab = -T_aa X;
    // (2) the lower-left 32 x 32 block: X = M[32:64, 0:32] T[0:32, 0:32], then
    // T[32:64, 0:32] = -T[32:64, 32:64] X. With M = diag(beta) Akk, X = diag(beta) (Akk T), as
    // kda_bwd_chunk forms it. Four barriers and dependent chains of 16 + 16 + 32 + 32 products,
    // where the blocks' distance order took six barriers and 144 (ablation, session 9: that
    // loop was 13 % of the kernel). X lives in M's unused upper blocks: (0,1) and (2,3) for
    // level 1, rows 0-31 x columns 32-63 for level 2.
    {
        const bool lv1 = tid < 128;
        const int p = (tid >> 6) & 1, rr = (tid >> 2) & 15, cg = tid & 3;
        const int a = 2 * p + 1, b = 2 * p;
        if (lv1) {
            const int row = 16 * a + rr;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int s4 = 4 * b; s4 < 4 * a; ++s4) fma_row4(x, Ms, row, s4, As, 4 * s4, 4 * b + cg);
            const float br = bs[row];
            *reinterpret_cast<float4*>(Ms + at_sq(16 * b + rr, 4 * a + cg)) =
                make_float4(br * x.x, br * x.y, br * x.z, br * x.w);
        }
        __syncthreads();
        if (lv1) {
            const int row = 16 * a + rr;
            float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int q4 = 0; q4 < 4; ++q4) fma_row4(y, As, row, 4 * a + q4, Ms, 16 * b + 4 * q4, 4 * a + cg);
            *reinterpret_cast<float4*>(As + at_sq(row, 4 * b + cg)) = make_float4(-y.x, -y.y, -y.z, -y.w);
        }
        __syncthreads();
        // level 2: thread (r2, c2) owns row 32 + r2 and columns 4 c2..4 c2+3 of the block. T[s][c]
        // is zero for s < 16 <= c (its upper blocks hold scratch, so the sums skip them): columns
        // of block 1 start at row block 1; rows of block 2 stop at column block 2.
        const int r2 = tid >> 3, c2 = tid & 7;
        const int row2 = 32 + r2;
        {
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int s4 = 0; s4 < 8; ++s4)
                if (s4 >= 4 * (c2 >> 2)) fma_row4(x, Ms, row2, s4, As, 4 * s4, c2);
            const float br = bs[row2];
            *reinterpret_cast<float4*>(Ms + at_sq(r2, 8 + c2)) = make_float4(br * x.x, br * x.y, br * x.z, br * x.w);
        }
        __syncthreads();
        {
            float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
            const int q4end = 4 * ((r2 >> 4) + 1);  // warp-uniform: a warp's rows r2 share r2 >> 4
#pragma unroll
            for (int q4 = 0; q4 < 8; ++q4)
                if (q4 < q4end) fma_row4(y, As, row2, 8 + q4, Ms, 4 * q4, 8 + c2);
            *reinterpret_cast<float4*>(As + at_sq(row2, c2)) = make_float4(-y.x, -y.y, -y.z, -y.w);
        }
        __syncthreads();
    }

    cake_cp_async_wait<0>();  // v's tile, for every thread's B fragments below
    __syncthreads();

    // ---- [W | U] = T [diag(beta) K exp(G) | diag(beta) V], TF32 on tensor cores. Warp w owns 16
    // columns of W (n-tiles 0, 1) and the same 16 of U (n-tiles 2, 3), all 64 rows, so that every
    // warp forms the same mix of B fragments (W's carry an exp2 each, U's none); B fragments are
    // formed on the fly.
    {
        const int cb = 16 * warp;
        // B element (token 16 kp + 4 t + e, dim cb + 8 (ni & 1) + g): the token's swizzles depend
        // on (e, t) only (cake_sw_bf16 on (t ^ e) & 3, sw_gam on t and e & 1), so it lies at
        // (kb0 ^ 16 e) + 128 e + 2048 kp + 8 (ni & 1) in the bf16 tiles and at
        // (gb0 ^ 16 (e & 1) ^ 8 (ni & 1)) + 128 e + 2048 kp in Gamma (kb0, gb0: token 4 t, dim
        // cb + g), where recomputing them per element cost ~300 instructions.
        const int kb0 = cake_at_bf16(4 * t, (cb + g) >> 2) + (g & 3);
        const int gb0 = at_gam(4 * t, (cb + g) >> 2) + (g & 3);
        const int sq0 = at_sq(g, t);
        float acc[4][4][4];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int x = 0; x < 4; ++x) acc[mi][ni][x] = 0.f;
#pragma unroll
        for (int kp = 0; kp < 4; ++kp) {
            unsigned int bf[4][4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int tok = 16 * kp + 4 * t + e;
                const float mu = bs[tok], mw = kL2Norm ? mu * rk[tok] : mu;
                const int ke = (kb0 ^ (16 * e)) + 128 * e + 2048 * kp;
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    const int kd = ke + 8 * (ni & 1);
                    if (ni < 2) {
                        float val = mw * cake_bf16_to_f32(ks[kd]);
                        val *= cake_ex2(gs[(gb0 ^ (16 * (e & 1)) ^ (8 * (ni & 1))) + 128 * e + 2048 * kp]);
                        bf[ni][e] = cake_tf32(val);
                    } else {
                        bf[ni][e] = cake_tf32(mu * cake_bf16_to_f32(vs[kd]));
                    }
                }
            }
            // rows 16 mi + g, + 8 share row g's swizzle: at_sq(g, t) ^ 16 kp, plus 1024 mi (+ 512)
            const int sa = sq0 ^ (16 * kp);
#pragma unroll
            for (int mi = kp; mi < 4; ++mi) {
                const float4 ta = ld4_f32(As, sa + 1024 * mi);
                const float4 tb = ld4_f32(As, sa + 1024 * mi + 512);
                const unsigned int a0 = cake_tf32(ta.x), a1 = cake_tf32(tb.x), a2 = cake_tf32(ta.y), a3 = cake_tf32(tb.y);
                const unsigned int a4 = cake_tf32(ta.z), a5 = cake_tf32(tb.z), a6 = cake_tf32(ta.w), a7 = cake_tf32(tb.w);
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    cake_mma_tf32(acc[mi][ni], a0, a1, a2, a3, bf[ni][0], bf[ni][1]);
                    cake_mma_tf32(acc[mi][ni], a4, a5, a6, a7, bf[ni][2], bf[ni][3]);
                }
            }
        }
        // Rows 16 mi + g and + 8 lie a constant step from row g in either layout (both repeat
        // every 8 rows), so one offset per n-tile: with one per element the g program spilled.
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const bool isW = ni < 2;
            const int col = cb + 8 * (ni & 1) + 2 * t;
            float* const out = (isW ? W : U) + ws * 8192 + (isW ? out_w(g, col) : out_u(g, col));
            const int step8 = isW ? out_w(8, 0) - out_w(0, 0) : out_u(8, 0) - out_u(0, 0);
            const int step16 = isW ? out_w(16, 0) - out_w(0, 0) : out_u(16, 0) - out_u(0, 0);
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                float4 x = make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]);
                if (isW) { x.x = rtf32(x.x); x.y = rtf32(x.y); x.z = rtf32(x.z); x.w = rtf32(x.w); }
                *reinterpret_cast<float2*>(out + mi * step16) = make_float2(x.x, x.y);
                *reinterpret_cast<float2*>(out + mi * step16 + step8) = make_float2(x.z, x.w);
            }
        }
    }
    if (TA_out != nullptr) {  // T on and below the diagonal, Akk (M's strictly lower part) turned above it
        float* ta = TA_out + ws * 4096;
#pragma unroll 1
        for (int idx = tid; idx < 64 * 16; idx += 256) {
            const int r = idx >> 4, c4 = idx & 15;
            // TA[r][4 c4 + e] = Akk[63 - r][63 - 4 c4 - e] above the diagonal: M's float4 at
            // (63 - r, 15 - c4), reversed
            const float4 a = 4 * c4 <= r ? ld4_f32(As, at_sq(r, c4)) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 m = 4 * c4 + 3 > r ? ld4_f32(Ms, at_sq(63 - r, 15 - c4)) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 y = make_float4(4 * c4 <= r ? a.x : m.w, 4 * c4 + 1 <= r ? a.y : m.z,
                                         4 * c4 + 2 <= r ? a.z : m.y, 4 * c4 + 3 <= r ? a.w : m.x);
            cake_st_global_v4(ta + r * 64 + 4 * c4, y);
        }
    }
}
