// twin of generators/include/cake/bar.cuh sha256:201bb725b48421146578c5f178ce09e4b75ab5e3e0a713f5dc7cd42afe951a8a
#pragma once

// bar.sync / bar.arrive id, n: see emu::named_bar.
__device__ __forceinline__ void cake_bar_sync(int id, int n) { ::emu::named_bar(id, n, true); }
__device__ __forceinline__ void cake_bar_arrive(int id, int n) { ::emu::named_bar(id, n, false); }
