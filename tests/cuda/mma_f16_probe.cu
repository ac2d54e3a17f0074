// cake/mma_f16.cuh alone, one warp (tests/test_mma_f16_probe_gpu.py on the H200,
// tests/test_mma_f16_emu.py on the CPU twin): the fragment map of m16n8k16 f16 against
// cake_mma_tf32 on the same values, and cvt.rn.f16x2's rounding. Headers are inlined by
// cake.render.inline_headers.
#include "cake/mma.cuh"
#include "cake/mma_f16.cuh"

// A [16][16], B [16][8] (k rows, n columns), fp16- and TF32-exact values. D = A B by one
// m16n8k16 f16 mma, Dt = A B by two m16n8k8 tf32 mma (k 0..7, then 8..15); both [16][8].
extern "C" __global__ void mma_f16_probe(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ D, float* __restrict__ Dt) {
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    auto a = [&](int i, int k) { return A[16 * i + k]; };
    auto b = [&](int k, int n) { return B[8 * k + n]; };
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    cake_mma_f16(d, cake_f16x2(a(g, 2 * t), a(g, 2 * t + 1)),
                 cake_f16x2(a(g + 8, 2 * t), a(g + 8, 2 * t + 1)),
                 cake_f16x2(a(g, 2 * t + 8), a(g, 2 * t + 9)),
                 cake_f16x2(a(g + 8, 2 * t + 8), a(g + 8, 2 * t + 9)),
                 cake_f16x2(b(2 * t, g), b(2 * t + 1, g)), cake_f16x2(b(2 * t + 8, g), b(2 * t + 9, g)));
    float e[4] = {0.f, 0.f, 0.f, 0.f};
    for (int h = 0; h < 2; ++h) {
        const int k = 8 * h + t;
        cake_mma_tf32(e, cake_tf32(a(g, k)), cake_tf32(a(g + 8, k)), cake_tf32(a(g, k + 4)),
                      cake_tf32(a(g + 8, k + 4)), cake_tf32(b(k, g)), cake_tf32(b(k + 4, g)));
    }
    for (int x = 0; x < 4; ++x) {
        const int i = g + 8 * (x >> 1), j = 2 * t + (x & 1);
        D[8 * i + j] = d[x];
        Dt[8 * i + j] = e[x];
    }
}

// out[i] = cake_f16x2(x[2 i], x[2 i + 1]) for i < n, one thread each.
extern "C" __global__ void f16x2_probe(const float* __restrict__ x, unsigned int* __restrict__ out,
                                       int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = cake_f16x2(x[2 * i], x[2 * i + 1]);
}
