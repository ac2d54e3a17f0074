#pragma once
// Sums over lanes by recursive halving. A lane holds 2 N values; at partner lane ^ B it sends the
// half that the partner keeps (the upper half when its own bit B is clear, the lower when set) and
// adds the partner's copy of the half it keeps, which then lies in v[0 .. N). Each value meets the
// same partner as in a butterfly over the same lane bits, in the same order, so every sum has the
// bits of that butterfly. Halving 2 N values down to one takes N + N / 2 + ... + 1 = 2 N - 1 SHFL,
// where butterflies over the same levels take 2 N each (SHFL issues at one warp instruction a
// clock an SM).
// After levels at bits B1, B2, ... a lane keeps the value whose index has, from its top bit down,
// the lane's bits B1, B2, ...
template <int N, int B, int M>
__device__ __forceinline__ void cake_halve(float (&v)[M], int lane) {
    static_assert(2 * N <= M, "cake_halve: the lane holds 2 N values");
    const bool up = lane & B;
#pragma unroll
    for (int x = 0; x < N; ++x) {
        const float send = up ? v[x] : v[x + N];
        const float keep = up ? v[x + N] : v[x];
        v[x] = keep + __shfl_xor_sync(0xffffffffu, send, B);
    }
}
