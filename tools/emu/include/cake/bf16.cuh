// twin of generators/include/cake/bf16.cuh sha256:d69b086995476e4555cfca56a33b2b540b9a4c17083943ff8f5337af9d08025a
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

__device__ __forceinline__ unsigned short cake_f32_to_bf16(float x) {
    return (unsigned short)(cake_pack_bf16x2(x, 0.f) & 0xffffu);
}
