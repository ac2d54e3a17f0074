"""Host-side cost of one chunk_kda fwd+bwd: wall time per step against GPU kernel time, and a
cProfile of the Python side (sorted by own time), for one benchmark row.

  python tools/host_profile.py --row m2 --variant g:off:saved
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import ROWS, bench_inputs, call_kwargs, parse_variants  # noqa: E402

from cake.kda import chunk_kda  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", default="m2")
    p.add_argument("--variant", default="g:off:saved")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    (v,) = parse_variants(args.variant)
    x = bench_inputs(ROWS[args.row], v.gate, v.l2n, 0, "cuda").with_grad()
    kw = call_kwargs("cake", chunk_kda, x, v.path)  # as tools/bench.py calls it
    do = torch.randn(x.v.shape, device="cuda", dtype=x.v.dtype)
    leaves = [getattr(x, n) for n in x.grad_names()]

    def step() -> None:
        o = chunk_kda(**kw)[0]
        torch.autograd.grad(o, leaves, do)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(args.steps):
        step()
    host = (time.perf_counter() - t) / args.steps * 1e3
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / args.steps * 1e3
    print(f"{args.row} {v.key}: host issue {host:.3f} ms per fwd+bwd, wall {wall:.3f} ms")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
