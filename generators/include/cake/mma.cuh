#pragma once

// Round to nearest, ties to even: the same half-ulp bound the TF32 error budget in
// docs/kernel-notes.md assumes; feeding raw fp32 bits to the tensor core would truncate instead.
// cvt.rn (PTX 7.8, sm_90+: every arch cake builds) is one native instruction (F2FP.TF32); cvt.rna
// was three (an Inf/NaN guard, an add, a mask), ~10 % of kda_bwd_chunk's instructions.
__device__ __forceinline__ unsigned int cake_tf32(float x) {
    unsigned int r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// x = hi + lo, both TF32 (each cake_tf32): |x - hi - lo| <= 2^-22 |x|. Three tensor-core products
// (hi hi, hi lo, lo hi) of two split operands then carry ~fp32 precision ("3xTF32").
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

// D += A(16x8, row) * B(8x8, col), fp32 accumulate. Fragment ownership, g = lane / 4, t = lane % 4:
// a0 (g, k0) a1 (g+8, k0) a2 (g, k1) a3 (g+8, k1); b0 (k0, g) b1 (k1, g);
// d0,d1 (g, 2t..2t+1) d2,d3 (g+8, 2t..2t+1). Callers choose the pair (k0, k1) a lane covers; any
// bijection onto the 8 reduction slots is valid as long as A and B use the same one.
__device__ __forceinline__ void cake_mma_tf32(float (&d)[4], unsigned int a0, unsigned int a1,
                                              unsigned int a2, unsigned int a3, unsigned int b0,
                                              unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
