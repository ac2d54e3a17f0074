#pragma once
// Where kda_fwd_chunk (sm_90a) stores each chunk tile that the state passes read: in kda_fwd_state's
// shared-memory image of that tile, so that fwd_state copies a tile whole with one bulk copy (one
// thread, a transaction mbarrier) where it took 16-byte cp.async pieces from 128 threads
// (docs/notes.md, session 22). Float offsets inside one chunk-head's tile; every map is a
// permutation of 16-byte pieces, so a row-major 128-byte run of a row lands on one 128-byte line.
// Plain C++ (the CPU emulator compiles it as it is).
#include "cake/wgmma_layout.cuh"

// fwd_state's chain keeps W's rows (tokens) and Kd^T's rows (keys) in the order pk,
// pk(8j + 2t + e) = 8j + t + 4e: row r is stored at position pkinv(r).
__device__ __forceinline__ int cake_pkinv(int r) { return (r & ~7) + 2 * (r & 3) + ((r >> 2) & 1); }
__device__ __forceinline__ int cake_pk(int q) { return (q & ~7) + 4 * (q & 1) + ((q >> 1) & 3); }

// U's 16-byte chunks XOR-swizzled per row (fwd_state's el64): rows 2q, 2q + 1 differ in bit 2.
__device__ __forceinline__ int cake_sw64(int r) { return (r & 6) ^ ((r & 1) << 2); }

// W [64 tok][128 K]: wgmma B operand of W S, rows in pk order.
__device__ __forceinline__ int cake_img_w(int r, int k) { return cake_wg_idx<64>(cake_pkinv(r), k); }
// Kd^T [128 K][64 tok]: B operand of Vnew^T Kd, rows (keys) in pk order.
__device__ __forceinline__ int cake_img_kd(int d, int r) { return cake_wg_idx<128>(cake_pkinv(d), r); }
// Qg [64 tok][128 K] and Aqk [64][64]: A operands of O, rows as they are.
__device__ __forceinline__ int cake_img_qg(int r, int k) { return cake_wg_idx<64>(r, k); }
__device__ __forceinline__ int cake_img_aqk(int r, int c) { return cake_wg_idx<64>(r, c); }
// U [64 tok][128 v]: the two 64-value halves one after the other (one per value block of
// fwd_state), each [64 tok][64 v] with its 16-byte chunks swizzled by cake_sw64.
__device__ __forceinline__ int cake_img_u(int r, int v) {
    return (v >> 6) * 4096 + r * 64 + ((((v & 63) >> 2) ^ cake_sw64(r)) << 2) + (v & 3);
}
