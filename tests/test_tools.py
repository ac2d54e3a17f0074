"""The tools' pure parts, on the CPU: tools/ab_table.py reads the `ab` step's log;
tools/state_precision.py's operand formats round as the byte-diet plan says."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import torch  # noqa: E402
from ab_table import parse  # noqa: E402
from state_precision import f16_hilo, f16_scaled, tf32  # noqa: E402

LOG = """== raw:off:saved new
1doc raw:off:saved segments=auto: per fwd+bwd, us
     5363.2  x1   kda_bwd_chunk
     9960.5  total kernel time, 10022.9 wall; peak memory of one fwd+bwd 8468 MiB
R2 raw:off:saved segments=auto: per fwd+bwd, us
      289.2  x3   kda_fwd_state
== raw:off:saved base
1doc raw:off:saved segments=auto: per fwd+bwd, us
     6272.2  x1   kda_bwd_chunk
     10871.4  total kernel time, 10911.2 wall; peak memory of one fwd+bwd 8468 MiB
"""


def test_ab_table_keys_times_by_variant_row_kernel_and_tree():
    times = parse(LOG)
    assert times[("raw:off:saved", "1doc", "kda_bwd_chunk")] == {"new": 5363.2, "base": 6272.2}
    assert times[("raw:off:saved", "1doc", "total")] == {"new": 9960.5, "base": 10871.4}
    assert times[("raw:off:saved", "R2", "kda_fwd_state")] == {"new": 289.2}
    assert len(times) == 3


def _spread(shape, seed=0):
    """fp32-exact values over ~40 binades, signs mixed, so rows hold tiny and large entries."""
    gen = torch.Generator().manual_seed(seed)
    mag = torch.ldexp(
        torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5,
        torch.randint(-30, 10, shape, generator=gen, dtype=torch.int32),
    )
    return (
        (mag * torch.sign(torch.randn(shape, generator=gen, dtype=torch.float64))).float().double()
    )


def test_fp16_with_a_power_of_two_row_scale_rounds_like_tf32():
    x = _spread((64, 128))
    y = f16_scaled(x, -1)
    rowmax = x.abs().amax(-1, keepdim=True)
    big = x.abs() >= rowmax * 2.0**-28
    assert big.float().mean() > 0.3 and (~big).any()
    assert torch.equal(y[big], tf32(x)[big])  # the same bits TF32's cvt.rn gives
    assert ((y - x).abs() <= rowmax * 2.0**-39)[~big].all()  # the rest: fp16 subnormals


def test_hi_lo_fp16_with_a_column_scale_keeps_22_bits():
    x = _spread((128, 64), seed=1)
    y = f16_hilo(x, -2)
    colmax = x.abs().amax(-2, keepdim=True)
    err = (y - x).abs()
    assert (err <= torch.maximum(x.abs() * 2.0**-22, colmax * 2.0**-39)).all()
    assert not torch.equal(y, tf32(x))  # more than TF32 alone
