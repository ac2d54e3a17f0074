"""Where a kernel's time goes, by phase of its source: ncu's per-instruction source counters
(stall samples by reason, instructions executed, shared-memory wavefronts) summed over the code
sections of the rendered program. The device exports the counters; the mapping of SASS to source
is made here from a local `-lineinfo` compile of the same artifact (the same instructions: the
line table does not change code generation; the script checks the instruction count).

  on the device:  ncu -o rep -k regex:kda_ --section SourceCounters python3 tools/one_step.py
                  ncu -i rep.ncu-rep -k kda_bwd_chunk --page source --csv --print-source sass > x.csv
  here:           python tools/ncu_phases.py x.csv artifacts/kda_det/bwd_chunk.gate-g.l2n-off.sm_90a.cu

With --ops, each section's executed instructions are also split by kind (integer and address
arithmetic, tensor-core, shared-memory loads / stores, TF32 conversions, float, global, control).
With --lines N, the N source lines (outermost call site) that executed the most instructions,
with their share of the samples and their integer share: where a section's instructions come from.

Without a csv (`--static`), the same tables from the local build alone: static instructions per
section and per source line, with their integer share and their register moves (MOV, IMAD.MOV:
the A quads mma.sync reads from consecutive registers), no device needed:

  here:           python tools/ncu_phases.py --static --lines 20 artifacts/kda_det/fwd_chunk.gate-g.l2n-off.sm_90a.cu

The hot column counts the section's static SASS instructions that ran at all (16 bytes each): the
instruction-cache footprint.

A section starts at each `// ---- ` comment and at the `// (a)`, `// (b)`, `// (c)` sub-phases and
the few other markers in MARKERS; an inlined helper counts where it was called from.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import gzip
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MARKERS = re.compile(r"^\s*// (---- |\((a|b|c)\) |Inverses of|Off-diagonal blocks of T|dgl\[d\])")
LINE = re.compile(r'//## File "[^"]*", line (\d+)(?:.*inlined at "[^"]*", line (\d+))?')
INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/")
STALLS = (
    "barrier",
    "long_sb",
    "short_sb",
    "mio",
    "math",
    "wait",
    "not_selected",
    "selected",
    "lg",
    "dispatch",
    "branch_resolving",
    "no_inst",
    "tex",
    "drain",
    "membar",
    "misc",
)


def find_nvdisasm() -> str | None:
    """nvdisasm from the nvidia-cuda-nvdisasm wheel (a dev dependency: `make setup` installs it),
    else from PATH; None when neither has it."""
    try:
        import nvidia  # noqa: PLC0415

        for root in nvidia.__path__:
            for found in sorted(Path(root).glob("*/bin/nvdisasm")):
                return str(found)
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def sass_listing(artifact: Path, arch: str, nvdisasm: str) -> list[tuple[int, str]]:
    """Each SASS instruction, in address order, with its source line (outermost call site)."""
    import cake.compile as cc
    from cake.spec import Arch

    flags = cc.FLAGS
    cc.FLAGS = (*flags, "-lineinfo")  # the same code, with a line table
    try:
        out = cc.compile_source(artifact.read_text(), Arch(arch), "main")
    finally:
        cc.FLAGS = flags
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(out.cubin)
        f.flush()
        text = subprocess.run(
            [nvdisasm, "-gi", "-c", f.name], capture_output=True, text=True, check=True
        ).stdout
    listing, cur = [], 0
    for row in text.splitlines():
        m = LINE.search(row)
        if m:
            # the outermost location: the last "inlined at" of the chain
            at = re.findall(r'inlined at "[^"]*", line (\d+)', row)
            cur = int(at[-1]) if at else int(m.group(1))
        elif INSN.match(row):
            listing.append((cur, INSN.sub("", row).strip().rstrip(" ;")))
    return listing


def sass_lines(artifact: Path, arch: str, nvdisasm: str) -> list[int]:
    """The source line of each SASS instruction, in address order (outermost call site)."""
    return [line for line, _ in sass_listing(artifact, arch, nvdisasm)]


# SASS opcode (first dotted part) -> kind, for --ops; anything else counts as "other".
KINDS = {
    "int": (
        "IMAD",
        "LOP3",
        "LEA",
        "IADD3",
        "VIADD",
        "SHF",
        "SEL",
        "ISETP",
        "MOV",
        "UIADD3",
        "IABS",
        "ULOP3",
        "UMOV",
        "ULEA",
        "USHF",
        "UISETP",
        "PRMT",
        "S2R",
        "S2UR",
        "CS2R",
        "IMNMX",
        "POPC",
    ),
    "mma": ("HMMA", "HGMMA", "WARPGROUP"),
    "lds": ("LDS", "LDSM"),
    "sts": ("STS",),
    "cvt": ("F2FP", "F2F", "I2F", "F2I"),
    "fp": ("FADD", "FMUL", "FFMA", "MUFU", "FSETP", "FSEL", "FMNMX", "FCHK"),
    "global": ("LDG", "STG", "LDGSTS", "LDGDEPBAR", "CCTL", "LDC", "ULDC"),
    "ctl": ("BRA", "BAR", "BSSY", "BSYNC", "EXIT", "DEPBAR", "WARPSYNC", "NOP", "RET", "CALL"),
}
KIND_OF = {op: k for k, ops in KINDS.items() for op in ops}


def opcode(source: str) -> str:
    """The instruction's opcode with its modifiers (IMAD.MOV.U32), past any predicate."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def kind(source: str) -> str:
    return KIND_OF.get(opcode(source).split(".")[0], "other")


def is_move(source: str) -> bool:
    op = opcode(source)
    return op == "MOV" or op.startswith("IMAD.MOV")


def static_report(artifact: Path, arch: str, nvdisasm: str, top: int) -> str:
    """Static SASS instructions per section and (top N) per source line: total, integer, moves."""
    listing = sass_listing(artifact, arch, nvdisasm)
    secs = sections(artifact)
    starts = [s for s, _ in secs]
    per_sec: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    per_line: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for line, insn in listing:
        counts = (1, kind(insn) == "int", is_move(insn))
        for agg in (per_sec[max(0, bisect.bisect_right(starts, line) - 1)], per_line[line]):
            for j, c in enumerate(counts):
                agg[j] += c
    out = [f"{'section':42s} {'static':>6s} {'int':>5s} {'moves':>5s}"]
    out += [
        f"{name:42s} {per_sec[i][0]:6d} {per_sec[i][1]:5d} {per_sec[i][2]:5d}"
        for i, (_, name) in enumerate(secs)
        if per_sec[i][0]
    ]
    total = [sum(v[j] for v in per_sec.values()) for j in range(3)]
    out.append(f"{'whole kernel':42s} {total[0]:6d} {total[1]:5d} {total[2]:5d}")
    if top:
        text = artifact.read_text().splitlines()
        out.append(
            f"\n{'line':>5s} {'static':>6s} {'int':>5s} {'moves':>5s}  source (largest lines)"
        )
        for line, (n, ni, nm) in sorted(per_line.items(), key=lambda kv: -kv[1][0])[:top]:
            src = text[line - 1].strip()[:90] if 0 < line <= len(text) else ""
            out.append(f"{line:5d} {n:6d} {ni:5d} {nm:5d}  {src}")
    return "\n".join(out)


def sections(artifact: Path) -> list[tuple[int, str]]:
    out = [(0, "(prologue)")]
    for n, row in enumerate(artifact.read_text().splitlines(), 1):
        if MARKERS.match(row):
            out.append((n, row.strip()[3:43]))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="?", help="ncu's source page export (omit with --static)")
    p.add_argument("artifact", type=Path)
    p.add_argument(
        "--static", action="store_true", help="static counts from the local build, no csv"
    )
    p.add_argument("--arch", default="sm_90a")
    p.add_argument(
        "--nvdisasm",
        help="nvdisasm to run (default: the nvidia-cuda-nvdisasm wheel's, else PATH's)",
    )
    p.add_argument(
        "--ops", action="store_true", help="also split each section's instructions by kind"
    )
    p.add_argument(
        "--lines", type=int, default=0, metavar="N", help="also the N busiest source lines"
    )
    a = p.parse_args()
    a.nvdisasm = a.nvdisasm or find_nvdisasm() or "nvdisasm"  # a missing one fails when run
    if a.static:
        if a.csv is not None:
            p.error("--static reads no csv: give the artifact only")
        print(static_report(a.artifact, a.arch, a.nvdisasm, a.lines))
        return
    if a.csv is None:
        p.error("a csv (ncu's source page export) is needed, or --static")
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    cols = {name: j for j, name in enumerate(rows[head])}
    data = [r for r in rows[head + 1 :] if r and r[0].startswith("0x")]
    lines = sass_lines(a.artifact, a.arch, a.nvdisasm)
    if len(lines) != len(data):
        sys.exit(
            f"{len(data)} instructions in the csv, {len(lines)} in the local build: not the same code"
        )
    secs = sections(a.artifact)
    starts = [s for s, _ in secs]

    def section_of(line: int) -> int:  # the last section starting at or before the line
        return max(0, bisect.bisect_right(starts, line) - 1)

    def num(r: list[str], name: str) -> float:
        v = r[cols[name]] if name in cols else "0"
        return float(v.replace(",", "")) if v not in ("", "-") else 0.0

    agg: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    per_line: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r, line in zip(data, lines, strict=True):
        samples = num(r, "Warp Stall Sampling (All Samples)")
        insts = num(r, "Instructions Executed")
        op_kind = kind(r[cols["Source"]].strip())
        pl = per_line[line]
        pl["samples"] += samples
        pl["insts"] += insts
        pl["int"] += insts * (op_kind == "int")
        s = agg[section_of(line)]
        s["samples"] += samples
        s["insts"] += insts
        s["wavefronts"] += num(r, "L1 Wavefronts Shared")
        s["hot"] += insts > 0  # static instructions that ran at all
        s["kind:" + op_kind] += insts
        for st in STALLS:
            s[st] += num(r, f"stall_{st}")
    tot = {k: sum(s[k] for s in agg.values()) for k in ("samples", "insts", "wavefronts")}
    print(
        f"{'section':42s} {'time%':>6s} {'inst%':>6s} {'smem%':>6s} {'hot':>5s}  top stalls (% of section samples)"
    )
    for i, (_, name) in enumerate(secs):
        s = agg.get(i)
        if not s or not s["samples"]:
            continue
        top = sorted(STALLS, key=lambda st: -s[st])[:4]
        stalls = " ".join(f"{st} {100 * s[st] / s['samples']:.0f}" for st in top)
        print(
            f"{name:42s} {100 * s['samples'] / tot['samples']:6.1f} "
            f"{100 * s['insts'] / tot['insts']:6.1f} {100 * s['wavefronts'] / max(1, tot['wavefronts']):6.1f} "
            f"{int(s['hot']):5d}  {stalls}"
        )
    if a.ops:
        names = [*KINDS, "other"]
        print(
            f"\n{'instructions by kind (% of section)':42s} {'inst%':>6s}  "
            + " ".join(f"{k:>6s}" for k in names)
        )
        for i, (_, name) in enumerate(secs):
            s = agg.get(i)
            if not s or not s["insts"]:
                continue
            shares = " ".join(f"{100 * s['kind:' + k] / s['insts']:6.1f}" for k in names)
            print(f"{name:42s} {100 * s['insts'] / tot['insts']:6.1f}  {shares}")
        whole = " ".join(
            f"{100 * sum(s['kind:' + k] for s in agg.values()) / tot['insts']:6.1f}" for k in names
        )
        print(f"{'whole kernel':42s} {100.0:6.1f}  {whole}")
    if a.lines:
        text = a.artifact.read_text().splitlines()
        print(f"\n{'line':>5s} {'time%':>6s} {'inst%':>6s} {'int%':>5s}  source (busiest lines)")
        busiest = sorted(per_line.items(), key=lambda kv: -kv[1]["insts"])[: a.lines]
        for line, pl in busiest:
            src = text[line - 1].strip()[:90] if 0 < line <= len(text) else ""
            print(
                f"{line:5d} {100 * pl['samples'] / tot['samples']:6.1f} "
                f"{100 * pl['insts'] / tot['insts']:6.1f} "
                f"{100 * pl['int'] / max(1.0, pl['insts']):5.0f}  {src}"
            )
    hot = int(sum(s["hot"] for s in agg.values()))
    print(f"hot code: {hot} of {len(data)} SASS instructions ran, {16 * hot // 1024} KiB")
    allst = {st: sum(s[st] for s in agg.values()) for st in STALLS}
    print(
        "whole kernel:",
        " ".join(
            f"{st} {100 * v / tot['samples']:.1f}"
            for st, v in sorted(allst.items(), key=lambda kv: -kv[1])[:8]
        ),
    )


if __name__ == "__main__":
    main()
