// The shared-memory layout, descriptors and accumulator map that a wgmma state pass on sm_90a
// would use (docs/wgmma-plan.md), checked in isolation: one warpgroup computes
// D[64][N] = A[64][K] B[K][N] with wgmma.mma_async m64n64k8 tf32, A and B^T K-major in shared
// memory with the 128-byte swizzle. K = 32 * panels; each 32-element K panel of a 64-row operand
// is 8 KB: row r at r * 128 bytes, its 16-byte chunk c at chunk c ^ (r % 8). Panels start on
// 1024-byte boundaries, so the descriptors' base offset is 0.

// Compiled after generators/include/cake/cp_async.cuh (tests/test_wgmma_probe_gpu.py prepends it):
// cake_smem_addr comes from there.

// Byte offset of element (row, k) of a [64][K] K-major operand in the swizzled panel layout.
__device__ __forceinline__ int probe_off(int row, int k) {
    const int panel = k >> 5, chunk = (k >> 2) & 7;
    return panel * 8192 + row * 128 + ((chunk ^ (row & 7)) << 4) + ((k & 3) << 2);
}

// Descriptor of k-step s (8 tf32 = 32 bytes of K): panel s / 4, 32-byte step s % 4 inside the
// swizzled 128-byte rows; SBO = 1024 bytes (8 rows), LBO unused (1), 128-byte swizzle (mode 1).
__device__ __forceinline__ unsigned long long probe_desc(const float* tile, int s) {
    const unsigned int addr = cake_smem_addr(tile) + (s >> 2) * 8192 + (s & 3) * 32;
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void probe_wgmma(float (&d)[32], unsigned long long da, unsigned long long db, int acc) {
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

// A [64][K], Bt [64][K] (B transposed: row n holds column n of B), D [64][64]; K = 32 * panels,
// panels 1..4. 128 threads, 65536 bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(128) wgmma_probe(const float* __restrict__ A,
                                                              const float* __restrict__ Bt,
                                                              float* __restrict__ D, int panels)
{
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* As = reinterpret_cast<float*>(smem);
    float* Bs = reinterpret_cast<float*>(smem + 32768);
    const int K = 32 * panels, tid = threadIdx.x;
    for (int i = tid; i < 64 * K; i += 128) {
        const int row = i / K, k = i % K;
        *reinterpret_cast<float*>(smem + probe_off(row, k)) = A[i];
        *reinterpret_cast<float*>(smem + 32768 + probe_off(row, k)) = Bt[i];
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> async proxy
    float d[32];
#pragma unroll
    for (int x = 0; x < 32; ++x) d[x] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int s = 0; s < 4 * panels; ++s) probe_wgmma(d, probe_desc(As, s), probe_desc(Bs, s), s > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    // accumulator map: warp w rows 16 w + g (+ 8), n8 block j columns 8 j + 2 t (+ 1)
    const int w = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int r = 16 * w + g, c = 8 * j + 2 * t;
        D[r * 64 + c] = d[4 * j];
        D[r * 64 + c + 1] = d[4 * j + 1];
        D[(r + 8) * 64 + c] = d[4 * j + 2];
        D[(r + 8) * 64 + c + 1] = d[4 * j + 3];
    }
}

// The same product with A from registers (the form kda_bwd_state would use, its A operands being
// transposes of the stored layouts): per k8 step a thread passes four tf32 of A, assumed to follow
// mma.sync m16n8k8's A map per warp: a0 (row g, k t), a1 (row g + 8, k t), a2 (row g, k t + 4),
// a3 (row g + 8, k t + 4), rows 16 w + ... for warp w.
__device__ __forceinline__ void probe_wgmma_rs(float (&d)[32], const unsigned (&a)[4], unsigned long long db, int acc) {
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

extern "C" __global__ void __launch_bounds__(128) wgmma_probe_rs(const float* __restrict__ A,
                                                                 const float* __restrict__ Bt,
                                                                 float* __restrict__ D, int panels)
{
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* Bs = reinterpret_cast<float*>(smem + 32768);
    const int K = 32 * panels, tid = threadIdx.x;
    for (int i = tid; i < 64 * K; i += 128) {
        const int row = i / K, k = i % K;
        *reinterpret_cast<float*>(smem + 32768 + probe_off(row, k)) = Bt[i];
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const int w = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
    float d[32];
#pragma unroll
    for (int x = 0; x < 32; ++x) d[x] = 0.f;
    for (int s = 0; s < 4 * panels; ++s) {
        const int r = 16 * w + g, k = 8 * s + t;
        const unsigned a[4] = {__float_as_uint(A[r * K + k]), __float_as_uint(A[(r + 8) * K + k]),
                               __float_as_uint(A[r * K + k + 4]), __float_as_uint(A[(r + 8) * K + k + 4])};
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        probe_wgmma_rs(d, a, probe_desc(Bs, s), s > 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int r = 16 * w + g, c = 8 * j + 2 * t;
        D[r * 64 + c] = d[4 * j];
        D[r * 64 + c + 1] = d[4 * j + 1];
        D[(r + 8) * 64 + c] = d[4 * j + 2];
        D[(r + 8) * 64 + c + 1] = d[4 * j + 3];
    }
}
