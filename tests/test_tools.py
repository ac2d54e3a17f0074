"""The device tools' pure parts, on the CPU: tools/ab_table.py reads the `ab` step's log."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from ab_table import parse  # noqa: E402

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
