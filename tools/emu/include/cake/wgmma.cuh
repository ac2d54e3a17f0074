// twin of generators/include/cake/wgmma.cuh sha256:e3f069ae6cf36127637492f2cf64d0107a1b746bbc9f4c335f90193d10b51db9
#pragma once

// The layout helpers (cake/wgmma_layout.cuh) are plain C++ and compile as they are.

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

// m64n32k8, A and B from shared memory.
__device__ __forceinline__ void cake_wgmma_n32(float (&d)[16], unsigned long long da, unsigned long long db, int acc) {
    ::emu::wgmma_n32(d, da, db, acc);
}

// An opaque copy: nothing to hide on the CPU.
__device__ __forceinline__ float cake_wg_opaque(float x) { return x; }

// The emulated wgmma is performed at the wait that covers its commit group (emu::group_collective);
// wgmma.fence and the async-proxy fence order nothing more here.
__device__ __forceinline__ void cake_wgmma_fence() {}
__device__ __forceinline__ void cake_wgmma_commit() { ::emu::wgmma_commit(); }
template <int N>
__device__ __forceinline__ void cake_wgmma_wait() { ::emu::wgmma_wait(N); }
__device__ __forceinline__ void cake_fence_proxy_async() {}
