"""GPU: cake/mma_f16.cuh alone on the hardware (tests/cuda/mma_f16_probe.cu): one m16n8k16 f16
mma.sync against two m16n8k8 tf32 ones and float64 on fp16-exact operands (a fragment-map mistake
is an O(1) error), and cvt.rn.f16x2's rounding against torch's, bit for bit. The CPU twin passes the
same checks (tests/test_mma_f16_emu.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

import mma_f16_probe as probe  # noqa: E402

from cake.compile import compile_source  # noqa: E402
from cake.launch import Module  # noqa: E402
from cake.spec import Arch  # noqa: E402
from cake.tree import default_tree  # noqa: E402

pytestmark = [pytest.mark.gpu]


@pytest.fixture(scope="module")
def kernels() -> Module:
    compiled = compile_source(probe.source(default_tree()), Arch("sm_90"), "mma_f16_probe")
    return Module(probe.ENTRY, compiled.cubin, 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f16_mma_fragment_map(kernels, seed):  # noqa: ANN001
    A, B = probe.operands(seed)
    D = torch.full((16, 8), float("nan"), device="cuda")
    Dt = torch.full((16, 8), float("nan"), device="cuda")
    kernels["mma_f16_probe"]((1,), A.cuda(), B.cuda(), D, Dt)
    torch.cuda.synchronize()
    probe.check_products(A, B, D.cpu(), Dt.cpu())


def test_f16x2_conversion_rounds_as_torch(kernels):  # noqa: ANN001
    x = probe.conversion_inputs()
    out = torch.zeros(x.numel() // 2, dtype=torch.int32, device="cuda")
    kernels["f16x2_probe"]((1,), x.cuda(), out, out.numel())
    torch.cuda.synchronize()
    probe.check_conversion(x, out.cpu())
