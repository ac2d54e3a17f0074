// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/gate.cu.j2
// record: kda_det/gate.gate-g  program: kda_det.gate.gate-g.sm_90a
// identity: sha256:9846835c41bacad78338657aaaf73af6d1fa98f2a4cce5ca097871448e5cbedd
// ---- begin cake/gate.cuh ----
// KDA gate activations, shared by the forward gate stage and (later) its backward.

__device__ __forceinline__ float cake_bf16_bits_to_float(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// softplus with torch's threshold: above 20 it is the identity to fp32 rounding.
__device__ __forceinline__ float cake_softplus(float x) {
    return x > 20.f ? x : log1pf(expf(x));
}

__device__ __forceinline__ float cake_sigmoid(float x) {
    return 1.f / (1.f + expf(-x));
}

// g = -exp(A_log) * softplus(x + dt_bias)
__device__ __forceinline__ float cake_gate_softplus(float x, float a_log, float dt_bias) {
    return -expf(a_log) * cake_softplus(x + dt_bias);
}

// g = lower_bound * sigmoid(exp(A_log) * (x + dt_bias)), with -5 <= lower_bound < 0
__device__ __forceinline__ float cake_gate_sigmoid(float x, float a_log, float dt_bias, float lower_bound) {
    return lower_bound * cake_sigmoid(expf(a_log) * (x + dt_bias));
}
// ---- end cake/gate.cuh ----

typedef float x_t;

__device__ __forceinline__ float load_x(const x_t* p) {
    return *p;
}

extern "C" __global__ void __launch_bounds__(128) kda_gate(
    const x_t* __restrict__ x, const float* __restrict__ A_log, const float* __restrict__ dt_bias,
    float* __restrict__ G, const int* __restrict__ chunks, int H, float lower_bound)
{
    const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int start = chunks[2 * c], len = chunks[2 * c + 1];
    // Over the chunk's rows in groups of 8 (the order and roundings kda_fwd_chunk's Gamma uses, so
    // the bits are the same): row r of group w is off_w + local_r, local_r the group's rows up to
    // r summed in order, off_w the earlier groups' totals summed in order. The order is fixed, so
    // every run gives the same bits.
    float off = 0.f;
    for (int r0 = 0; r0 < len; r0 += 8) {
        float acc = 0.f;
        for (int r = r0; r < r0 + 8 && r < len; ++r) {
            const long long i = ((long long)(start + r) * H + h) * 128 + d;
            acc += load_x(x + i);
            G[i] = __fadd_rn(off, acc);
        }
        off = __fadd_rn(off, acc);
    }
}
