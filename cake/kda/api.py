"""`cake.kda.chunk_kda`: a drop-in for FLA 0.6.0's `fla.ops.kda.chunk_kda`."""

from __future__ import annotations

from typing import Any

import torch

from ..spec import GateForm, L2Norm
from . import backward as bwd
from . import forward as fwd
from .validate import aligned, check_device, check_inputs, check_kwargs, check_unsupported
from .workspace import Carved


class _ChunkKDA(torch.autograd.Function):
    """Saved path (disable_recompute=True): the forward keeps Γ, Aqk, W, Qg, Kd, gl and the chunk-start
    states. Replay path: it keeps its inputs (and a split call's segment carries) and the backward
    reruns the same forward programs, so both paths read the same bits."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, A_log, dt_bias, initial_state, config: fwd.Config):  # noqa: ANN001, ANN205
        grads = any(ctx.needs_input_grad)
        keep = config.saved and grads
        q, k, v, g, beta, initial_state = map(aligned, (q, k, v, g, beta, initial_state))
        o, ht, saved, carries = fwd.forward(
            q, k, v, g, beta, A_log, dt_bias, initial_state, config, keep=keep
        )
        ctx.config = config
        # the saved workspace travels as its layout and names here, its tensors through autograd
        ctx.carved = (saved.layout, tuple(saved.extra)) if saved is not None else None
        kept = saved.tensors() if saved is not None else ()
        # the replay path of a split call keeps the segment carries (the saved path has M in saved)
        ctx.has_carries = grads and not keep and carries is not None
        if ctx.has_carries:
            kept = (carries.X, carries.M)
        ctx.save_for_backward(q, k, v, g, beta, A_log, dt_bias, initial_state, *kept)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):  # noqa: ANN001, ANN205
        q, k, v, g, beta, A_log, dt_bias, h0, *kept = ctx.saved_tensors
        saved = carries = None
        if ctx.carved is not None:
            layout, extra_names = ctx.carved
            saved = Carved.rebuilt(layout, extra_names, tuple(kept))
        elif ctx.has_carries:
            carries = fwd.Carries(*kept)
        grads = bwd.backward(
            q, k, v, g, beta, A_log, dt_bias, h0, do, dht, ctx.config, saved, carries
        )
        dA_log = grads.get("dA_log")
        ddt_bias = grads.get("ddt_bias")
        return (
            grads["dq"],
            grads["dk"],
            grads["dv"],
            grads["dg"],
            grads["dbeta"],
            dA_log.view_as(A_log) if dA_log is not None else None,
            ddt_bias.view_as(dt_bias) if ddt_bias is not None else None,
            grads.get("dh0"),
            None,
        )


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_cpu: torch.Tensor | None = None,
    cp_context: Any = None,
    use_graph: bool = False,
    max_num_seqs: int | None = None,
    segments: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked KDA, deterministic: same inputs give the same bits on the same arch.

    Shapes as in FLA: q, k, v `[B, T, H, 128]` bf16, g `[B, T, H, 128]` (fp32 log gate, or the raw
    gate input when use_gate_in_kernel), beta `[B, T, H]`, initial_state fp32 `[N, H, 128, 128]`.
    Returns (o `[B, T, H, 128]` bf16, final state fp32 `[N, H, 128, 128]` or None).

    `segments` (cake's own): how many segments each sequence's state passes are split into (long
    sequences run segment-parallel, cake/kda/segments.py). None chooses per sequence from its own
    length and the head count; 1 is the serial path; results are bitwise reproducible for a given
    value (and, with None, a given GPU model)."""
    extra = check_kwargs(kwargs)
    if "transpose_state_layout" in extra:
        if state_v_first:
            raise ValueError(
                "pass state_v_first or the deprecated transpose_state_layout, not both"
            )
        state_v_first = bool(extra["transpose_state_layout"])
    check_unsupported(
        allow_neg_eigval=allow_neg_eigval,
        return_intermediate_states=return_intermediate_states,
        cp_context=cp_context,
        use_graph=use_graph,
    )
    A_log, dt_bias = extra.get("A_log"), extra.get("dt_bias")
    if safe_gate and use_gate_in_kernel and lower_bound is None:
        raise ValueError(
            "safe_gate=True with use_gate_in_kernel=True needs lower_bound (as in FLA)"
        )
    if initial_state is not None and state_v_first and isinstance(initial_state, torch.Tensor):
        initial_state = initial_state.transpose(-1, -2).contiguous()
    shapes = check_inputs(
        q,
        k,
        v,
        g,
        beta,
        initial_state=initial_state,
        cu_seqlens=cu_seqlens,
        cu_seqlens_cpu=cu_seqlens_cpu,
        use_gate_in_kernel=use_gate_in_kernel,
        lower_bound=lower_bound,
        A_log=A_log,
        dt_bias=dt_bias,
    )
    if max_num_seqs is not None and max_num_seqs != len(shapes.cu_seqlens) - 1:
        raise ValueError(
            f"max_num_seqs={max_num_seqs} but cu_seqlens holds {len(shapes.cu_seqlens) - 1} sequences"
        )
    if segments is not None and (
        isinstance(segments, bool) or not isinstance(segments, int) or segments < 1
    ):
        raise ValueError(f"segments must be None or an int >= 1, got {segments!r}")
    check_device(q)
    if use_gate_in_kernel:
        form = GateForm.sigmoid if lower_bound is not None else GateForm.softplus
    else:
        form = GateForm.g
    config = fwd.Config(
        cu_seqlens=shapes.cu_seqlens,
        scale=float(scale) if scale is not None else q.shape[-1] ** -0.5,
        gate=form,
        l2n=L2Norm.fused if use_qk_l2norm_in_kernel else L2Norm.off,
        beta_sigmoid=use_beta_sigmoid_in_kernel,
        lower_bound=float(lower_bound) if lower_bound is not None else 0.0,
        store_final_state=output_final_state,
        saved=disable_recompute,
        segments=segments,
    )
    o, ht = _ChunkKDA.apply(q, k, v, g, beta, A_log, dt_bias, initial_state, config)
    if ht is not None and state_v_first:
        ht = ht.transpose(-1, -2).contiguous()
    return o, ht
