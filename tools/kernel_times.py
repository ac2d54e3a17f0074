"""Where cake's time goes: one fwd+bwd of chunk_kda per benchmark row under torch.profiler,
printed as per-kernel GPU time (kernels launched through the driver API show up too), and the
peak memory of one fwd+bwd (inputs included, as tools/bench.py measures it).

  python tools/kernel_times.py --rows 1doc,R2 --variant g:off:saved
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import cake_step, call_kwargs, cuda_time_ms, parse_variants, peak_mib  # noqa: E402

import cake.kda.api as api  # noqa: E402
import cake.kda.segments as seg  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1doc,4doc,R2,m2")
    p.add_argument("--variant", default="g:off:saved")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument(
        "--segments", type=int, default=None, help="chunk_kda's segments= (default auto)"
    )
    p.add_argument(
        "--seg-chunks", type=int, default=None,
        help="try the automatic P rule with this SEG_CHUNKS (cake.kda.segments)",
    )  # fmt: skip
    p.add_argument(
        "--fill-blocks", type=int, default=None,
        help="try the automatic P rule with this BLOCKS_PER_ROW_HEAD (cake.kda.segments)",
    )  # fmt: skip
    p.add_argument(
        "--gaps", action="store_true",
        help="also the GPU's idle time between the kernels of back-to-back forwards and steps",
    )  # fmt: skip
    p.add_argument(
        "--each", action="store_true",
        help="also every launch of one forward and one fwd+bwd, in order (duration, idle before)",
    )  # fmt: skip
    args = p.parse_args()
    (v,) = parse_variants(args.variant)
    if args.seg_chunks is not None:
        seg.SEG_CHUNKS = args.seg_chunks
    if args.fill_blocks is not None:
        seg.BLOCKS_PER_ROW_HEAD = args.fill_blocks
    seg.plan_call.cache_clear()
    for name in args.rows.split(","):
        x, step = cake_step(name, v, args.segments)
        step()
        peak = peak_mib(step)
        wall = cuda_time_ms(step, 1, args.calls) * 1000
        kw = call_kwargs("cake", api.chunk_kda, x, v.path)  # the forward as the benchmark calls it
        forward = functools.partial(api.chunk_kda, **kw, segments=args.segments)
        fwd = cuda_time_ms(forward, 1, args.calls) * 1000
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
        rule = f"seg_chunks={seg.SEG_CHUNKS} fill_blocks={seg.BLOCKS_PER_ROW_HEAD}"
        print(f"{name} {v.key} segments={args.segments or 'auto'} ({rule}): per fwd+bwd, us")
        for k, t in sorted(total.items(), key=lambda kv: -kv[1])[:18]:
            print(f"  {t:9.1f}  x{count[k] // args.calls:<3d} {k[:80]}")
        print(
            f"  {sum(total.values()):9.1f}  total kernel time, {wall:.1f} wall (forward alone"
            f" {fwd:.1f}); peak memory of one fwd+bwd {peak:.0f} MiB"
        )
        if args.gaps:
            print_gaps(forward, args.calls, "forward")
            print_gaps(step, args.calls, "fwd+bwd")
        if args.each:
            print_each(forward, "forward")
            print_each(step, "fwd+bwd")


def profiled_kernels(fn, calls: int) -> list[tuple[float, float, str]]:
    """(start, end, name) of every kernel of `calls` back-to-back calls of fn under the profiler,
    in time order, after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )


def print_each(fn, what: str) -> None:
    """One call of fn (after a warm-up call) under the profiler: its kernel launches in order, each
    with its duration and the GPU's idle time before it (launches of one name apart: a local pass
    and its fix-up, the forward's and the replay's)."""
    kernels = profiled_kernels(fn, 1)
    print(f"  {what}, one call: every launch in order, us (duration, idle before)")
    prev_end = kernels[0][0] if kernels else 0
    for start, end, name in kernels:
        print(f"  {end - start:9.1f}  idle {start - prev_end:6.1f}  {name[:60]}")
        prev_end = end


def print_gaps(fn, calls: int, what: str) -> None:
    """Back-to-back calls of fn under the profiler: each kernel's mean duration and the mean idle
    time before it (the previous kernel's end to its start, the first kernel's across calls)."""
    kernels = profiled_kernels(fn, calls)
    gap: dict[str, list[float]] = defaultdict(list)
    dur: dict[str, list[float]] = defaultdict(list)
    for (_, end0, _), (start, end, name) in zip(kernels, kernels[1:], strict=False):
        gap[name].append(start - end0)
        dur[name].append(end - start)
    span = kernels[-1][1] - kernels[0][0]
    print(
        f"  {what} x{calls}, us per call: span {span / calls:.1f}, kernels then the idle before each"
    )
    for name in dur:
        print(
            f"  {sum(dur[name]) / len(dur[name]):9.1f}  idle before {sum(gap[name]) / len(gap[name]):6.1f}"
            f"  x{len(dur[name])}  {name[:60]}"
        )


if __name__ == "__main__":
    main()
