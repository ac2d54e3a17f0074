// GENERATED FILE, DO NOT EDIT.
// copy of kda_det.gate.gate-sigmoid.x-bf16.sm_90 by cake migrate
// record: kda_cp/gate.gate-sigmoid.x-bf16  program: kda_cp.gate.gate-sigmoid.x-bf16.sm_90
// identity: sha256:d0a9557cf8374a538308362347c528d45d808e774c722e2863279aba015afd59
// ---- begin cake/gate.cuh ----
// KDA gate activations and Gamma's per-row step, shared by the gate stage and the chunk programs.

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

// Four consecutive gate inputs (dims 4c..4c+3 of one token) as fp32, from fp32 or bf16 storage.
__device__ __forceinline__ float4 cake_load_gate4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}

__device__ __forceinline__ float4 cake_load_gate4(const unsigned short* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    return make_float4(cake_bf16_bits_to_float((unsigned short)(u.x & 0xffffu)),
                       cake_bf16_bits_to_float((unsigned short)(u.x >> 16)),
                       cake_bf16_bits_to_float((unsigned short)(u.y & 0xffffu)),
                       cake_bf16_bits_to_float((unsigned short)(u.y >> 16)));
}

// Gamma's level 1 (kda_fwd_chunk and kda_bwd_chunk, which must agree to the bit): one row's log
// gate added to its 8-row group's running sum, four dims at a time. kGate 0: x is the log gate g;
// 1: -ea softplus(x + bias); 2: lower_bound sigmoid(ea (x + bias)). The raw forms add with one
// fma, as the gate stage's compiled `acc += cake_gate_*(...)` does; ea = exp(A_log[h]).
template <int kGate>
__device__ __forceinline__ float4 cake_gamma_add(float4 acc, float4 x, float4 bias, float ea, float lower_bound) {
    if (kGate == 0) {
        acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
    } else if (kGate == 1) {
        acc.x = __fmaf_rn(-ea, cake_softplus(x.x + bias.x), acc.x);
        acc.y = __fmaf_rn(-ea, cake_softplus(x.y + bias.y), acc.y);
        acc.z = __fmaf_rn(-ea, cake_softplus(x.z + bias.z), acc.z);
        acc.w = __fmaf_rn(-ea, cake_softplus(x.w + bias.w), acc.w);
    } else {
        acc.x = __fmaf_rn(lower_bound, cake_sigmoid(ea * (x.x + bias.x)), acc.x);
        acc.y = __fmaf_rn(lower_bound, cake_sigmoid(ea * (x.y + bias.y)), acc.y);
        acc.z = __fmaf_rn(lower_bound, cake_sigmoid(ea * (x.z + bias.z)), acc.z);
        acc.w = __fmaf_rn(lower_bound, cake_sigmoid(ea * (x.w + bias.w)), acc.w);
    }
    return acc;
}
// ---- end cake/gate.cuh ----

typedef unsigned short x_t;

__device__ __forceinline__ float load_x(const x_t* p) {
    return cake_bf16_bits_to_float(*p);
}

extern "C" __global__ void __launch_bounds__(128) kda_gate(
    const x_t* __restrict__ x, const float* __restrict__ A_log, const float* __restrict__ dt_bias,
    float* __restrict__ G, const int* __restrict__ chunks, int H, float lower_bound)
{
    const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int start = chunks[2 * c], len = chunks[2 * c + 1];
    const float a_log = A_log[h];
    const float bias = dt_bias[h * 128 + d];
    // Over the chunk's rows in groups of 8 (the order and roundings kda_fwd_chunk's Gamma uses, so
    // the bits are the same): row r of group w is off_w + local_r, local_r the group's rows up to
    // r summed in order, off_w the earlier groups' totals summed in order. The order is fixed, so
    // every run gives the same bits.
    float off = 0.f;
    for (int r0 = 0; r0 < len; r0 += 8) {
        float acc = 0.f;
        for (int r = r0; r < r0 + 8 && r < len; ++r) {
            const long long i = ((long long)(start + r) * H + h) * 128 + d;
            acc += cake_gate_sigmoid(load_x(x + i), a_log, bias, lower_bound);
            G[i] = __fadd_rn(off, acc);
        }
        off = __fadd_rn(off, acc);
    }
}
