#pragma once
#include "cake/cp_async.cuh"
// mbarriers (shared-memory barrier objects, 8 bytes each) as one-way hand-offs between
// warpgroups: n producer threads arrive (release), the consumers wait on the phase's parity
// (acquire). Unlike a named barrier's arrive -> sync, compute-sanitizer's racecheck orders
// ordinary shared-memory accesses through them, and synccheck accepts waits at any instruction
// (tools/barrier_probe.py, docs/notes.md, session 21), so data written by ordinary stores may be
// read by ordinary loads on the other side.

// One thread initialises; every thread of the block passes a __syncthreads() before first use.
__device__ __forceinline__ void cake_mbar_init(unsigned long long* b, int n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(cake_smem_addr(b)), "r"(n) : "memory");
}

// One of the n arrivals of the current phase; the last completes it (the parity flips).
__device__ __forceinline__ void cake_mbar_arrive(unsigned long long* b) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" :: "r"(cake_smem_addr(b)) : "memory");
}

// Wait until the phase of this parity (0 for the first, 1 for the second, ...) has completed.
__device__ __forceinline__ void cake_mbar_wait(unsigned long long* b, int parity) {
    asm volatile(
        "{\n\t.reg .pred p;\n"
        "CAKE_MBAR_WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n\t"
        "@!p bra CAKE_MBAR_WAIT_%=;\n}"
        :: "r"(cake_smem_addr(b)), "r"(parity) : "memory");
}

// After the inits, before any bulk copy completes on them: the mbarriers' initialisation made
// visible to the async proxy (the bulk-copy engine that signals them).
__device__ __forceinline__ void cake_mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One of the n arrivals that also expects `bytes` more transaction bytes in this phase: the phase
// completes once every arrival is in and every expected byte has landed.
__device__ __forceinline__ void cake_mbar_expect_tx(unsigned long long* b, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :: "r"(cake_smem_addr(b)), "r"(bytes) : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory by the
// bulk-copy engine, landing as transaction bytes of mbarrier b's phase in progress. One thread
// issues the copy of a whole tile; the readers wait on the mbarrier (acquire), which also makes
// the async proxy's writes visible to wgmma and to ordinary loads.
__device__ __forceinline__ void cake_bulk_load(void* dst, const void* src, unsigned int bytes,
                                               unsigned long long* b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(cake_smem_addr(dst)), "l"(src), "r"(bytes), "r"(cake_smem_addr(b)) : "memory");
}
