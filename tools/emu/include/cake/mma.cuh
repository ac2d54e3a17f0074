// twin of generators/include/cake/mma.cuh sha256:1b12597d740bda6a942f43a3de481d6b9347e74b3da31a2907d26b2081bcc0c7
#pragma once

// cvt.rn.tf32.f32
__device__ __forceinline__ unsigned int cake_tf32(float x) { return ::emu::cvt_rn_tf32(x); }

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = C = d (see emu::op_mma).
__device__ __forceinline__ void cake_mma_tf32(float (&d)[4], unsigned int a0, unsigned int a1,
                                              unsigned int a2, unsigned int a3, unsigned int b0,
                                              unsigned int b1) {
    ::emu::mma_tf32(d, a0, a1, a2, a3, b0, b1);
}
