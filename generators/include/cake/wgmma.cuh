#pragma once
// Warpgroup matrix multiply (wgmma, sm_90a only) on tf32 operands in shared memory; the layout,
// descriptors and fragment map are docs/wgmma-plan.md's, checked alone by tests/cuda/wgmma_probe.cu.
//
// Operand layout: K-major (tf32 wgmma has no transpose), 128-byte swizzle. A tile of ROWS rows is
// stored as K panels of 32 elements: panel p = ROWS x 128 bytes, row r at r * 128, its 16-byte
// chunk c at chunk c ^ (r % 8). Tiles start on 1024-byte boundaries (descriptor base offset 0).
// Accumulators (m64nNk8, f32): warp w of the warpgroup holds rows 16 w + g, 16 w + g + 8; n8 block
// j holds columns 8 j + 2 t, 8 j + 2 t + 1 as d[4 j], d[4 j + 1] (row 16 w + g) and d[4 j + 2],
// d[4 j + 3] (row 16 w + g + 8), with g = lane / 4, t = lane % 4.
#include "cake/wgmma_layout.cuh"

// d (+)= A B for one k8 step: m64n64k8, f32 accumulators, tf32 operands. acc = 0: d = A B.
__device__ __forceinline__ void cake_wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}

// The same with A from registers: a = A(16 w + g, t), A(16 w + g + 8, t), A(16 w + g, t + 4),
// A(16 w + g + 8, t + 4) of this k8 step (w = warp in the warpgroup), already TF32.
__device__ __forceinline__ void cake_wgmma_n64_rs(float (&d)[32], const unsigned int (&a)[4], unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

// m64n32k8 with A from registers (the same a as cake_wgmma_n64_rs); B rows (n) from the
// descriptor's row0 on, d[4 j + x] for n8 blocks j = 0..3.
__device__ __forceinline__ void cake_wgmma_n32_rs(float (&d)[16], const unsigned int (&a)[4], unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

// m64n32k8 with A and B from shared memory (descriptors as cake_wgmma_n64's); d as cake_wgmma_n32_rs.
__device__ __forceinline__ void cake_wgmma_n32(float (&d)[16], unsigned long long da, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(acc));
}

// x through an empty asm: a copy of an accumulator that ptxas does not trace back to it. Reading
// an accumulator of the state pass (say, to shuffle it) between a wgmma's issue and its wait made
// ptxas serialize every wgmma (C7514); reading the copy does not.
__device__ __forceinline__ float cake_wg_opaque(float x) {
    asm volatile("" : "+f"(x));
    return x;
}

// Before the first wgmma that reads accumulators written by other instructions.
__device__ __forceinline__ void cake_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void cake_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cake_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// Shared memory written by ordinary stores, made visible to wgmma's (async proxy) reads.
__device__ __forceinline__ void cake_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
