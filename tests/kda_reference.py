"""Float64 reference for KDA (Kimi Delta Attention), forward and backward.

Every accuracy test and the benchmark's accuracy mode compare against this module. It is plain
PyTorch on purpose: the forward is the recurrence of docs/kda.md written out, and the backward is
whatever torch.autograd derives from it in float64, so no hand-written gradient can hide a
mistake shared with the kernels.

Two forms of the forward exist:

- `recurrent_kda`: token by token, exactly the four steps of docs/kda.md. This is the definition.
- `chunk_kda_ref`: the chunked form (C = 64) of docs/kda.md. It computes the same function with
  one Python iteration per chunk instead of per token, so long inputs stay affordable. The tests
  check it against `recurrent_kda` to 1e-12.

Layouts follow FLA 0.6.0 / cake: q, k `[B,T,H,K]`, v `[B,T,HV,V]`, g `[B,T,HV,K]`, beta
`[B,T,HV]`, states `[N,HV,K,V]`; with `cu_seqlens` (int64 `[N+1]`) B must be 1. HV may be a
multiple of H (FLA's grouped value heads); value head hv reads query/key head hv // (HV // H).
Head dimensions are generic so tests can use K = V = 4.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

F64 = torch.float64
CHUNK = 64
L2NORM_EPS = 1e-6


# Elementwise pieces: gate, L2 norm, beta


def raw_gate(
    x: torch.Tensor,
    A_log: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    lower_bound: float | None = None,
) -> torch.Tensor:
    """Log decay from the raw gate input x `[B,T,H,K]`, in float64.

    Default: g = -exp(A_log[h]) * softplus(x + dt_bias[h,d]).
    With lower_bound: g = lower_bound * sigmoid(exp(A_log[h]) * (x + dt_bias[h,d])).
    As in FLA, a missing dt_bias means zero bias, and a missing A_log is only allowed with
    lower_bound, where the factor in front of (x + dt_bias) is then 1.
    """
    H, K = x.shape[-2], x.shape[-1]
    z = x.to(F64)
    if dt_bias is not None:
        z = z + dt_bias.to(F64).reshape(H, K)
    if lower_bound is None:
        if A_log is None:
            raise ValueError("raw_gate: A_log is required when lower_bound is None")
        # logaddexp(z, 0) is softplus without F.softplus's linear cut-off at z > 20, which would
        # be an approximation (error ~exp(-20)) visible at float64.
        return -torch.exp(A_log.to(F64)).reshape(H, 1) * torch.logaddexp(z, torch.zeros_like(z))
    if not (-5.0 <= lower_bound < 0.0):
        raise ValueError(f"raw_gate: lower_bound must be in [-5, 0), got {lower_bound}")
    if A_log is not None:
        z = torch.exp(A_log.to(F64)).reshape(H, 1) * z
    return lower_bound * torch.sigmoid(z)


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dimension (FLA's l2norm, eps inside the root)."""
    x = x.to(F64)
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def beta_sigmoid(b: torch.Tensor) -> torch.Tensor:
    """beta from logits, for use_beta_sigmoid_in_kernel=True."""
    return torch.sigmoid(b.to(F64))


# Packing: varlen tokens <-> a padded [N, Tpad, ...] batch
#
# Both forms run all sequences of a call at once on a padded batch. Padding tokens get q = k = v
# = 0, g = 0 and beta = 0: a token with g = 0 does not decay the state and one with beta = 0 (and
# k = 0) does not update it, so padding after a sequence's end leaves its state exactly as the
# last real token left it, and chunk boundaries stay aligned to each sequence's start.


def _lengths(cu_seqlens: torch.Tensor) -> list[int]:
    cu = cu_seqlens.detach().to("cpu", torch.int64)
    if cu.dim() != 1 or cu.numel() < 2 or int(cu[0]) != 0:
        raise ValueError(f"cu_seqlens must be a 1-D int64 tensor [N+1] starting at 0, got {cu}")
    lens = (cu[1:] - cu[:-1]).tolist()
    if any(n < 0 for n in lens):
        raise ValueError(f"cu_seqlens must be non-decreasing, got {cu.tolist()}")
    return lens


class _Packing:
    """Index maps between packed tokens `[T_total]` and a padded batch `[N, Tpad]`."""

    def __init__(self, lengths: list[int], pad_to: int, device: torch.device):
        self.lengths = lengths
        self.n = len(lengths)
        longest = max(lengths) if lengths else 0
        self.tpad = max(pad_to, math.ceil(longest / pad_to) * pad_to) if pad_to > 1 else longest
        total = sum(lengths)
        # gather[n, t] = packed index of token t of sequence n, or `total` (an appended zero row)
        gather = torch.full((self.n, self.tpad), total, dtype=torch.int64)
        # scatter[i] = flat padded index of packed token i
        scatter = torch.empty(total, dtype=torch.int64)
        start = 0
        for n, length in enumerate(lengths):
            gather[n, :length] = torch.arange(start, start + length)
            scatter[start : start + length] = n * self.tpad + torch.arange(length)
            start += length
        self.gather = gather.to(device)
        self.scatter = scatter.to(device)
        self.total = total

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[T_total, ...] -> [N, Tpad, ...], zeros after each sequence (differentiable)."""
        zero = x.new_zeros((1, *x.shape[1:]))
        return torch.cat([x, zero])[self.gather]

    def unpad(self, y: torch.Tensor) -> torch.Tensor:
        """[N, Tpad, ...] -> [T_total, ...]."""
        return y.reshape(self.n * self.tpad, *y.shape[2:])[self.scatter]


def _to_padded(
    tensors: list[torch.Tensor], cu_seqlens: torch.Tensor | None, pad_to: int
) -> tuple[list[torch.Tensor], _Packing | None, int]:
    """Bring [B,T,...] tensors to [N,Tpad,...]; returns the packing (None for plain batches)."""
    B, T = tensors[0].shape[:2]
    if cu_seqlens is None:
        tpad = math.ceil(T / pad_to) * pad_to if pad_to > 1 else T
        if tpad == T:
            return tensors, None, tpad
        padded = [
            torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, tpad - T)) for x in tensors
        ]
        return padded, None, tpad
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1, got {B}")
    lengths = _lengths(cu_seqlens)
    if sum(lengths) != T:
        raise ValueError(f"cu_seqlens covers {sum(lengths)} tokens but the input has T = {T}")
    packing = _Packing(lengths, pad_to, tensors[0].device)
    return [packing.pad(x[0]) for x in tensors], packing, packing.tpad


def _from_padded(o: torch.Tensor, packing: _Packing | None, T: int) -> torch.Tensor:
    if packing is None:
        return o[:, :T]
    return packing.unpad(o).unsqueeze(0)


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    pad_to: int,
):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if k.shape != q.shape:
        raise ValueError(
            f"q and k must have the same shape, got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if HV % H != 0:
        raise ValueError(f"value heads ({HV}) must be a multiple of query/key heads ({H})")
    if g.shape != (B, T, HV, K) or beta.shape != (B, T, HV) or v.shape[:2] != (B, T):
        raise ValueError(
            f"shape mismatch: q {tuple(q.shape)}, v {tuple(v.shape)}, g {tuple(g.shape)}, "
            f"beta {tuple(beta.shape)}"
        )
    if HV != H:
        q = q.repeat_interleave(HV // H, dim=2)
        k = k.repeat_interleave(HV // H, dim=2)
    tensors = [x.to(F64) for x in (q, k, v, g)] + [beta.to(F64)[..., None]]
    (q, k, v, g, beta), packing, tpad = _to_padded(tensors, cu_seqlens, pad_to)
    N = q.shape[0]
    if initial_state is None:
        S = q.new_zeros(N, HV, K, V)
    else:
        if initial_state.shape != (N, HV, K, V):
            raise ValueError(
                f"initial_state must be [N,HV,K,V] = {[N, HV, K, V]}, got {list(initial_state.shape)}"
            )
        S = initial_state.to(F64)
    return q, k, v, g, beta[..., 0], S, packing, T


# The two forms of the forward


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token KDA in float64: returns (o `[B,T,HV,V]`, final_state `[N,HV,K,V]`).

    g is the log decay (already activated). All sequences and heads advance together; only the
    tokens are a Python loop.
    """
    q, k, v, g, beta, S, packing, T = _prepare(q, k, v, g, beta, initial_state, cu_seqlens, 1)
    outs = []
    for t in range(q.shape[1]):
        # 1. decay: row d of S scaled by exp(g_t[d])
        S = torch.exp(g[:, t])[..., None] * S
        # 2. error against the decayed state: e = v - S^T k
        e = v[:, t] - torch.einsum("nhkv,nhk->nhv", S, k[:, t])
        # 3. rank-one update: S += beta k e^T
        S = S + beta[:, t, :, None, None] * k[:, t, :, :, None] * e[:, :, None, :]
        # 4. output reads the updated state
        outs.append(scale * torch.einsum("nhkv,nhk->nhv", S, q[:, t]))
    o = torch.stack(outs, dim=1) if outs else v.new_zeros(v.shape)
    return _from_padded(o, packing, T), S


def chunk_tiles(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, ...]:
    """The chunk-local operands of docs/kda.md's chunk form, for any leading batch dims.

    q, k, g `[..., C, K]`, v `[..., C, V]`, beta `[..., C]`. Returns W, U `[..., C, K|V]`,
    Qg = scale q exp(Γ) `[..., C, K]`, Kd^T = (k exp(Γ_last - Γ))^T `[..., K, C]`, Aqk `[..., C, C]`
    and gl = exp(Γ_last) `[..., 1, K]`.
    """
    C = q.shape[-2]
    G = g.cumsum(-2)  # Γ, chunk-local inclusive cumsum
    ones = torch.ones(C, C, dtype=torch.bool, device=q.device)
    causal = torch.tril(ones)  # j <= i
    strict = torch.tril(ones, -1)  # j < i
    # exp(Γ_i - Γ_j) only where j <= i: there Γ_i - Γ_j <= 0 so the factor is <= 1 whatever the
    # gate. Above the diagonal the difference is large and positive (up to 64 * 1000 for the
    # extreme gate) and would overflow; the exponent is replaced before exp so that neither the
    # value nor its gradient sees an inf.
    diff = G[..., :, None, :] - G[..., None, :, :]  # [..., C, C, K]
    decay = torch.exp(torch.where(causal[:, :, None], diff, torch.full_like(diff, -math.inf)))
    Aqk = scale * torch.einsum("...ik,...jk,...ijk->...ij", q, k, decay)
    M = beta[..., :, None] * torch.einsum("...ik,...jk,...ijk->...ij", k, k, decay) * strict
    # T = (I + M)^-1 applied by a unit-lower-triangular solve rather than an explicit inverse.
    IM = M + torch.eye(C, dtype=M.dtype, device=M.device)
    eG = torch.exp(G)  # Γ <= 0 for log decays, so <= 1
    W = torch.linalg.solve_triangular(
        IM, beta[..., None] * (k * eG), upper=False, unitriangular=True
    )
    U = torch.linalg.solve_triangular(IM, beta[..., None] * v, upper=False, unitriangular=True)
    G_last = G[..., -1:, :]  # [..., 1, K]
    Kd_t = (k * torch.exp(G_last - G)).transpose(-1, -2)
    return W, U, scale * (q * eG), Kd_t, Aqk, torch.exp(G_last)


def _chunk_step(
    S: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of docs/kda.md's chunk form for all (sequence, head) pairs at once.

    S `[N,H,K,V]` is the state at the chunk's start; q, k, g `[N,H,C,K]`, v `[N,H,C,V]`,
    beta `[N,H,C]`. Returns (o `[N,H,C,V]`, state at the chunk's end).
    """
    W, U, Qg, Kd_t, Aqk, gl = chunk_tiles(q, k, v, g, beta, scale)
    v_new = U - W @ S
    out = Qg @ S + Aqk @ v_new
    S_next = gl.transpose(-1, -2) * S + Kd_t @ v_new
    return out, S_next


def chunk_kda_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked KDA in float64 (same contract as `recurrent_kda`).

    Chunks start at each sequence's first token; a sequence's last chunk is completed with
    padding tokens that change nothing (see the packing note above). One Python iteration per
    chunk; all sequences and heads of the call advance together.
    """
    q, k, v, g, beta, S, packing, T = _prepare(
        q, k, v, g, beta, initial_state, cu_seqlens, chunk_size
    )
    N, Tpad = q.shape[:2]
    C = chunk_size

    def chunks(x: torch.Tensor) -> torch.Tensor:
        # [N, Tpad, H, ...] -> [N, H, NC, C, ...]
        x = x.reshape(N, Tpad // C, C, *x.shape[2:]).movedim(3, 1)
        return x

    qc, kc, vc, gc, bc = (chunks(x) for x in (q, k, v, g, beta))
    outs = []
    for c in range(Tpad // C):
        out, S = _chunk_step(
            S, qc[:, :, c], kc[:, :, c], vc[:, :, c], gc[:, :, c], bc[:, :, c], scale
        )
        outs.append(out)
    if outs:
        o = torch.stack(outs, dim=2)  # [N,H,NC,C,V]
        o = o.reshape(N, o.shape[1], Tpad, -1).transpose(1, 2)  # [N,Tpad,H,V]
    else:
        o = v.new_zeros(v.shape)
    return _from_padded(o, packing, T), S


# The FLA-shaped entry point and its gradients


def kda_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    lower_bound: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    output_final_state: bool = True,
    form: str = "chunk",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """float64 KDA with the argument meanings of FLA 0.6.0's `chunk_kda`.

    Every tensor is upcast with `.to(float64)`, which keeps it in the autograd graph, so a
    backward through this function yields float64 gradients of the exact function (read them
    from float64 leaves, see `kda_reference_grads`). With use_gate_in_kernel, `g` is the raw gate
    input x. `form` picks the chunked ("chunk", default, fast) or token-by-token ("recurrent")
    forward. Returns (o `[B,T,HV,V]`, final_state `[N,HV,K,V]` or None), both float64.
    """
    if scale is None:
        scale = q.shape[-1] ** -0.5
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    if use_beta_sigmoid_in_kernel:
        beta = beta_sigmoid(beta)
    if use_gate_in_kernel:
        g = raw_gate(g, A_log, dt_bias, lower_bound)
    if form == "chunk":
        o, ht = chunk_kda_ref(q, k, v, g, beta, scale, initial_state, cu_seqlens)
    elif form == "recurrent":
        o, ht = recurrent_kda(q, k, v, g, beta, scale, initial_state, cu_seqlens)
    else:
        raise ValueError(f"form must be 'chunk' or 'recurrent', got {form!r}")
    return o, (ht if output_final_state else None)


# Names of the differentiable inputs of chunk_kda and of their gradients in the result dict.
GRAD_NAMES = {
    "q": "dq",
    "k": "dk",
    "v": "dv",
    "g": "dg",  # dx for the raw gate form: the gradient of the `g` argument either way
    "beta": "dbeta",
    "A_log": "dA_log",
    "dt_bias": "ddt_bias",
    "initial_state": "dh0",
}

_FLAGS = (
    "scale",
    "use_qk_l2norm_in_kernel",
    "use_gate_in_kernel",
    "use_beta_sigmoid_in_kernel",
    "lower_bound",
    "cu_seqlens",
)


def kda_reference_grads(
    inputs: Mapping[str, Any] | Any,
    do: torch.Tensor,
    dht: torch.Tensor | None = None,
    *,
    form: str = "chunk",
) -> dict[str, torch.Tensor]:
    """Outputs and float64 gradients of the reference for the given chunk_kda arguments.

    `inputs` is a mapping of chunk_kda keyword arguments (q, k, v, g, beta and optionally
    initial_state, A_log, dt_bias, scale, the *_in_kernel flags, lower_bound, cu_seqlens), or an
    object with an `as_kwargs()` method returning one (tests/kda_inputs.KDAInputs). The tensors
    are copied to float64 leaves, so their own dtype and requires_grad do not matter.

    Returns {"o", "ht", "dq", "dk", "dv", "dg", "dbeta"} plus "dA_log" and "ddt_bias" for the raw
    gate (when given) and "dh0" when an initial state was given; all float64. "dg" is the
    gradient of the `g` argument, i.e. dx for the raw gate form. `dht` None means no gradient
    flows into the final state.
    """
    kwargs = dict(inputs.as_kwargs() if hasattr(inputs, "as_kwargs") else inputs)
    leaves: dict[str, torch.Tensor] = {}
    for name in GRAD_NAMES:
        t = kwargs.get(name)
        if t is None:
            continue
        if name in ("A_log", "dt_bias") and not kwargs.get("use_gate_in_kernel", False):
            continue  # FLA ignores them for the g form, so they get no gradient
        leaves[name] = t.detach().to(F64).requires_grad_(True)
    flags = {name: kwargs[name] for name in _FLAGS if name in kwargs}
    with torch.enable_grad():
        o, ht = kda_reference(
            leaves["q"],
            leaves["k"],
            leaves["v"],
            leaves["g"],
            leaves["beta"],
            initial_state=leaves.get("initial_state"),
            A_log=leaves.get("A_log"),
            dt_bias=leaves.get("dt_bias"),
            output_final_state=True,
            form=form,
            **flags,
        )
        outputs = [o]
        grad_outputs = [do.detach().to(F64)]
        if dht is not None:
            outputs.append(ht)
            grad_outputs.append(dht.detach().to(F64))
        names = list(leaves)
        grads = torch.autograd.grad(
            outputs, [leaves[n] for n in names], grad_outputs, allow_unused=True
        )
    result = {"o": o.detach(), "ht": ht.detach()}
    for name, grad in zip(names, grads, strict=True):
        # allow_unused: a leaf that does not reach the output (e.g. dt_bias where the gate is
        # saturated) has zero gradient, not a missing one.
        result[GRAD_NAMES[name]] = torch.zeros_like(leaves[name]) if grad is None else grad
    return result


# Error metrics


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64. 0 when both are zero, inf when only ref is."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {tuple(out.shape)} vs {tuple(ref.shape)}")
    ref = ref.detach().to(F64)
    err = (out.detach().to(device=ref.device, dtype=F64) - ref).norm().item()
    den = ref.norm().item()
    if den == 0.0:
        return 0.0 if err == 0.0 else math.inf
    return err / den


def window_errors(out: torch.Tensor, ref: torch.Tensor, head: int, window: int) -> list[float]:
    """rel_l2 of `[B,T,H,V]` outputs for one head over consecutive windows of `window` tokens."""
    return [
        rel_l2(out[:, a : a + window, head], ref[:, a : a + window, head])
        for a in range(0, out.shape[1], window)
    ]


def rel_l2_per_head(out: torch.Tensor, ref: torch.Tensor, head_dim: int) -> list[float]:
    """rel_l2 per index of dimension `head_dim` (2 for `[B,T,H,K]`, 1 for `[N,H,K,V]`)."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {tuple(out.shape)} vs {tuple(ref.shape)}")
    return [rel_l2(o, r) for o, r in zip(out.unbind(head_dim), ref.unbind(head_dim), strict=True)]
