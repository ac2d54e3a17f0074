// twin of generators/include/cake/fmath.cuh sha256:e1442e851ef6663175b6daf41dee1db07c9bd08bc55fd46ea5ebcd95a3d570b0
#pragma once

#define CAKE_LOG2E 1.4426950408889634f
#define CAKE_LN2 0.6931471805599453f

// ex2.approx.ftz.f32 (see emu::ex2_approx_ftz: exp2f, subnormals flushed)
__device__ __forceinline__ float cake_ex2(float x) { return ::emu::ex2_approx_ftz(x); }

__device__ __forceinline__ float cake_sigmoid_ex2(float x) {
    return 1.0f / (1.0f + cake_ex2(-x * CAKE_LOG2E));
}

// rcp.approx.ftz.f32 (the GPU's is within about 1 ulp of this)
__device__ __forceinline__ float cake_rcp(float x) { return 1.0f / x; }

__device__ __forceinline__ float cake_sigmoid_fast(float x) {
    return cake_rcp(1.0f + cake_ex2(-x * CAKE_LOG2E));
}

// lg2.approx.ftz.f32 (the GPU's is within about 2^-22 of log2f; it flushes subnormal inputs)
__device__ __forceinline__ float cake_lg2(float x) { return log2f(x); }
