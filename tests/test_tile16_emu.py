"""The byte diet (docs/wgmma-plan.md): kda_fwd_chunk with kTile16WK / kTile16QA on writes W and
Kd^T / Qg and Aqk as 16-bit records (generators/include/cake/tile16.cuh). Decoded here from the
format alone, each record must give back the TF32 tile the shipped program writes: bit for bit
wherever the scaled value is an fp16 normal, within 2^-25 of the row's scale below that, with each
row's exponent byte putting its largest value in fp16's top binade. Readers that take the records
(kda_fwd_state's warpgroup 1 on sm_90a: Qg and Aqk) must then give the shipped outputs. Not every
reader takes them yet, so the shipped programs keep the switches off."""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import cake.kda.backward as backward_module  # noqa: E402
import cake.kda.forward as forward_module  # noqa: E402
from cake.spec import Arch  # noqa: E402
from tools.emu import compiler  # noqa: E402
from tools.emu.check import CASES, case_inputs, config_for  # noqa: E402
from tools.emu.loader import EmuLoader, EmuModule, Options, Program, emulate  # noqa: E402

pytestmark = pytest.mark.skipif(
    not compiler.available(), reason=f"no C++ compiler {compiler.compiler()!r} for tools/emu"
)

WK, QA = "kTile16WK", "kTile16QA"
TILES = {"W": (64, 128), "Qg": (64, 128), "Kd": (128, 64), "Aqk": (64, 64)}  # rows, columns


class _Skipped:
    """A program whose kernels do nothing: the state passes, which cannot read the records."""

    def __getitem__(self, symbol: str) -> Any:
        return lambda *args, **kw: None

    def __contains__(self, symbol: object) -> bool:
        return True


class Tile16Loader(EmuLoader):
    """The programs whose record starts with a key of `switches` rendered with those switches on;
    with `only`, every other program skipped (kernels that do nothing)."""

    def __init__(self, switches: dict[str, tuple[str, ...]], only: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.switches, self.only = switches, only

    def _switched(self, record: str) -> tuple[str, ...] | None:
        return next((s for key, s in self.switches.items() if record.startswith(key)), None)

    def program(self, package: str, record: str) -> Program:
        program = super().program(package, record)
        text = program.text
        for name in self._switched(record) or ():
            off = f"constexpr bool {name} = false;"
            assert off in text, f"{off!r} is not in {record}: update the test"
            text = text.replace(off, off.replace("false", "true"))
        return Program(program.entry, text)

    def module(self, package: str, record: str, device: int = 0) -> EmuModule:
        if self.only and self._switched(record) is None:
            return _Skipped()  # type: ignore[return-value]
        return super().module(package, record, device)


def wg_idx(rows: int, r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """cake_wg_idx<rows>: the TF32 wgmma image (float offsets)."""
    return (k >> 5) * (rows * 32) + r * 32 + ((((k >> 2) & 7) ^ (r & 7)) << 2) + (k & 3)


def pkinv(r: torch.Tensor) -> torch.Tensor:
    return (r & ~7) + 2 * (r & 3) + ((r >> 2) & 1)


def stored_row(name: str, arch: Arch) -> torch.Tensor:
    """Where each logical row is stored: its image row on sm_90a (W's and Kd^T's in pk order)."""
    r = torch.arange(TILES[name][0])
    return pkinv(r) if arch is Arch.sm_90a and name in ("W", "Kd") else r


def offsets(name: str, arch: Arch) -> torch.Tensor:
    """[rows, cols] element offsets of each logical element in a tile's fp32 form, which the
    16-bit record keeps (cake/tile16.cuh)."""
    rows, cols = TILES[name]
    r = torch.arange(rows)[:, None].expand(rows, cols)
    c = torch.arange(cols)[None, :].expand(rows, cols)
    if arch is not Arch.sm_90a:
        return r * cols + c  # the portable programs: row-major
    return wg_idx(rows, stored_row(name, arch)[:, None].expand(rows, cols), c)


def decode(
    name: str, f32_slots: torch.Tensor, record_slots: torch.Tensor, arch: Arch
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A tile's shipped TF32 values, its record decoded from the format alone, and the record's
    exponent bytes by logical row: [nc, h, rows, cols] (float64) twice, [nc, h, rows]."""
    rows, cols = TILES[name]
    nc, h = f32_slots.shape[:2]
    at = offsets(name, arch)
    f32 = f32_slots.reshape(nc, h, -1)[..., at].double()
    raw = record_slots.reshape(nc, h, -1).view(torch.uint8)
    half = raw[..., : 2 * rows * cols].contiguous().view(torch.float16)
    vals = half[..., at].double()  # [nc, h, rows, cols], scaled
    E = raw[..., 2 * rows * cols : 2 * rows * cols + rows].to(torch.int64)  # by stored row
    E = E[..., stored_row(name, arch)]  # [nc, h, rows], logical
    return f32, vals * torch.pow(2.0, (E - 141).double())[..., None], E


def inexact(
    shipped: dict[str, torch.Tensor], records: dict[str, torch.Tensor], names: str, arch: Arch
) -> int:
    """How many values of the tiles `names` the records do not carry exactly."""
    total = 0
    for name in names.split():
        f32, decoded, _ = decode(name, shipped[name], records[name], arch)
        total += int((decoded != f32).sum())
    return total


def assert_same(want: torch.Tensor, got: torch.Tensor, exact: bool, what: str) -> None:
    """Bit for bit where the records are exact; else within their error (< 2^-39 of a row's
    largest value, relative)."""
    if exact:
        assert torch.equal(want, got), what
    else:
        err = float((want.double() - got.double()).norm() / want.double().norm().clamp_min(1e-30))
        assert err < 1e-9, (what, err)


def chunk_tiles(
    loader: EmuLoader, case: str, lengths: tuple[int, ...] = (130, 65, 1)
) -> dict[str, torch.Tensor]:
    inp, _, _ = case_inputs(CASES[case], lengths=list(lengths))
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        saved = forward_module.forward(*args, config_for(inp), keep=True)[2]
    assert saved is not None
    return {name: saved[name].clone() for name in TILES}


@pytest.mark.parametrize("arch", [Arch.sm_90, Arch.sm_90a])
@pytest.mark.parametrize("case", ["g-mixed-off", "g-fast-fused-bsig", "sigmoid-lb5-fused"])
def test_16_bit_records_decode_to_the_tf32_tiles(arch, case):
    shipped = chunk_tiles(EmuLoader(arch=arch), case)
    records = chunk_tiles(Tile16Loader({"fwd_chunk.": (WK, QA)}, only=True, arch=arch), case)
    inexact = 0
    for name in TILES:
        f32, decoded, E = decode(name, shipped[name], records[name], arch)
        up = torch.pow(2.0, (E - 141).double())[..., None]
        assert bool(torch.isfinite(decoded).all()), name
        # each row's exponent: its largest |TF32 value| scaled into [2^14, 2^15), or E = 15 for
        # rows below that (then the largest is under 2^14 scaled)
        top = f32.abs().amax(-1) / up[..., 0]
        assert bool((((top >= 2**14) & (top < 2**15)) | ((E == 15) & (top < 2**14))).all()), name
        normal = f32.abs() / up >= 2**-14
        assert torch.equal(decoded[normal], f32[normal]), f"{name}: a normal value changed"
        tiny = ~normal
        err = (decoded - f32).abs()[tiny]
        assert bool((err <= 2**-25 * up.expand_as(f32)[tiny]).all()), f"{name}: {err.max()}"
        inexact += int((decoded != f32).sum())
    if case == "g-fast-fused-bsig":  # fast decay: Kd^T's rows span more than fp16's normal range
        assert inexact > 0, "no value below the normal range: the bound above went unchecked"


def forward_o(
    loader: EmuLoader, case: str, segments: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    inp, _, _ = case_inputs(CASES[case], lengths=list(LENGTHS))
    config = dataclasses.replace(config_for(inp), segments=segments)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        o, ht, *_ = forward_module.forward(*args, config)
    return o, ht


LENGTHS = (300, 65, 1)
# the reader tests' cases: every tile value exact in 16 bits (bits as shipped), and a strong decay
# that puts values below fp16's normal range (then within the records' error)
EXACT = {"g-mixed-off": True, "sigmoid-lb5-fused": False}


@functools.cache  # deterministic: two forwards once per case, names and arch, not per test
def exactness(case: str, names: str, arch: Arch = Arch.sm_90a) -> bool:
    shipped = chunk_tiles(EmuLoader(arch=arch), case, LENGTHS)
    records = chunk_tiles(
        Tile16Loader({"fwd_chunk.": (WK, QA)}, only=True, arch=arch), case, LENGTHS
    )
    exact = inexact(shipped, records, names, arch) == 0
    assert exact == EXACT[case], f"{case}: the case no longer covers what the test says"
    return exact


@pytest.mark.parametrize(
    "segments, schedule",
    [(None, 0), (2, 0), (2, 1), (2, 7)],
    ids=["serial", "split", "desc", "shuf"],
)
@pytest.mark.parametrize("case", list(EXACT))
@pytest.mark.parametrize("arch", [Arch.sm_90a, Arch.sm_90])
def test_fwd_state_reads_16_bit_qg_and_aqk(arch, case, segments, schedule):
    """kda_fwd_state with Qg and Aqk as records (serial calls and the split calls' fix-up),
    widened where they land: in place by warpgroup 1 (sm_90a), in each thread's own cp.async
    slots (the portable program): o and the final state as shipped, bit for bit where every value
    of the two tiles is exact in 16 bits, else within the records' error; also with the threads
    run in other orders (a widening write before another thread's read of the record, or a read
    before the copy landed, changes bits)."""
    exact = exactness(case, "Qg Aqk", arch)
    shipped = forward_o(EmuLoader(arch=arch), case, segments)
    loader = Tile16Loader(
        {"fwd_chunk.": (QA,), "fwd_state": (QA,)},
        arch=arch,
        options=Options(schedule=schedule),
    )
    records = forward_o(loader, case, segments)
    for what, a, b in zip(("o", "ht"), shipped, records, strict=True):
        assert_same(a, b, exact, what)


@pytest.mark.parametrize(
    "segments, schedule",
    [(None, 0), (None, 7), (2, 0), (2, 7)],
    ids=["serial", "serial-shuf", "split", "split-shuf"],
)
@pytest.mark.parametrize("case", list(EXACT))
@pytest.mark.parametrize("arch", [Arch.sm_90a, Arch.sm_90])
def test_bwd_state_reads_16_bit_qg_and_aqk(arch, case, segments, schedule):
    """kda_bwd_state (serial calls: each thread widens its own cp.async slots) and
    kda_bwd_state_bulk (the split calls' reverse passes on sm_90a: the block widens the bulk-copied
    records in place) with Qg and Aqk as records: every gradient as shipped, bit for bit where the
    two tiles' values are exact in 16 bits, else within the records' error. The forward's tiles
    are swapped for kda_fwd_chunk's records of the same inputs before the backward reads them."""
    exact = exactness(case, "Qg Aqk", arch)
    inp, do, dht = case_inputs(CASES[case], lengths=list(LENGTHS))
    config = dataclasses.replace(config_for(inp), segments=segments)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(EmuLoader(arch=arch)):
        saved = forward_module.forward(*args, config, keep=True)[2]
        want = backward_module.backward(*args, do, dht, config, saved)
    assert saved is not None
    records = chunk_tiles(Tile16Loader({"fwd_chunk.": (QA,)}, only=True, arch=arch), case, LENGTHS)
    for name in ("Qg", "Aqk"):
        saved[name].copy_(records[name])
    loader = Tile16Loader({"bwd_state": (QA,)}, arch=arch, options=Options(schedule=schedule))
    with emulate(loader):
        got = backward_module.backward(*args, do, dht, config, saved)
    assert want.keys() == got.keys()
    for name in want:
        assert_same(want[name], got[name], exact, name)


@pytest.mark.parametrize("segments", [None, 2], ids=["serial", "split"])
@pytest.mark.parametrize("case", list(EXACT))
@pytest.mark.parametrize("arch", [Arch.sm_90a, Arch.sm_90])
def test_the_whole_pass_with_16_bit_qg_and_aqk(arch, case, segments):
    """kTile16QA on in every program (the writer and all of Qg's and Aqk's readers), a forward and
    both backward paths (saved, replay): o, the final state and every gradient as shipped, bit for
    bit where the two tiles' values are exact in 16 bits, else within the records' error."""
    exact = exactness(case, "Qg Aqk", arch)
    inp, do, dht = case_inputs(CASES[case], lengths=list(LENGTHS))
    config = dataclasses.replace(config_for(inp), segments=segments)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)

    def run(loader: EmuLoader) -> dict[str, torch.Tensor]:
        with emulate(loader):
            o, ht, saved, _ = forward_module.forward(*args, config, keep=True)
            out = {"o": o, "ht": ht}
            for path, grads in (
                ("saved", backward_module.backward(*args, do, dht, config, saved)),
                ("replay", backward_module.backward(*args, do, dht, config)),
            ):
                out.update({f"{path} {name}": t for name, t in grads.items()})
        return out

    want = run(EmuLoader(arch=arch))
    switched = {key: (QA,) for key in ("fwd_chunk.", "fwd_state", "bwd_state")}
    got = run(Tile16Loader(switched, arch=arch))
    assert want.keys() == got.keys()
    for name in want:
        assert_same(want[name], got[name], exact, name)


def test_writer_and_readers_agree_on_the_format():
    """Each switch has one value in every rendered program that defines it: kda_fwd_chunk writing
    records that a reader takes as fp32 tiles (or the reverse) would be garbage, not an error."""
    values: dict[str, set[str]] = {}
    for path in (REPO / "artifacts").glob("*/*.cu"):
        for name, value in re.findall(r"constexpr bool (kTile16\w+) = (\w+);", path.read_text()):
            values.setdefault(name, set()).add(value)
    assert set(values) >= {"kTile16QA", "kTile16WK"}, values
    for name, seen in values.items():
        assert len(seen) == 1, (name, seen)
