"""Host-side cost of one chunk_kda fwd+bwd: wall time per step against GPU kernel time, where the
issue time goes by section (timers around cake's own functions, no profiler overhead), and a
cProfile of the Python side (sorted by own time), for one benchmark row.

  python tools/host_profile.py --row m2 --variant g:off:saved
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import cake_step, parse_variants  # noqa: E402

import cake.kda.api as api  # noqa: E402
import cake.kda.backward as backward  # noqa: E402
import cake.kda.forward as forward  # noqa: E402
import cake.launch as launch  # noqa: E402

SPENT: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn with its wall time (inclusive) added to SPENT[name]."""

    def wrapper(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            SPENT[name] += time.perf_counter() - t
            CALLS[name] += 1

    return wrapper


def sections(step: Callable[[], object], steps: int) -> None:
    """Issue time per step by section: chunk_kda (all of the forward call), forward.forward (the
    launches' Python side and allocations), the batches' issues (a call's launches as one CUDA
    graph: nodes set again + cuGraphLaunch) and any kernel launched on its own, the backward call (autograd.grad: engine + thread hand-off + backward.backward), backward.backward.
    Inclusive times: a section contains the ones it calls."""
    patches = [
        (api, "chunk_kda", "chunk_kda (forward call)"),
        (forward, "forward", "forward.forward"),
        (backward, "backward", "backward.backward"),
        (launch.Function, "__call__", "launch (each kernel on its own)"),
        (launch.Batch, "issue", "issue (each batch of launches)"),
        (torch.autograd, "grad", "autograd.grad (backward call)"),
    ]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
    try:
        for obj, attr, name in patches:
            setattr(obj, attr, timed(name, getattr(obj, attr)))
        step()  # the wrappers in place before timing
        torch.cuda.synchronize()
        SPENT.clear()
        CALLS.clear()
        t = time.perf_counter()
        for _ in range(steps):
            step()
        total = time.perf_counter() - t
        torch.cuda.synchronize()
    finally:
        for obj, attr, fn in saved:
            setattr(obj, attr, fn)
    print(
        f"issue time by section, us per fwd+bwd (inclusive; {steps} steps, total {1e6 * total / steps:.0f}):"
    )
    for name, sec in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"  {1e6 * sec / steps:8.1f}  x{CALLS[name] // steps:<3d} {name}")


def backward_hops(step: Callable[[], object], steps: int) -> None:
    """The backward call by hops, us per fwd+bwd: autograd.grad's entry to our Function.backward
    (the engine, and its hand-off to the device's backward thread), our Python around
    cake.kda.backward, cake.kda.backward itself, and the way back to autograd.grad's return."""
    stamps: dict[str, float] = {}

    def stamped(key_in: str, key_out: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            stamps[key_in] = time.perf_counter()
            out = fn(*a, **kw)
            stamps[key_out] = time.perf_counter()
            return out

        return wrapper

    fn_backward = api._ChunkKDA.backward
    restore = [  # (object, attribute, value to put back)
        (torch.autograd, "grad", torch.autograd.grad),
        (api._ChunkKDA, "backward", staticmethod(fn_backward)),
        (backward, "backward", backward.backward),
    ]
    hops = {
        "autograd.grad -> Function.backward": ("grad_in", "fn_in"),
        "Function.backward -> kda.backward": ("fn_in", "bwd_in"),
        "kda.backward": ("bwd_in", "bwd_out"),
        "kda.backward -> Function.backward returns": ("bwd_out", "fn_out"),
        "Function.backward returns -> autograd.grad returns": ("fn_out", "grad_out"),
    }
    spent = dict.fromkeys(hops, 0.0)
    try:
        torch.autograd.grad = stamped("grad_in", "grad_out", torch.autograd.grad)
        api._ChunkKDA.backward = staticmethod(stamped("fn_in", "fn_out", fn_backward))
        backward.backward = stamped("bwd_in", "bwd_out", backward.backward)
        step()
        for _ in range(steps):
            step()
            for name, (a, b) in hops.items():
                spent[name] += stamps[b] - stamps[a]
        torch.cuda.synchronize()
    finally:
        for obj, attr, value in restore:
            setattr(obj, attr, value)
    print("the backward call by hops, us per fwd+bwd:")
    for name, sec in spent.items():
        print(f"  {1e6 * sec / steps:8.1f}  {name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", default="m2")
    p.add_argument("--variant", default="g:off:saved")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    (v,) = parse_variants(args.variant)
    _, step = cake_step(args.row, v)
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
    sections(step, args.steps)
    backward_hops(step, args.steps)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
