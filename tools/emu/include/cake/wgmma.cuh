// twin of generators/include/cake/wgmma.cuh sha256:b696a20521788d32c66da7e9271479313fe1d6ba1633bbf746123e7d0cc00bc4
#pragma once

// The layout helpers are plain C++, the same as on the GPU.
template <int ROWS>
__device__ __forceinline__ int cake_wg_idx(int row, int k) {
    return (k >> 5) * (ROWS * 32) + row * 32 + ((((k >> 2) & 7) ^ (row & 7)) << 2) + (k & 3);
}

template <int ROWS>
__device__ __forceinline__ unsigned long long cake_wg_desc(const float* tile, int row0, int s) {
    const unsigned int addr = cake_smem_addr(tile) + (s >> 2) * (ROWS * 128) + row0 * 128 + (s & 3) * 32;
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// wgmma.mma_async m64n64k8 tf32: a warpgroup collective (see emu::op_wgmma_n64).
__device__ __forceinline__ void cake_wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db, int acc) {
    ::emu::wgmma_n64(d, da, db, acc);
}

// The same with A from registers (see emu::op_wgmma_n64 for the register map).
__device__ __forceinline__ void cake_wgmma_n64_rs(float (&d)[32], const unsigned int (&a)[4], unsigned long long db, int acc) {
    ::emu::wgmma_n64_rs(d, a, db, acc);
}

// m64n32k8, A from registers.
__device__ __forceinline__ void cake_wgmma_n32_rs(float (&d)[16], const unsigned int (&a)[4], unsigned long long db, int acc) {
    ::emu::wgmma_n32_rs(d, a, db, acc);
}

// The emulated wgmma completes at issue: the fences and the group wait order nothing more.
__device__ __forceinline__ void cake_wgmma_fence() {}
__device__ __forceinline__ void cake_wgmma_commit() {}
template <int N>
__device__ __forceinline__ void cake_wgmma_wait() {}
__device__ __forceinline__ void cake_fence_proxy_async() {}
