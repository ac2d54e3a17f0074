#pragma once
// A 16-byte store to global memory issued as one st.global.v4.f32. The C++ float4 store is not
// always one instruction: the compiler split kda_fwd_chunk's row-major float4 stores (G_out, TA_out,
// and until session 22 Qg, Aqk and Kd) into four 4-byte stores, depending only on how the address
// was formed (docs/notes.md, session 22), on a kernel near the shared-memory / LSU pipe's limit.
// p: 16-byte aligned, in global memory.
__device__ __forceinline__ void cake_st_global_v4(float* p, float4 v) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
}
