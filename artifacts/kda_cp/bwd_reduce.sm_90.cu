// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.bwd_reduce.sm_90 by cake migrate
// record: kda_cp/bwd_reduce  program: kda_cp.bwd_reduce.sm_90
// identity: sha256:91f4bc0a2cfd03b2f50f34937c8134a45e6a9583422d6e27d297152a15b97ceb

extern "C" __global__ void __launch_bounds__(128) kda_bwd_gate_reduce(
    const float* __restrict__ dA_part, const float* __restrict__ dbias_part,
    float* __restrict__ dA_log, float* __restrict__ ddt_bias, int NC, int H)
{
    const int h = blockIdx.x, d = threadIdx.x;
    float s = 0.f;
    for (int c = 0; c < NC; ++c) s += dbias_part[((long long)c * H + h) * 128 + d];
    ddt_bias[h * 128 + d] = s;
    if (d == 0) {
        float a = 0.f;
        for (int c = 0; c < NC; ++c) a += dA_part[(long long)c * H + h];
        dA_log[h] = a;
    }
}
