"""CPU: segment planning and the segment-parallel state passes' orchestration (cake/kda/forward.py
`_segmented_state_pass`, cake/kda/backward.py `_segmented_reverse_pass`) driven by float64
stand-ins for kda_fwd_state / kda_bwd_state / kda_seg_combine that follow the programs' argument
contracts. Split runs must equal the serial run to float64 rounding. The programs themselves run
under the CPU emulator in tests/test_kda_segments_emu.py."""

from __future__ import annotations

import math
from itertools import accumulate

import pytest
import torch

import cake.kda.backward as bwd
import cake.kda.forward as fwd
from cake.kda import segments as seg
from cake.kda.layout import layout_for
from cake.launch import Batch

F64 = torch.float64
CPU = torch.device("cpu")
K = V = 128


# ------------------------------------------------------------------------------- planning


@pytest.mark.parametrize(
    ("lengths", "heads", "want"),
    [
        ((16384,), 64, (1,)),  # 1doc: 64 heads already fill the GPU
        ((8192, 4096, 3072, 1024), 64, (1, 1, 1, 1)),  # 4doc
        ((9000, 4384, 3000), 4, (8, 4, 3)),  # R2: each sequence from its own length
        ((2048, 1500), 4, (1, 1)),  # m2: 32 chunks and fewer are never split
        ((65536,), 1, (57,)),  # long, one head: segments of at most 18 chunks
        ((65536,), 4, (16,)),  # long, four heads: the fix-up pass fills the GPU
        ((2048,), 1, (1,)),  # 32 chunks: below MIN_SPLIT_CHUNKS
        ((2049,), 1, (2,)),  # 33 chunks: two segments of at most 18
        ((8192,), 1, (8,)),  # 128 chunks: 8 segments of at most 18, although 66 would fit
        ((1024 * 64 * 4,), 1, (64,)),  # 4096 chunks: capped at MAX_SEGMENTS
        ((65536,), 8, (8,)),  # 8 heads: the fix-up pass fills the GPU with 8 segments
        ((2200, 0, 1), 2, (2, 1, 1)),
    ],
)
def test_automatic_segments(lengths, heads, want):
    cu = tuple([0, *accumulate(lengths)])
    assert seg.choose_segments(cu, heads, 132, None) == want


def test_override_is_capped_by_the_chunk_count_and_one_is_serial():
    cu = (0, 130, 130, 4096)
    assert seg.choose_segments(cu, 4, 132, 8) == (3, 1, 8)
    assert seg.choose_segments(cu, 4, 132, 1) == (1, 1, 1)


def test_segment_sizes_are_balanced_and_cover_the_chunks():
    for nc in (1, 7, 16, 63, 64, 1024):
        for P in (1, 2, 3, 16, 64):
            sizes = seg.segment_sizes(nc, P)
            assert sum(sizes) == nc and len(sizes) == min(P, nc)
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert seg.segment_sizes(0, 4) == [0]


def test_plan_rows_follow_the_chunk_table():
    cu = (0, 1000, 1000, 1065, 4096)
    segments = (4, 1, 1, 8)
    plan = seg.plan_for(segments, cu, CPU)
    layout = layout_for(cu, CPU)
    rows = plan.rows.tolist()
    # consecutive, covering every chunk once, each sequence's rows inside its chunks
    assert [r[0] for r in rows] == list(accumulate([0] + [r[1] for r in rows]))[:-1]
    assert sum(r[1] for r in rows) == layout.n_chunks
    for n, (first, count) in enumerate(layout.seq_chunks.tolist()):
        mine = rows[plan.first_row[n] : plan.last_row[n] + 1]
        assert mine[0][0] == first and sum(r[1] for r in mine) == count
    assert plan.split == (0, 3)
    assert plan.local_rows.tolist() == rows[0:4] + rows[plan.first_row[3] :]
    assert plan.local_of[0] == 0 and plan.local_of[3] == 4
    # kda_seg_combine's table: first row, rows, first local row; the gathers' row indices
    assert plan.table.tolist() == [[0, 4, 0], [4, 1, 4], [5, 1, 4], [6, 8, 4]]
    assert plan.first_rows.tolist() == [0, 4, 5, 6]
    assert plan.last_rows.tolist() == [3, 4, 5, 13]


# ----------------------------------------------------------------- state-pass stand-ins


def fake_fwd_state(
    grid, W, U, Qg, Kd, Aqk, gl, chunks, rows, precise, h0, o, ht, states, H, has_h0, store
):  # noqa: ANN001
    """kda_fwd_state's contract in float64: per row, S from h0 (or 0); per chunk Vn = U - W S,
    O = Qg S + Aqk Vn (rows < L to o), S = diag(gl) S + Kd^T Vn; states[c] = S at the chunk start.
    has_h0 = 3 (the local program's two passes in one launch): grid.z = 2 R, the offset passes'
    ends to ht and the transition passes' (from I, U = 0) to `states`."""
    if has_h0 == 3:
        R = rows.shape[0]
        assert grid == (2, H, 2 * R) and o is None and h0 is None
        one = (2, H, R)
        fake_fwd_state(
            one, W, U, Qg, Kd, Aqk, gl, chunks, rows, precise, None, None, ht, None, H, 0, store
        )
        fake_fwd_state(
            one,
            W,
            None,
            Qg,
            Kd,
            Aqk,
            gl,
            chunks,
            rows,
            precise,
            None,
            None,
            states,
            None,
            H,
            2,
            store,
        )
        return
    assert grid == (2, H, rows.shape[0])
    assert precise is None or precise.shape == (rows.shape[0],)
    for r, (c0, n) in enumerate(rows.tolist()):
        S = torch.zeros(H, K, V, dtype=F64)
        if has_h0 == 1:
            S = h0[r].clone()
        elif has_h0 == 2:
            S = torch.eye(K, dtype=F64).expand(H, K, V).clone()
        for c in range(c0, c0 + n):
            t0, L = chunks[c].tolist()
            if states is not None:
                states[c] = S
            Vn = (0 if U is None else U[c]) - W[c] @ S
            if o is not None:
                o[0, t0 : t0 + L] = (Qg[c] @ S + Aqk[c] @ Vn)[:, :L].transpose(0, 1)
            S = gl[c].unsqueeze(-1) * S + Kd[c] @ Vn
        if store:
            ht[r] = S


def fake_bwd_state(
    grid, Qg, W, Kd, Aqk, gl, do, chunks, rows, dht, dS_end, dVn, dh0, H, has_dht, store
):  # noqa: ANN001
    """kda_bwd_state's contract in float64: per row from dht (or 0), chunks in reverse:
    dS_end[c] = dS; dVn = Aqk^T dO + Kd dS; dS = diag(gl) dS + Qg^T dO - W^T dVn; dh0 = dS."""
    assert grid == (2, H, rows.shape[0])
    for r, (c0, n) in enumerate(rows.tolist()):
        dS = dht[r].clone() if has_dht else torch.zeros(H, K, V, dtype=F64)
        for c in reversed(range(c0, c0 + n)):
            t0, L = chunks[c].tolist()
            dO = torch.zeros(H, 64, V, dtype=F64)
            dO[:, :L] = do[0, t0 : t0 + L].transpose(0, 1)
            if dS_end is not None:
                dS_end[c] = dS
            dv = Aqk[c].transpose(-1, -2) @ dO + Kd[c].transpose(-1, -2) @ dS
            if dVn is not None:
                dVn[c] = dv
            dS = (
                gl[c].unsqueeze(-1) * dS
                + Qg[c].transpose(-1, -2) @ dO
                - W[c].transpose(-1, -2) @ dv
            )
        if store:
            dh0[r] = dS


def fake_combine(grid, M, B, table, x0, X, H, reverse):  # noqa: ANN001
    """kda_seg_combine's contract in float64: per sequence (f, P, l), X[f] = x0 (or 0) and
    X[f+p+1] = M[l+p] X[f+p] + B[l+p]; reverse: X[f+P-1] = x0, X[f+p-1] = M[l+p]^T X[f+p] + B[l+p]."""
    assert grid == (V // fwd.COMBINE_COLUMNS, H, table.shape[0])
    for n, (f, P, first_local) in enumerate(table.tolist()):
        x = torch.zeros(H, K, V, dtype=F64) if x0 is None else x0[n].clone()
        X[f + P - 1 if reverse else f] = x
        for p in range(P - 1, 0, -1) if reverse else range(P - 1):
            m = M[first_local + p].transpose(-1, -2) if reverse else M[first_local + p]
            x = m @ x + B[first_local + p]
            X[f + p - 1 if reverse else f + p + 1] = x


class Scratch(dict):
    """A Carved's interface over float64 tensors (the stand-ins take tensors, not addresses)."""

    def __init__(self, plan: seg.Plan, H: int) -> None:
        super().__init__(
            B_loc=torch.full((plan.n_local, H, K, V), float("nan"), dtype=F64),
            dB_loc=torch.full((plan.n_local, H, K, V), float("nan"), dtype=F64),
            **{
                n: torch.full((plan.n_rows, H, K, V), float("nan"), dtype=F64)
                for n in ("ht_rows", "Y", "dh0_rows")
            },
        )

    def ptr(self, name: str) -> torch.Tensor:
        return self[name]


F64_CPU = dict(dtype=F64, device=CPU)


def chunk_operands(cu, H, seed):
    layout = layout_for(cu, CPU)
    NC = layout.n_chunks
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, s=1.0):
        return torch.randn(*shape, generator=gen, dtype=F64) * s

    W, U, Qg = rnd(NC, H, 64, K, s=0.1), rnd(NC, H, 64, V), rnd(NC, H, 64, K, s=0.3)
    Kd = rnd(NC, H, K, 64, s=0.1)  # transposed, as kda_fwd_chunk writes it
    Aqk = torch.tril(rnd(NC, H, 64, 64, s=0.1))
    gl = torch.rand(NC, H, K, generator=gen, dtype=F64) * 0.1 + 0.9
    return layout, (W, U, Qg, Kd, Aqk, gl, layout.chunks)


@pytest.mark.parametrize("with_states", [False, True])
def test_segmented_passes_equal_the_serial_passes(with_states):
    cu = (0, 1000, 1000, 1065, 2500)  # split, empty, short (unsplit), split
    H = 2
    layout, ops = chunk_operands(cu, H, 3)
    W, U, Qg, Kd, Aqk, gl, chunks = ops
    N, NC, T = layout.n_seqs, layout.n_chunks, cu[-1]
    gen = torch.Generator().manual_seed(4)
    h0 = torch.randn(N, H, K, V, generator=gen, dtype=F64) if with_states else None
    dht = torch.randn(N, H, K, V, generator=gen, dtype=F64) if with_states else None
    do = torch.randn(1, T, H, V, generator=gen, dtype=F64)

    # serial: the sequence table, as forward() / backward() launch it unsplit
    o1 = torch.zeros(1, T, H, V, dtype=F64)
    ht1 = torch.zeros(N, H, K, V, dtype=F64)
    st1 = torch.zeros(NC, H, K, V, dtype=F64)
    fake_fwd_state(
        (2, H, N), *ops, layout.seq_chunks, None, h0, o1, ht1, st1, H, int(h0 is not None), 1
    )
    dS1, dVn1 = torch.zeros(NC, H, K, V, dtype=F64), torch.zeros(NC, H, 64, V, dtype=F64)
    dh01 = torch.zeros(N, H, K, V, dtype=F64)
    bops = (Qg, W, Kd, Aqk, gl, do, chunks)
    fake_bwd_state(
        (2, H, N), *bops, layout.seq_chunks, dht, dS1, dVn1, dh01, H, int(dht is not None), 1
    )

    segments = seg.choose_segments(cu, H, 132, 5)
    plan = seg.plan_for(segments, cu, CPU)
    assert plan.split == (0, 2, 3) and plan.segments == (5, 1, 2, 5)  # 65 tokens: 2 chunks
    o2 = torch.full_like(o1, float("nan"))
    ht2 = torch.full_like(ht1, float("nan"))
    st2 = torch.full_like(st1, float("nan"))
    carries = fwd._segmented_state_pass(
        Batch(), fake_fwd_state, fake_fwd_state, fake_combine, plan, ops, h0, o2, ht2, st2, H,
        None, Scratch(plan, H), F64_CPU,
    )  # fmt: skip
    torch.testing.assert_close(o2, o1, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ht2, ht1, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(st2, st1, rtol=1e-10, atol=1e-10)
    M = carries.M

    def unused(*args: object) -> None:
        raise AssertionError("the replay from carries ran a local pass or the combine")

    # the backward's replay from the forward's carries: the states pass only, the same states
    st3 = torch.full_like(st1, float("nan"))
    fwd._segmented_state_pass(
        Batch(), fake_fwd_state, unused, unused, plan, ops, h0, None, None, st3, H, carries,
        Scratch(plan, H), F64_CPU,
    )  # fmt: skip
    assert torch.equal(st3, st2)

    dS2, dVn2 = torch.full_like(dS1, float("nan")), torch.full_like(dVn1, float("nan"))
    run = Batch()
    scratch = Scratch(plan, H)
    bwd._segmented_reverse_pass(
        run, fake_bwd_state, fake_combine, plan, bops, M, dht, dS2, dVn2, scratch, True, H
    )
    run.issue()  # as backward() issues it, then takes each sequence's first row
    dh02 = scratch["dh0_rows"][plan.first_rows]
    torch.testing.assert_close(dS2, dS1, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(dVn2, dVn1, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(dh02, dh01, rtol=1e-10, atol=1e-10)


def test_transitions_of_the_local_pass_are_the_chunk_products():
    cu = (0, 64 * 20)
    H = 1
    layout, ops = chunk_operands(cu, H, 5)
    W, U, Qg, Kd, Aqk, gl, chunks = ops
    plan = seg.plan_for((4,), cu, CPU)
    o = torch.zeros(1, cu[-1], H, V, dtype=F64)
    M = fwd._segmented_state_pass(
        Batch(), fake_fwd_state, fake_fwd_state, fake_combine, plan, ops, None, o, None, None, H,
        None, Scratch(plan, H), F64_CPU,
    ).M  # fmt: skip
    for p, (c0, n) in enumerate(plan.local_rows.tolist()):
        A = torch.eye(K, dtype=F64).expand(H, K, K)
        for c in range(c0, c0 + n):
            A = (torch.diag_embed(gl[c]) - Kd[c] @ W[c]) @ A
        torch.testing.assert_close(M[p], A, rtol=1e-10, atol=1e-10)
    assert math.isfinite(float(o.abs().sum()))


def test_precise_flags_follow_the_automatic_split_and_reach_every_row():
    cu = (0, 2200, 2200, 2265, 4400)
    flags = seg.precise_flags(cu, 2, 132)
    assert flags == (1, 0, 0, 1)
    assert seg.precise_flags((0, 16384), 64, 132) == (0,)  # 1doc: 64 heads fill the GPU unsplit
    # a sequence the automatic rule leaves whole runs precise when a call splits it
    assert seg.precise_flags((0, 1000, 2000), 2, 132) == (0, 0)
    assert seg.precise_flags((0, 1000, 2000), 2, 132, (3, 1)) == (1, 0)
    plan = seg.plan_for((5, 1, 2, 5), cu, CPU, flags)
    assert plan.seq_precise is not None and plan.seq_precise.tolist() == list(flags)
    assert plan.row_precise is not None and plan.local_precise is not None
    for n in range(4):
        rows = range(plan.first_row[n], plan.last_row[n] + 1)
        assert all(plan.row_precise[r] == flags[n] for r in rows)
    assert plan.local_precise.tolist() == [1] * 5 + [0] * 2 + [1] * 5
    assert seg.plan_for((1, 1), (0, 5, 9), CPU, (0, 0)).row_precise is None
