"""The KDA backward as a sequence of program launches (docs/backward-design.md).

    replay (saved is None): fwd_chunk (gate fused, G_out, TA_out), fwd_state without O
                            (fwd_state_local: states_out only; a split call's rows from the
                            forward's carries when it kept them)
    then:                   bwd_state (reverse state pass: dS_end, dVn, dh0)
                            bwd_chunk (chunk-parallel gradients + gate / L2-norm / beta epilogue)
                            bwd_reduce (raw gates only: dA_log, ddt_bias in a fixed order)

The saved path passes `saved` = the forward's G, Aqk, W, Qg, Kd, gl, TA (T and Akk in one tile), R
(fused L2 norm) and states_out (fwd_state): bwd_state reads Qg, W, Kd, Aqk, gl; bwd_chunk reads G,
TA, R and states_out.
Both paths run the same programs on the same values, so their gradients are bitwise equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import torch

from ..launch import Batch
from ..loader import default_loader
from ..spec import DType, GateForm, L2Norm, Stage, Variant
from . import segments as seg
from .forward import (
    BV,
    COMBINE,
    COMBINE_COLUMNS,
    Carries,
    Config,
    K,
    V,
    beta_flags,
    forward,
    select_programs,
)
from .forward import records as fwd_records
from .layout import CHUNK, Layout
from .stages import raw_gate_params
from .validate import aligned
from .workspace import Carved, Workspace


def bwd_chunk_record(config: Config, x_dtype: torch.dtype) -> str:
    return _bwd_chunk_record(config.gate, config.l2n, x_dtype)


@cache  # a handful of keys; spares every call a pydantic validation
def _bwd_chunk_record(gate: GateForm, l2n: L2Norm, x_dtype: torch.dtype) -> str:
    if gate is GateForm.g:
        return Variant(stage=Stage.bwd_chunk, gate=gate, l2n=l2n).key
    x = DType.bf16 if x_dtype == torch.bfloat16 else DType.fp32
    return Variant(stage=Stage.bwd_chunk, gate=gate, x=x, l2n=l2n).key


BWD_STATE = Variant(stage=Stage.bwd_state).key
BWD_REDUCE = Variant(stage=Stage.bwd_reduce).key


def records(
    config: Config, g_dtype: torch.dtype, *, replay: bool = True, split: bool = False
) -> list[str]:
    """The records one backward call launches, in launch order; with `split`, kda_cp's combine."""
    out = []
    if replay:
        out += fwd_records(config, g_dtype, split=split, want_o=False)
    out += [BWD_STATE, *([COMBINE] if split else [])]
    out += [bwd_chunk_record(config, g_dtype)]
    if config.gate is not GateForm.g:
        out.append(BWD_REDUCE)
    return list(dict.fromkeys(out))  # the replay repeats the combine


def replay_forward(  # noqa: PLR0913
    q, k, v, g, beta, A_log, dt_bias, h0, config: Config, carries: Carries | None = None
) -> Carved:  # noqa: ANN001
    """What the backward needs from the forward, recomputed with the forward's own programs (so the
    replay and saved paths read the same bits); the state pass runs without O (the same states),
    from the forward's carries when a split call kept them (no local passes, no combine)."""
    saved = forward(
        q, k, v, g, beta, A_log, dt_bias, h0, config, keep=True, want_o=False, carries=carries
    )[2]
    assert saved is not None
    return saved


@dataclass(frozen=True)
class _Static:
    """What a backward call of one signature launches: looked up once."""

    layout: Layout
    plan: seg.Plan
    state: Any  # the kernels (cake.launch.Function)
    combine: Any  # split calls only
    chunk: Any
    reduce: Any  # raw gates only
    scratch: tuple[Workspace, Workspace]  # the fp32 buffers only its launches read: [h0 given]


@lru_cache(maxsize=64)  # as kda.forward's
def _static(
    loader: Any, config: Config, H: int, g_dtype: torch.dtype, device: torch.device, replay: bool
) -> _Static:
    layout, plan, kernel = select_programs(
        loader,
        config,
        H,
        device,
        lambda split: records(config, g_dtype, replay=replay, split=split),
    )
    raw = config.gate is not GateForm.g
    NC = layout.n_chunks
    split = plan.any_split

    def scratch(h0: bool) -> Workspace:
        return Workspace([
            ("dS_end", (NC, H, K, V)),  # the state gradient at each chunk's end
            ("dVn", (NC, H, CHUNK, V)),
            ("dA_part", (NC, H) if raw else None),  # per chunk: bwd_reduce sums them in order
            ("dbias_part", (NC, H, K) if raw else None),
            ("dB_loc", (plan.n_local, H, K, V) if split else None),  # the local passes' dS_start
            ("Y", (plan.n_rows, H, K, V) if split else None),  # every row's true end gradient
            ("dh0_rows", (plan.n_rows, H, K, V) if split and h0 else None),
        ])  # fmt: skip

    return _Static(
        layout=layout,
        plan=plan,
        # split calls' segment passes take the chunk tiles by bulk copy (sm_90a: -4.5 % of their
        # kda_bwd_state time); serial calls keep the cp.async form (docs/notes.md session 43)
        state=kernel(BWD_STATE, "kda_bwd_state_bulk" if plan.any_split else "kda_bwd_state"),
        combine=kernel(COMBINE, "kda_seg_combine") if plan.any_split else None,
        chunk=kernel(bwd_chunk_record(config, g_dtype), "kda_bwd_chunk"),
        reduce=kernel(BWD_REDUCE, "kda_bwd_gate_reduce") if raw else None,
        scratch=(scratch(False), scratch(True)),
    )


def backward(  # noqa: ANN201
    q,
    k,
    v,
    g,
    beta,
    A_log,
    dt_bias,
    h0,
    do,
    dht,
    config: Config,
    saved: Carved | None = None,
    carries: Carries | None = None,
):
    """Gradients of chunk_kda. Returns {"dq", "dk", "dv", "dg", "dbeta"} plus "dA_log" and
    "ddt_bias" (raw gates) and "dh0" (when h0 is given); dg is dx for the raw gate forms. Without
    `saved` the forward is replayed (from the forward's `carries`, when a split call kept them)."""
    H = q.shape[2]
    device = q.device
    st = _static(default_loader(), config, H, g.dtype, device, saved is None)
    layout, plan = st.layout, st.plan
    N, NC = layout.n_seqs, layout.n_chunks
    if saved is None:
        saved = replay_forward(q, k, v, g, beta, A_log, dt_bias, h0, config, carries)
    f32 = dict(dtype=torch.float32, device=device)
    do = aligned(do.contiguous())
    if do.dtype != q.dtype:
        do = do.to(q.dtype)

    # K1: reverse state pass. Its buffers and bwd_chunk's partial sums in one allocation (one
    # torch.empty, ~4-8 us of host time on the H200, instead of four; docs/notes.md session 45).
    sc = st.scratch[h0 is not None].carve(torch.float32, device)
    dS_end, dVn = sc.ptr("dS_end"), sc.ptr("dVn")
    dh0 = torch.empty((N, H, K, V), **f32) if h0 is not None else None
    dht_ = aligned(dht.float().contiguous()) if dht is not None else None
    p = saved.ptr  # the buffers' addresses (the tensor for M)
    ops = (p("Qg"), p("W"), p("Kd"), p("Aqk"), p("gl"), do, layout.chunks)
    run = Batch()  # the launches go as one CUDA graph (cake/launch.py)
    if not plan.any_split:
        run(
            st.state, (V // BV, H, N), *ops, layout.seq_chunks, dht_, dS_end, dVn, dh0, H,
            int(dht_ is not None), int(dh0 is not None),
        )  # fmt: skip
    else:
        _segmented_reverse_pass(
            run, st.state, st.combine, plan, ops, p("M"), dht_, dS_end, dVn, sc, dh0 is not None, H
        )

    # K2: chunk-parallel gradients.
    raw = config.gate is not GateForm.g
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    dg = torch.empty(g.shape, dtype=g.dtype if raw else torch.float32, device=device)
    dbeta = torch.empty_like(beta)  # in beta's dtype, written by the program
    A, bias = raw_gate_params(A_log, dt_bias, H, device) if raw else (None, None)
    dA_part, dbias_part = sc.ptr("dA_part"), sc.ptr("dbias_part")
    run(
        st.chunk, (NC, H), q, k, v, do, beta, p("G"), g, A, bias,
        layout.chunks, p("states"), p("TA"), p("R"), dS_end, dVn,
        dq, dk, dv, dg, dbeta, dA_part, dbias_part, H, beta_flags(config, beta),
        config.scale, config.lower_bound,
    )  # fmt: skip
    if raw:
        dA_log = torch.empty(H, **f32)
        ddt_bias = torch.empty(H * K, **f32)
        run(st.reduce, (H,), dA_part, dbias_part, dA_log, ddt_bias, NC, H)
    run.issue()
    if dh0 is not None and plan.any_split:
        rows = sc["dh0_rows"]
        assert rows is not None
        torch.index_select(rows, 0, plan.first_rows, out=dh0)
    out = dict(dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta)
    if raw:
        if A_log is not None:
            out["dA_log"] = dA_log
        if dt_bias is not None:
            out["ddt_bias"] = ddt_bias
    if dh0 is not None:
        out["dh0"] = dh0
    return out


def _segmented_reverse_pass(
    run: Batch,
    bstate,
    combine,
    plan: seg.Plan,
    ops,
    M_loc,
    dht,
    dS_end,
    dVn,
    scratch,
    want_dh0: bool,
    H: int,
) -> None:  # noqa: ANN001
    """Local reverse passes over the split sequences' segments from a zero end gradient (their start
    gradients dB; dS_end and dVn not stored), the combine with the forward's transitions
    (transposed, last segment first), then the serial program over every row from its true end
    gradient, recorded into `run`. `scratch` (a Carved) holds dB_loc, Y and, with `want_dh0`,
    every row's start gradient dh0_rows (the caller takes each sequence's first row once `run`
    is issued)."""
    dB_loc, Y = scratch.ptr("dB_loc"), scratch.ptr("Y")
    run(
        bstate, (V // BV, H, plan.n_local), *ops, plan.local_rows, None, None, None, dB_loc, H, 0, 1
    )
    N = int(plan.table.shape[0])
    run(combine, (V // COMBINE_COLUMNS, H, N), M_loc, dB_loc, plan.table, dht, Y, H, 1)
    dh0_rows = scratch.ptr("dh0_rows") if want_dh0 else None
    run(
        bstate, (V // BV, H, plan.n_rows), *ops, plan.rows, Y, dS_end, dVn, dh0_rows, H, 1,
        int(dh0_rows is not None),
    )  # fmt: skip
