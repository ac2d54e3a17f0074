"""One cake fwd+bwd of a benchmark row, nothing else: the workload for `ncu` (kernel profiles)
and compute-sanitizer runs that should see each program once.

  python tools/one_step.py --row 1doc --variant g:off:saved [--steps 1] [--save out.pt]

--save keeps o and every gradient of the last step, and --compare reports whether two such files
hold the same bits (an A/B of two builds that should not change results).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import cake_step, parse_variants  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", default="1doc")
    p.add_argument("--variant", default="g:off:saved")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--segments", type=int, default=None)
    p.add_argument("--save", type=Path, help="write o and the gradients of the last step here")
    p.add_argument("--compare", type=Path, nargs=2, metavar="PT", help="compare two --save files")
    args = p.parse_args()
    if args.compare:
        a, b = (torch.load(f) for f in args.compare)
        for name in a:
            same = torch.equal(a[name], b[name])
            diff = (a[name].double() - b[name].double()).abs().max().item()
            print(f"{name:8s} {'bitwise equal' if same else f'DIFFERS, max |a - b| {diff:.3e}'}")
        return
    (v,) = parse_variants(args.variant)
    x, step = cake_step(args.row, v, args.segments)
    for _ in range(args.steps):
        o, grads = step()
    torch.cuda.synchronize()
    if args.save:
        names = ["o", *(f"d{n}" for n in x.grad_names())]
        torch.save({n: t.cpu() for n, t in zip(names, [o, *grads], strict=True)}, args.save)
    print(f"{args.row} {v.key}: {args.steps} fwd+bwd done")


if __name__ == "__main__":
    main()
