#pragma once
// The [64][128] bf16 tiles of kda_fwd_chunk and kda_bwd_chunk (q, k, v; dO in bwd_chunk), one
// layout in both: a row's 4-element (8-byte) units u = 0..31 XOR-swizzled by cake_sw_bf16(r),
// which reads r's low 4 bits only, so rows r + 16 j keep row r's swizzle.
#include "cake/bf16.cuh"

__device__ __forceinline__ int cake_sw_bf16(int r) { return ((r ^ (r >> 2)) & 3) << 2; }

// Unit u of row r, as an element offset.
__device__ __forceinline__ int cake_at_bf16(int r, int u) {
    return r * 128 + ((u ^ cake_sw_bf16(r)) << 2);
}

// Element (r, d), widened.
__device__ __forceinline__ float cake_ld1_bf16(const unsigned short* s, int r, int d) {
    return cake_bf16_to_f32(s[cake_at_bf16(r, d >> 2) + (d & 3)]);
}

// The unit at offset off (a cake_at_bf16 offset or one derived from it), widened: one 8-byte load.
__device__ __forceinline__ float4 cake_ld4_bf16_at(const unsigned short* s, int off) {
    const uint2 p = *reinterpret_cast<const uint2*>(s + off);
    return make_float4(cake_bf16_lo(p.x), cake_bf16_hi(p.x), cake_bf16_lo(p.y), cake_bf16_hi(p.y));
}
