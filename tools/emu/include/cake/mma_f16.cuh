// twin of generators/include/cake/mma_f16.cuh sha256:aaf7712879df0f2bb3818a47ea00c004597b401b2d87beefeba17f4508cc7d64
#pragma once

// cvt.rn.f16x2.f32: lo in bits 0-15, hi in bits 16-31 (see emu::cvt_rn_f16).
__device__ __forceinline__ unsigned int cake_f16x2(float lo, float hi) {
    return ::emu::cvt_rn_f16(lo) | (::emu::cvt_rn_f16(hi) << 16);
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, D = C = d (see emu::op_mma_f16).
__device__ __forceinline__ void cake_mma_f16(float (&d)[4], unsigned int a0, unsigned int a1,
                                             unsigned int a2, unsigned int a3, unsigned int b0,
                                             unsigned int b1) {
    ::emu::mma_f16(d, a0, a1, a2, a3, b0, b1);
}
