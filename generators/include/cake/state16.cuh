#pragma once

#include "cake/f16.cuh"

// kda's chunk-start states in 16 bits (kda_fwd_state / _local write them, kda_bwd_chunk reads them;
// docs/notes.md, session 20). One record per (chunk, head), CAKE_S16_BYTES bytes:
//   fp16 [128 keys d][128 values v]  TF32(S[d][v]) * 2^(141 - E), exact: TF32 (cvt.rn, what every
//                                    product of S rounds it to) keeps fp16's 11 significant bits;
//                                    within each group of 16 values (32 bytes) value 16 G + r sits
//                                    at position 2 (r & 7) + (r >> 3), the order
//                                    in which kda_fwd_state's wgmma accumulators hold them (a
//                                    lane's rows g and g + 8 make one 4-byte word)
//   u8 E [8 groups][128 keys d]      at CAKE_S16_EXP: group v / 16; E = max(15, the biased fp32
//                                    exponent of the group's largest |TF32(S)|), so that the
//                                    largest scaled value lies in [2^14, 2^15)
// Half the bytes of fp32 states, and the reader gets back exactly the TF32 values its tensor-core
// products use; only its fp32 use of S_c (dgl) sees 11 significant bits instead of 24.
constexpr int CAKE_S16_BYTES = 33792;
constexpr int CAKE_S16_EXP = 32768;

// The exponent byte E of a group from its largest |value| m (m >= 0): max(15, m's biased exponent).
__device__ __forceinline__ unsigned int cake_s16_exp(float m) {
    const unsigned int e = __float_as_uint(m) >> 23;
    return e < 15u ? 15u : e;
}
// The writer's factor 2^(141 - E) and the reader's 2^(E - 141) (E in [15, 255]: both normal floats).
__device__ __forceinline__ float cake_s16_down(unsigned int e) { return __uint_as_float((268u - e) << 23); }
__device__ __forceinline__ float cake_s16_up(unsigned int e) { return __uint_as_float((e - 14u) << 23); }
