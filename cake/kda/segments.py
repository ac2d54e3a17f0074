"""Segment-parallel state passes for long sequences (docs/cp-design.md, "intracard CP").

A long sequence's chunks are split into P segments of consecutive chunks. The forward state pass
then runs in three steps, all with the serial programs (kda_fwd_state / kda_bwd_state) and a
*segment table* in place of the sequence table:

  local    every segment from a zero state: its end state B_p (the pass without o), and its K x K
           transition M_p = A_last ... A_first (the same pass on U = 0 from S = I, because the state
           update is affine in S: S' = A_c S + Kd_c^T U_c with A_c = Diag(gl_c) - Kd_c^T W_c);
           both passes of every segment in one launch of the local program;
  combine  X_0 = h0 (or 0), X_{p+1} = M_p X_p + B_p: kda_seg_combine, one launch, fp32 in a fixed
           order, P - 1 steps of a 128 x 128 by 128 x 4 product per block;
  fix-up   every segment again from its true start X_p: o, the chunk-start states, the final state.

The backward mirrors it: local reverse passes from dS = 0 at each segment's end give dB_p; the
combine Y_P = dht, Y_p = M_p^T Y_{p+1} + dB_p uses the forward's M_p; the fix-up reruns each
segment from Y_{p+1}. P = 1 is the serial path: no local pass, no combine, the same launches.

P is chosen per sequence from its own length and the head count (never from its neighbours), so a
sequence's bits are the same alone and packed, for a given GPU. Everything the launches need is
built once per (cu_seqlens, heads, P) and cached, so a call adds no host work per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from .layout import CHUNK

# The automatic rule's segment length: P = ceil(chunks / SEG_CHUNKS), so every split sequence's
# chains are at most 18 chunks. Measured on R2 (session 27, H200, one process, kernel time of one
# fwd+bwd, g off saved / raw fused replay): the old floor(chunks / 8) rule (P = 16 / 8 / 5) 830 /
# 1205 us; ceil(chunks / 18) (8 / 4 / 3) 747 / 1086 (-10 %); ceil(chunks / 16) (9 / 5 / 3) 895 /
# 1274 (+6..8 %). Fewer segments mean fewer combine steps and fewer blocks (the local pass has 4
# per segment and head, one an SM), while the longest chain, not the sum, sets the time; but the
# waves are cliffs: 9 / 5 / 3 makes 272 local blocks, a third wave of 132. 64K tokens (1024
# chunks), one head: P = 57 for 64, the same time (904 / 910 us); 4 heads: P = 16 either way (the
# GPU-filling bound below).
SEG_CHUNKS = 18
# Sequences of fewer chunks are not split by the automatic rule: at 32 chunks (m2's 2048 tokens x 4
# heads) the serial path measured 5-33 % faster per fwd+bwd than 4 segments (session 13, H200, three
# processes): such calls are bound by the host, and the split path's extra launches cost more there
# than its shorter chain saves on the GPU.
MIN_SPLIT_CHUNKS = 33
MAX_SEGMENTS = 64
BLOCKS_PER_ROW_HEAD = 2  # kda_fwd_state / kda_bwd_state: 2 blocks of 64 value columns


def _chunk_counts(cu_seqlens: tuple[int, ...]) -> list[int]:
    return [
        math.ceil((e - s) / CHUNK) for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True)
    ]


def auto_segments(n_chunks: int, heads: int, sms: int) -> int:
    """P for one sequence: segments of at most SEG_CHUNKS chunks, but no more than its fix-up pass
    alone fills the GPU with (2 blocks per segment and head) and at most MAX_SEGMENTS; 1 when that
    is < 2 or the sequence has fewer than MIN_SPLIT_CHUNKS chunks."""
    if n_chunks < MIN_SPLIT_CHUNKS:
        return 1
    fill = sms // (BLOCKS_PER_ROW_HEAD * heads)
    return max(1, min(fill, MAX_SEGMENTS, -(-n_chunks // SEG_CHUNKS)))


def segment_sizes(n_chunks: int, P: int) -> list[int]:
    """Chunks per segment: min(P, n_chunks) balanced segments, the longer ones first; [0] for an
    empty sequence (its one row carries h0 to the final state)."""
    p = max(1, min(P, n_chunks))
    base, extra = divmod(n_chunks, p)
    return [base + (1 if i < extra else 0) for i in range(p)]


def precise_flags(
    cu_seqlens: tuple[int, ...], heads: int, sms: int, segments: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """Per sequence, 1 when its state pass runs at the precise setting (kda_fwd_state `precise`):
    the sequences the automatic rule would split, whatever P the call uses, so that a split run
    and its serial run (segments=1) compute the same chain to ~1e-6; and every sequence this call
    splits (`segments`, P per sequence), so that no split chain runs at the default setting. From
    the sequence's own length, the head count and P only (pack invariant)."""
    chosen = segments or (1,) * (len(cu_seqlens) - 1)
    return tuple(
        int(auto_segments(nc, heads, sms) > 1 or p > 1)
        for nc, p in zip(_chunk_counts(cu_seqlens), chosen, strict=True)
    )


@dataclass(frozen=True)
class Plan:
    """Rows of the segment table, sequence by sequence. `segments[n]` = P of sequence n (1: serial).
    `rows` int32 [R, 2] (first chunk, number of chunks) on the device; `first_row[n]` /
    `last_row[n]` index rows; `split` lists the sequences with P >= 2; `local_rows` int32 [Rs, 2]
    are the rows of the split sequences (in order), `local_of[n]` the first of them for sequence n.
    `seq_precise` / `row_precise` / `local_precise`: int32 precise flags per sequence / row /
    local row (None when no sequence is precise). `table` int32 [N, 3] (first row, rows, first
    local row) is kda_seg_combine's; `first_rows` / `last_rows` int64 [N] index the rows."""

    segments: tuple[int, ...]
    rows: torch.Tensor
    first_row: tuple[int, ...]
    last_row: tuple[int, ...]
    split: tuple[int, ...]
    local_rows: torch.Tensor
    local_of: tuple[int, ...]
    seq_precise: torch.Tensor | None
    row_precise: torch.Tensor | None
    local_precise: torch.Tensor | None
    table: torch.Tensor
    first_rows: torch.Tensor
    last_rows: torch.Tensor

    @property
    def any_split(self) -> bool:
        return bool(self.split)

    @property
    def n_rows(self) -> int:
        return int(self.rows.shape[0])

    @property
    def n_local(self) -> int:
        return int(self.local_rows.shape[0])


def choose_segments(
    cu_seqlens: tuple[int, ...], heads: int, sms: int, override: int | None
) -> tuple[int, ...]:
    """P per sequence: `override` for every sequence when given (capped by its chunk count), else
    auto_segments from the sequence's own length."""
    out = []
    for nc in _chunk_counts(cu_seqlens):
        p = override if override is not None else auto_segments(nc, heads, sms)
        out.append(max(1, min(p, nc)) if nc else 1)
    return tuple(out)


@lru_cache(maxsize=64)
def plan_call(
    cu_seqlens: tuple[int, ...], heads: int, sms: int, override: int | None, device: torch.device
) -> Plan:
    """The plan of one call: P per sequence (choose_segments) and the precise flags, cached."""
    segments = choose_segments(cu_seqlens, heads, sms, override)
    return plan_for(segments, cu_seqlens, device, precise_flags(cu_seqlens, heads, sms, segments))


@lru_cache(maxsize=64)
def plan_for(
    segments: tuple[int, ...],
    cu_seqlens: tuple[int, ...],
    device: torch.device,
    precise: tuple[int, ...] | None = None,
) -> Plan:
    precise = precise or (0,) * len(segments)
    rows: list[tuple[int, int]] = []
    first_row, last_row, split, local_of = [], [], [], []
    local: list[tuple[int, int]] = []
    row_flag: list[int] = []
    local_flag: list[int] = []
    chunk = 0
    for n, nc in enumerate(_chunk_counts(cu_seqlens)):
        first_row.append(len(rows))
        for size in segment_sizes(nc, segments[n]):
            rows.append((chunk, size))
            row_flag.append(precise[n])
            chunk += size
        last_row.append(len(rows) - 1)
        local_of.append(len(local))
        if segments[n] > 1:
            split.append(n)
            local += rows[first_row[n] :]
            local_flag += row_flag[first_row[n] :]
    any_precise = any(precise)
    counts = [b - a + 1 for a, b in zip(first_row, last_row, strict=True)]
    table = list(zip(first_row, counts, local_of, strict=True))
    return Plan(
        segments=segments,
        rows=_pairs(rows, device),
        first_row=tuple(first_row),
        last_row=tuple(last_row),
        split=tuple(split),
        local_rows=_pairs(local, device),
        local_of=tuple(local_of),
        seq_precise=_flags(precise, device) if any_precise else None,
        row_precise=_flags(tuple(row_flag), device) if any_precise else None,
        local_precise=_flags(tuple(local_flag), device) if any_precise else None,
        table=torch.tensor(table, dtype=torch.int32).reshape(len(table), 3).to(device),
        first_rows=torch.tensor(first_row, dtype=torch.int64).to(device),
        last_rows=torch.tensor(last_row, dtype=torch.int64).to(device),
    )


def _flags(flags: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(flags, dtype=torch.int32).to(device)


def _pairs(rows: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), 2).to(device)
