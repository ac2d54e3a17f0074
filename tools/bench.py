#!/usr/bin/env python3
"""Benchmark and accuracy check of cake's chunk_kda against FLA 0.6.0 (docs/measuring.md).

Speed (default mode): for each row x variant, both implementations run in the same process on
the same inputs, so the ratio is meaningful even when absolute times drift on a shared machine.

- rows: 1doc, 4doc, R2, m2 (the 001 seed) and long / long4 (65536 tokens on 1 / 4 heads);
  bf16 q/k/v/beta, fp32 gate, K = V = 128, always packed with cu_seqlens.
- variants: gate g|raw x L2 norm off|fused x path saved|replay. The raw gate is the
  lower-bound sigmoid form with lower_bound = -5 (and safe_gate=True for FLA, as measured in
  docs/measuring.md); path saved is disable_recompute=True, replay is disable_recompute=False.
- ops: fwd (training forward, autograd graph built), fwd+bwd (forward and
  torch.autograd.grad of o), bwd = fwd+bwd - fwd.
- method: one warm-up round, then `--samples` samples; a sample is the CUDA-event time of
  `--calls` back-to-back calls divided by `--calls`; the median is reported. Peak memory is
  torch.cuda.max_memory_allocated over one fwd+bwd (inputs included).

Accuracy (--accuracy): both implementations against the float64 reference of
tests/kda_reference.py (run on the GPU), T = 4096, 4 heads, per gate regime; prints rel-L2 of
o, dq, dk, dv, dg, dbeta, dA_log, ddt_bias (the JSON also has the per-head values). The case
`long` is the 000 seed's 64K slow-decay forward, reported per 8K window.

An implementation or op that is missing or raises (cake's backward may not exist yet) is
reported as n/a, with the exception in the notes under the table.

Examples:
  python tools/bench.py --rows m2,R2 --variants 'g:off:*' --json out.json --png out.png
  python tools/bench.py --accuracy --json acc.json
  python tools/bench.py --replot out.json --png out.png     # no GPU needed
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib
import importlib.util
import inspect
import itertools
import json
import math
import os
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from kda_inputs import KDAInputs, make_inputs, make_long_input  # noqa: E402
from kda_reference import kda_reference, kda_reference_grads, rel_l2, rel_l2_per_head  # noqa: E402

LOWER_BOUND = -5.0
DEVICE = "cuda"  # a module constant so the control flow can be exercised on CPU with stand-ins
IMPLS = ("fla", "cake", "cake1")  # cake1: cake with segments=1 (serial state passes)
OPS = ("fwd", "bwd", "fwd+bwd")
GATES = ("g", "raw")
L2NS = ("off", "fused")
PATHS = ("saved", "replay")
GRAD_TENSORS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias")
ACC_COLUMNS = ("o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")


# Rows and variants


@dataclass(frozen=True)
class Row:
    name: str
    lengths: tuple[int, ...]
    heads: int

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


ROWS: dict[str, Row] = {
    r.name: r
    for r in (
        Row("1doc", (16384,), 64),
        Row("4doc", (8192, 4096, 3072, 1024), 64),
        Row("R2", (9000, 4384, 3000), 4),
        Row("m2", (2048, 1500), 4),
        Row("long", (65536,), 1),
        Row("long4", (65536,), 4),
    )
}


@dataclass(frozen=True)
class Variant:
    gate: str  # g | raw
    l2n: str  # off | fused
    path: str  # saved | replay

    @property
    def key(self) -> str:
        return f"{self.gate}:{self.l2n}:{self.path}"


ALL_VARIANTS = tuple(Variant(g, n, p) for g, n, p in itertools.product(GATES, L2NS, PATHS))


def parse_rows(spec: str) -> list[Row]:
    if spec == "all":
        return list(ROWS.values())
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        raise ValueError(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    return [ROWS[n] for n in names]


def parse_variants(spec: str) -> list[Variant]:
    """'all' or a comma list of gate:l2n:path patterns, each field a value or '*'."""
    if spec == "all":
        return list(ALL_VARIANTS)
    chosen: list[Variant] = []
    for pattern in (s.strip() for s in spec.split(",") if s.strip()):
        fields = pattern.split(":")
        if len(fields) != 3:
            raise ValueError(
                f"variant {pattern!r} is not gate:l2n:path (e.g. raw:fused:saved, g:*:*)"
            )
        for field, allowed in zip(fields, (GATES, L2NS, PATHS), strict=True):
            if field != "*" and field not in allowed:
                raise ValueError(f"variant {pattern!r}: {field!r} is not one of {allowed} or '*'")
        matches = [
            v
            for v in ALL_VARIANTS
            if all(f in ("*", val) for f, val in zip(fields, (v.gate, v.l2n, v.path), strict=True))
        ]
        chosen += [v for v in matches if v not in chosen]
    if not chosen:
        raise ValueError(f"--variants {spec!r} selects nothing")
    return chosen


def parse_choice(spec: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [i for i in items if i not in allowed]
    if bad or not items:
        raise ValueError(f"{what}: {bad or spec!r} not in {list(allowed)}")
    return items


# Implementations


class Unavailable(Exception):
    """An implementation that cannot be imported here."""


def load_impl(name: str) -> Callable[..., Any]:
    module = {"fla": "fla.ops.kda", "cake": "cake.kda", "cake1": "cake.kda"}[name]
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # reported as n/a with the reason, never hidden
        raise Unavailable(f"import {module}: {type(exc).__name__}: {exc}") from exc
    fn = getattr(mod, "chunk_kda", None)
    if fn is None:
        raise Unavailable(f"{module} has no chunk_kda")
    if name == "cake1":
        return functools.partial(fn, segments=1)
    return fn


def call_kwargs(impl: str, fn: Callable[..., Any], x: KDAInputs, path: str) -> dict[str, Any]:
    """chunk_kda keyword arguments for one implementation (same inputs for both)."""
    kw = x.as_kwargs()
    kw["output_final_state"] = x.initial_state is not None
    kw["disable_recompute"] = path == "saved"
    if x.cu_seqlens is not None:
        # FLA takes the host copy to avoid a device-to-host sync per call; cake accepts it too.
        kw["cu_seqlens_cpu"] = x.cu_seqlens.cpu()
    # FLA's lower-bound gate is measured with safe_gate=True (docs/measuring.md). cake only gets
    # the flag if its signature names it, since it must reject what it does not know.
    lower_bound_gate = x.use_gate_in_kernel and x.lower_bound is not None
    if lower_bound_gate and (impl == "fla" or "safe_gate" in inspect.signature(fn).parameters):
        kw["safe_gate"] = True
    return kw


def cake_step(
    row: str, variant: Variant, segments: int | None = None
) -> tuple[KDAInputs, Callable[[], tuple[torch.Tensor, tuple[torch.Tensor, ...]]]]:
    """One cake fwd+bwd of a benchmark row as the device tools run it (kernel_times, host_profile,
    one_step): inputs with grad, and a step returning (o, gradients of x.grad_names()). chunk_kda is
    looked up in cake.kda.api at each call, so a tool may wrap it; dO is seeded (the unseeded CUDA
    generator differs between processes)."""
    import cake.kda.api as api

    x = bench_inputs(ROWS[row], variant.gate, variant.l2n, 0, "cuda").with_grad()
    kw = call_kwargs("cake", api.chunk_kda, x, variant.path)  # as the benchmark calls it
    gen = torch.Generator(device="cuda").manual_seed(1)
    do = torch.randn(x.v.shape, device="cuda", dtype=x.v.dtype, generator=gen)
    leaves = [getattr(x, n) for n in x.grad_names()]

    def step() -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        o = api.chunk_kda(**kw, segments=segments)[0]
        return o, torch.autograd.grad(o, leaves, do)

    return x, step


def describe_exc(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:200]


# Speed


def bench_inputs(row: Row, gate: str, l2n: str, seed: int, device: str) -> KDAInputs:
    return make_inputs(
        list(row.lengths),
        heads=row.heads,
        gate=gate,
        regime="mixed",
        lower_bound=LOWER_BOUND if gate == "raw" else None,
        l2norm_in_kernel=l2n == "fused",
        seed=seed,
        device=device,
    )


def cuda_time_ms(fn: Callable[[], Any], samples: int, calls: int) -> float:
    """Median over samples of (CUDA-event time of `calls` back-to-back calls) / calls."""
    for _ in range(calls):  # warm-up round: caches, allocator, autotuners
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) / calls for s, e in events)


def peak_mib(fn: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def bench_variant(
    impl: str, fn: Callable[..., Any], x: KDAInputs, path: str, do: torch.Tensor, args
) -> tuple[dict[str, float | None], float | None, list[str]]:
    """Times of fwd / fwd+bwd / bwd (ms, None = n/a), peak MiB, notes."""
    kw = call_kwargs(impl, fn, x, path)
    grads_of = [getattr(x, n) for n in x.grad_names()]
    notes: list[str] = []

    def fwd():
        return fn(**kw)[0]

    def fwd_bwd():
        o = fn(**kw)[0]
        return torch.autograd.grad(o, grads_of, do, allow_unused=True)

    times: dict[str, float | None] = {op: None for op in OPS}
    peak = None
    try:
        fwd()
        times["fwd"] = cuda_time_ms(fwd, args.samples, args.calls)
    except Exception as exc:
        notes.append(f"fwd: {describe_exc(exc)}")
        return times, peak, notes
    try:
        fwd_bwd()
        peak = peak_mib(fwd_bwd)
        times["fwd+bwd"] = cuda_time_ms(fwd_bwd, args.samples, args.calls)
        times["bwd"] = times["fwd+bwd"] - times["fwd"]
    except Exception as exc:
        notes.append(f"bwd: {describe_exc(exc)}")
    return times, peak, notes


def run_speed(args) -> dict[str, Any]:
    rows = parse_rows(args.rows)
    variants = parse_variants(args.variants)
    ops = parse_choice(args.ops, OPS, "--ops")
    impls = parse_choice(args.impl, IMPLS, "--impl")
    fns, notes = load_impls(impls)
    results: list[dict[str, Any]] = []
    for row in rows:
        by_inputs: dict[tuple[str, str], list[Variant]] = {}
        for v in variants:
            by_inputs.setdefault((v.gate, v.l2n), []).append(v)
        for (gate, l2n), vs in by_inputs.items():
            x = bench_inputs(row, gate, l2n, args.seed, DEVICE).with_grad()
            do = torch.randn(x.v.shape, device=DEVICE, dtype=x.v.dtype)
            for v in vs:
                per_impl: dict[str, tuple[dict[str, float | None], float | None]] = {}
                for impl in impls:
                    if impl not in fns:
                        per_impl[impl] = ({op: None for op in OPS}, None)
                        continue
                    times, peak, impl_notes = bench_variant(impl, fns[impl], x, v.path, do, args)
                    per_impl[impl] = (times, peak)
                    notes += [f"{row.name}:{v.key} {impl} {n}" for n in impl_notes]
                    torch.cuda.empty_cache()
                for op in ops:
                    results.append(speed_record(row, v, op, per_impl))
                print_progress(results[-len(ops) :])
                if args.json:  # what is done so far survives a run cut short by a time limit
                    write_json(args.json, {**result_of(args, results, notes), "partial": True})
            del x, do
            torch.cuda.empty_cache()
    return result_of(args, results, notes)


def result_of(args, results: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    return {"meta": meta(args), "speed": results, "notes": notes}


def speed_record(row: Row, v: Variant, op: str, per_impl) -> dict[str, Any]:
    rec: dict[str, Any] = {"row": row.name, "gate": v.gate, "l2n": v.l2n, "path": v.path, "op": op}
    for impl in IMPLS:
        times, peak = per_impl.get(impl, ({}, None))
        rec[f"{impl}_ms"] = times.get(op)
        rec[f"{impl}_peak_mib"] = peak
    fla, cake, serial = rec["fla_ms"], rec["cake_ms"], rec["cake1_ms"]
    rec["speedup"] = fla / cake if fla is not None and cake is not None and cake > 0 else None
    rec["vs_serial"] = (
        serial / cake if serial is not None and cake is not None and cake > 0 else None
    )
    return rec


def load_impls(impls: Sequence[str]) -> tuple[dict[str, Callable[..., Any]], list[str]]:
    fns: dict[str, Callable[..., Any]] = {}
    notes: list[str] = []
    for impl in impls:
        try:
            fns[impl] = load_impl(impl)
        except Unavailable as exc:
            notes.append(f"{impl} unavailable: {exc}")
    if "fla" in fns:
        # FLA's @dispatch may route chunk_kda (FlashKDA, inference only) or parts of the
        # backward (TileLang) to other backends when those packages are installed.
        for pkg in ("flash_kda", "tilelang"):
            if importlib.util.find_spec(pkg) is not None:
                notes.append(f"fla: optional backend package {pkg!r} is installed and may be used")
    return fns, notes


def print_progress(recs: list[dict[str, Any]]) -> None:
    for rec in recs:
        print("  " + format_speed_line(rec), flush=True)


# Accuracy


@dataclass(frozen=True)
class AccCase:
    name: str
    gate: str
    regime: str  # g-form regime or the raw form's label
    l2n: str


ACC_CASES: dict[str, AccCase] = {
    c.name: c
    for c in (
        AccCase("g-mixed-off", "g", "mixed", "off"),
        AccCase("g-fast-off", "g", "fast", "off"),
        AccCase("g-slow-off", "g", "slow", "off"),
        AccCase("g-slow-fused", "g", "slow", "fused"),
        AccCase("g-extreme-off", "g", "extreme", "off"),
        AccCase("raw-lb-off", "raw", "lb -5", "off"),
        AccCase("raw-lb-fused", "raw", "lb -5", "fused"),
        AccCase("long", "g", "long slow", "off"),
    )
}


def acc_inputs(
    case: AccCase, lengths: list[int], heads: int, seed: int, initial_state: bool
) -> KDAInputs:
    if case.name == "long":
        return make_long_input(65536, 1, seed=seed, device=DEVICE)
    return make_inputs(
        lengths,
        heads=heads,
        initial_state=initial_state,
        gate=case.gate,
        regime=case.regime if case.gate == "g" else "mixed",
        lower_bound=LOWER_BOUND if case.gate == "raw" else None,
        l2norm_in_kernel=case.l2n == "fused",
        seed=seed,
        device=DEVICE,
    )


def per_head(name: str, out: torch.Tensor, ref: torch.Tensor, heads: int) -> list[float]:
    if name == "dA_log":
        return rel_l2_per_head(out, ref, 0)
    if name == "ddt_bias":
        return rel_l2_per_head(out.reshape(heads, -1), ref.reshape(heads, -1), 0)
    if name in ("ht", "dh0"):  # [N, H, K, V]
        return rel_l2_per_head(out, ref, 1)
    return rel_l2_per_head(out, ref, 2)


def run_accuracy(args) -> dict[str, Any]:
    impls = parse_choice(args.impl, IMPLS, "--impl")
    paths = parse_choice(args.acc_paths, PATHS, "--acc-paths")
    cases = [ACC_CASES[c] for c in parse_choice(args.acc_cases, list(ACC_CASES), "--acc-cases")]
    lengths = [int(n) for n in args.acc_lengths.split(",")]
    fns, notes = load_impls(impls)
    results: list[dict[str, Any]] = []
    for i, case in enumerate(cases):
        x = acc_inputs(case, lengths, args.acc_heads, args.seed + 1000 * i, args.acc_initial_state)
        heads = x.q.shape[2]
        gen = torch.Generator(device=DEVICE).manual_seed(args.seed + 1000 * i + 1)
        do = torch.randn(x.v.shape, generator=gen, device=DEVICE).to(x.v.dtype)
        # with an initial state the final state is an output too, with its own random gradient
        dht = None
        if x.initial_state is not None:
            dht = torch.randn(x.initial_state.shape, generator=gen, device=DEVICE)
        if case.name == "long":
            # forward only: the reference backward over 64K tokens is not needed for this case
            with torch.no_grad():
                ref = {"o": kda_reference(**x.as_kwargs())[0]}
        else:
            ref = kda_reference_grads(x, do, dht)
            # no output in beta's dtype can beat the reference rounded to it
            floor = ref["dbeta"].to(x.beta.dtype)
            notes.append(
                f"{case.name} dbeta {x.beta.dtype} rounding floor: whole "
                f"{rel_l2(floor, ref['dbeta']):.2e}, worst head "
                f"{max(per_head('dbeta', floor, ref['dbeta'], heads)):.2e}"
            )
        for impl, path in itertools.product(impls, paths):
            rec: dict[str, Any] = {"case": case.name, "gate": case.gate, "decay": case.regime}
            rec |= {"l2n": case.l2n, "path": path, "impl": impl, "rel_l2": {}, "per_head": {}}
            if impl not in fns:
                results.append(rec)
                continue
            xg = x.with_grad()
            kw = call_kwargs(impl, fns[impl], xg, path)
            try:
                o, ht = fns[impl](**kw)[:2]
            except Exception as exc:
                notes.append(f"{case.name}:{path} {impl} fwd: {describe_exc(exc)}")
                results.append(rec)
                continue
            got: dict[str, torch.Tensor] = {"o": o.detach()}
            if ht is not None:
                got["ht"] = ht.detach()
            if case.name != "long":
                names = xg.grad_names()
                outs, douts = ((o, ht), (do, dht)) if dht is not None else ((o,), (do,))
                rename = {"dt_bias": "ddt_bias", "initial_state": "dh0"}
                try:
                    grads = torch.autograd.grad(
                        outs, [getattr(xg, n) for n in names], douts, allow_unused=True
                    )
                    for n, gr in zip(names, grads, strict=True):
                        if gr is not None:
                            got[rename.get(n, "d" + n)] = gr
                except Exception as exc:
                    notes.append(f"{case.name}:{path} {impl} bwd: {describe_exc(exc)}")
            for name in ACC_COLUMNS:
                if name in got and name in ref:
                    if not torch.isfinite(got[name]).all():
                        notes.append(f"{case.name}:{path} {impl} {name} has non-finite values")
                    rec["rel_l2"][name] = rel_l2(got[name], ref[name])
                    rec["per_head"][name] = per_head(name, got[name], ref[name], heads)
            if case.name == "long":
                rec["windows"] = [
                    rel_l2(got["o"][:, a : a + 8192], ref["o"][:, a : a + 8192])
                    for a in range(0, x.q.shape[1], 8192)
                ]
                notes.append(
                    f"long {impl} {path} o per 8K window: "
                    + " ".join(f"{w:.2e}" for w in rec["windows"])
                )
            results.append(rec)
            print("  " + format_acc_line(rec), flush=True)
            del xg, o, got
        del x, do, ref
        torch.cuda.empty_cache()
    return {"meta": meta(args), "accuracy": results, "notes": notes}


# Output: tables, JSON, PNG

SPEED_HEADER = (
    "row",
    "gate",
    "l2n",
    "path",
    "op",
    "fla ms",
    "cake ms",
    "speedup",
    "fla MiB",
    "cake MiB",
    "cake P=1 ms",
    "auto P vs P=1",
)


def _num(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def speed_cells(rec: dict[str, Any]) -> list[str]:
    return [
        rec["row"],
        rec["gate"],
        rec["l2n"],
        rec["path"],
        rec["op"],
        _num(rec["fla_ms"], ".3f"),
        _num(rec["cake_ms"], ".3f"),
        _num(rec["speedup"], ".2f") + ("x" if rec["speedup"] is not None else ""),
        _num(rec["fla_peak_mib"], ".0f"),
        _num(rec["cake_peak_mib"], ".0f"),
        _num(rec.get("cake1_ms"), ".3f"),
        _num(rec.get("vs_serial"), ".2f") + ("x" if rec.get("vs_serial") is not None else ""),
    ]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Markdown-style table with columns padded to their widest cell."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def format_speed_line(rec: dict[str, Any]) -> str:
    c = speed_cells(rec)
    fla = c[5] + (" ms" if rec["fla_ms"] is not None else "")
    cake = c[6] + (" ms" if rec["cake_ms"] is not None else "")
    return f"{c[0]}:{c[1]}:{c[2]}:{c[3]} {c[4]}: fla {fla}, cake {cake}, speedup {c[7]}"


def format_speed_table(recs: Sequence[dict[str, Any]]) -> str:
    return format_table(SPEED_HEADER, [speed_cells(r) for r in recs])


ACC_HEADER = ("case", "gate", "decay", "l2n", "path", "impl", *ACC_COLUMNS)


def acc_cells(rec: dict[str, Any], worst_head: bool = False) -> list[str]:
    vals = rec.get("rel_l2", {})
    if worst_head:
        vals = {name: max(v) for name, v in rec.get("per_head", {}).items()}
    return [
        rec["case"],
        rec["gate"],
        rec["decay"],
        rec["l2n"],
        rec["path"],
        rec["impl"],
        *(_num(vals.get(c), ".1e") for c in ACC_COLUMNS),
    ]


def format_acc_line(rec: dict[str, Any]) -> str:
    return " ".join(acc_cells(rec))


def format_acc_table(recs: Sequence[dict[str, Any]], worst_head: bool = False) -> str:
    return format_table(ACC_HEADER, [acc_cells(r, worst_head) for r in recs])


def meta(args) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": args.argv,
        "torch": torch.__version__,
        "samples": args.samples,
        "calls": args.calls,
    }
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    for pkg in ("triton", "fla", "cake"):
        try:
            info[pkg] = getattr(importlib.import_module(pkg), "__version__", "unknown")
        except Exception as exc:
            info[pkg] = f"unavailable ({type(exc).__name__})"
    return info


def draw_speedups(recs: Sequence[dict[str, Any]], path: Path) -> None:
    """One panel per row: bars of FLA/cake time ratio per variant, grouped by op."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(dict.fromkeys(r["row"] for r in recs))
    ops = [op for op in OPS if any(r["op"] == op for r in recs)]
    fig, axes = plt.subplots(len(rows), 1, figsize=(12, 2.8 * len(rows) + 0.6), squeeze=False)
    for ax, row in zip(axes[:, 0], rows, strict=True):
        mine = [r for r in recs if r["row"] == row]
        variants = list(dict.fromkeys(f"{r['gate']}:{r['l2n']}:{r['path']}" for r in mine))
        width = 0.8 / max(len(ops), 1)
        for j, op in enumerate(ops):
            heights = []
            for v in variants:
                match = [
                    r for r in mine if r["op"] == op and f"{r['gate']}:{r['l2n']}:{r['path']}" == v
                ]
                s = match[0]["speedup"] if match else None
                heights.append(math.nan if s is None else s)
            xs = [i + (j - (len(ops) - 1) / 2) * width for i in range(len(variants))]
            bars = ax.bar(xs, heights, width=width, label=op)
            for b, h in zip(bars, heights, strict=True):
                if math.isnan(h):
                    ax.annotate(
                        "n/a",
                        (b.get_x() + b.get_width() / 2, 0),
                        ha="center",
                        va="bottom",
                        fontsize=6,
                    )
                else:
                    ax.annotate(
                        f"{h:.2f}",
                        (b.get_x() + b.get_width() / 2, h),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                    )
        finite = [r["speedup"] for r in mine if r["speedup"] is not None]
        ax.set_ylim(0, max([1.0, *finite]) * 1.25)  # room for the labels and the legend
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(variants)), variants, fontsize=8)
        ax.set_ylabel("FLA ms / cake ms")
        ax.set_title(row, fontsize=10, loc="left")
    axes[0, 0].legend(fontsize=8, ncols=len(ops), loc="upper right")
    fig.suptitle("cake chunk_kda speedup over FLA 0.6.0 (above 1 = cake faster)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(path: str, result: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


def report(result: dict[str, Any], args) -> None:
    if result.get("speed"):
        print(format_speed_table(result["speed"]))
    if result.get("accuracy"):
        print(format_acc_table(result["accuracy"]))
        print("\nworst head:")
        print(format_acc_table(result["accuracy"], worst_head=True))
    for note in result.get("notes", []):
        print(f"note: {note}")
    if args.json and not args.replot:
        write_json(args.json, result)
        print(f"wrote {args.json}")
    if args.png:
        if not result.get("speed"):
            print("no speed results: no PNG drawn")
        else:
            draw_speedups(result["speed"], Path(args.png))
            print(f"wrote {args.png}")


# CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="rows: "
        + ", ".join(
            f"{r.name} ({'+'.join(map(str, r.lengths))} tokens x {r.heads} heads)"
            for r in ROWS.values()
        )
        + "\naccuracy cases: "
        + ", ".join(ACC_CASES),
    )
    p.add_argument("--rows", default="all", help="comma list of rows, or 'all' (default)")
    p.add_argument(
        "--variants",
        default="all",
        help="'all' or comma list of gate:l2n:path, '*' allowed (e.g. 'raw:*:saved')",
    )
    p.add_argument("--ops", default="fwd,bwd,fwd+bwd", help="comma list of fwd, bwd, fwd+bwd")
    p.add_argument(
        "--impl",
        default="fla,cake",
        help="comma list of fla, cake, cake1 (cake with segments=1: the serial state passes)",
    )
    p.add_argument(
        "--samples", type=int, default=15, help="samples per measurement (median reported)"
    )
    p.add_argument("--calls", type=int, default=20, help="back-to-back calls per sample")
    p.add_argument(
        "--triton-cache",
        metavar="DIR",
        help="keep Triton's kernels and autotuning results (FLA's) in DIR, so that a later process "
        "with the same DIR skips the autotuning (TRITON_CACHE_DIR, TRITON_CACHE_AUTOTUNING=1)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write results as JSON")
    p.add_argument(
        "--png", metavar="PATH", help="draw a bar chart of the speedups (needs matplotlib)"
    )
    p.add_argument(
        "--replot", metavar="JSON", help="print and draw from a saved JSON; no GPU needed"
    )
    acc = p.add_argument_group("accuracy mode")
    acc.add_argument(
        "--accuracy", action="store_true", help="compare against the float64 reference"
    )
    acc.add_argument(
        "--acc-cases",
        default=",".join(ACC_CASES),
        help="comma list of accuracy cases (default: all)",
    )
    acc.add_argument("--acc-paths", default="saved", help="comma list of saved, replay")
    acc.add_argument(
        "--acc-lengths", default="4096", help="sequence lengths packed with cu_seqlens"
    )
    acc.add_argument("--acc-heads", type=int, default=4)
    acc.add_argument(
        "--acc-initial-state",
        action="store_true",
        help="give an fp32 N(0,1) initial state: also compares ht and dh0 (with a random dht)",
    )
    return p


# FLA's autotuning results on the H200 (TRITON_CACHE_AUTOTUNING files, as the device_check
# fla-cache step brings them back), kept in the repo: a new checkout's first table then skips the
# tuning, which costs minutes of device time a variant and row shape.
TUNED = Path(__file__).resolve().parent / "fla_autotune"


def seed_triton_cache(cache: Path, tuned: Path = TUNED) -> int:
    """Copy the kept autotuning results into `cache` (same relative paths), never over a file the
    cache has; returns how many were copied."""
    if not tuned.is_dir():
        return 0
    copied = 0
    for src in sorted(tuned.rglob("*autotune*")):
        dst = cache / src.relative_to(tuned)
        if src.is_file() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            copied += 1
    return copied


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.samples < 1 or args.calls < 1:
        raise SystemExit("--samples and --calls must be at least 1")
    if args.png and importlib.util.find_spec("matplotlib") is None:
        raise SystemExit(
            "--png needs matplotlib; save --json here and draw it with --replot elsewhere"
        )
    if args.replot:
        report(json.loads(Path(args.replot).read_text()), args)
        return 0
    try:
        # validate the selections before any GPU work
        parse_rows(args.rows), parse_variants(args.variants), parse_choice(args.ops, OPS, "--ops")
        parse_choice(args.impl, IMPLS, "--impl")
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the benchmark needs a GPU (--replot works without one)")
    if args.triton_cache:  # before FLA is imported (per implementation), so before its kernels
        Path(args.triton_cache).mkdir(parents=True, exist_ok=True)
        seeded = seed_triton_cache(Path(args.triton_cache))
        if seeded:
            print(f"triton cache: {seeded} autotuning results from {TUNED}", file=sys.stderr)
        os.environ["TRITON_CACHE_DIR"] = str(Path(args.triton_cache).resolve())
        os.environ["TRITON_CACHE_AUTOTUNING"] = "1"
    result = run_accuracy(args) if args.accuracy else run_speed(args)
    report(result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
