"""Forward and backward of cake.kda on the CPU emulator against the float64 reference.

    .venv/bin/python -m tools.emu.check                 # every case, a table of rel-L2 errors
    .venv/bin/python -m tools.emu.check --case g-mixed-off --races

Each case runs cake.kda.forward.forward (o, final state) and cake.kda.backward.backward (replay
path) through tools.emu.emulate() and compares every output with tests/kda_reference.py under the
GPU tests' bound (2.5e-3 relative L2, whole tensor and per head). beta is passed as fp32 (the
same values as the bf16 draw), so dbeta is compared as the kernel computes it, as the GPU test
does. --races reruns each case in four other legal executions (threads in descending and in
shuffled order, cp.async landing at issue rather than at its wait) and requires bitwise equal
outputs: the programs have a fixed reduction order, so any difference is a race (a missing
__syncthreads or cp.async wait)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cake.spec import Arch

from .loader import SOURCES, EmuLoader, Options, emulate

TESTS = Path(__file__).resolve().parents[2] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from kda_inputs import KDAInputs, kda_config, make_inputs  # noqa: E402
from kda_reference import kda_reference_grads, rel_l2, rel_l2_per_head  # noqa: E402

BOUND = 2.5e-3  # tests/test_kda_forward_gpu.py and tests/test_kda_backward_gpu.py
LENGTHS = [1, 63, 65, 130]
HEADS = 2

# id: make_inputs keyword arguments (beyond lengths, heads, seed); they cover the g form in every
# gate regime, both raw forms, both raw input dtypes, the fused L2 norm and the sigmoid beta.
CASES: dict[str, dict[str, Any]] = {
    "g-mixed-off": dict(regime="mixed", initial_state=True),
    "g-fast-fused-bsig": dict(
        regime="fast", l2norm_in_kernel=True, beta_sigmoid_in_kernel=True, initial_state=True
    ),
    "g-slow-fused": dict(regime="slow", l2norm_in_kernel=True),
    "softplus-off": dict(gate="raw", initial_state=True),
    "softplus-fused-xbf16": dict(
        gate="raw", l2norm_in_kernel=True, gate_dtype=torch.bfloat16, initial_state=True
    ),
    "sigmoid-lb5-off-xbf16": dict(gate="raw", lower_bound=-5.0, gate_dtype=torch.bfloat16),
    "sigmoid-lb5-fused": dict(
        gate="raw", lower_bound=-5.0, l2norm_in_kernel=True, initial_state=True
    ),
}

# Outputs whose error is also bounded per head, and the dimension that indexes heads.
PER_HEAD = {"o": 2, "ht": 1, "dq": 2, "dk": 2, "dv": 2, "dg": 2, "dbeta": 2, "dh0": 1}


def config_for(inp: KDAInputs) -> Any:
    return kda_config(inp, store_final_state=True)


def case_inputs(
    kw: dict[str, Any], lengths: list[int] = LENGTHS, heads: int = HEADS, seed: int = 0
) -> tuple[KDAInputs, torch.Tensor, torch.Tensor]:
    """CPU inputs (beta as fp32), do and dht for one case."""
    inp = make_inputs(lengths, heads=heads, seed=seed, device="cpu", **kw)
    inp = dataclasses.replace(inp, beta=inp.beta.float())
    gen = torch.Generator().manual_seed(1000 + seed)
    do = torch.randn(inp.v.shape, generator=gen).to(inp.v.dtype)
    dht = torch.randn(len(inp.lengths), heads, 128, 128, generator=gen)
    return inp, do, dht


def run_emulated(
    inp: KDAInputs, do: torch.Tensor, dht: torch.Tensor | None, loader: EmuLoader
) -> dict[str, torch.Tensor]:
    """o and ht from the forward, the gradients from the backward (replay path)."""
    from cake.kda import backward, forward

    config = config_for(inp)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        o, ht, *_ = forward.forward(*args, config)
        grads = backward.backward(*args, do, dht, config)
    return {"o": o, "ht": ht, **grads}


@dataclass(frozen=True)
class Row:
    output: str
    rel: float
    worst_head: float | None

    @property
    def ok(self) -> bool:
        worst = self.worst_head if self.worst_head is not None else 0.0
        return self.rel <= BOUND and worst <= BOUND


def compare(
    out: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], names: list[str]
) -> list[Row]:
    rows = []
    for name in names:
        o, r = out[name], ref[name]
        if o.shape != r.shape:
            raise AssertionError(f"{name}: shape {tuple(o.shape)}, reference {tuple(r.shape)}")
        if not torch.isfinite(o).all():
            rows.append(Row(name, float("nan"), float("nan")))
            continue
        dim = PER_HEAD.get(name)
        worst = max(rel_l2_per_head(o, r, dim)) if dim is not None else None
        rows.append(Row(name, rel_l2(o, r), worst))
    return rows


def output_names(inp: KDAInputs) -> list[str]:
    names = ["o", "ht", "dq", "dk", "dv", "dg", "dbeta"]
    if inp.use_gate_in_kernel:
        names += ["dA_log", "ddt_bias"]
    if inp.initial_state is not None:
        names.append("dh0")
    return names


def check_case(
    kw: dict[str, Any],
    loader: EmuLoader,
    *,
    lengths: list[int] = LENGTHS,
    heads: int = HEADS,
    seed: int = 0,
) -> tuple[list[Row], dict[str, torch.Tensor]]:
    inp, do, dht = case_inputs(kw, lengths, heads, seed)
    out = run_emulated(inp, do, dht, loader)
    ref = kda_reference_grads(inp, do, dht)
    return compare(out, ref, output_names(inp)), out


# Other executions a race-free program must give the same bits under (the base run is ascending
# thread order, cp.async landing at its wait): descending order, copies landing at issue, shuffled.
RACE_RUNS = ((1, False), (0, True), (1, True), (2, False))


def schedule_differences(
    kw: dict[str, Any],
    base: dict[str, torch.Tensor],
    make_loader: Callable[[Options], EmuLoader],
    options: Options | None = None,
    **case: Any,
) -> list[str]:
    """Outputs that are not bitwise equal to `base` under the other executions of RACE_RUNS."""
    options = options or Options()
    inp, do, dht = case_inputs(kw, **case)
    diffs = []
    for schedule, eager in RACE_RUNS:
        run = dataclasses.replace(options, schedule=schedule, eager_copies=eager)
        out = run_emulated(inp, do, dht, make_loader(run))
        where = f"schedule {schedule}{', eager cp.async' if eager else ''}"
        diffs += [f"{n} ({where})" for n, t in base.items() if not torch.equal(t, out[n])]
    return diffs


def compare_saved(a: Path, b: Path) -> int:
    """1 when any output of any case differs in a bit (or is missing from one file)."""
    first, second = torch.load(a), torch.load(b)
    differ = 0
    for case in sorted(set(first) | set(second)):
        for name in sorted(set(first.get(case, {})) | set(second.get(case, {}))):
            x, y = first.get(case, {}).get(name), second.get(case, {}).get(name)
            if x is None or y is None:
                verdict = "missing in " + (str(a) if x is None else str(b))
            elif torch.equal(x, y):
                verdict = "bitwise equal"
            else:
                verdict = f"DIFFERS, max |a - b| {(x.double() - y.double()).abs().max().item():.3e}"
            differ += verdict != "bitwise equal"
            print(f"{case:24} {name:9} {verdict}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.emu.check", description=__doc__)
    parser.add_argument("--case", action="append", choices=list(CASES), help="default: all")
    parser.add_argument("--source", choices=SOURCES, default="templates")
    parser.add_argument(
        "--arch",
        choices=["sm_90", "sm_90a"],
        default="sm_90",
        help="the programs of this arch (sm_90a: the wgmma bodies; default the portable twin)",
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--heads", type=int, default=HEADS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="OS threads (0: one per core)")
    parser.add_argument("--races", action="store_true", help="also rerun in four other orders")
    parser.add_argument(
        "--save", type=Path, metavar="PT", help="write every case's outputs here (torch.save)"
    )
    parser.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        metavar="PT",
        help="compare two --save files bitwise (template A/B: save, change, save, compare)",
    )
    args = parser.parse_args(argv)
    if args.compare:
        return compare_saved(*args.compare)

    def make_loader(options: Options) -> EmuLoader:
        return EmuLoader(arch=Arch(args.arch), source=args.source, options=options)

    options = Options(workers=args.workers)
    loader = make_loader(options)
    case = dict(lengths=args.lengths, heads=args.heads, seed=args.seed)
    print(f"lengths {args.lengths}, heads {args.heads}, seed {args.seed}, bound {BOUND:.1e}")
    print(f"{'case':24} {'output':9} {'rel-L2':>9} {'worst head':>11}  result")
    failed = 0
    saved: dict[str, dict[str, torch.Tensor]] = {}
    for name in args.case or list(CASES):
        start = time.perf_counter()
        rows, out = check_case(CASES[name], loader, **case)
        for row in rows:
            head = f"{row.worst_head:11.2e}" if row.worst_head is not None else " " * 11
            print(f"{name:24} {row.output:9} {row.rel:9.2e} {head}  {'ok' if row.ok else 'FAIL'}")
            failed += not row.ok
        note = ""
        if args.races:
            diffs = schedule_differences(CASES[name], out, make_loader, options, **case)
            failed += len(diffs)
            note = "; other schedules: " + (", ".join(diffs) + " DIFFER" if diffs else "same bits")
        print(f"{'':24} ({time.perf_counter() - start:.1f} s{note})")
        saved[name] = out
    if args.save:
        torch.save(saved, args.save)
    print("all within bounds" if not failed else f"{failed} FAILURE(S)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
