#pragma once
// The K-major, 128-byte-swizzled shared-memory layout of wgmma's tf32 operands and their
// descriptors (docs/wgmma-plan.md): plain C++, so the CPU emulator compiles this header as it is
// (cake/wgmma.cuh, the instructions, has a CPU twin).
#include "cake/cp_async.cuh"

// Float index of element (row, k) of a ROWS-row tile in that layout.
template <int ROWS>
__device__ __forceinline__ int cake_wg_idx(int row, int k) {
    return (k >> 5) * (ROWS * 32) + row * 32 + ((((k >> 2) & 7) ^ (row & 7)) << 2) + (k & 3);
}

// Descriptor of rows row0..row0+63 (row0 a multiple of 8) and k8 step s of a ROWS-row tile: panel
// s / 4, +32 bytes per step inside the swizzled rows; SBO 1024 bytes (8 rows), LBO unused (1),
// 128-byte swizzle (mode 1 in bits 62-63).
// The descriptor is split in two words: the low word holds the start address / 16 (bits 0-13) and
// LBO, the high word is the constant SBO and swizzle mode. cake_wg_desc_lo(addr) is the low word of
// a tile starting at shared-memory byte address addr; cake_wg_desc_at adds a step's byte offset / 16
// to it, which cannot carry out of the address field (shared-memory addresses are below 2^18), so
// a loop's descriptors cost one add each from a low word computed once.
__device__ __forceinline__ unsigned int cake_wg_desc_lo(unsigned int addr) {
    return ((addr & 0x3FFFF) >> 4) | (1u << 16);
}
template <int ROWS>
__device__ __forceinline__ unsigned long long cake_wg_desc_at(unsigned int lo, int row0, int s) {
    // the high word, a constant here: at namespace scope it was unreferenced (NVRTC warning 177)
    // in the programs that include this header for its layout only (kda_fwd_chunk sm_90a, the
    // portable fwd_state and fwd_state_local programs)
    constexpr unsigned int hi = 64u | (1u << 30);
    const int bytes = (s >> 2) * (ROWS * 128) + row0 * 128 + (s & 3) * 32;
    return ((unsigned long long)hi << 32) | (lo + (unsigned int)(bytes >> 4));
}
template <int ROWS>
__device__ __forceinline__ unsigned long long cake_wg_desc(const float* tile, int row0, int s) {
    return cake_wg_desc_at<ROWS>(cake_wg_desc_lo(cake_smem_addr(tile)), row0, s);
}
