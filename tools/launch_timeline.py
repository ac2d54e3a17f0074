"""Where the host is while the GPU runs back-to-back forwards (or fwd+bwd steps) of one benchmark
row: each kernel launch's host time stamps inside a call (entry and return of the launch, from the
call's start), the host time a call takes, and whether torch reports a synchronizing operation
(torch.cuda.set_sync_debug_mode). A launch whose return comes long after its entry, or a gap
between two launches, shows where the host waited on the GPU.

  python tools/launch_timeline.py --row 4doc --variant raw:off:saved [--step]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import cake_step, call_kwargs, parse_variants  # noqa: E402

import cake.kda.api as api  # noqa: E402
import cake.launch as launch  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", default="4doc")
    p.add_argument("--variant", default="raw:off:saved")
    p.add_argument("--calls", type=int, default=6)
    p.add_argument("--step", action="store_true", help="time fwd+bwd steps, not forwards")
    args = p.parse_args()
    (v,) = parse_variants(args.variant)
    x, step = cake_step(args.row, v)
    if args.step:
        fn = step
    else:
        fn = functools.partial(api.chunk_kda, **call_kwargs("cake", api.chunk_kda, x, v.path))
    for _ in range(3):
        fn()
    torch.cuda.synchronize()

    stamps: list[tuple[str, float, float]] = []
    call = launch.Function.__call__

    def recorded(self, grid, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        t = time.perf_counter()
        out = call(self, grid, *a, **kw)
        stamps.append((self.meta.symbol, t, time.perf_counter()))
        return out

    launch.Function.__call__ = recorded
    launch.GRAPHS = False  # each kernel its own launch, so that every one is stamped
    starts = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            for _ in range(args.calls):
                starts.append((time.perf_counter(), len(stamps)))
                fn()
            torch.cuda.set_sync_debug_mode(0)
        end = time.perf_counter()
        torch.cuda.synchronize()
    finally:
        launch.Function.__call__ = call
        launch.GRAPHS = None
    what = "fwd+bwd step" if args.step else "forward"
    print(f"{args.row} {v.key}, back-to-back {what}s, host us from each call's start:")
    bounds = [*starts[1:], (end, len(stamps))]
    for (t0, i0), (t1, i1) in zip(starts, bounds, strict=True):
        parts = [f"{s} {1e6 * (a - t0):.0f}-{1e6 * (b - t0):.0f}" for s, a, b in stamps[i0:i1]]
        print(f"  call {1e6 * (t1 - t0):8.0f}: " + ", ".join(parts))
    # torch's own notice that the mode is a prototype is a warning too; count only its reports
    syncs = [
        str(w.message).splitlines()[0][:160]
        for w in caught
        if "called a synchronizing" in str(w.message)
    ]
    print(f"synchronizing operations reported by torch: {len(syncs)}")
    for s in dict.fromkeys(syncs):
        print("  " + s)


if __name__ == "__main__":
    main()
