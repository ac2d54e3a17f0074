"""Input checks for chunk_kda, run before any launch. Each error names the argument."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

HEAD_DIM = 128
# FLA 0.6.0 arguments cake accepts only at their neutral value, with the reason it does not do more.
UNSUPPORTED = {
    "allow_neg_eigval": (False, "cake's kernels assume beta in [0, 1]"),
    "return_intermediate_states": (False, "cake does not return per-chunk states"),
    "cp_context": (
        None,
        "multi-GPU context parallelism is not in cake; long sequences are split on one GPU",
    ),
    "use_graph": (False, "FLA's graph mode is for Ascend NPUs"),
}


ALIGN_BYTES = 16  # the programs copy rows in 16-byte pieces (cp.async, float4 loads)


def aligned(x: torch.Tensor | None) -> torch.Tensor | None:
    """x, or a copy of it where its data does not start on a 16-byte boundary (a view at an odd
    element offset into a larger tensor, which the programs' 16-byte copies would fault on)."""
    return x if x is None or x.data_ptr() % ALIGN_BYTES == 0 else x.clone()


@dataclass(frozen=True)
class Shapes:
    batch: int
    tokens: int
    heads: int
    cu_seqlens: tuple[int, ...]  # always set: plain batches become B sequences of T tokens


def _tensor(
    name: str, x: Any, dtypes: tuple[torch.dtype, ...], device: torch.device | None
) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(map(str, dtypes))}, got {x.dtype}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} is on {x.device}, expected {device} (where q is)")
    return x


def check_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the FLA keyword arguments cake understands; reject everything else by name."""
    out: dict[str, Any] = {}
    for name in ("A_log", "dt_bias", "chunk_size", "transpose_state_layout"):
        if name in kwargs:
            out[name] = kwargs.pop(name)
    if kwargs:
        raise TypeError(
            f"chunk_kda got unsupported keyword argument(s): {', '.join(sorted(kwargs))}"
        )
    if out.get("chunk_size", 64) != 64:
        raise ValueError(
            f"chunk_size must be 64 in cake (its programs are built for 64), got {out['chunk_size']}"
        )
    return out


def check_unsupported(**values: Any) -> None:
    for name, value in values.items():
        neutral, why = UNSUPPORTED[name]
        if value is not neutral and value != neutral:
            raise ValueError(f"{name}={value!r} is not supported by cake ({why})")


def check_inputs(
    q: Any,
    k: Any,
    v: Any,
    g: Any,
    beta: Any,
    *,
    initial_state: Any,
    cu_seqlens: Any,
    cu_seqlens_cpu: Any,
    use_gate_in_kernel: bool,
    lower_bound: float | None,
    A_log: Any,
    dt_bias: Any,
) -> Shapes:
    q = _tensor("q", q, (torch.bfloat16,), None)
    dev = q.device
    k = _tensor("k", k, (torch.bfloat16,), dev)
    v = _tensor("v", v, (torch.bfloat16,), dev)
    gate_dtypes = (torch.float32, torch.bfloat16) if use_gate_in_kernel else (torch.float32,)
    g = _tensor("g", g, gate_dtypes, dev)
    beta = _tensor("beta", beta, (torch.bfloat16, torch.float32), dev)
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = q.shape
    if K != HEAD_DIM:
        raise ValueError(
            f"q/k head dim must be {HEAD_DIM} (cake has programs for K = V = 128 only), got {K}"
        )
    if tuple(k.shape) != (B, T, H, K):
        raise ValueError(f"k must have q's shape {(B, T, H, K)}, got {tuple(k.shape)}")
    if v.dim() != 4 or tuple(v.shape[:2]) != (B, T) or v.shape[2] != H:
        raise ValueError(
            f"v must be [B, T, H, V] with q's B, T, H = {(B, T, H)} (no grouped values), got {tuple(v.shape)}"
        )
    if v.shape[3] != HEAD_DIM:
        raise ValueError(f"v head dim must be {HEAD_DIM}, got {v.shape[3]}")
    if tuple(g.shape) != (B, T, H, K):
        raise ValueError(f"g must be [B, T, H, K] = {(B, T, H, K)}, got {tuple(g.shape)}")
    if tuple(beta.shape) != (B, T, H):
        raise ValueError(f"beta must be [B, T, H] = {(B, T, H)}, got {tuple(beta.shape)}")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous (call .contiguous() first)")

    if cu_seqlens is not None:
        cu = _check_cu_seqlens(cu_seqlens, cu_seqlens_cpu, B, T)
    else:
        if cu_seqlens_cpu is not None:
            raise ValueError("cu_seqlens_cpu was given without cu_seqlens")
        cu = tuple(i * T for i in range(B + 1))
    n = len(cu) - 1

    if initial_state is not None:
        h0 = _tensor("initial_state", initial_state, (torch.float32,), dev)
        if tuple(h0.shape) != (n, H, K, HEAD_DIM):
            raise ValueError(
                f"initial_state must be [N, H, K, V] = {(n, H, K, HEAD_DIM)}, got {tuple(h0.shape)}"
            )
        if not h0.is_contiguous():
            raise ValueError("initial_state must be contiguous")

    if use_gate_in_kernel:
        if A_log is None and lower_bound is None:
            raise ValueError(
                "A_log is required when use_gate_in_kernel=True and lower_bound is not set"
            )
        if A_log is not None:
            _tensor("A_log", A_log, (torch.float32,), dev)
            if A_log.numel() != H:
                raise ValueError(
                    f"A_log must have H = {H} elements, got shape {tuple(A_log.shape)}"
                )
        if dt_bias is not None:
            _tensor("dt_bias", dt_bias, (torch.float32,), dev)
            if dt_bias.numel() != H * K:
                raise ValueError(
                    f"dt_bias must have H*K = {H * K} elements, got shape {tuple(dt_bias.shape)}"
                )
    else:
        for name, x in (("A_log", A_log), ("dt_bias", dt_bias)):
            if x is not None:
                raise ValueError(
                    f"{name} is only used with use_gate_in_kernel=True; it was given without it"
                )
        if lower_bound is not None:
            raise ValueError("lower_bound is only used with use_gate_in_kernel=True")
    if lower_bound is not None and not (-5.0 <= float(lower_bound) < 0.0):
        raise ValueError(f"lower_bound must be in [-5, 0), got {lower_bound}")
    return Shapes(B, T, H, cu)


def check_device(q: torch.Tensor) -> None:
    """Called after every other check, so each rule can be tested on a machine without a GPU."""
    if q.device.type != "cuda":
        raise ValueError(f"q, k, v, g, beta must be on a CUDA device, got {q.device}")


def _check_cu_seqlens(cu_seqlens: Any, cu_seqlens_cpu: Any, B: int, T: int) -> tuple[int, ...]:
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype not in (
        torch.int32,
        torch.int64,
    ):
        raise TypeError("cu_seqlens must be an int32 or int64 torch.Tensor")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(
            f"cu_seqlens must be 1-D with at least 2 elements, got shape {tuple(cu_seqlens.shape)}"
        )
    if B != 1:
        raise ValueError(
            f"with cu_seqlens the batch size must be 1 (flatten the sequences), got {B}"
        )
    source = cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens
    if cu_seqlens_cpu is not None and (
        not isinstance(cu_seqlens_cpu, torch.Tensor)
        or cu_seqlens_cpu.device.type != "cpu"
        or cu_seqlens_cpu.shape != cu_seqlens.shape
    ):
        raise ValueError("cu_seqlens_cpu must be a CPU tensor with cu_seqlens' shape")
    cu = tuple(source.tolist())  # Python ints
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {cu[0]}")
    if any(b < a for a, b in zip(cu[:-1], cu[1:], strict=True)):
        raise ValueError("cu_seqlens must be non-decreasing (sorted)")
    if cu[-1] != T:
        raise ValueError(f"cu_seqlens must end at the number of tokens T = {T}, got {cu[-1]}")
    return cu
