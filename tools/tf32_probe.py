"""What the tensor core reads of an fp32 register that is not a TF32 value (H200 only).

mma.sync m16n8k8 .tf32 with one operand an identity (exact: every product but one is zero), so
the output is the other operand as the tensor core took it. Printed: how often that equals the
value truncated to TF32 (low 13 bits cleared), rounded to nearest (cvt.rn) and the raw fp32, over
random values with random low bits, for the A and the B operand.

    python3 tools/tf32_probe.py [--n 65536]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCE = r"""
#include "cake/mma.cuh"
// Per warp w: A_w = x[128 w ..] as 16 x 8 (row i, k), B = I (8 x 8): D = A as read.
// Then B_w = x[...] as 8 x 8 (k, n) with A = [I; I]: D = B (twice) as read.
extern "C" __global__ void tf32_probe(const float* __restrict__ x, float* __restrict__ da,
                                      float* __restrict__ db, int warps) {
    const int w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= warps) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float* a = x + 128 * w;
    const unsigned int one = __float_as_uint(1.f);
    auto raw = [&](int i, int k) { return __float_as_uint(a[8 * i + k]); };
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    // A raw; B[k][n] = (k == n): lane holds b0 = B[t][g], b1 = B[t + 4][g]
    cake_mma_tf32(d, raw(g, t), raw(g + 8, t), raw(g, t + 4), raw(g + 8, t + 4),
                  t == g ? one : 0u, t + 4 == g ? one : 0u);
    for (int e = 0; e < 4; ++e) da[128 * w + 8 * (g + 8 * (e >> 1)) + 2 * t + (e & 1)] = d[e];
    // B raw (rows k of x's first 64 values), A[i][k] = (k == i % 8)
    float f[4] = {0.f, 0.f, 0.f, 0.f};
    cake_mma_tf32(f, t == g ? one : 0u, t == g ? one : 0u, t + 4 == g ? one : 0u, t + 4 == g ? one : 0u,
                  raw(t, g), raw(t + 4, g));
    for (int e = 0; e < 4; ++e) db[128 * w + 8 * (g + 8 * (e >> 1)) + 2 * t + (e & 1)] = f[e];
}
"""


def measure(n: int = 1 << 16) -> dict[str, dict[str, float]]:
    """{operand: {reading: share of values the tensor core's output equals}} for n random values
    (a multiple of 128) with random low 13 bits; readings: trunc, rn (cvt.rn), rna, fp32."""
    import torch

    from cake.compile import compile_source
    from cake.launch import Module
    from cake.manifest import Entry, Kernel
    from cake.render import inline_headers
    from cake.spec import Arch, ArgType
    from cake.tree import default_tree

    warps = n // 128
    kernels = (Kernel(symbol="tf32_probe", threads=256, smem=0,
                      args=(ArgType.ptr, ArgType.ptr, ArgType.ptr, ArgType.i32)),)  # fmt: skip
    entry = Entry.model_construct(program="tf32_probe", kernels=kernels)
    compiled = compile_source(
        inline_headers(SOURCE, default_tree(), {}), Arch("sm_90a"), "tf32_probe"
    )
    mod = Module(entry, compiled.cubin, 0)
    gen = torch.Generator().manual_seed(0)
    scale = torch.exp2(torch.randint(-20, 20, (warps * 128,), generator=gen).float())
    xi = (torch.randn(warps * 128, generator=gen) * scale).view(torch.int32)
    # random low 13 bits, a seventh of them exact half-ulp ties
    low = torch.randint(0, 1 << 13, xi.shape, generator=gen, dtype=torch.int32)
    low[::7] = 1 << 12
    xi = (xi & ~0x1FFF) | low
    x = xi.view(torch.float32)
    da = torch.full_like(x, float("nan")).cuda()
    db = torch.full_like(x, float("nan")).cuda()
    mod["tf32_probe"](((warps + 7) // 8,), x.cuda(), da, db, warps)
    torch.cuda.synchronize()
    lsb = (xi >> 13) & 1
    readings = {
        "trunc": (xi & ~0x1FFF).view(torch.float32),
        "rn": ((xi + 0xFFF + lsb) & ~0x1FFF).view(torch.float32),  # ties to even at bit 13
        "rna": ((xi + 0x1000) & ~0x1FFF).view(torch.float32),
        "fp32": x,
    }
    out = {}
    for name, d in (("A", da.cpu()), ("B", db.cpu())):
        # B's output rows 0-7 are each block's first 64 values (rows 8-15 repeat them)
        pick = (lambda v: v) if name == "A" else (lambda v: v.view(-1, 128)[:, :64].reshape(-1))
        got = pick(d)
        out[name] = {k: int((got == pick(v)).sum()) / got.numel() for k, v in readings.items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 16, help="values (a multiple of 128)")
    a = p.parse_args()
    for name, shares in measure(a.n).items():
        text = "  ".join(f"{k} {v:.4f}" for k, v in shares.items())
        print(f"operand {name}: {a.n if name == 'A' else a.n // 2} values, equal to  {text}")


if __name__ == "__main__":
    main()
