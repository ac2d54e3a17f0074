"""The CPU twin of cake/mma_f16.cuh (tools/emu) on tests/cuda/mma_f16_probe.cu: the same kernels and
references as the H200 probe (tests/test_mma_f16_probe_gpu.py), so a program that uses the fp16
tensor-core path can be checked on the emulator."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))

import mma_f16_probe as probe  # noqa: E402

from cake.tree import default_tree  # noqa: E402
from tools.emu import compiler  # noqa: E402
from tools.emu.loader import EmuModule, Options  # noqa: E402
from tools.emu.source import translation_unit  # noqa: E402

pytestmark = pytest.mark.skipif(
    not compiler.available(), reason=f"no C++ compiler {compiler.compiler()!r} for tools/emu"
)


@pytest.fixture(scope="module")
def module() -> EmuModule:
    tree = default_tree()
    symbols = [k.symbol for k in probe.KERNELS]
    unit = translation_unit(probe.source(tree), "mma_f16_probe", symbols, tree.include)
    return EmuModule(probe.ENTRY, compiler.library(unit, "mma_f16_probe"), Options())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f16_mma_fragment_map(module, seed):  # noqa: ANN001
    A, B = probe.operands(seed)
    D = torch.full((16, 8), float("nan"))
    Dt = torch.full((16, 8), float("nan"))
    module["mma_f16_probe"]((1,), A, B, D, Dt)
    probe.check_products(A, B, D, Dt)


def test_f16x2_conversion_rounds_as_torch(module):  # noqa: ANN001
    x = probe.conversion_inputs()
    out = torch.zeros(x.numel() // 2, dtype=torch.int32)
    module["f16x2_probe"]((1,), x, out, out.numel())
    probe.check_conversion(x, out)


def test_a_swapped_fragment_is_caught(module):  # noqa: ANN001
    """The check is not vacuous: A with two k columns exchanged multiplies to something else."""
    A, B = probe.operands(0)
    D = torch.zeros(16, 8)
    Dt = torch.zeros(16, 8)
    module["mma_f16_probe"]((1,), A, B, D, Dt)
    with pytest.raises(AssertionError, match="fragment map wrong"):
        probe.check_products(A[:, [1, 0, *range(2, 16)]], B, D, Dt)
