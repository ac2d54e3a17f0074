// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.bwd_reduce.sm_90a by cake migrate
// record: kda_cp/bwd_reduce  program: kda_cp.bwd_reduce.sm_90a
// identity: sha256:8a1440e0cfcfdda8ce7426a769bc2a1fc7e121447df8a6cc9d0272665e3e9816

namespace {

// sum_{c < n} p[c * stride], added in order c = 0, 1, ...: the loads go out 32 at a time (a serial
// loop had each wait for the one before: ~22 us on 1doc and on R2, session 28).
__device__ __forceinline__ float serial_sum(const float* __restrict__ p, long long stride, int n) {
    float s = 0.f;
    int c = 0;
    for (; c + 32 <= n; c += 32) {
        float v[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) v[j] = p[(c + j) * stride];
#pragma unroll
        for (int j = 0; j < 32; ++j) s += v[j];
    }
    for (; c < n; ++c) s += p[c * stride];
    return s;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(160) kda_bwd_gate_reduce(
    const float* __restrict__ dA_part, const float* __restrict__ dbias_part,
    float* __restrict__ dA_log, float* __restrict__ ddt_bias, int NC, int H)
{
    const int h = blockIdx.x, d = threadIdx.x;
    if (d < 128) ddt_bias[h * 128 + d] = serial_sum(dbias_part + h * 128 + d, (long long)H * 128, NC);
    else if (d == 128) dA_log[h] = serial_sum(dA_part + h, H, NC);
}
