// twin of generators/include/cake/opaque.cuh sha256:a6918079f83190fd3d63fcc2e37f2bcb8ac09a134b46f66e9709c1ba4e645c6f
#pragma once

// A compiler-only barrier on the GPU; the CPU build needs none.
__device__ __forceinline__ int cake_opaque(int x) { return x; }
