#pragma once
// Named barriers (bar.sync / bar.arrive; ids 1..15, 0 is __syncthreads): n threads of the block, a
// multiple of 32, take part. bar.arrive counts the caller and goes on; bar.sync waits until all n
// have arrived. A producer warpgroup arrives where its consumer syncs: one-way hand-offs.
__device__ __forceinline__ void cake_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void cake_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}
