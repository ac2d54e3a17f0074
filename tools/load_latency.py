"""Time to get cached programs ready in a fresh process (run twice: the first run fills the cache).

Prints: CUDA context start (PyTorch's, not cake's), the first program (manifest, machine facts,
cache read, module load) and each further program, in milliseconds."""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--package", default="kda_det")
    p.add_argument("--stages", default="gate,fwd_chunk,fwd_state", help="comma list of stages")
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args()

    t0 = time.perf_counter()
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t_ctx = time.perf_counter() - t0

    from cake.loader import default_loader

    loader = default_loader()
    stages = set(args.stages.split(","))
    records = sorted(
        {
            e.record
            for e in loader.manifest.entries
            if e.package == args.package and e.record.split(".")[0] in stages
        }
    )
    times = []
    for record in records:
        t = time.perf_counter()
        loader.module(args.package, record, 0)
        times.append(time.perf_counter() - t)
    out = {
        "context_ms": t_ctx * 1e3,
        "first_program_ms": times[0] * 1e3,
        "other_programs_ms_mean": 1e3 * sum(times[1:]) / max(len(times) - 1, 1),
        "programs": len(times),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
