"""Where cake's time goes: one fwd+bwd of chunk_kda per benchmark row under torch.profiler,
printed as per-kernel GPU time (kernels launched through the driver API show up too), and the
peak memory of one fwd+bwd (inputs included, as tools/bench.py measures it).

  python tools/kernel_times.py --rows 1doc,R2 --variant g:off:saved
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import cake_step, parse_variants  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1doc,4doc,R2,m2")
    p.add_argument("--variant", default="g:off:saved")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument(
        "--segments", type=int, default=None, help="chunk_kda's segments= (default auto)"
    )
    args = p.parse_args()
    (v,) = parse_variants(args.variant)
    for name in args.rows.split(","):
        _, step = cake_step(name, v, args.segments)
        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.calls):
            step()
        end.record()
        torch.cuda.synchronize()
        wall = start.elapsed_time(end) * 1000 / args.calls
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                step()
            torch.cuda.synchronize()
        total: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                total[e.name] += e.device_time_total / args.calls
                count[e.name] += 1
        print(f"{name} {v.key} segments={args.segments or 'auto'}: per fwd+bwd, us")
        for k, t in sorted(total.items(), key=lambda kv: -kv[1])[:18]:
            print(f"  {t:9.1f}  x{count[k] // args.calls:<3d} {k[:80]}")
        print(
            f"  {sum(total.values()):9.1f}  total kernel time, {wall:.1f} wall; peak memory of one fwd+bwd {peak:.0f} MiB"
        )


if __name__ == "__main__":
    main()
