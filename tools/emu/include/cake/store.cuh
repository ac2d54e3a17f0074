// twin of generators/include/cake/store.cuh sha256:9d16649905984147ec90d28095ea7e90fa3d348aa04f0fe9fad6a518c5c38d72
#pragma once

// st.global.v4.f32: one 16-byte store (the address must be 16-byte aligned)
__device__ __forceinline__ void cake_st_global_v4(float* p, float4 v) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) ::emu::fail("st.global.v4 to %p: not 16-byte aligned", static_cast<void*>(p));
    memcpy(p, &v, 16);
}
