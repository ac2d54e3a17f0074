// The shared-memory layout, descriptors and accumulator map of generators/include/cake/wgmma.cuh
// (docs/wgmma-plan.md), checked in isolation: one warpgroup computes D[64][64] = A[64][K] B[K][64]
// with wgmma m64n64k8 tf32, A and B^T K-major in 128-byte-swizzled K panels (K = 32 * panels).
// Compiled after cake/cp_async.cuh and cake/wgmma.cuh (tests/test_wgmma_probe_gpu.py prepends them).

// A [64][K], Bt [64][K] (row n of Bt = column n of B), D [64][64]; panels 1..4. 128 threads,
// 65536 bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(128) wgmma_probe(const float* __restrict__ A,
                                                              const float* __restrict__ Bt,
                                                              float* __restrict__ D, int panels)
{
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* As = reinterpret_cast<float*>(smem);
    float* Bs = As + 8192;
    const int K = 32 * panels, tid = threadIdx.x;
    for (int i = tid; i < 64 * K; i += 128) {
        const int row = i / K, k = i % K;
        As[cake_wg_idx<64>(row, k)] = A[i];
        Bs[cake_wg_idx<64>(row, k)] = Bt[i];
    }
    __syncthreads();
    cake_fence_proxy_async();
    float d[32];
#pragma unroll
    for (int x = 0; x < 32; ++x) d[x] = 0.f;
    cake_wgmma_fence();
    for (int s = 0; s < 4 * panels; ++s)
        cake_wgmma_n64(d, cake_wg_desc<64>(As, 0, s), cake_wg_desc<64>(Bs, 0, s), s > 0);
    cake_wgmma_commit();
    cake_wgmma_wait<0>();
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
// transposes of the stored layouts), by the register map cake_wgmma_n64_rs assumes.
extern "C" __global__ void __launch_bounds__(128) wgmma_probe_rs(const float* __restrict__ A,
                                                                 const float* __restrict__ Bt,
                                                                 float* __restrict__ D, int panels)
{
    extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];
    float* Bs = reinterpret_cast<float*>(smem) + 8192;
    const int K = 32 * panels, tid = threadIdx.x;
    for (int i = tid; i < 64 * K; i += 128) Bs[cake_wg_idx<64>(i / K, i % K)] = Bt[i];
    __syncthreads();
    cake_fence_proxy_async();
    const int w = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
    float d[32];
#pragma unroll
    for (int x = 0; x < 32; ++x) d[x] = 0.f;
    for (int s = 0; s < 4 * panels; ++s) {
        const int r = 16 * w + g, k = 8 * s + t;
        const unsigned int a[4] = {__float_as_uint(A[r * K + k]), __float_as_uint(A[(r + 8) * K + k]),
                                   __float_as_uint(A[r * K + k + 4]), __float_as_uint(A[(r + 8) * K + k + 4])};
        cake_wgmma_fence();
        cake_wgmma_n64_rs(d, a, cake_wg_desc<64>(Bs, 0, s), s > 0);
        cake_wgmma_commit();
        cake_wgmma_wait<0>();
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
