#pragma once

#define CAKE_LOG2E 1.4426950408889634f

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
