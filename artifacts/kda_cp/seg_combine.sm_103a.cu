// GENERATED FILE, DO NOT EDIT.
// generator: cake render from generators/templates/kda/seg_combine.cu.j2
// record: kda_cp/seg_combine  program: kda_cp.seg_combine.sm_103a
// identity: sha256:29d269ebe7aaf36676afc90d11b72758d4db99d0aa5207ab82fc23a2639c58a6
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
// ---- end cake/cp_async.cuh ----

namespace {
constexpr int LD = 132;  // padded row: float4 reads of row r hit banks 4r..4r+3, conflict-free per 8 lanes
}  // namespace

extern "C" __global__ void __launch_bounds__(128) kda_seg_combine(
    const float* __restrict__ M, const float* __restrict__ B, const int* __restrict__ table,
    const float* __restrict__ x0, float* __restrict__ X, int H, int reverse)
{
    extern __shared__ __attribute__((aligned(16))) unsigned char smem[];
    float* Ms = reinterpret_cast<float*>(smem);                // [2][128][LD]
    float (*Xs)[4] = reinterpret_cast<float (*)[4]>(Ms + 2 * 128 * LD);  // the state's 4 columns

    const int cb = blockIdx.x, h = blockIdx.y, n = blockIdx.z, r = threadIdx.x;
    const int f = table[3 * n], P = table[3 * n + 1], l = table[3 * n + 2];
    const int col = 4 * cb;
    auto at = [&](long long row) {  // offset of element (r, col) of state [row, h]
        return ((row * H + h) * 128 + r) * 128 + col;
    };

    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (x0 != nullptr) x = *reinterpret_cast<const float4*>(x0 + at(n));
    const int first_out = reverse ? f + P - 1 : f;
    *reinterpret_cast<float4*>(X + at(first_out)) = x;
    *reinterpret_cast<float4*>(Xs[r]) = x;
    if (P < 2) return;  // block-uniform

    // M[row, h] into buffer b: 4096 16-byte pieces, 32 per thread, rows r0 = tid / 32 + 4 i.
    auto issue = [&](int b, long long row) {
        const float* src = M + (row * H + h) * 16384;
        float* dst = Ms + b * 128 * LD;
        const int c4 = 4 * (r & 31);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const int rr = (r >> 5) + 4 * i;
            cake_cp_async16(dst + rr * LD + c4, src + rr * 128 + c4, 16);
        }
    };
    // step s applies segment p = s (forward) or p = P - 1 - s (reverse)
    auto seg = [&](int s) { return reverse ? P - 1 - s : s; };

    auto fma4 = [](float4& a, float m, const float4& x) {
        a.x = fmaf(m, x.x, a.x);
        a.y = fmaf(m, x.y, a.y);
        a.z = fmaf(m, x.z, a.z);
        a.w = fmaf(m, x.w, a.w);
    };

    issue(0, l + seg(0));
    cake_cp_async_commit();
    float4 b_next = *reinterpret_cast<const float4*>(B + at(l + seg(0)));
#pragma unroll 1
    for (int s = 0; s < P - 1; ++s) {
        const int p = seg(s);
        if (s + 1 < P - 1) issue((s + 1) & 1, l + seg(s + 1));
        cake_cp_async_commit();
        // B of this step was loaded during the last one; the next one's load flies over this one.
        // Two accumulators (even and odd k) halve the dependent FMA chains; acc = B + even + odd.
        float4 acc = b_next, odd = make_float4(0.f, 0.f, 0.f, 0.f);
        if (s + 1 < P - 1) b_next = *reinterpret_cast<const float4*>(B + at(l + seg(s + 1)));
        cake_cp_async_wait<1>();
        __syncthreads();  // M[p] landed for every thread; Xs holds the previous state
        const float* m = Ms + (s & 1) * 128 * LD;
        if (!reverse) {
#pragma unroll 8
            for (int k = 0; k < 128; k += 4) {
                const float4 mk = *reinterpret_cast<const float4*>(m + r * LD + k);
                fma4(acc, mk.x, *reinterpret_cast<const float4*>(Xs[k]));
                fma4(odd, mk.y, *reinterpret_cast<const float4*>(Xs[k + 1]));
                fma4(acc, mk.z, *reinterpret_cast<const float4*>(Xs[k + 2]));
                fma4(odd, mk.w, *reinterpret_cast<const float4*>(Xs[k + 3]));
            }
        } else {
#pragma unroll 8
            for (int k = 0; k < 128; k += 2) {
                fma4(acc, m[k * LD + r], *reinterpret_cast<const float4*>(Xs[k]));
                fma4(odd, m[(k + 1) * LD + r], *reinterpret_cast<const float4*>(Xs[k + 1]));
            }
        }
        acc.x += odd.x;
        acc.y += odd.y;
        acc.z += odd.z;
        acc.w += odd.w;
        __syncthreads();  // every read of Xs and of this M buffer is done
        *reinterpret_cast<float4*>(Xs[r]) = acc;
        *reinterpret_cast<float4*>(X + at(reverse ? f + p - 1 : f + p + 1)) = acc;
    }
    cake_cp_async_wait<0>();
}
