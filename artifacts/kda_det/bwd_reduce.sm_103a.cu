// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/bwd_reduce.cu.j2
// record: kda_det/bwd_reduce  program: kda_det.bwd_reduce.sm_103a
// identity: sha256:86b7d81de6cdd87fb72970c16228ae48c4eb5190b65579ea92686af0064ea54e

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
