// twin of generators/include/cake/mma.cuh sha256:af30cbc1ea00a662380b4b9867d5b24384a65c89275ca5165a06b01ea3b40222
#pragma once

// cvt.rn.tf32.f32
__device__ __forceinline__ unsigned int cake_tf32(float x) { return ::emu::cvt_rn_tf32(x); }

// cvt.rna.tf32.f32
__device__ __forceinline__ unsigned int cake_tf32_rna(float x) { return ::emu::cvt_rna_tf32(x); }

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = C = d (see emu::op_mma).
__device__ __forceinline__ void cake_mma_tf32(float (&d)[4], unsigned int a0, unsigned int a1,
                                              unsigned int a2, unsigned int a3, unsigned int b0,
                                              unsigned int b1) {
    ::emu::mma_tf32(d, a0, a1, a2, a3, b0, b1);
}
