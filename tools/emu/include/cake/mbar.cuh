// twin of generators/include/cake/mbar.cuh sha256:bea1c4f5b8e502629d56dcb4eb25decca97b3b94b00b5652a4b8a27a8bfdf851
#pragma once

// mbarrier.init / arrive / try_wait.parity on the mbarrier at cake_smem_addr(b): see emu::mbar_*.
__device__ __forceinline__ void cake_mbar_init(unsigned long long* b, int n) { ::emu::mbar_init(b, n); }
__device__ __forceinline__ void cake_mbar_arrive(unsigned long long* b) { ::emu::mbar_arrive(b); }
__device__ __forceinline__ void cake_mbar_wait(unsigned long long* b, int parity) { ::emu::mbar_wait(b, parity); }
