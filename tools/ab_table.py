"""The `ab` step's table: per-kernel times of each variant and row, here / .base / here again.

    python3 tools/ab_table.py ab.txt

ab.txt holds, per variant and tree, the lines of tools/kernel_times.py: "== <variant> <new|base|new2>",
then "<row> <variant> segments=...: per fwd+bwd, us" and "<us> x<n> <kernel>" / "<us> total ...".
Prints one line per (variant, row, kernel) with the three times and new / base - 1 (the mean of
the two runs here). Kernels that are forms of one pass (SAME_PASS: kda_bwd_state_bulk and
kda_bwd_state_reg, which split calls launch in place of kda_bwd_state, and kda_fwd_state_lean,
sm_90a's local launch of kda_fwd_state) are listed under the pass's name, so that a tree that switched form still lines up
with its base.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

SAME_PASS = {
    "kda_bwd_state_bulk": "kda_bwd_state",
    "kda_bwd_state_reg": "kda_bwd_state",
    "kda_fwd_state_lean": "kda_fwd_state",
}


def parse(text: str) -> dict[tuple[str, str, str], dict[str, float]]:
    times: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    variant = tree = row = ""
    for line in text.splitlines():
        if m := re.match(r"== (\S+) (new|base|new2)$", line):
            variant, tree = m.groups()
        elif m := re.match(r"(\S+) \S+ segments=", line):
            row = m.group(1)
        elif m := re.match(r"\s*([\d.]+)\s+x\d+\s+(\S+)", line):
            t = times[(variant, row, SAME_PASS.get(m.group(2), m.group(2)))]
            t[tree] = t.get(tree, 0.0) + float(m.group(1))  # both forms in one call: the pass's sum
        elif m := re.match(r"\s*([\d.]+)\s+total", line):
            times[(variant, row, "total")][tree] = float(m.group(1))
    return times


def main() -> int:
    times = parse(Path(sys.argv[1]).read_text())
    print(
        f"{'variant':18} {'row':6} {'kernel':22} {'new':>9} {'base':>9} {'new2':>9} {'change':>8}"
    )
    for (variant, row, kernel), t in times.items():
        cells = [f"{t[k]:9.1f}" if k in t else f"{'-':>9}" for k in ("new", "base", "new2")]
        here = [t[k] for k in ("new", "new2") if k in t]
        change = (
            f"{100 * (sum(here) / len(here) / t['base'] - 1):+7.1f}%"
            if here and t.get("base")
            else ""
        )
        print(f"{variant:18} {row:6} {kernel:22} {' '.join(cells)} {change:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
