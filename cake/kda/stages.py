"""One Python function per KDA stage: pick the record, allocate outputs, launch."""

from __future__ import annotations

import torch

from ..loader import default_loader
from ..spec import DType, GateForm, Stage, Variant
from .layout import Layout
from .validate import aligned

PACKAGE = "kda_det"
PACKAGE_CP = "kda_cp"  # the same programs, copied; used when a long sequence is split


def raw_gate_params(A_log, dt_bias, H: int, device):  # noqa: ANN001, ANN201
    """A_log and dt_bias as the programs read them: fp32, contiguous, 16-byte aligned, zeros where
    not given."""
    A = torch.zeros(H, device=device) if A_log is None else aligned(A_log.float().contiguous())
    bias = (
        torch.zeros(H * 128, device=device)
        if dt_bias is None
        else aligned(dt_bias.float().contiguous())
    )
    return A, bias


def gate_record(form: GateForm, x_dtype: torch.dtype) -> str:
    if form is GateForm.g:
        return Variant(stage=Stage.gate, gate=form).key
    x = DType.bf16 if x_dtype == torch.bfloat16 else DType.fp32
    return Variant(stage=Stage.gate, gate=form, x=x).key


def gate_cumsum(
    x: torch.Tensor,
    layout: Layout,
    form: GateForm,
    *,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    lower_bound: float = 0.0,
    package: str = PACKAGE,
) -> torch.Tensor:
    """Γ: the chunk-local inclusive cumsum of the log gate, fp32 [T, H, 128] (x is [T, H, 128])."""
    T, H, K = x.shape
    device = x.device
    G = torch.empty((T, H, K), dtype=torch.float32, device=device)
    if form is not GateForm.g:
        A_log, dt_bias = raw_gate_params(A_log, dt_bias, H, device)
    module = default_loader().module(package, gate_record(form, x.dtype), device.index or 0)
    module["kda_gate"](
        (layout.n_chunks, H), x, A_log, dt_bias, G, layout.chunks, H, float(lower_bound)
    )
    return G
