#pragma once

__device__ __forceinline__ unsigned int cake_smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

// 16-byte global->shared copy that bypasses L1 (every byte is read once per block). src_bytes < 16
// zero-fills the rest, which is how rows past a short chunk become exact zeros.
__device__ __forceinline__ void cake_cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(cake_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
}

// 8-byte global->shared copy (the .cg form above takes 16 bytes only, so this one goes through L1).
__device__ __forceinline__ void cake_cp_async8(void* smem_dst, const void* gmem_src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;"
                 :: "r"(cake_smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cake_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cake_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

// Pull the 128-byte line holding p into L2 (no register result, nothing waits on it): a later
// load of it then pays L2 latency, not DRAM's.
__device__ __forceinline__ void cake_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}
