"""NVRTC: every program in build.json compiles to a cubin for its own arch, with a ptxas resource
report for each of its kernels. Programs compile in parallel, once each, in a process pool."""

from __future__ import annotations

import multiprocessing
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, require_nvrtc

from cake.compile import FLAGS, Compiled, compile_source, parse_resources
from cake.errors import CompileError
from cake.manifest import Entry
from cake.manifest import load as load_manifest
from cake.spec import Arch, Version
from cake.tree import Tree

ENTRIES = load_manifest(Tree(REPO).manifest).entries
EM_CUDA = 190


def _compile(path: str, arch: Arch, name: str) -> Compiled:
    return compile_source(Path(path).read_text(), arch, name)


USES_POOL = (
    "test_program_compiles",
    "test_no_register_a_operand_is_overwritten_in_flight",
    "test_no_16_byte_global_store_is_split",
)


@pytest.fixture(scope="session")
def compiles(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Compiled]]]:
    """Submit every program selected in this session to a pool at once; each test waits for its
    own. Spawned workers: NVRTC state is never shared with a forked parent."""
    require_nvrtc()
    wanted = {
        item.callspec.params["entry"].program  # type: ignore[attr-defined]
        for item in request.session.items
        if getattr(item, "originalname", "") in USES_POOL
    }
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=context) as pool:
        futures = {
            e.program: pool.submit(_compile, str(REPO / e.source), e.arch, e.program)
            for e in ENTRIES
            if e.program in wanted
        }
        yield futures
        for fut in futures.values():
            fut.cancel()


def elf_sm(cubin: bytes) -> int:
    """The SM number a CUDA ELF is built for: e_flags bits 0-7 in ELF ABI version 7, bits 8-15
    from version 8 on (LLVM's EF_CUDA_SM / EF_CUDA_SM_MASK)."""
    (flags,) = struct.unpack_from("<I", cubin, 48)
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def text_instructions(cubin: bytes, symbol: str) -> int:
    """SASS instructions of one kernel: the size of its ELF section .text.<symbol>, 16 bytes each
    (what nvdisasm lists, cold paths included)."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)

    names = header(shstrndx)[4]
    want = (".text." + symbol).encode()
    for i in range(shnum):
        start = names + header(i)[0]
        if cubin[start : cubin.index(b"\0", start)] == want:
            return header(i)[5] // 16
    raise KeyError(f"no .text.{symbol} in the cubin")


# Hopper's instruction cache: kda_bwd_chunk runs one 512-thread block per SM, and each block sweeps
# the whole program once per chunk. Its fused-L2 programs, at 9 416 SASS instructions (122 KiB of
# them ran), took 26 % longer than the l2n-off one at 8 248 (109 KiB ran), and 12.6 % less once
# rolled loops brought them to 8 184 (docs/kernel-notes.md, session 6). Static code is the proxy
# checked here; the hot code (tools/ncu_phases.py) is what the cache sees.
CODE_BUDGET = {("kda_bwd_chunk", Arch.sm_90a): 8600, ("kda_bwd_chunk", Arch.sm_90): 8600}


def test_text_instructions_reads_the_kernel_section() -> None:
    # a minimal ELF64: header, a section-name table and one .text.k section of 48 bytes
    names = b"\0.shstrtab\0.text.k\0"
    body = names + bytes(48)
    shoff = 64 + len(body)
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 1)
    sections = bytes(64)  # the null section
    sections += struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 11, 1, 0, 0, 64 + len(names), 48, 0, 0, 16, 0)
    cubin = bytes(head) + body + sections
    assert text_instructions(cubin, "k") == 3
    with pytest.raises(KeyError):
        text_instructions(cubin, "other")


def test_manifest_has_programs() -> None:
    assert len(ENTRIES) > 0


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.program)
def test_program_compiles(entry: Entry, compiles: dict[str, Future[Compiled]]) -> None:
    nvrtc = require_nvrtc()
    if nvrtc < Version.parse(entry.min_cuda):
        pytest.skip(f"NVRTC {nvrtc} is older than {entry.program}'s min_cuda {entry.min_cuda}")
    compiled = compiles[entry.program].result()
    cubin = compiled.cubin
    assert len(cubin) > 64
    assert cubin[:4] == b"\x7fELF", "NVRTC returned something that is not a cubin"
    assert cubin[4] == 2, "not a 64-bit ELF"
    assert struct.unpack_from("<H", cubin, 18)[0] == EM_CUDA
    assert elf_sm(cubin) == int(str(entry.arch).removeprefix("sm_").rstrip("a"))
    for kernel in entry.kernels:
        assert kernel.symbol.encode() in cubin
        assert kernel.symbol in compiled.resources, f"no ptxas report for {kernel.symbol}"
        assert compiled.resources[kernel.symbol].registers > 0
        budget = CODE_BUDGET.get((kernel.symbol, entry.arch))
        if budget is not None:
            n = text_instructions(cubin, kernel.symbol)
            assert n <= budget, f"{kernel.symbol}: {n} SASS instructions, over its {budget}"
    # ptxas C7510-C7519: a wgmma under a branch it cannot prove warp-uniform, or an accumulator
    # read between a wgmma's issue and its wait, makes it wait for every wgmma to finish before
    # the next issues (the state passes ran so for a session, 2026-11-29).
    # C7517: a wait injected after a wgmma whose registers are read too early.
    serialized = [
        line
        for line in compiled.log.splitlines()
        if "wgmma.mma_async instructions are serialized" in line
        or "wgmma.wait_group is injected" in line
    ]
    assert not serialized, serialized
    # No front-end warning either (an unused helper, an unused variable): every program compiles
    # clean, so a new warning is seen when it appears.
    warnings = [line for line in compiled.log.splitlines() if "warning #" in line]
    assert not warnings, warnings
    # Hopper programs (the ones the H200 runs) spill nothing: kda_fwd_state at 255 registers
    # spilled 176 bytes in its chain under NVRTC 13.0 and ran 45 % slower (docs/notes.md, session
    # 19). Blackwell's portable programs (128 registers a thread) are not held to it: several
    # spill a little, differently per NVRTC version, and none of them can be timed here.
    if entry.arch in (Arch.sm_90a, Arch.sm_90):
        spills = {
            k: (r.spill_stores, r.spill_loads)
            for k, r in compiled.resources.items()
            if r.spill_stores or r.spill_loads
        }
        assert not spills, f"spills (stores, loads in bytes): {spills}"


def nvdisasm() -> str | None:
    """nvdisasm as tools/ncu_phases.py finds it (the nvidia-cuda-nvdisasm wheel, else PATH)."""
    tools = str(REPO / "tools")
    if tools not in sys.path:  # called once per SASS test: insert it once
        sys.path.insert(0, tools)
    from ncu_phases import find_nvdisasm  # noqa: PLC0415

    return find_nvdisasm()


def sass_lines(cubin: bytes, tmp: Path) -> list[str]:
    tool = nvdisasm()
    if tool is None:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    path = tmp / "k.cubin"
    path.write_bytes(cubin)
    text = subprocess.run(
        [tool, "-c", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return [
        re.sub(r"/\*[0-9a-f]+\*/", "", ln).strip().rstrip(";").strip()
        for ln in text.splitlines()
        if ln.strip().startswith("/*")
    ]


_NOT_A_WRITE = (
    "ST",
    "RED",
    "ATOM",
    "BAR",
    "BRA",
    "EXIT",
    "RET",
    "CALL",
    "BSYNC",
    "BSSY",
    "WARPSYNC",
    "NOP",
    "YIELD",
    "DEPBAR",
    "MEMBAR",
    "FENCE",
    "ERRBAR",
    "CCTL",
    "SYNCS",
    "UTMA",
    "WARPGROUP",
)


def register_a_hazards(lines: list[str]) -> list[str]:
    """Instructions that write a register while an HGMMA that reads it as its A operand may still
    be in flight (issued, no `WARPGROUP.DEPBAR.LE gsb0, 0x0` since), in listing order. The tensor
    cores read register A operands asynchronously, but ptxas may give their registers to new
    values once the PTX no longer uses them: kda_fwd_state's copy of S^T, stored while the lo pass
    ran, landed in the lo pass's A registers and gave a wrong o on the H200 (docs/notes.md,
    session 10). A linear scan of the listing: branches are not followed."""
    inflight: dict[int, str] = {}
    found = []
    for line in lines:
        words = line.split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if not words:
            continue
        op, operands = words[0], " ".join(words[1:]).split(",")
        first = operands[0].strip() if operands else ""
        if op.startswith("HGMMA"):
            a = re.match(r"R(\d+)$", operands[1].strip()) if len(operands) > 1 else None
            if a:
                for r in range(int(a.group(1)), int(a.group(1)) + 4):
                    inflight[r] = line
            continue
        if op.startswith("WARPGROUP.DEPBAR") and line.rstrip().endswith("0x0"):
            inflight.clear()
            continue
        dest = re.match(r"R(\d+)$", first)
        if dest is None or op.startswith(_NOT_A_WRITE):
            continue
        width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
        hit = [r for r in range(int(dest.group(1)), int(dest.group(1)) + width) if r in inflight]
        if hit:
            found.append(f"{line}  (A operand of: {inflight[hit[0]]})")
    return found


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if e.arch == Arch.sm_90a and "state" in e.program],
    ids=lambda e: e.program,
)
def test_no_register_a_operand_is_overwritten_in_flight(
    entry: Entry, compiles: dict[str, Future[Compiled]], tmp_path: Path
) -> None:
    compiled = compiles[entry.program].result()  # the session's compile, shared
    assert register_a_hazards(sass_lines(compiled.cubin, tmp_path)) == []


def test_register_a_hazard_is_found() -> None:
    """The scan on a listing shaped like session 10's hazard (kda_fwd_state's copy of S^T converted
    into the lo pass's A registers while that pass ran). Planting it in the program itself, by
    removing the wait before the copy, no longer makes ptxas reuse those registers since the chain
    is compiled once per precise-rows setting (session 19), so the listing stands in for it."""
    hgmma = "HGMMA.64x64x8.F32.TF32 R24, R120, gdesc[UR8], R24, gsb0"
    listing = [
        "WARPGROUP.ARRIVE",
        hgmma,
        "F2FP.TF32.F32.PACK_B R122, R56",  # overwrites A register R122 in flight: a hazard
        "STS [R2], R121",  # reads an A register: not a write
        "WARPGROUP.DEPBAR.LE gsb0, 0x0",
        "F2FP.TF32.F32.PACK_B R120, R57",  # after the wait: fine
    ]
    found = register_a_hazards(listing)
    assert (
        len(found) == 1 and found[0].startswith("F2FP.TF32.F32.PACK_B R122") and hgmma in found[0]
    )
    assert (
        register_a_hazards([ln for ln in listing if not ln.startswith("F2FP.TF32.F32.PACK_B R122")])
        == []
    )
    wide = [hgmma, "LDS.64 R118, [R3]"]  # a 64-bit load into R118..R119: outside R120..R123
    assert register_a_hazards(wide) == []
    assert len(register_a_hazards([hgmma, "LDS.128 R118, [R3]"])) == 1  # R118..R121


def test_flags_make_a_cubin_with_a_resource_report() -> None:
    assert "--ptxas-options=-v" in FLAGS
    assert not any(f.lstrip("-") == "ptx" for f in FLAGS)


def test_bad_source_raises_compile_error_with_the_log() -> None:
    require_nvrtc()
    with pytest.raises(CompileError) as info:
        compile_source(
            'extern "C" __global__ void k() { undeclared_thing(); }\n', Arch.sm_90a, "bad"
        )
    assert "could not compile bad for sm_90a" in str(info.value)
    assert "undeclared_thing" in str(info.value)


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'first' for 'sm_90a'
ptxas info    : Function properties for first
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 33024 bytes smem
ptxas info    : Compiling entry function 'second' for 'sm_90a'
ptxas info    : Function properties for second
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
"""


def test_parse_resources_per_kernel() -> None:
    res = parse_resources(PTXAS_LOG)
    assert set(res) == {"first", "second"}
    first, second = res["first"], res["second"]
    assert (first.registers, first.stack, first.spill_stores, first.spill_loads) == (168, 16, 8, 4)
    assert first.smem_static == 33024
    assert (second.registers, second.smem_static, second.spill_stores) == (40, 0, 0)


_STG32 = re.compile(r"^STG\.E (?:desc\[\w+\])?\[(R\d+)\.64(?:\+0x([0-9a-f]+))?\]")


def split_stores(listing: list[str], window: int = 8) -> list[str]:
    """Four 4-byte global stores to offsets o, o + 4, o + 8, o + 12 (o a multiple of 16) of one
    base register within `window` instructions: a 16-byte store the compiler split (kda_fwd_chunk's
    float4 stores were, until cake_st_global_v4: docs/notes.md, session 22)."""
    found = []
    for i, line in enumerate(listing):
        m = _STG32.match(line)
        if m is None or int(m.group(2) or "0", 16) % 16:
            continue
        base, o = m.group(1), int(m.group(2) or "0", 16)
        near = {
            int(n.group(2) or "0", 16)
            for ln in listing[max(0, i - window) : i + window]
            if (n := _STG32.match(ln)) is not None and n.group(1) == base
        }
        if {o + 4, o + 8, o + 12} <= near:
            found.append(line)
    return found


@pytest.mark.parametrize(
    "entry", [e for e in ENTRIES if e.arch in (Arch.sm_90a, Arch.sm_90)], ids=lambda e: e.program
)
def test_no_16_byte_global_store_is_split(
    entry: Entry, compiles: dict[str, Future[Compiled]], tmp_path: Path
) -> None:
    compiled = compiles[entry.program].result()  # the session's compile, shared
    assert split_stores(sass_lines(compiled.cubin, tmp_path)) == []


def test_split_store_is_found() -> None:
    """The scan on a listing shaped like 7fd06c4's kda_fwd_chunk (a float4 store as four STG.E,
    out of order), and on whole 16-byte stores and 4-byte stores of separate rows."""
    split = [
        "STG.E desc[UR10][R4.64+0x4], R7",
        "STG.E desc[UR10][R4.64], R9",
        "FMUL R3, R3, R5",
        "STG.E desc[UR10][R4.64+0x8], R13",
        "STG.E desc[UR10][R4.64+0xc], R11",
    ]
    assert split_stores(split) == ["STG.E desc[UR10][R4.64], R9"]
    whole = ["STG.E.128 desc[UR10][R4.64], R8", "STG.E.128 desc[UR10][R4.64+0x10], R12"]
    rows = [f"STG.E desc[UR10][R{2 * k}.64], R{20 + k}" for k in range(4)]  # four bases
    assert split_stores(whole) == [] and split_stores(rows) == []
