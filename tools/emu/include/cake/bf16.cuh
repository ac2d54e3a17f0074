// twin of generators/include/cake/bf16.cuh sha256:5611fca834c5363619dca9e3376b94bcbce3191606d0346a19b57aabac2bdc5d
#pragma once

__device__ __forceinline__ float cake_bf16_lo(unsigned int packed) {
    return __uint_as_float(packed << 16);
}

__device__ __forceinline__ float cake_bf16_hi(unsigned int packed) {
    return __uint_as_float(packed & 0xffff0000u);
}

__device__ __forceinline__ float cake_bf16_to_f32(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// cvt.rn.bf16x2.f32 d, hi, lo: round to nearest even, hi in the upper half.
__device__ __forceinline__ unsigned int cake_pack_bf16x2(float lo, float hi) {
    return (::emu::cvt_rn_bf16(hi) << 16) | ::emu::cvt_rn_bf16(lo);
}
