// twin of generators/include/cake/fmath.cuh sha256:3b4ed4b34329bc04ab18c231d1629a9876d88468b7f3a8d3b96f621c389af8dd
#pragma once

#define CAKE_LOG2E 1.4426950408889634f

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
