// twin of generators/include/cake/f16.cuh sha256:13ca06813a96662bf04cbe94f0267cc1ae2ddfc7aaa4033a083da4449ae35a28
#pragma once

// cvt.rn.f16x2.f32: lo in bits 0-15, hi in bits 16-31 (see emu::cvt_rn_f16).
__device__ __forceinline__ unsigned int cake_f16x2(float lo, float hi) {
    return ::emu::cvt_rn_f16(lo) | (::emu::cvt_rn_f16(hi) << 16);
}

// cvt.f32.f16 of both halves (see emu::f16_value).
__device__ __forceinline__ float2 cake_f16x2_to_f32(unsigned int h) {
    return make_float2(::emu::f16_value(h & 0xffffu), ::emu::f16_value(h >> 16));
}

// max.u16x2.
__device__ __forceinline__ unsigned int cake_max_u16x2(unsigned int a, unsigned int b) {
    const unsigned int lo = (a & 0xffffu) > (b & 0xffffu) ? a & 0xffffu : b & 0xffffu;
    const unsigned int hi = (a >> 16) > (b >> 16) ? a >> 16 : b >> 16;
    return lo | (hi << 16);
}
