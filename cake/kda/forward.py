"""The KDA forward as a sequence of program launches: chunk-parallel stage (with the gate and its
chunk-local cumsum fused in), state pass."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..loader import default_loader
from ..spec import DType, GateForm, L2Norm, Stage, Variant
from .layout import CHUNK, layout_for
from .stages import PACKAGE, raw_gate_params

K = V = 128
BV = 64  # value columns per state-pass block (the fwd_state template says why)


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


def chunk_record(config: Config, g_dtype: torch.dtype) -> str:
    """The fwd_chunk record: the gate form (and raw input dtype) fused into it, and the L2 norm."""
    x = None
    if config.gate is not GateForm.g:
        x = DType.bf16 if g_dtype == torch.bfloat16 else DType.fp32
    return Variant(stage=Stage.fwd_chunk, gate=config.gate, x=x, l2n=config.l2n).key


def records(config: Config, g_dtype: torch.dtype) -> list[str]:
    """The kda_det records one forward call launches, in launch order."""
    return [
        chunk_record(config, g_dtype),
        Variant(stage=Stage.fwd_state).key,
    ]


def forward(q, k, v, g, beta, A_log, dt_bias, h0, config: Config, *, keep: bool = False):  # noqa: ANN001, ANN201
    """Launch the forward; returns (o, final state or None, saved or None). With keep, saved holds
    what the backward reads: G (Γ), Aqk, W, Qg, Kd, gl and the state at each chunk's start."""
    B, T_, H, _ = q.shape
    T = B * T_
    device = q.device
    dev = device.index or 0
    layout = layout_for(config.cu_seqlens, device)
    N, NC = layout.n_seqs, layout.n_chunks
    loader = default_loader()
    # Select and fetch every program first, so that an offline miss names all of them at once.
    loader.ensure([(PACKAGE, r) for r in records(config, g.dtype)], dev)
    chunk = loader.module(PACKAGE, chunk_record(config, g.dtype), dev)
    state = loader.module(PACKAGE, Variant(stage=Stage.fwd_state).key, dev)

    x = g.view(T, H, K)
    if config.gate is not GateForm.g:
        A_log, dt_bias = raw_gate_params(A_log, dt_bias, H, device)
    beta32 = beta.reshape(T, H).float().contiguous()
    f32 = dict(dtype=torch.float32, device=device)
    Aqk = torch.empty((NC, H, CHUNK, CHUNK), **f32)
    W = torch.empty((NC, H, CHUNK, K), **f32)
    U = torch.empty((NC, H, CHUNK, V), **f32)
    Qg = torch.empty((NC, H, CHUNK, K), **f32)
    Kd = torch.empty((NC, H, K, CHUNK), **f32)  # transposed: the state pass reads Kd^T rows
    gl = torch.empty((NC, H, K), **f32)
    G = torch.empty((T, H, K), **f32) if keep else None
    states = torch.empty((NC, H, K, V), **f32) if keep else None
    chunk["kda_fwd_chunk"](
        (NC, H),
        q,
        k,
        v,
        beta32,
        x,
        A_log,
        dt_bias,
        layout.chunks,
        Aqk,
        W,
        U,
        Qg,
        Kd,
        gl,
        G,  # G_out: written only when the backward will read it
        H,
        int(config.beta_sigmoid),
        config.scale,
        float(config.lower_bound),
    )
    o = torch.empty((B, T_, H, V), dtype=q.dtype, device=device)
    ht = torch.empty((N, H, K, V), **f32) if config.store_final_state else None
    state["kda_fwd_state"](
        (V // BV, H, N),
        W,
        U,
        Qg,
        Kd,
        Aqk,
        gl,
        layout.chunks,
        layout.seq_chunks,
        h0,
        o,
        ht,
        states,
        H,
        int(h0 is not None),
        int(ht is not None),
    )
    saved = dict(G=G, Aqk=Aqk, W=W, Qg=Qg, Kd=Kd, gl=gl, states=states) if keep else None
    return o, ht, saved
