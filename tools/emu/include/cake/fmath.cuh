// twin of generators/include/cake/fmath.cuh sha256:298e4132083ea549d16838b1a85f17871471fe19c05c5173339c1fec94457bc5
#pragma once

#define CAKE_LOG2E 1.4426950408889634f

// ex2.approx.ftz.f32 (see emu::ex2_approx_ftz: exp2f, subnormals flushed)
__device__ __forceinline__ float cake_ex2(float x) { return ::emu::ex2_approx_ftz(x); }

__device__ __forceinline__ float cake_sigmoid_ex2(float x) {
    return 1.0f / (1.0f + cake_ex2(-x * CAKE_LOG2E));
}
