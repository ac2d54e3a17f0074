#pragma once
// kda's chunk tiles in 16 bits (the byte diet, docs/wgmma-plan.md): W, Qg, Aqk and Kd^T, which the
// state passes take only as TF32 tensor-core operands, as fp16 values under one power-of-two
// scale per row. Plain C++ apart from cake/f16.cuh's conversion (the CPU emulator has its twin).
//
// A record of a ROWS x COLS tile, CAKE_T16_BYTES(ROWS, COLS) bytes:
//   fp16 [ROWS][COLS] at the element offsets of the tile's fp32 form (sm_90a: kda_fwd_state's
//                     image of it, cake/chunk_image.cuh; the portable programs: row-major), so a
//                     reader widens 16 bytes of the record into the 32 bytes of its fp32 tile at the
//                     same element offset, with no index arithmetic: TF32(x) * 2^(141 - E), as
//                     cake/state16.cuh scales a group of S; exact (fp16 keeps TF32's 11
//                     significant bits) wherever the scaled value is normal, >= 2^-14, i.e. >= 2^-28
//                     of its row's largest; below it the error is at most 2^-25 * 2^(E - 141),
//                     < 2^-39 of the row's largest
//   u8 E [ROWS]       at byte 2 ROWS COLS, indexed by where the row is stored: its image row on
//                     sm_90a (pkinv(r) for W and Kd^T, r for Qg and Aqk; element offset o lies in
//                     image row (o / 32) % ROWS), r in the portable programs (o / COLS):
//                     E = cake_s16_exp(the row's largest |TF32(x)|), so that the largest scaled
//                     value lies in [2^14, 2^15) (E = 15 below that: tiny rows)
// padded to 16 bytes, so that one bulk copy takes a record whole.
#include "cake/state16.cuh"

#define CAKE_T16_BYTES(rows, cols) ((2 * (rows) * (cols) + (rows) + 15) / 16 * 16)

// Two TF32 values of one row, scaled by the row's 2^(141 - E) (cake_s16_down(E)), as one f16x2
// word: lo at the lower column.
__device__ __forceinline__ unsigned int cake_t16_pack(float lo, float hi, float down) {
    return cake_f16x2(lo * down, hi * down);
}

// The largest magnitude of four values.
__device__ __forceinline__ float cake_t16_max4(float a, float b, float c, float d) {
    return fmaxf(fmaxf(fabsf(a), fabsf(b)), fmaxf(fabsf(c), fabsf(d)));
}
// The largest m over the LANES lanes (a power of two) of each aligned group, in every lane of it:
// exact, so its order does not matter.
template <int LANES>
__device__ __forceinline__ float cake_t16_group_max(float m) {
#pragma unroll
    for (int b = LANES / 2; b > 0; b >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, b));
    return m;
}
// A record's 4-value piece (8 bytes) as fp32, with its row's factor up = cake_s16_up(E).
__device__ __forceinline__ float4 cake_t16_widen4(uint2 h, float up) {
    const float2 a = cake_f16x2_to_f32(h.x), b = cake_f16x2_to_f32(h.y);
    return make_float4(a.x * up, a.y * up, b.x * up, b.y * up);
}
// Four TF32 values of one row at halves p .. p + 3 of a record in global memory (8-byte aligned).
__device__ __forceinline__ void cake_t16_store4(unsigned short* p, float4 y, float down) {
    *reinterpret_cast<uint2*>(p) = make_uint2(cake_t16_pack(y.x, y.y, down), cake_t16_pack(y.z, y.w, down));
}

// A record widened in place into its tile's fp32 form: the record sits in the top
// CAKE_T16_BYTES(ROWS, COLS) bytes of the tile's 4 ROWS COLS, where one bulk copy put it. NT threads
// (index tw) each read their 4-value pieces (8 bytes of the record, 16 of the tile: piece u of both
// at the same place) and rows' factors 2^(E - 141), meet at sync() (every read done: the writes
// below overwrite the record), then write the pieces as fp32. IMAGE: the tile is an sm_90a image
// (piece u in image row (u / 8) % ROWS), else row-major. The caller orders the writes before
// their readers (a proxy fence before wgmma, and a barrier).
template <int ROWS, int COLS, int NT, bool IMAGE, class Sync>
__device__ __forceinline__ void cake_t16_widen(float* tile, int tw, Sync sync) {
    constexpr int kPieces = ROWS * COLS / 4, kPer = kPieces / NT;
    static_assert(kPieces % NT == 0, "cake_t16_widen: whole pieces per thread");
    const unsigned char* rec =
        reinterpret_cast<const unsigned char*>(tile) + 4 * ROWS * COLS - CAKE_T16_BYTES(ROWS, COLS);
    uint2 h[kPer];
    float up[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int u = tw + NT * k;
        h[k] = reinterpret_cast<const uint2*>(rec)[u];
        const int row = IMAGE ? (u >> 3) & (ROWS - 1) : 4 * u / COLS;
        up[k] = cake_s16_up(rec[2 * ROWS * COLS + row]);
    }
    sync();
#pragma unroll
    for (int k = 0; k < kPer; ++k) reinterpret_cast<float4*>(tile)[tw + NT * k] = cake_t16_widen4(h[k], up[k]);
}

// A 4-value piece of a tile as its reader loads it: fp32 (Piece<false>, 16 bytes) or the 16-bit
// record's 8 bytes (Piece<true>), widened when used with its row's factor up = cake_s16_up(E), so
// that the loads can be issued well before the widening. base: the tile's fp32 slot, where the
// record starts; o: the element offset (both forms keep it).
template <bool RECORD>
struct CakeT16Piece {
    float4 v;
    __device__ __forceinline__ void load(const float* base, int o) { v = *reinterpret_cast<const float4*>(base + o); }
    __device__ __forceinline__ float4 get(float) const { return v; }
};
template <>
struct CakeT16Piece<true> {
    uint2 v;
    __device__ __forceinline__ void load(const float* base, int o) {
        v = *reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned short*>(base) + o);
    }
    __device__ __forceinline__ float4 get(float up) const { return cake_t16_widen4(v, up); }
};
// The factor 2^(E - 141) of stored row `row` of a ROWS x COLS record at base (1 when not a record).
template <bool RECORD, int ROWS, int COLS>
__device__ __forceinline__ float cake_t16_up(const float* base, int row) {
    if (!RECORD) return 1.f;
    return cake_s16_up(reinterpret_cast<const unsigned char*>(base)[2 * ROWS * COLS + row]);
}

// A record's 4-value piece that cp.async put in the upper half of its 16-byte fp32 slot
// (cake_cp_async8 to slot + 2), widened in place by the thread that copied it once its copy has
// landed (no other thread reads the slot before the barrier that follows); up: its row's factor.
__device__ __forceinline__ void cake_t16_widen_slot(float* slot, float up) {
    *reinterpret_cast<float4*>(slot) = cake_t16_widen4(*reinterpret_cast<const uint2*>(slot + 2), up);
}
