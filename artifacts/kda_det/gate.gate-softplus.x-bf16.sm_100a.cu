// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/gate.cu.j2
// record: kda_det/gate.gate-softplus.x-bf16  program: kda_det.gate.gate-softplus.x-bf16.sm_100a
// identity: sha256:206b714c45022a14f297f86d98a7b668af4e7933205ca48672fd6da53cddfa0f
// ---- begin cake/gate.cuh ----
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

typedef unsigned short x_t;

__device__ __forceinline__ float load_x(const x_t* p) {
    return cake_bf16_bits_to_float(*p);
}

extern "C" __global__ void __launch_bounds__(128) kda_gate(
    const x_t* __restrict__ x, const float* __restrict__ A_log, const float* __restrict__ dt_bias,
    float* __restrict__ G, const int* __restrict__ chunks, int H, float lower_bound)
{
    const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int start = chunks[2 * c], len = chunks[2 * c + 1];
    const float ea = expf(A_log[h]);
    const float bias = dt_bias[h * 128 + d];
    // Over the chunk's rows in groups of 8 (the order and roundings kda_fwd_chunk's Gamma uses, so
    // the bits are the same): row r of group w is off_w + local_r, local_r the group's rows up to
    // r summed in order, off_w the earlier groups' totals summed in order. The order is fixed, so
    // every run gives the same bits.
    float off = 0.f;
    for (int r0 = 0; r0 < len; r0 += 8) {
        float acc = 0.f;
        for (int r = r0; r < r0 + 8 && r < len; ++r) {
            const long long i = ((long long)(start + r) * H + h) * 128 + d;
            acc = cake_gamma_step<1>(acc, load_x(x + i), bias, ea, lower_bound);
            G[i] = __fadd_rn(off, acc);
        }
        off = __fadd_rn(off, acc);
    }
}
