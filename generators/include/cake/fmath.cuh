#pragma once

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
