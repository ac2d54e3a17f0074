#pragma once
// x through an empty asm: the compiler cannot see through it, so what a thread derives from x
// (its shared-memory offsets) is computed once where written, not recomputed from tid at every
// use nor kept live across a phase or a loop that re-derives it (register pressure). No
// instruction.
__device__ __forceinline__ int cake_opaque(int x) {
    asm volatile("" : "+r"(x));
    return x;
}
