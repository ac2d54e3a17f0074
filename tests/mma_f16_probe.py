"""tests/cuda/mma_f16_probe.cu's inputs and what its outputs must be, shared by the H200 test
(tests/test_mma_f16_probe_gpu.py) and the CPU twin's (tests/test_mma_f16_emu.py): both hold the
same kernels to the same references, so the twin agrees with the hardware where both pass."""

from __future__ import annotations

from pathlib import Path

import torch

from cake.manifest import Entry, Kernel
from cake.render import inline_headers
from cake.spec import ArgType
from cake.tree import Tree

SOURCE = Path(__file__).parent / "cuda" / "mma_f16_probe.cu"
KERNELS = (
    Kernel(
        symbol="mma_f16_probe",
        threads=32,
        smem=0,
        args=(ArgType.ptr, ArgType.ptr, ArgType.ptr, ArgType.ptr),
    ),
    Kernel(symbol="f16x2_probe", threads=128, smem=0, args=(ArgType.ptr, ArgType.ptr, ArgType.i32)),
)
# what cake.launch.Module and the emulator's EmuModule read of a program: its name and kernels
ENTRY = Entry.model_construct(program="mma_f16_probe", kernels=KERNELS)


def source(tree: Tree) -> str:
    """The probe with cake's headers inlined as `cake render` inlines them."""
    return inline_headers(SOURCE.read_text(), tree, {})


def operands(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A [16][16], B [16][8] (CPU, fp32): fp16 values (so TF32 values too), every element
    different, rows of A over 2^-8..2^8 (the spread a power-of-two row scale leaves)."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.exp2(torch.linspace(-8, 8, 16)).unsqueeze(1)
    A = (torch.randn(16, 16, generator=gen) * rows).half().float()
    B = torch.randn(16, 8, generator=gen).half().float()
    return A, B


def check_products(A: torch.Tensor, B: torch.Tensor, D: torch.Tensor, Dt: torch.Tensor) -> None:
    """D (f16 mma) and Dt (two tf32 mma) against float64: exact products, fp32 sums only."""
    ref = A.double() @ B.double()
    scale = A.double().abs() @ B.double().abs()  # what fp32 sums of 16 exact products can be off by
    for name, out in (("f16", D), ("tf32", Dt)):
        err = ((out.double() - ref).abs() / scale).max().item()
        assert err < 1e-6, f"{name} product off by {err:.3e} of its terms: fragment map wrong"


def conversion_inputs() -> torch.Tensor:
    """fp32 values (an even count) over fp16's range and its edges: normals, subnormals, exact
    ties of both parities, the overflow threshold, signed zeros and infinities, NaN."""
    gen = torch.Generator().manual_seed(7)
    mags = torch.exp2(torch.empty(4000).uniform_(-30, 17, generator=gen))
    signs = torch.where(torch.rand(4000, generator=gen) < 0.5, -1.0, 1.0)
    f16 = torch.arange(0, 0x7C00, 37, dtype=torch.int32).to(torch.int16).view(torch.float16)
    ulps = torch.arange(0, 0x7C00, 37, dtype=torch.int32)
    half_ulp = torch.where(ulps < 0x400, 2.0**-25, torch.exp2(((ulps >> 10) - 26).double())).float()
    ties = f16.float() + half_ulp  # exactly halfway to the next fp16 value
    edges = torch.tensor(
        [0.0, -0.0, 65504.0, 65519.0, 65520.0, 65536.0, 1e30, 2.0**-14, 2.0**-24, 2.0**-25,
         3 * 2.0**-26, 2.0**-26, 1e-30, float("inf"), float("-inf"), float("nan")]
    )  # fmt: skip
    x = torch.cat([mags * signs, ties, -ties, edges])
    return x if x.numel() % 2 == 0 else torch.cat([x, torch.zeros(1)])


def check_conversion(x: torch.Tensor, out: torch.Tensor) -> None:
    """out[i] = lo | hi << 16 with lo, hi = fp16(x[2 i]), fp16(x[2 i + 1]) rounded to nearest even
    (torch's conversion); a NaN input must give a NaN (its payload is not compared)."""
    bits = out.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    got = torch.stack([bits & 0xFFFF, bits >> 16], 1).reshape(-1)
    want = x.half().view(torch.int16).to(torch.int64) & 0xFFFF
    nan = torch.isnan(x)
    got_nan = ((got & 0x7C00) == 0x7C00) & ((got & 0x3FF) != 0)
    assert torch.equal(got_nan, nan), "NaN in, NaN out"
    bad = (got != want) & ~nan
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} conversions differ, first x = {x[i].item()!r}: "
            f"0x{int(got[i]):04x}, expected 0x{int(want[i]):04x}"
        )
