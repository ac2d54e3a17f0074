// twin of generators/include/cake/mma.cuh sha256:81b7201c2effd50defb1a05196ed57477c5f8bf48e7b5ec6b94bd79b6dbfc8aa
#pragma once

// cvt.rn.tf32.f32
__device__ __forceinline__ unsigned int cake_tf32(float x) { return ::emu::cvt_rn_tf32(x); }

// x = hi + lo, both TF32 (as the GPU header: two cvt.rn).
__device__ __forceinline__ void cake_split_tf32(float x, unsigned int& hi, unsigned int& lo) {
    hi = cake_tf32(x);
    lo = cake_tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ void cake_split_tf32(float x, float& hi, float& lo) {
    unsigned int h, l;
    cake_split_tf32(x, h, l);
    hi = __uint_as_float(h);
    lo = __uint_as_float(l);
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = C = d (see emu::op_mma).
__device__ __forceinline__ void cake_mma_tf32(float (&d)[4], unsigned int a0, unsigned int a1,
                                              unsigned int a2, unsigned int a3, unsigned int b0,
                                              unsigned int b1) {
    ::emu::mma_tf32(d, a0, a1, a2, a3, b0, b1);
}
