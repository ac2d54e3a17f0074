// twin of generators/include/cake/mbar.cuh sha256:13c9c35141061d858410d26384c65f8689a236d8e42837dc3945443718a36e7e
#pragma once

// mbarrier.init / arrive / try_wait.parity on the mbarrier at cake_smem_addr(b): see emu::mbar_*.
__device__ __forceinline__ void cake_mbar_init(unsigned long long* b, int n) { ::emu::mbar_init(b, n); }
__device__ __forceinline__ void cake_mbar_arrive(unsigned long long* b) { ::emu::mbar_arrive(b); }
__device__ __forceinline__ void cake_mbar_wait(unsigned long long* b, int parity) { ::emu::mbar_wait(b, parity); }
// the async proxy is not modelled: nothing to fence
__device__ __forceinline__ void cake_mbar_init_fence() {}
__device__ __forceinline__ void cake_mbar_expect_tx(unsigned long long* b, unsigned int bytes) { ::emu::mbar_expect_tx(b, bytes); }
// see emu::bulk_load: lands at issue with eager copies, else at the first wait on the phase
__device__ __forceinline__ void cake_bulk_load(void* dst, const void* src, unsigned int bytes, unsigned long long* b) {
    ::emu::bulk_load(dst, src, bytes, b);
}
