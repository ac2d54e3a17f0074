"""Side-by-side table of cake's wall times from bench.py JSONs of two trees (device_check.sh's
`wall` step: this tree, .base, this tree again), one line per (row, variant, op):

  python tools/wall_table.py new.json base.json new2.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def times(path: str) -> dict[tuple[str, str, str], float]:
    out = {}
    for r in json.loads(Path(path).read_text())["speed"]:
        if r.get("cake_ms") is not None:
            out[(r["row"], f"{r['gate']}:{r['l2n']}:{r['path']}", r["op"])] = r["cake_ms"]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    new, base, new2 = (times(p) for p in argv)
    print(
        f"{'row':6} {'variant':18} {'op':8} {'new ms':>8} {'base ms':>8} {'new2 ms':>8} {'change':>8}"
    )
    for key, b in base.items():
        a, c = new.get(key), new2.get(key)
        if a is None or c is None:
            continue
        mean = (a + c) / 2
        print(
            f"{key[0]:6} {key[1]:18} {key[2]:8} {a:8.3f} {b:8.3f} {c:8.3f} {100 * (mean / b - 1):+7.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
