"""GPU: what mma.sync's TF32 operands read of an fp32 register that is not a TF32 value
(tools/tf32_probe.py): its truncation (low 13 bits ignored), on every A and B operand. The
emulator refuses such operands; a program that hands one over on purpose (the prepared
docs/prepared/bwd-split-lo-trunc.patch) is modelled there as truncated, and this holds that model
to the hardware."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import tf32_probe  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.sm90]


def test_tensor_core_truncates_unrounded_tf32_operands():
    shares = tf32_probe.measure(1 << 14)
    for operand in ("A", "B"):
        assert shares[operand]["trunc"] == 1.0, shares
        # the inputs tell the readings apart: round-to-nearest differs on about half of them
        assert shares[operand]["rn"] < 0.6, shares
