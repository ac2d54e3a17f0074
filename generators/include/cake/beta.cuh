#pragma once
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
