"""Issue 5's tables on a GPU: the seed's 64K slow-decay input (H = 1, and H = 4 with a different
slow decay per head), o per 8K window and the final state per head against the float64
token-by-token recurrence, CP vs serial, last/first window growth, for every P; then the gradients
per head against the float64 reference for a few P. tests/test_kda_long_gpu.py asserts the bounds;
this prints the numbers (and writes them as JSON).

  python tools/long_report.py [--heads 1,4] [--ps 1,2,4,8,16,32,64] [--grad-ps 1,8,64] [--json F]

--emulate runs it on the CPU emulator (tools/emu) with --tokens of the sequence (a smoke test).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kda_inputs import LONG_HEAD_DECAYS, make_long_input  # noqa: E402
from kda_reference import (  # noqa: E402
    kda_reference_grads,
    recurrent_kda,
    rel_l2,
    rel_l2_per_head,
    window_errors,
)

from cake.kda import chunk_kda  # noqa: E402

WINDOW = 8192


def forward_rows(heads: int, ps: list[int], tokens: int, device: str) -> list[dict]:
    decays = LONG_HEAD_DECAYS[:heads] if heads > 1 else None
    inp = make_long_input(tokens, heads=heads, device=device, decays=decays)
    with torch.no_grad():
        o_ref, ht_ref = recurrent_kda(inp.q, inp.k, inp.v, inp.g, inp.beta, scale=128**-0.5)
    rows, serial = [], None
    for P in ps:
        o, ht = chunk_kda(**inp.as_kwargs(), output_final_state=True, segments=P)
        if serial is None:
            serial = (o, ht)
        for h in range(heads):
            w = window_errors(o, o_ref, h, WINDOW)
            rows.append(
                dict(
                    heads=heads,
                    P=P,
                    head=h,
                    windows=w,
                    growth=w[-1] / w[0],
                    ht=rel_l2_per_head(ht, ht_ref, 1)[h],
                    o_vs_serial=rel_l2(o[:, :, h], serial[0][:, :, h]),
                    ht_vs_serial=rel_l2(ht[:, h], serial[1][:, h]),
                )
            )
    return rows


def gradient_rows(ps: list[int], tokens: int, device: str) -> list[dict]:
    inp = make_long_input(tokens, heads=1, device=device)
    inp = dataclasses.replace(inp, beta=inp.beta.float())  # dbeta as the kernel's fp32 value
    gen = torch.Generator(device=device).manual_seed(0)
    do = torch.randn(inp.v.shape, generator=gen, device=device).to(torch.bfloat16)
    ref = kda_reference_grads(inp, do)
    rows = []
    for P in ps:
        leaf = inp.with_grad()
        o, _ = chunk_kda(**leaf.as_kwargs(), segments=P)
        o.backward(do)
        row: dict = dict(P=P)
        for name, tensor in (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dg", "g"), ("dbeta", "beta")):
            row[name] = max(rel_l2_per_head(getattr(leaf, tensor).grad, ref[name], 2))
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", default="1,4")
    p.add_argument("--ps", default="1,2,4,8,16,32,64")
    p.add_argument("--grad-ps", default="1,8,64")
    p.add_argument("--json", type=Path)
    p.add_argument("--tokens", type=int, default=65536)
    p.add_argument("--emulate", action="store_true", help="CPU emulator instead of the GPU")
    args = p.parse_args()
    device = "cpu" if args.emulate else "cuda"
    with contextlib.ExitStack() as stack:
        if args.emulate:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tools.emu import emulate

            stack.enter_context(emulate())
        report(args, device)


def report(args: argparse.Namespace, device: str) -> None:
    ps = [int(x) for x in args.ps.split(",")]
    fwd = [r for h in args.heads.split(",") for r in forward_rows(int(h), ps, args.tokens, device)]
    print(
        "| H | P | head | o, worst 8K window | first | last | last/first | ht | o vs P=1 | ht vs P=1 |"
    )
    print(
        "| - | - | ---- | ----------------- | ----- | ---- | ---------- | -- | -------- | --------- |"
    )
    for r in fwd:
        w = r["windows"]
        print(
            f"| {r['heads']} | {r['P']} | {r['head']} | {max(w):.2e} | {w[0]:.2e} | {w[-1]:.2e} "
            f"| {r['growth']:.3f} | {r['ht']:.2e} | {r['o_vs_serial']:.1e} | {r['ht_vs_serial']:.1e} |"
        )
    grad_ps = [int(x) for x in args.grad_ps.split(",")] if args.grad_ps else []
    grads = gradient_rows(grad_ps, args.tokens, device) if grad_ps else []
    if grads:
        print("\n| P | dq | dk | dv | dg | dbeta |  (worst head, H = 1)")
        print("| - | -- | -- | -- | -- | ----- |")
        for r in grads:
            print(
                f"| {r['P']} | "
                + " | ".join(f"{r[n]:.2e}" for n in ("dq", "dk", "dv", "dg", "dbeta"))
                + " |"
            )
    if args.json:
        args.json.write_text(json.dumps(dict(forward=fwd, gradients=grads), indent=1))


if __name__ == "__main__":
    main()
