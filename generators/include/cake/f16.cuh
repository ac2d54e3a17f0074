#pragma once

// fp16 conversions and the 16-bit SIMD max: kda's 16-bit chunk-start states (cake/state16.cuh)
// and cake/mma_f16.cuh's tensor-core operands.

// Two floats to one f16x2 register, round to nearest even: lo in bits 0-15 (the lower k or column
// index of a fragment pair, the lower address in memory), hi in bits 16-31. Out of range: +-inf;
// below 2^-14: subnormal.
__device__ __forceinline__ unsigned int cake_f16x2(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The two halves of an f16x2 register as floats (exact).
__device__ __forceinline__ float2 cake_f16x2_to_f32(unsigned int h) {
    float lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi) : "r"(h));
    return make_float2(lo, hi);
}

// The larger of each 16-bit lane, unsigned (max.u16x2: sm_90+, one instruction).
__device__ __forceinline__ unsigned int cake_max_u16x2(unsigned int a, unsigned int b) {
    unsigned int r;
    asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
