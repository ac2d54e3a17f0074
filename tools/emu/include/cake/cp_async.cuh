// twin of generators/include/cake/cp_async.cuh sha256:4a30ca7a9a99062c52347b3409854f1af45d9d3eed932084ff38c74cd1b11d9b
#pragma once

// cvta.to.shared.u64: the offset into the block's shared memory.
__device__ __forceinline__ unsigned int cake_smem_addr(const void* p) {
    return ::emu::smem_offset(p);
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: queued, performed at the wait that
// covers its group; src_bytes < 16 zero-fills the rest.
__device__ __forceinline__ void cake_cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
    ::emu::cp_async(smem_dst, gmem_src, 16, src_bytes);
}

// cp.async.ca.shared.global [dst], [src], 8: as above, 8 bytes.
__device__ __forceinline__ void cake_cp_async8(void* smem_dst, const void* gmem_src) {
    ::emu::cp_async(smem_dst, gmem_src, 8, 8);
}

__device__ __forceinline__ void cake_cp_async_commit() { ::emu::cp_async_commit(); }

template <int N>
__device__ __forceinline__ void cake_cp_async_wait() {
    ::emu::cp_async_wait(N);
}

// prefetch.global.L2: no effect on results; nothing to emulate.
__device__ __forceinline__ void cake_prefetch_l2(const void* p) { (void)p; }
