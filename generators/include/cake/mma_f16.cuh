#pragma once

#include "cake/f16.cuh"

// fp16 tensor-core operands (docs/notes.md, session 17, section 7): fp16 keeps TF32's 11
// significant bits, so a value scaled by a power of two into fp16's normal range is the same
// value the TF32 path multiplies, and m16n8k16 does twice the multiply-adds of m16n8k8 tf32 per
// instruction with two operands a register. tests/test_mma_f16_probe_gpu.py checks the fragment
// map and the conversion on the H200, tests/test_mma_f16_emu.py the CPU twin against the same
// references. No program uses these: kda_bwd_chunk with every mma on them measured -1.8 %.

// D += A(16x16, row) * B(16x8, col), fp16 operands, fp32 accumulate. g = lane / 4, t = lane % 4:
// a0 (g, 2t..2t+1) a1 (g+8, 2t..2t+1) a2 (g, 2t+8..2t+9) a3 (g+8, 2t+8..2t+9);
// b0 (k = 2t..2t+1, n = g) b1 (k = 2t+8..2t+9, n = g), the lower index in the low half;
// d0,d1 (g, 2t..2t+1) d2,d3 (g+8, 2t..2t+1): cake_mma_tf32's accumulator map.
__device__ __forceinline__ void cake_mma_f16(float (&d)[4], unsigned int a0, unsigned int a1,
                                             unsigned int a2, unsigned int a3, unsigned int b0,
                                             unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
