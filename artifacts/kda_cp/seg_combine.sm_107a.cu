// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/seg_combine.cu.j2
// record: kda_cp/seg_combine  program: kda_cp.seg_combine.sm_107a
// identity: sha256:4f18d97bfdb27e59243c2a34c91a117b7127a89000764fa8dfd7d5bb258f29b4
// ---- begin cake/cp_async.cuh ----

__device__ __forceinline__ unsigned int cake_smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

// 16-byte global->shared copy that bypasses L1 (every byte is read once per block). src_bytes < 16
// zero-fills the rest, which is how rows past a short chunk become exact zeros.
__device__ __forceinline__ void cake_cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(cake_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
}

// 8-byte global->shared copy (the .cg form above takes 16 bytes only, so this one goes through L1).
__device__ __forceinline__ void cake_cp_async8(void* smem_dst, const void* gmem_src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;"
                 :: "r"(cake_smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cake_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cake_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

// Pull the 128-byte line holding p into L2 (no register result, nothing waits on it): a later
// load of it then pays L2 latency, not DRAM's.
__device__ __forceinline__ void cake_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}
// ---- end cake/cp_async.cuh ----
// ---- begin cake/store.cuh ----
// A 16-byte store to global memory issued as one st.global.v4.f32. The C++ float4 store is not
// always one instruction: the compiler split kda_fwd_chunk's row-major float4 stores (G_out, TA_out,
// and until session 22 Qg, Aqk and Kd) into four 4-byte stores, depending only on how the address
// was formed (docs/notes.md, session 22), on a kernel near the shared-memory / LSU pipe's limit.
// p: 16-byte aligned, in global memory.
__device__ __forceinline__ void cake_st_global_v4(float* p, float4 v) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
}
// ---- end cake/store.cuh ----

namespace {
// Padded rows of M in shared memory. Forward, the 8 lanes of a shared-memory phase read float4s of
// rows r0..r0+7 at the same column: banks 4r (LD = 132) are distinct. Reverse, a warp reads
// scalars M[q + 4j][r] for 8 rows r and q = 0..3: banks 8q + r (LD = 136) are distinct.
constexpr int LD_MAX = 136;

__device__ __forceinline__ void fma4(float4& a, float m, const float4& x) {
    a.x = fmaf(m, x.x, a.x);
    a.y = fmaf(m, x.y, a.y);
    a.z = fmaf(m, x.z, a.z);
    a.w = fmaf(m, x.w, a.w);
}

__device__ __forceinline__ float4 shfl_add(const float4& a, int mask) {
    return make_float4(a.x + __shfl_xor_sync(0xffffffffu, a.x, mask),
                       a.y + __shfl_xor_sync(0xffffffffu, a.y, mask),
                       a.z + __shfl_xor_sync(0xffffffffu, a.z, mask),
                       a.w + __shfl_xor_sync(0xffffffffu, a.w, mask));
}
}  // namespace

extern "C" __global__ void __launch_bounds__(256) kda_seg_combine(
    const float* __restrict__ M, const float* __restrict__ B, const int* __restrict__ table,
    const float* __restrict__ x0, float* __restrict__ X, int H, int reverse)
{
    extern __shared__ __attribute__((aligned(16))) unsigned char smem[];
    float* Ms = reinterpret_cast<float*>(smem);                               // [2][128][LD]
    float (*Xs)[4] = reinterpret_cast<float (*)[4]>(Ms + 2 * 128 * LD_MAX);  // the state's 4 columns

    const int cb = blockIdx.x, h = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    // lanes q*8 .. q*8+7: rows 8 warp .. 8 warp + 7 of this warp, and those + 64
    const int q = lane >> 3, r0 = 8 * warp + (lane & 7);
    const int LD = reverse ? 136 : 132;
    const int f = table[3 * n], P = table[3 * n + 1], l = table[3 * n + 2];
    const int col = 4 * cb;
    auto at = [&](long long row, int r) {  // offset of element (r, col) of state [row, h]
        return ((row * H + h) * 128 + r) * 128 + col;
    };

    if (tid < 128) {  // one thread per row loads / stores the boundary value
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        const long long o = ((static_cast<long long>(n) * H + h) * 128 + tid) * 128 + col;
        if (x0 != nullptr) x = *reinterpret_cast<const float4*>(x0 + o);
        const long long first_out = reverse ? f + P - 1 : f;
        cake_st_global_v4(X + ((first_out * H + h) * 128 + tid) * 128 + col, x);
        *reinterpret_cast<float4*>(Xs[tid]) = x;
    }
    if (P < 2) return;  // block-uniform

    // M[row, h] into buffer b: 4096 16-byte pieces, 16 per thread (rows tid / 32 + 8 i).
    auto issue = [&](int b, long long row) {
        const float* src = M + (row * H + h) * 16384;
        float* dst = Ms + b * 128 * LD_MAX;
        const int c4 = 4 * lane;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const int rr = warp + 8 * i;
            cake_cp_async16(dst + rr * LD + c4, src + rr * 128 + c4, 16);
        }
    };
    auto seg = [&](int s) { return reverse ? P - 1 - s : s; };  // the segment step s applies
    // row r's sum over this lane's quarter of k, in the order of the one-row-a-lane form: forward
    // k = 4 (q + 4 j) + e, e = 0, 2 into acc and 1, 3 into odd; reverse k = q + 4 j, even j into
    // acc, odd j into odd. xr[i]: the state's row of the i-th k of the quarter.
    auto row_sum = [&](const float* m, int r, const float4 (&xr)[32]) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f), odd = acc;
        if (!reverse) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float4 mk = *reinterpret_cast<const float4*>(m + r * LD + 4 * (q + 4 * j));
                fma4(acc, mk.x, xr[4 * j]);
                fma4(odd, mk.y, xr[4 * j + 1]);
                fma4(acc, mk.z, xr[4 * j + 2]);
                fma4(odd, mk.w, xr[4 * j + 3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 32; j += 2) {
                const int k = q + 4 * j;
                fma4(acc, m[k * LD + r], xr[j]);
                fma4(odd, m[(k + 4) * LD + r], xr[j + 1]);
            }
        }
        acc = make_float4(acc.x + odd.x, acc.y + odd.y, acc.z + odd.z, acc.w + odd.w);
        acc = shfl_add(acc, 8);   // (q0 + q1), (q2 + q3)
        return shfl_add(acc, 16);  // + the other pair: every lane of the row holds the sum
    };

    // B[row, h] at this lane's two rows (the lanes with q == 0 add it)
    auto load_b = [&](float4 (&b)[2], long long row) {
#pragma unroll
        for (int t = 0; t < 2; ++t) b[t] = *reinterpret_cast<const float4*>(B + at(row, r0 + 64 * t));
    };

    issue(0, l + seg(0));
    cake_cp_async_commit();
    float4 b_next[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
    if (q == 0) load_b(b_next, l + seg(0));
#pragma unroll 1
    for (int s = 0; s < P - 1; ++s) {
        const int p = seg(s);
        if (s + 1 < P - 1) issue((s + 1) & 1, l + seg(s + 1));
        cake_cp_async_commit();
        const float4 b[2] = {b_next[0], b_next[1]};  // loaded during the last step
        if (q == 0 && s + 1 < P - 1) load_b(b_next, l + seg(s + 1));
        cake_cp_async_wait<1>();
        __syncthreads();  // M[p] landed for every thread; Xs holds the previous state
        float4 xr[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const int k = reverse ? q + 4 * i : 4 * (q + 4 * (i >> 2)) + (i & 3);
            xr[i] = *reinterpret_cast<const float4*>(Xs[k]);
        }
        const float* m = Ms + (s & 1) * 128 * LD_MAX;
        float4 y[2];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            y[t] = row_sum(m, r0 + 64 * t, xr);
            y[t] = make_float4(y[t].x + b[t].x, y[t].y + b[t].y, y[t].z + b[t].z, y[t].w + b[t].w);
        }
        __syncthreads();  // every read of Xs and of this M buffer is done
        if (q == 0) {
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                *reinterpret_cast<float4*>(Xs[r0 + 64 * t]) = y[t];
                cake_st_global_v4(X + at(reverse ? f + p - 1 : f + p + 1, r0 + 64 * t), y[t]);
            }
        }
    }
    cake_cp_async_wait<0>();
}
