// twin of generators/include/cake/mma_f16.cuh sha256:22518983c6bd4277ac05ae0d326d27f64cb4544fd0af9414459a8d7030ea6243
#pragma once

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, D = C = d (see emu::op_mma_f16).
__device__ __forceinline__ void cake_mma_f16(float (&d)[4], unsigned int a0, unsigned int a1,
                                             unsigned int a2, unsigned int a3, unsigned int b0,
                                             unsigned int b1) {
    ::emu::mma_f16(d, a0, a1, a2, a3, b0, b1);
}
