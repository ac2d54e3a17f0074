"""The KDA forward as a sequence of program launches: chunk-parallel stage (with the gate and its
chunk-local cumsum fused in), state pass. Long sequences run the state pass segment-parallel
(cake/kda/segments.py) with the kda_cp package's copies of the same programs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import torch

from ..launch import Batch
from ..loader import default_loader
from ..spec import DType, GateForm, L2Norm, Stage, Variant
from . import segments as seg
from .layout import CHUNK, Layout, layout_for
from .stages import PACKAGE, PACKAGE_CP, raw_gate_params
from .workspace import Workspace

K = V = 128
BV = 64  # value columns per state-pass block (the fwd_state template says why)
# A chunk-start state's record, in fp32 words: TF32(S) as fp16 [K][V] and an exponent byte per key
# and 16 values (generators/include/cake/state16.cuh, CAKE_S16_BYTES), half the bytes of fp32.
STATE_RECORD = (2 * K * V + K * V // 16) // 4


@dataclass(frozen=True)
class Config:
    cu_seqlens: tuple[int, ...]
    scale: float
    gate: GateForm
    l2n: L2Norm
    beta_sigmoid: bool
    lower_bound: float
    store_final_state: bool
    saved: bool  # disable_recompute: keep what the backward needs
    segments: int | None = None  # state-pass segments per sequence: None = automatic, 1 = serial


def chunk_record(config: Config, g_dtype: torch.dtype) -> str:
    """The fwd_chunk record: the gate form (and raw input dtype) fused into it, and the L2 norm."""
    return _chunk_record(config.gate, config.l2n, g_dtype)


@cache  # a handful of keys; spares every call a pydantic validation
def _chunk_record(gate: GateForm, l2n: L2Norm, g_dtype: torch.dtype) -> str:
    x = None
    if gate is not GateForm.g:
        x = DType.bf16 if g_dtype == torch.bfloat16 else DType.fp32
    return Variant(stage=Stage.fwd_chunk, gate=gate, x=x, l2n=l2n).key


BETA_SIGMOID, BETA_BF16 = 1, 2  # cake/beta.cuh's CAKE_BETA_SIGMOID, CAKE_BETA_BF16


def beta_flags(config: Config, beta: torch.Tensor) -> int:
    """kda_fwd_chunk's / kda_bwd_chunk's beta_flags: the in-kernel sigmoid, and beta (and dbeta)
    in bf16; the programs read beta and write dbeta in its own dtype."""
    return (BETA_SIGMOID if config.beta_sigmoid else 0) | (
        BETA_BF16 if beta.dtype == torch.bfloat16 else 0
    )


STATE = Variant(stage=Stage.fwd_state).key
STATE_LOCAL = Variant(stage=Stage.fwd_state_local).key  # the state pass without O
COMBINE = Variant(stage=Stage.seg_combine).key  # kda_cp only
COMBINE_COLUMNS = 4  # value columns per kda_seg_combine block


def records(
    config: Config, g_dtype: torch.dtype, *, split: bool = False, want_o: bool = True
) -> list[str]:
    """The records one forward call launches, in launch order (in `package_for`'s package);
    with `split`, kda_cp's local state program and combine too. Without `want_o` (the backward's
    replay) the state pass is the program without O."""
    out = [chunk_record(config, g_dtype), *([STATE_LOCAL, COMBINE] if split else [])]
    return list(dict.fromkeys([*out, STATE if want_o else STATE_LOCAL]))


def segment_plan(config: Config, heads: int, device: torch.device) -> seg.Plan:
    """The state passes' segment table for this call (the same in the forward and the backward)."""
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 132
    )
    return seg.plan_call(config.cu_seqlens, heads, sms, config.segments, device)


def package_for(plan: seg.Plan) -> str:
    """kda_det for serial runs; kda_cp (copies of the same programs) when a sequence is split."""
    return PACKAGE_CP if plan.any_split else PACKAGE


def select_programs(
    loader: Any, config: Config, H: int, device: torch.device, wanted: Callable[[bool], list[str]]
) -> tuple[Layout, seg.Plan, Callable[..., Any]]:
    """A call's chunk layout and segment plan, and its programs selected and fetched first (so
    that an offline miss names all of them at once): `wanted(split)` lists the records. Returns
    also kernel(record, *symbols), the loaded kernel of one of them: the first of `symbols` that
    its program has (a kernel some archs' programs have, then the one every program has)."""
    layout = layout_for(config.cu_seqlens, device)
    plan = segment_plan(config, H, device)
    pkg = package_for(plan)
    dev = device.index or 0
    loader.ensure([(pkg, r) for r in wanted(plan.any_split)], dev)

    def kernel(record: str, *symbols: str) -> Any:
        module = loader.module(pkg, record, dev)
        for symbol in symbols[:-1]:
            if symbol in module:
                return module[symbol]
        return module[symbols[-1]]

    return layout, plan, kernel


@dataclass(frozen=True)
class Carries:
    """A split call's segment boundaries: every row's true start state X (the combine's output) and
    the local rows' transitions M. O(rows x H x K x V) floats: the replay path keeps them from the
    forward, so that the backward's replay launches only the chunk stage and the states pass from
    the same X (the same states, the same bits; docs/cp-design.md section 6)."""

    X: torch.Tensor  # [plan.n_rows, H, K, V]
    M: torch.Tensor  # [plan.n_local, H, K, K]


@dataclass(frozen=True)
class _Static:
    """What a forward call of one signature launches, and its buffers' layout: looked up once."""

    layout: Layout
    plan: seg.Plan
    chunk: Any  # the kernels (cake.launch.Function)
    state: Any
    local: Any  # split calls only
    combine: Any
    buffers: Workspace
    scratch: tuple[Workspace, Workspace]  # the call's own fp32 buffers: [local passes run]


@lru_cache(maxsize=64)  # like layout_for: packed batches change cu_seqlens from call to call
def _static(  # noqa: PLR0913
    loader: Any,
    config: Config,
    H: int,
    T: int,
    g_dtype: torch.dtype,
    device: torch.device,
    keep: bool,
    want_o: bool,
) -> _Static:
    layout, plan, kernel = select_programs(
        loader,
        config,
        H,
        device,
        lambda split: records(config, g_dtype, split=split, want_o=want_o),
    )
    split = plan.any_split
    NC = layout.n_chunks

    def kept(shape: tuple[int, ...]) -> tuple[int, ...] | None:
        return shape if keep else None  # only when the backward will read the buffer

    fused = config.l2n is L2Norm.fused
    buffers = Workspace([
        ("Aqk", (NC, H, CHUNK, CHUNK)),
        ("W", (NC, H, CHUNK, K)),
        ("Qg", (NC, H, CHUNK, K)),
        ("Kd", (NC, H, K, CHUNK)),  # transposed: the state pass reads Kd^T rows
        ("gl", (NC, H, K)),
        ("G", kept((T, H, K))),
        ("TA", kept((NC, H, CHUNK, CHUNK))),  # T, and Akk turned above it: one tile
        ("states", kept((NC, H, STATE_RECORD))),  # S_c in 16 bits: cake/state16.cuh
        ("R", kept((NC, H, 2 * CHUNK)) if fused else None),
    ])  # fmt: skip
    rows = (plan.n_rows, H, K, V) if split and config.store_final_state and want_o else None

    def scratch(local: bool) -> Workspace:
        return Workspace([
            ("U", (NC, H, CHUNK, V)),  # read by the state passes only
            ("B_loc", (plan.n_local, H, K, V) if split and local else None),  # local end states
            ("ht_rows", rows),  # every row's end state; the last row of each sequence is ht
        ])  # fmt: skip

    return _Static(
        layout=layout,
        plan=plan,
        chunk=kernel(chunk_record(config, g_dtype), "kda_fwd_chunk"),
        state=kernel(STATE if want_o else STATE_LOCAL, "kda_fwd_state"),
        # the local launch: sm_90a's program has it at two blocks an SM (-17 % of that launch on
        # R2, long and long4; docs/notes.md, session 44), the others run it on kda_fwd_state
        local=kernel(STATE_LOCAL, "kda_fwd_state_lean", "kda_fwd_state") if split else None,
        combine=kernel(COMBINE, "kda_seg_combine") if split else None,
        buffers=buffers,
        scratch=(scratch(False), scratch(True)),
    )


def forward(  # noqa: ANN201, PLR0913
    q,
    k,
    v,
    g,
    beta,
    A_log,
    dt_bias,
    h0,
    config: Config,
    *,
    keep: bool = False,
    want_o: bool = True,
    carries: Carries | None = None,
):  # noqa: ANN001
    """Launch the forward; returns (o, final state or None, saved or None, carries or None). With
    keep, saved (a Carved workspace: `saved.ptr(name)` for launches, `saved[name]` a tensor
    view) holds what the backward reads: G (Γ), Aqk, W, Qg, Kd, gl, TA (the chunk solve's T on and below the diagonal,
    Akk turned by 180 degrees above it), R (the L2 norms' reciprocals, fused L2 norm only), the state at each
    chunk's start ("states") and the segments' transitions ("M", split calls only).
    Without want_o (the backward's replay: keep only) the state pass is the program without O,
    which reads neither Qg nor Aqk and writes the same states; o and the final state are then
    None. A split call returns its Carries (None for a serial one); given the Carries of an
    earlier forward on the same inputs (the replay), it skips the local passes and the combine."""
    assert keep or want_o, "want_o=False is the replay's: it needs keep"
    B, T_, H, _ = q.shape
    T = B * T_
    device = q.device
    st = _static(default_loader(), config, H, T, g.dtype, device, keep, want_o)
    layout, plan = st.layout, st.plan
    N, NC = layout.n_seqs, layout.n_chunks

    x = g.view(T, H, K)
    if config.gate is not GateForm.g:
        A_log, dt_bias = raw_gate_params(A_log, dt_bias, H, device)
    buf = st.buffers.carve(torch.float32, device)
    p = buf.ptr  # the launches take the buffers' addresses: no tensor views built
    Aqk, W, Qg, Kd, gl = p("Aqk"), p("W"), p("Qg"), p("Kd"), p("gl")
    # U and a split call's row states: one allocation of their own, freed when the forward returns
    sc = st.scratch[carries is None].carve(torch.float32, device)
    U = sc.ptr("U")
    o = torch.empty((B, T_, H, V), dtype=q.dtype, device=device) if want_o else None
    ht = (
        torch.empty((N, H, K, V), dtype=torch.float32, device=device)
        if config.store_final_state and want_o
        else None
    )
    run = Batch()  # the launches go as one CUDA graph (cake/launch.py)
    run(
        st.chunk, (NC, H), q, k, v, beta, x, A_log, dt_bias, layout.chunks, Aqk, W, U, Qg, Kd, gl,
        p("G"), p("TA"), p("R"),  # written only when the backward will read them
        H, beta_flags(config, beta), config.scale, float(config.lower_bound),
    )  # fmt: skip
    states = p("states")
    ops = (W, U, Qg, Kd, Aqk, gl, layout.chunks)
    carried = None
    assert carries is None or plan.any_split, "carries for a serial call"
    if not plan.any_split:
        run(
            st.state, (V // BV, H, N), *ops, layout.seq_chunks, plan.seq_precise, h0, o, ht,
            states, H, int(h0 is not None), int(ht is not None),
        )  # fmt: skip
        run.issue()
    else:
        carried = _segmented_state_pass(
            run, st.state, st.local, st.combine, plan, ops, h0, o, ht, states, H, carries,
            sc, dict(dtype=torch.float32, device=device),
        )  # fmt: skip
    if not keep:
        return o, ht, None, carried
    buf.extra["M"] = carried.M if carried is not None else None
    return o, ht, buf, carried


def _segmented_state_pass(  # noqa: PLR0913
    run: Batch,
    fwd_state,
    local_state,
    combine,
    plan: seg.Plan,
    ops,
    h0,
    o,
    ht,
    states,
    H: int,
    carries,
    scratch: Any,
    f32: dict[str, Any],
):  # noqa: ANN001, ANN202
    """Local passes over the split sequences' segments with the local program, both in one
    launch (no o; end states B from zero, transitions M from the identity with U = 0), the
    combine of the segment boundaries, then the serial program over every row from its true
    start. Given `carries` (the replay), only the last. The launches join `run`'s, which this
    issues. `scratch` (a Carved: `ptr(name)` an address, `[name]` a view) holds B_loc and
    ht_rows; X and M are allocated with `f32` (float32 on the device; float64 in the CPU tests'
    stand-ins). Returns the Carries: X and M of every local row (the backward combines with
    it)."""
    if carries is None:
        carries = _carries(run, local_state, combine, plan, ops, h0, H, scratch.ptr("B_loc"), f32)
    else:
        assert carries.X.shape == (plan.n_rows, H, K, V), "carries of another call"
    X = carries.X
    ht_rows = scratch.ptr("ht_rows") if ht is not None else None
    run(
        fwd_state, (V // BV, H, plan.n_rows), *ops, plan.rows, plan.row_precise, X, o, ht_rows,
        states, H, 1, int(ht_rows is not None),
    )  # fmt: skip
    run.issue()
    if ht is not None and ht_rows is not None:
        torch.index_select(scratch["ht_rows"], 0, plan.last_rows, out=ht)
    return carries


def _carries(
    run: Batch, local_state, combine, plan: seg.Plan, ops, h0, H: int, B_loc, f32
) -> Carries:  # noqa: ANN001
    """The local passes (end states into B_loc, transitions M) and the combine of the segment
    boundaries, recorded into `run`."""
    M_loc = torch.empty((plan.n_local, H, K, K), **f32)  # its own tensor: the backward keeps it
    run(
        local_state, (V // BV, H, 2 * plan.n_local), *ops, plan.local_rows, plan.local_precise,
        None, None, B_loc, M_loc, H, 3, 1,
    )  # fmt: skip
    X = torch.empty((plan.n_rows, H, K, V), **f32)
    N = int(plan.table.shape[0])
    run(combine, (V // COMBINE_COLUMNS, H, N), M_loc, B_loc, plan.table, h0, X, H, 0)
    return Carries(X, M_loc)
