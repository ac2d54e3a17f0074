#pragma once
// KDA gate activations, shared by the forward gate stage and (later) its backward.

__device__ __forceinline__ float cake_bf16_bits_to_float(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// softplus with torch's threshold: above 20 it is the identity to fp32 rounding.
__device__ __forceinline__ float cake_softplus(float x) {
    return x > 20.f ? x : log1pf(expf(x));
}

__device__ __forceinline__ float cake_sigmoid(float x) {
    return 1.f / (1.f + expf(-x));
}

// g = -exp(A_log) * softplus(x + dt_bias)
__device__ __forceinline__ float cake_gate_softplus(float x, float a_log, float dt_bias) {
    return -expf(a_log) * cake_softplus(x + dt_bias);
}

// g = lower_bound * sigmoid(exp(A_log) * (x + dt_bias)), with -5 <= lower_bound < 0
__device__ __forceinline__ float cake_gate_sigmoid(float x, float a_log, float dt_bias, float lower_bound) {
    return lower_bound * cake_sigmoid(expf(a_log) * (x + dt_bias));
}
