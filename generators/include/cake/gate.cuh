#pragma once
#include "cake/fmath.cuh"
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
