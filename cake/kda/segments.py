"""Segment-parallel state passes for long sequences (docs/cp-design.md, "intracard CP").

A long sequence's chunks are split into P segments of consecutive chunks. The forward state pass
then runs in three steps, all with the serial programs (kda_fwd_state / kda_bwd_state) and a
*segment table* in place of the sequence table:

  local    every segment from a zero state: its end state B_p (the pass as it is), and its K x K
           transition M_p = A_last ... A_first (the same pass on U = 0 from S = I, because the state
           update is affine in S: S' = A_c S + Kd_c^T U_c with A_c = Diag(gl_c) - Kd_c^T W_c);
  combine  X_0 = h0 (or 0), X_{p+1} = M_p X_p + B_p, as a prefix scan of affine maps in float64;
  fix-up   every segment again from its true start X_p: o, the chunk-start states, the final state.

The backward mirrors it: local reverse passes from dS = 0 at each segment's end give dB_p; the
combine Y_P = dht, Y_p = M_p^T Y_{p+1} + dB_p uses the forward's M_p; the fix-up reruns each
segment from Y_{p+1}. P = 1 is the serial path: no local pass, no combine, the same launches.

P is chosen per sequence from its own length and the head count (never from its neighbours), so a
sequence's bits are the same alone and packed, for a given GPU. Only the combine's float64 scan
differs in association order from a serial composition; its rounding is ~1e-16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from .layout import CHUNK

MIN_SEG_CHUNKS = 8  # below this, the local pass and the combine cost more than the chain saves
MAX_SEGMENTS = 64
BLOCKS_PER_ROW_HEAD = 2  # kda_fwd_state / kda_bwd_state: 2 blocks of 64 value columns


def _chunk_counts(cu_seqlens: tuple[int, ...]) -> list[int]:
    return [
        math.ceil((e - s) / CHUNK) for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True)
    ]


def auto_segments(n_chunks: int, heads: int, sms: int) -> int:
    """P for one sequence: enough segments that its passes alone fill the GPU (2 blocks per segment
    and head), at least MIN_SEG_CHUNKS chunks each, at most MAX_SEGMENTS; 1 when that is < 2."""
    if n_chunks < 2 * MIN_SEG_CHUNKS:
        return 1
    fill = sms // (BLOCKS_PER_ROW_HEAD * heads)
    return max(1, min(fill, MAX_SEGMENTS, n_chunks // MIN_SEG_CHUNKS))


def segment_sizes(n_chunks: int, P: int) -> list[int]:
    """Chunks per segment: min(P, n_chunks) balanced segments, the longer ones first; [0] for an
    empty sequence (its one row carries h0 to the final state)."""
    p = max(1, min(P, n_chunks))
    base, extra = divmod(n_chunks, p)
    return [base + (1 if i < extra else 0) for i in range(p)]


def precise_flags(cu_seqlens: tuple[int, ...], heads: int, sms: int) -> tuple[int, ...]:
    """Per sequence, 1 when its state pass runs at the precise setting (kda_fwd_state `precise`):
    the sequences the automatic rule would split, whatever P the call uses, so that a split run
    and its serial run (segments=1) compute the same chain to ~1e-6. From the sequence's own
    length and the head count only (pack invariant)."""
    return tuple(int(auto_segments(nc, heads, sms) > 1) for nc in _chunk_counts(cu_seqlens))


@dataclass(frozen=True)
class Plan:
    """Rows of the segment table, sequence by sequence. `segments[n]` = P of sequence n (1: serial).
    `rows` int32 [R, 2] (first chunk, number of chunks) on the device; `first_row[n]` /
    `last_row[n]` index rows; `split` lists the sequences with P >= 2; `local_rows` int32 [Rs, 2]
    are the rows of the split sequences (in order), `local_of[n]` the first of them for sequence n.
    `seq_precise` / `row_precise` / `local_precise`: int32 precise flags per sequence / row /
    local row (None when no sequence is precise)."""

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

    @property
    def any_split(self) -> bool:
        return bool(self.split)

    @property
    def n_rows(self) -> int:
        return int(self.rows.shape[0])


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
    return plan_for(segments, cu_seqlens, device, precise_flags(cu_seqlens, heads, sms))


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
    )


def _flags(flags: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(flags, dtype=torch.int32).to(device)


def _pairs(rows: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), 2).to(device)


# ------------------------------------------------------------------------------------- combine


def affine_prefix(M: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inclusive prefix composition of the affine maps x -> M[p] x + B[p] along dim 1 (float64):
    returns (P, Q) with P[:, p] = M[:, p] ... M[:, 0] and Q[:, p] the image of 0 under maps 0..p,
    so maps 0..p send x to P[:, p] x + Q[:, p]. Hillis-Steele: ceil(log2 n) rounds, a fixed order of
    operations for a given shape (deterministic)."""
    P, Q = M.clone(), B.clone()
    n = M.shape[1]
    d = 1
    while d < n:
        P_next, Q_next = P.clone(), Q.clone()
        P_next[:, d:] = P[:, d:] @ P[:, :-d]
        Q_next[:, d:] = P[:, d:] @ Q[:, :-d] + Q[:, d:]
        P, Q = P_next, Q_next
        d *= 2
    return P, Q


def combine_forward(
    plan: Plan, B_loc: torch.Tensor, M_loc: torch.Tensor, h0: torch.Tensor | None, heads: int
) -> torch.Tensor:
    """Start state of every row ([R, H, K, V], B_loc's dtype): h0 (or 0) for a sequence's first row,
    X_{p+1} = M_p X_p + B_p along the segments of split sequences (B_loc, M_loc: the local pass's
    end states over plan.local_rows)."""
    R, K = plan.n_rows, B_loc.shape[-2]
    V = B_loc.shape[-1]
    device = B_loc.device
    X = torch.zeros((R, heads, K, V), dtype=B_loc.dtype, device=device)
    if h0 is not None:
        X[list(plan.first_row)] = h0
    if not plan.split:
        return X
    Mp, Bp = _stack_split(plan, M_loc, B_loc)  # [S, Pmax, H, K, K|V], float64
    pre_M, pre_B = affine_prefix(Mp, Bp)
    X0 = X[[plan.first_row[n] for n in plan.split]].double()  # [S, H, K, V]
    # X_{p+1} = pre_M[p] X_0 + pre_B[p], for p = 0 .. P_n - 2
    ends = pre_M @ X0.unsqueeze(1) + pre_B
    for s, n in enumerate(plan.split):
        P = plan.segments[n]
        r0 = plan.first_row[n]
        X[r0 + 1 : r0 + P] = ends[s, : P - 1].to(X.dtype)
    return X


def combine_backward(
    plan: Plan, dB_loc: torch.Tensor, M_loc: torch.Tensor, dht: torch.Tensor | None, heads: int
) -> torch.Tensor:
    """State gradient at the END of every row ([R, H, K, V], dB_loc's dtype): dht (or 0) for a sequence's
    last row, Y_p = M_p^T Y_{p+1} + dB_p walking back along the segments of split sequences
    (dB_loc: the local reverse pass's start gradients over plan.local_rows)."""
    R, K = plan.n_rows, dB_loc.shape[-2]
    V = dB_loc.shape[-1]
    device = dB_loc.device
    Y = torch.zeros((R, heads, K, V), dtype=dB_loc.dtype, device=device)
    if dht is not None:
        Y[list(plan.last_row)] = dht
    if not plan.split:
        return Y
    # reversed order: map j = P-1-p sends Y_{p+1} to Y_p with M_p^T and dB_p, p = P-1 .. 1
    Mt, dBp = _stack_split(plan, M_loc.transpose(-1, -2), dB_loc, reverse=True)
    pre_M, pre_B = affine_prefix(Mt, dBp)
    YP = Y[[plan.last_row[n] for n in plan.split]].double()
    starts = pre_M @ YP.unsqueeze(1) + pre_B  # starts[s, j] = Y_{P-1-j} (start of segment P-1-j)
    for s, n in enumerate(plan.split):
        P = plan.segments[n]
        r0 = plan.first_row[n]
        # the end gradient of row p (p < P-1) is the start gradient of row p+1 = starts[s, P-2-p]
        Y[r0 : r0 + P - 1] = starts[s, : P - 1].flip(0).to(Y.dtype)
    return Y


def _stack_split(
    plan: Plan, M_loc: torch.Tensor, B_loc: torch.Tensor, *, reverse: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """[S, Pmax, H, K, K] transitions and [S, Pmax, H, K, V] offsets of the split sequences in
    float64; sequences with fewer segments are padded at the end with identity maps (which leave
    the earlier prefixes unchanged). reverse: segments P-1 .. 1 of each sequence, in that order."""
    S = len(plan.split)
    n_maps = max(plan.segments[n] for n in plan.split) - (1 if reverse else 0)
    H, K = M_loc.shape[1], M_loc.shape[-1]
    V = B_loc.shape[-1]
    eye = torch.eye(K, dtype=torch.float64, device=M_loc.device)
    Ms = eye.expand(S, n_maps, H, K, K).clone()
    Bs = torch.zeros((S, n_maps, H, K, V), dtype=torch.float64, device=B_loc.device)
    for s, n in enumerate(plan.split):
        P, l0 = plan.segments[n], plan.local_of[n]
        # reverse: segments P-1 .. 1; forward: 0 .. P-1
        idx = list(range(l0 + P - 1, l0, -1)) if reverse else list(range(l0, l0 + P))
        Ms[s, : len(idx)] = M_loc[idx].double()
        Bs[s, : len(idx)] = B_loc[idx].double()
    return Ms, Bs
