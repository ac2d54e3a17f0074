// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/seg_combine.cu.j2
// record: kda_cp/seg_combine  program: kda_cp.seg_combine.sm_103a
// identity: sha256:e44a193a795c3f650fc343fd9883e4e8dd51b2ba73c0c0f90f6940f9ba1cad98
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

extern "C" __global__ void __launch_bounds__(512) kda_seg_combine(
    const float* __restrict__ M, const float* __restrict__ B, const int* __restrict__ table,
    const float* __restrict__ x0, float* __restrict__ X, int H, int reverse)
{
    constexpr int COLS = 16;  // value columns per block
    extern __shared__ __attribute__((aligned(16))) unsigned char smem[];
    float* Ms = reinterpret_cast<float*>(smem);                                     // [2][128][LD]
    float (*Xs)[COLS] = reinterpret_cast<float (*)[COLS]>(Ms + 2 * 128 * LD_MAX);  // the state's columns

    const int cb = blockIdx.x, h = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    // lanes q*8 .. q*8+7 share the reduction quarter q; a warp holds one 4-column group cg and
    // 8 consecutive row groups rg, so a quarter-warp's M reads hit 8 consecutive rows
    const int q = lane >> 3, cg = warp & 3, rg = 8 * (warp >> 2) + (lane & 7);
    const int LD = reverse ? 136 : 132;
    const int f = table[3 * n], P = table[3 * n + 1], l = table[3 * n + 2];
    const int col = COLS * cb;
    const int r_out = rg + 32 * q;  // after the reduction, lane q adds B and stores row rg + 32 q
    auto at = [&](long long row, int r) {  // offset of element (r, col + 4 cg) of state [row, h]
        return ((row * H + h) * 128 + r) * 128 + col + 4 * cg;
    };

    {  // the boundary value: thread tid loads / stores 4 columns of row tid / 4
        const int rr = tid >> 2, c = 4 * (tid & 3);
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        const long long o = ((static_cast<long long>(n) * H + h) * 128 + rr) * 128 + col + c;
        if (x0 != nullptr) x = *reinterpret_cast<const float4*>(x0 + o);
        const long long first_out = reverse ? f + P - 1 : f;
        *reinterpret_cast<float4*>(X + ((first_out * H + h) * 128 + rr) * 128 + col + c) = x;
        *reinterpret_cast<float4*>(&Xs[rr][c]) = x;
    }
    if (P < 2) return;  // block-uniform

    // M[row, h] into buffer b: 4096 16-byte pieces, 8 per thread (rows tid / 32 + 16 i).
    auto issue = [&](int b, long long row) {
        const float* src = M + (row * H + h) * 16384;
        float* dst = Ms + b * 128 * LD_MAX;
        const int c4 = 4 * lane;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int rr = warp + 16 * i;
            cake_cp_async16(dst + rr * LD + c4, src + rr * 128 + c4, 16);
        }
    };
    auto seg = [&](int s) { return reverse ? P - 1 - s : s; };  // the segment step s applies

    issue(0, l + seg(0));
    cake_cp_async_commit();
    float4 b_next = *reinterpret_cast<const float4*>(B + at(l + seg(0), r_out));
#pragma unroll 1
    for (int s = 0; s < P - 1; ++s) {
        const int p = seg(s);
        if (s + 1 < P - 1) issue((s + 1) & 1, l + seg(s + 1));
        cake_cp_async_commit();
        const float4 b = b_next;  // loaded during the last step; the next one flies over this one
        if (s + 1 < P - 1) b_next = *reinterpret_cast<const float4*>(B + at(l + seg(s + 1), r_out));
        cake_cp_async_wait<1>();
        __syncthreads();  // M[p] landed for every thread; Xs holds the previous state
        const float* m = Ms + (s & 1) * 128 * LD_MAX;
        float4 acc[4], odd[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
            odd[i] = acc[i];
        }
        if (!reverse) {
#pragma unroll 2
            for (int j = 0; j < 8; ++j) {
                const int k = 4 * (q + 4 * j);
                const float4 x_0 = *reinterpret_cast<const float4*>(&Xs[k][4 * cg]);
                const float4 x_1 = *reinterpret_cast<const float4*>(&Xs[k + 1][4 * cg]);
                const float4 x_2 = *reinterpret_cast<const float4*>(&Xs[k + 2][4 * cg]);
                const float4 x_3 = *reinterpret_cast<const float4*>(&Xs[k + 3][4 * cg]);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float4 mk = *reinterpret_cast<const float4*>(m + (rg + 32 * i) * LD + k);
                    fma4(acc[i], mk.x, x_0);
                    fma4(odd[i], mk.y, x_1);
                    fma4(acc[i], mk.z, x_2);
                    fma4(odd[i], mk.w, x_3);
                }
            }
        } else {
#pragma unroll 4
            for (int j = 0; j < 32; j += 2) {
                const int k = q + 4 * j;
                const float4 x_0 = *reinterpret_cast<const float4*>(&Xs[k][4 * cg]);
                const float4 x_4 = *reinterpret_cast<const float4*>(&Xs[k + 4][4 * cg]);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    fma4(acc[i], m[k * LD + rg + 32 * i], x_0);
                    fma4(odd[i], m[(k + 4) * LD + rg + 32 * i], x_4);
                }
            }
        }
        float4 out = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float4 a = make_float4(acc[i].x + odd[i].x, acc[i].y + odd[i].y, acc[i].z + odd[i].z,
                                   acc[i].w + odd[i].w);
            a = shfl_add(a, 8);   // (q0 + q1), (q2 + q3)
            a = shfl_add(a, 16);  // + the other pair: every lane of the row holds the sum
            if (i == q) out = a;
        }
        out = make_float4(out.x + b.x, out.y + b.y, out.z + b.z, out.w + b.w);
        __syncthreads();  // every read of Xs and of this M buffer is done
        *reinterpret_cast<float4*>(&Xs[r_out][4 * cg]) = out;
        *reinterpret_cast<float4*>(X + at(reverse ? f + p - 1 : f + p + 1, r_out)) = out;
    }
    cake_cp_async_wait<0>();
}
