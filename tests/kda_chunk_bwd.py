"""The chunked KDA backward written out explicitly in float64: the blueprint of the GPU kernels.

`kda_reference.kda_reference_grads` gets its gradients from torch.autograd, which says nothing
about how a kernel should organise them. This module computes the same gradients by hand, stage by
stage, in the order and with the per-chunk quantities the CUDA programs use (docs/backward-design.md),
so that each kernel has a float64 twin whose intermediate tensors can be compared one by one:

  stage            kernel (plan)         what it does here
  gate / l2n fwd   kda_gate, fwd_chunk   activated g, l2-normalised q/k, beta (elementwise)
  fwd_chunk        kda_fwd_chunk         per chunk: Γ, Aqk, Akk, T = (I+M)^-1, W, U, Qg, Kd, gl
  fwd_state        kda_fwd_state         per sequence, forward over chunks: S_c, Vnew, O
  bwd_state        kda_bwd_state         per sequence, REVERSE over chunks: dS at each chunk end,
                                         dVnew, dh0
  bwd_chunk        kda_bwd_chunk         per chunk: dq, dk, dv, dbeta, dΓ -> dg (reverse cumsum)
  gate / l2n bwd   (bwd_chunk epilogue)  through the L2 norm, beta sigmoid and the raw gate;
                   kda_bwd_gate_reduce   dA_log / ddt_bias: per-chunk partials, then one ordered sum

Notation per chunk (rows r = 0..L-1, L <= 64, only valid rows: a short chunk has no padding here),
for one (sequence, value head): Γ = chunk-local inclusive cumsum of g, E_ij = exp(Γ_i - Γ_j),
s = scale, B = Diag(beta), Kg = K ⊙ exp(Γ), Qg = s Q ⊙ exp(Γ), Kd = K ⊙ exp(Γ_{L-1} - Γ),
gl = exp(Γ_{L-1}), Aqk = s (Q K^T ⊙ E) incl. diagonal, Akk = (K K^T ⊙ E) strictly lower,
M = B Akk, T = (I + M)^-1, W = T B Kg, U = T B V, Vn = U - W S_c,
O = Qg S_c + Aqk Vn, S_{c+1} = Diag(gl) S_c + Kd^T Vn.

Backward of one chunk, given dO and dS_{c+1} (the gradient of the state at the chunk's END, paired
with S_c, the state at its START):

  dVn      = Aqk^T dO + Kd dS_{c+1}                       (bwd_state: the only chained part)
  dS_c     = Diag(gl) dS_{c+1} + Qg^T dO - W^T dVn          (bwd_state)
  Y        = T^T dVn                                        (= d(B V), = -d(B Kg) S_c^T ... below)
  dv       = B Y                      dbeta += rowsum(V ⊙ Y)
  Z        = Y S_c^T                  dKg = -B Z            dbeta -= rowsum(Kg ⊙ Z)
  dQg      = dO S_c^T
  dAqk     = tril(dO Vn^T)            dM = -strict_tril(Y Vn^T)
  dAkk     = B dM                     dbeta += rowsum(dM ⊙ Akk)
  dKd      = Vn dS_{c+1}^T            dgl = rowsum_v(S_c ⊙ dS_{c+1})

The two identities that make Y useful: dW = -dVn S_c^T and dU = dVn give T^T dW = -Z, and
dM = -T^T dT T^T = -[(T^T dW) W^T + (T^T dU) U^T] = -(T^T dVn)(U - W S_c)^T = -Y Vn^T, so neither
W nor U is needed by the chunk gradient kernel, only Vn (one GEMM instead of two for dM).

Every exp() in this file goes through `_exp`, which refuses a positive exponent: all exponents are
bounded differences Γ_i - Γ_j with i >= j (or Γ against the chunk start, Γ_{-1} = 0), so every
factor is <= 1 and gates of -1000 (Γ ~ -64000) stay finite. See `_lower_scores`, `_row_grad`,
`_col_grad` for the 16-row block organisation with reference rows that the kernels use.

Head dimensions are generic (the tests use K = V = 8 and 128). HV may be a multiple of H (grouped
value heads) as in the reference: dq/dk are summed over the value heads of a key head.
"""

from __future__ import annotations

import math
from typing import Any

import torch

F64 = torch.float64
CHUNK = 64
BLOCK = 16  # row block of the intra-chunk products (one m16 MMA tile row-block in the kernels)
L2NORM_EPS = 1e-6


# ---------------------------------------------------------------------------------------------
# Bounded exponentials and the 16-row block products
# ---------------------------------------------------------------------------------------------


def _exp(x: torch.Tensor) -> torch.Tensor:
    """exp of a bounded difference. Γ is a cumsum of g <= 0, so Γ_i - Γ_j <= 0 exactly (also in
    floating point: adding a non-positive number never increases a float) for i >= j. A positive
    exponent here means someone exponentiated a raw cumsum or a reversed difference, which
    overflows at fast decay: refuse it."""
    if x.numel() and bool((x > 0).any()):
        raise AssertionError(f"unbounded exponent: max {x.max().item()} > 0")
    return torch.exp(x)


def _blocks(L: int) -> list[tuple[int, int]]:
    return [(b, min(b + BLOCK, L)) for b in range(0, L, BLOCK)]


def _diag_decays(G: torch.Tensor) -> list[torch.Tensor]:
    """E_ij = exp(Γ_i - Γ_j) per key dim for i, j inside each diagonal 16x16 block, 0 above the
    diagonal: one [H, n, n, K] tensor per row block, shared by every product of the chunk.

    Diagonal blocks are elementwise in the kernels too (16 x 16 x K exps per block, fp32, no
    TF32): a factored form k_j exp(Γ_ref - Γ_j) with the block's first row as reference would be
    exp(+15 |g|) for the later keys of the block, unbounded for general g (fine only while
    |g| <= 5.8, i.e. for the raw sigmoid form with lower_bound >= -5). Elementwise fp32 is also what
    makes the diagonal pair of the gate gradient cancel exactly (see `_chunk_bwd`)."""
    out = []
    for i0, i1 in _blocks(G.shape[1]):
        Gi = G[:, i0:i1]
        D = Gi[:, :, None, :] - Gi[:, None, :, :]
        n = i1 - i0
        keep = torch.tril(torch.ones(n, n, dtype=torch.bool, device=G.device))
        D = torch.where(keep[None, :, :, None], D, torch.full_like(D, -math.inf))
        out.append(_exp(D))
    return out


def _no_diag(P: torch.Tensor) -> torch.Tensor:
    L = P.shape[-1]
    return P * (1.0 - torch.eye(L, dtype=P.dtype, device=P.device))


def _lower_scores(
    a: torch.Tensor, b: torch.Tensor, G: torch.Tensor, Ed: list[torch.Tensor], strict: bool
) -> torch.Tensor:
    """P_ij = Σ_d a_i[d] b_j[d] exp(Γ_i[d] - Γ_j[d]) for j <= i (j < i when strict), [H, L, L].

    Off-diagonal 16x16 blocks (row block I > column block J) use the first row r of block I as the
    reference: (a_I ⊙ exp(Γ_I - Γ_r)) @ (b_J ⊙ exp(Γ_r - Γ_J))^T. Both factors are <= 1 because
    i >= r > j. This is one MMA per block pair with operands scaled on the way into shared memory;
    the b-side factor depends on I (the reference), so it is recomputed per row block.
    Ed: the diagonal blocks' decays (`_diag_decays`)."""
    H, L, _ = a.shape
    P = a.new_zeros(H, L, L)
    blocks = _blocks(L)
    for bi, (i0, i1) in enumerate(blocks):
        r = i0
        aI = a[:, i0:i1] * _exp(G[:, i0:i1] - G[:, r : r + 1])
        for j0, j1 in blocks[:bi]:
            bJ = b[:, j0:j1] * _exp(G[:, r : r + 1] - G[:, j0:j1])
            P[:, i0:i1, j0:j1] = aI @ bJ.transpose(-1, -2)
        P[:, i0:i1, i0:i1] = torch.einsum("hid,hjd,hijd->hij", a[:, i0:i1], b[:, i0:i1], Ed[bi])
    return _no_diag(P) if strict else P


def _row_grad(
    dP: torch.Tensor, b: torch.Tensor, G: torch.Tensor, Ed: list[torch.Tensor]
) -> torch.Tensor:
    """out_i = Σ_{j<=i} dP_ij b_j exp(Γ_i - Γ_j): the gradient of P's left operand (dP is lower
    triangular; zero its diagonal for the strict part). Off-diagonal: reference r = first row of
    row block I (as the forward), out_I += exp(Γ_I - Γ_r) ⊙ (dP_IJ @ (b_J ⊙ exp(Γ_r - Γ_J)))."""
    H, L, _ = b.shape
    out = torch.zeros_like(b)
    blocks = _blocks(L)
    for bi, (i0, i1) in enumerate(blocks):
        r = i0
        acc = b.new_zeros(H, i1 - i0, b.shape[-1])
        for j0, j1 in blocks[:bi]:
            acc = acc + dP[:, i0:i1, j0:j1] @ (b[:, j0:j1] * _exp(G[:, r : r + 1] - G[:, j0:j1]))
        out[:, i0:i1] = acc * _exp(G[:, i0:i1] - G[:, r : r + 1])
        out[:, i0:i1] += torch.einsum("hij,hjd,hijd->hid", dP[:, i0:i1, i0:i1], b[:, i0:i1], Ed[bi])
    return out


def _col_grad(
    dP: torch.Tensor, a: torch.Tensor, G: torch.Tensor, Ed: list[torch.Tensor]
) -> torch.Tensor:
    """out_j = Σ_{i>=j} dP_ij a_i exp(Γ_i - Γ_j): the gradient of P's right operand. Off-diagonal:
    reference e = LAST row of column block J (the first row of the row block would give
    exp(Γ_r - Γ_j) > 1 here, since now the sum runs over later rows),
    out_J += exp(Γ_e - Γ_J) ⊙ Σ_{I>J} dP_IJ^T @ (a_I ⊙ exp(Γ_I - Γ_e)); i > e >= j bounds both."""
    H, L, _ = a.shape
    out = torch.zeros_like(a)
    blocks = _blocks(L)
    for bj, (j0, j1) in enumerate(blocks):
        e = j1 - 1
        acc = a.new_zeros(H, j1 - j0, a.shape[-1])
        for i0, i1 in blocks[bj + 1 :]:
            acc = acc + dP[:, i0:i1, j0:j1].transpose(-1, -2) @ (
                a[:, i0:i1] * _exp(G[:, i0:i1] - G[:, e : e + 1])
            )
        out[:, j0:j1] = acc * _exp(G[:, e : e + 1] - G[:, j0:j1])
        out[:, j0:j1] += torch.einsum("hij,hid,hijd->hjd", dP[:, j0:j1, j0:j1], a[:, j0:j1], Ed[bj])
    return out


# ---------------------------------------------------------------------------------------------
# Elementwise stages: raw gate, L2 norm, beta (forward values and what their backward needs)
# ---------------------------------------------------------------------------------------------


def _gate_fwd(x, A_log, dt_bias, lower_bound):  # noqa: ANN001, ANN202
    """g and its partial derivatives ∂g/∂z (z = x + dt_bias) and ∂g/∂A_log, float64 [B,T,H,K]."""
    H, K = x.shape[-2], x.shape[-1]
    z = x.to(F64)
    if dt_bias is not None:
        z = z + dt_bias.to(F64).reshape(H, K)
    if lower_bound is None:
        a = torch.exp(A_log.to(F64)).reshape(H, 1)
        g = -a * torch.logaddexp(z, torch.zeros_like(z))  # -exp(A) softplus(z)
        return g, -a * torch.sigmoid(z), g  # ∂g/∂A_log = g (g is proportional to exp(A_log))
    a = torch.exp(A_log.to(F64)).reshape(H, 1) if A_log is not None else torch.ones(H, 1, dtype=F64)
    u = a * z
    sg = torch.sigmoid(u)
    g = lower_bound * sg
    dg_du = lower_bound * sg * (1.0 - sg)
    return g, dg_du * a, dg_du * u  # ∂u/∂A_log = a z = u


def _l2norm_fwd(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)
    return x * r, r


def _l2norm_bwd(y: torch.Tensor, r: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """y = x r, r = (Σx² + eps)^-1/2: dx = r (dy - y (y·dy)). One row dot product per token, so it
    fuses into the epilogue of the chunk gradient kernel (which owns whole rows)."""
    return r * (dy - y * (y * dy).sum(-1, keepdim=True))


# ---------------------------------------------------------------------------------------------
# Per-chunk forward quantities (kda_fwd_chunk) and the forward state pass (kda_fwd_state)
# ---------------------------------------------------------------------------------------------


def _chunk_fwd(q, k, v, g, beta, scale):  # noqa: ANN001, ANN202
    """Everything of one chunk that does not depend on the state. Inputs [H, L, .], beta [H, L]."""
    G = g.cumsum(1)  # Γ (fp32 in the kernels, written by kda_gate)
    Ed = _diag_decays(G)
    Aqk = scale * _lower_scores(q, k, G, Ed, strict=False)
    Akk = _lower_scores(k, k, G, Ed, strict=True)
    L = q.shape[1]
    eye = torch.eye(L, dtype=F64, device=q.device)
    # T = (I + B Akk)^-1, unit lower triangular; the kernel inverts the four 16x16 diagonal blocks by
    # forward substitution and merges them (fp32 throughout).
    T = torch.linalg.solve_triangular(
        eye + beta[..., None] * Akk, eye.expand_as(Akk), upper=False, unitriangular=True
    )
    eG = _exp(G)  # reference = the chunk start (Γ_{-1} = 0), where S_c lives: <= 1
    Kg = k * eG
    Gl = G[:, L - 1 : L]  # [H,1,K], Γ of the last VALID row
    fd = _exp(Gl - G)  # exp(Γ_{L-1} - Γ_i) <= 1
    return dict(
        G=G,
        Ed=Ed,
        Aqk=Aqk,
        Akk=Akk,
        T=T,
        Kg=Kg,
        W=T @ (beta[..., None] * Kg),
        U=T @ (beta[..., None] * v),
        Qg=scale * q * eG,
        fd=fd,
        Kd=k * fd,
        gl=_exp(Gl[:, 0]),  # [H,K]
    )


# ---------------------------------------------------------------------------------------------
# Per-chunk gradient (kda_bwd_chunk)
# ---------------------------------------------------------------------------------------------


def _chunk_bwd(q, k, v, beta, scale, ch, S, dS_end, Vn, dVn, dO):  # noqa: ANN001, ANN202
    """All gradients of one chunk that are parallel over chunks. S = S_c (state at the chunk's
    START), dS_end = dS_{c+1} (gradient of the state at its END), Vn / dVn from the state passes.
    Returns dq, dk, dv [H,L,.], dbeta [H,L], dg [H,L,K] (gradient of the activated log gate)."""
    G, Ed, T, Akk, Kg, Kd, Qg, fd, gl = (
        ch[n] for n in ("G", "Ed", "T", "Akk", "Kg", "Kd", "Qg", "fd", "gl")
    )
    L = q.shape[1]
    b = beta[..., None]
    eG = _exp(G)
    St = S.transpose(-1, -2)

    # --- through the state and the triangular solve ----------------------------------------
    Y = T.transpose(-1, -2) @ dVn  # T^T dU (dU = dVn); d(B V) = Y
    dv = b * Y
    dbeta = (v * Y).sum(-1)
    # One GEMM [dO; Y] @ S_c^T in the kernel (2L x V x K): dQg and Z = -T^T dW.
    dQg = dO @ St
    Z = Y @ St
    dKg = -b * Z  # d(Kg) = B T^T dW
    dbeta = dbeta - (Kg * Z).sum(-1)
    # One GEMM [dO; Y] @ Vn^T (2L x V x L): dAqk (incl. diagonal) and -dM (strictly lower).
    P = torch.tril(dO @ Vn.transpose(-1, -2))
    dAqk = P
    dM = -torch.tril(Y @ Vn.transpose(-1, -2), -1)
    dbeta = dbeta + (dM * Akk).sum(-1)
    dAkk = b * dM
    # Through the chunk-end decay: S_{c+1} = Diag(gl) S_c + Kd^T Vn.
    dKd = Vn @ dS_end.transpose(-1, -2)
    dgl = (S * dS_end).sum(-1)  # [H,K]

    # --- q, k --------------------------------------------------------------------------------
    dAqk_off = _no_diag(dAqk)
    dq_off = scale * _row_grad(dAqk_off, k, G, Ed)
    dk_off = scale * _col_grad(dAqk_off, q, G, Ed)
    dd = scale * torch.diagonal(dAqk, dim1=-2, dim2=-1)[..., None]  # s dAqk_ii, [H,L,1]
    dkr = _row_grad(dAkk, k, G, Ed)  # dAkk is strictly lower: Akk has no diagonal, no pair
    dkc = _col_grad(dAkk, k, G, Ed)
    dq = scale * eG * dQg + dq_off + dd * k
    dk = eG * dKg + fd * dKd + dk_off + dd * q + dkr + dkc

    # --- the gate: dΓ per row, then a chunk-local reverse cumsum ---------------------------------
    # A factor exp(Γ_i - Γ_j) puts +x on row i and -x on row j, x = (its operand) ⊙ (its gradient).
    dGam = Qg * dQg + Kg * dKg  # exp(Γ_i - Γ_{-1}): the chunk-start member is outside the chunk
    dGam = dGam + q * dq_off - k * dk_off + k * dkr - k * dkc
    # DIAGONAL PAIR (i = j of Aqk): q_i·(s dAqk_ii k_i) on row i from dq and -k_i·(s dAqk_ii q_i)
    # from dk. They cancel exactly in real arithmetic and are left out here, which is what the
    # kernel must reproduce: the diagonal 16x16 blocks are elementwise fp32 (`_diag_decays`), so the
    # kernel accumulates the j = i term separately from the strict part (dq = dq_off + dd k,
    # dk = dk_off + dd q) and forms dΓ only from dq_off, dk_off. If instead the i = j term ever
    # sits inside an MMA accumulator (TF32 or split-bf16 operands), both members must multiply the
    # SAME rounded operands: dΓ += q~ ⊙ (dA~ k~) - k~ ⊙ (dA~^T q~) with q~, k~, dA~ the values fed to
    # the MMA, rounded once into shared memory. Rounding each member on its own leaves a TF32
    # residue of the largest (undecayed, E_ii = 1) term in every dg (seed 001). bf16 q/k are exact
    # in TF32, so it bites where the operands are fp32 products: with the fused L2 norm at fast
    # decay the residue alone is 4.9e-3 of |dg| (docs/backward-design.md), above FLA's whole error.
    # The chunk-end factor exp(Γ_{L-1} - Γ_i): -x_i on row i and +Σ_i x_i on the LAST VALID row.
    # Its i = L-1 member is the same kind of pair (exp(0)); it is left out of both rows, so the
    # kernel sums rows 0..L-2 only and subtracts on rows 0..L-2 only (same fp32 products both ways).
    x = Kd * dKd
    last = L - 1
    dGam[:, :last] -= x[:, :last]
    dGam[:, last] += x[:, :last].sum(1) + gl * dgl  # gl ⊙ dgl: the chunk decay Diag(exp(Γ_{L-1}))
    dg = dGam.flip(1).cumsum(1).flip(1)  # reverse cumsum, only over the chunk's valid rows
    return dq, dk, dv, dbeta, dg


# ---------------------------------------------------------------------------------------------
# The whole backward
# ---------------------------------------------------------------------------------------------


def _seq_bounds(B: int, T: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(b * T, (b + 1) * T) for b in range(B)]
    if B != 1:
        raise ValueError("with cu_seqlens the batch size must be 1")
    cu = cu_seqlens.tolist()
    return list(zip(cu[:-1], cu[1:], strict=True))


def chunk_kda_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    do: torch.Tensor,
    dht: torch.Tensor | None = None,
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
    chunk_size: int = CHUNK,
    return_intermediates: bool = False,
) -> dict[str, Any]:
    """Forward replay plus explicit chunked backward, float64, argument meanings of FLA's chunk_kda.

    Returns {"o", "ht", "dq", "dk", "dv", "dg", "dbeta"} plus "dA_log"/"ddt_bias" (raw gate, when
    given) and "dh0" (when an initial state was given), with the names and shapes of
    `kda_reference.kda_reference_grads`. "dg" is the gradient of the `g` argument (dx for the raw
    form). With return_intermediates, also "chunks": per chunk the state pair and dVn.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    grp = HV // H
    if scale is None:
        scale = K**-0.5
    dev = q.device

    # ---- elementwise forward pieces (token-major [BT, head, dim]) -------------------------------
    flat = lambda x: x.detach().to(F64).reshape(B * T, *x.shape[2:])  # noqa: E731
    q0, k0, v_, do_ = flat(q), flat(k), flat(v), flat(do)
    if use_qk_l2norm_in_kernel:
        qn, rq = _l2norm_fwd(q0)
        kn, rk = _l2norm_fwd(k0)
    else:
        qn, kn = q0, k0
    b_in = flat(beta)
    bt = torch.sigmoid(b_in) if use_beta_sigmoid_in_kernel else b_in
    if use_gate_in_kernel:
        gx, dg_dz, dg_dA = _gate_fwd(g.detach(), A_log, dt_bias, lower_bound)
        gx, dg_dz, dg_dA = (x.reshape(B * T, HV, K) for x in (gx, dg_dz, dg_dA))
    else:
        gx = flat(g)
    if grp > 1:
        qn_v, kn_v = qn.repeat_interleave(grp, 1), kn.repeat_interleave(grp, 1)
    else:
        qn_v, kn_v = qn, kn

    seqs = _seq_bounds(B, T, cu_seqlens)
    N = len(seqs)
    h0 = None if initial_state is None else initial_state.detach().to(F64)
    o = torch.zeros(B * T, HV, V, dtype=F64, device=dev)
    ht = torch.zeros(N, HV, K, V, dtype=F64, device=dev)
    dq_v = torch.zeros(B * T, HV, K, dtype=F64, device=dev)
    dk_v = torch.zeros_like(dq_v)
    dv = torch.zeros_like(v_)
    dbeta_act = torch.zeros(B * T, HV, dtype=F64, device=dev)
    dgate = torch.zeros(B * T, HV, K, dtype=F64, device=dev)
    dh0 = torch.zeros(N, HV, K, V, dtype=F64, device=dev)
    hm = lambda x, s, e: x[s:e].transpose(0, 1)  # [L, H, .] -> [H, L, .]  # noqa: E731
    record = []

    for n, (s0, s1) in enumerate(seqs):
        starts = list(range(s0, s1, chunk_size))
        spans = [(c, min(c + chunk_size, s1)) for c in starts]
        # kda_fwd_chunk: chunk-parallel
        chs = [
            _chunk_fwd(
                hm(qn_v, a, e), hm(kn_v, a, e), hm(v_, a, e), hm(gx, a, e), hm(bt, a, e), scale
            )
            for a, e in spans
        ]
        # kda_fwd_state: forward over chunks. Keeps S_c (state at each chunk's START) and Vn.
        S = h0[n] if h0 is not None else torch.zeros(HV, K, V, dtype=F64, device=dev)
        S_start, Vns = [], []
        for (a, e), ch in zip(spans, chs, strict=True):
            S_start.append(S)
            Vn = ch["U"] - ch["W"] @ S
            Vns.append(Vn)
            o[a:e] = (ch["Qg"] @ S + ch["Aqk"] @ Vn).transpose(0, 1)
            S = ch["gl"][..., None] * S + ch["Kd"].transpose(-1, -2) @ Vn
        ht[n] = S
        # kda_bwd_state: REVERSE over chunks, dS starts at dht. dS_end[c] = dS_{c+1} is the
        # gradient of chunk c's END state; it is what bwd_chunk pairs with S_start[c].
        dS = (
            dht[n].detach().to(F64)
            if dht is not None
            else torch.zeros(HV, K, V, dtype=F64, device=dev)
        )
        dS_end: list[torch.Tensor] = [None] * len(spans)  # type: ignore[list-item]
        dVns: list[torch.Tensor] = [None] * len(spans)  # type: ignore[list-item]
        for c in reversed(range(len(spans))):
            a, e = spans[c]
            ch, dO = chs[c], hm(do_, a, e)
            dS_end[c] = dS
            # Aqk^T dO does not depend on dS: the kernel computes it off the chain (prefetch stage).
            dVn = ch["Aqk"].transpose(-1, -2) @ dO + ch["Kd"] @ dS
            dVns[c] = dVn
            dS = (
                ch["gl"][..., None] * dS
                + ch["Qg"].transpose(-1, -2) @ dO
                - ch["W"].transpose(-1, -2) @ dVn
            )
        dh0[n] = dS
        # kda_bwd_chunk: chunk-parallel
        for c, (a, e) in enumerate(spans):
            dq_c, dk_c, dv_c, db_c, dg_c = _chunk_bwd(
                hm(qn_v, a, e), hm(kn_v, a, e), hm(v_, a, e), hm(bt, a, e), scale,
                chs[c], S_start[c], dS_end[c], Vns[c], dVns[c], hm(do_, a, e),
            )  # fmt: skip
            dq_v[a:e], dk_v[a:e], dv[a:e] = (
                dq_c.transpose(0, 1),
                dk_c.transpose(0, 1),
                dv_c.transpose(0, 1),
            )
            dbeta_act[a:e], dgate[a:e] = db_c.transpose(0, 1), dg_c.transpose(0, 1)
            if return_intermediates:
                record.append(
                    dict(seq=n, span=(a, e), S=S_start[c], dS_end=dS_end[c], dVn=dVns[c], Vn=Vns[c])
                )

    # ---- epilogue: grouped heads, L2 norm, beta sigmoid, raw gate ------------------------------
    if grp > 1:
        dq_n = dq_v.reshape(B * T, H, grp, K).sum(2)
        dk_n = dk_v.reshape(B * T, H, grp, K).sum(2)
    else:
        dq_n, dk_n = dq_v, dk_v
    if use_qk_l2norm_in_kernel:
        dq_n = _l2norm_bwd(qn, rq, dq_n)
        dk_n = _l2norm_bwd(kn, rk, dk_n)
    dbeta = dbeta_act * bt * (1.0 - bt) if use_beta_sigmoid_in_kernel else dbeta_act
    shape4 = lambda x: x.reshape(B, T, *x.shape[1:])  # noqa: E731
    res: dict[str, Any] = dict(
        o=shape4(o), ht=ht, dq=shape4(dq_n), dk=shape4(dk_n), dv=shape4(dv), dbeta=shape4(dbeta)
    )
    if use_gate_in_kernel:
        dz = dgate * dg_dz
        res["dg"] = shape4(dz)
        # Deterministic reduction, as the kernels do it: one partial per (chunk, head) written by the
        # chunk gradient kernel (rows summed in row order), then one pass that adds the partials of
        # each head in chunk order. No atomics anywhere.
        parts_A, parts_b = [], []
        for s0, s1 in seqs:
            for a in range(s0, s1, chunk_size):
                e = min(a + chunk_size, s1)
                parts_b.append(dz[a:e].sum(0))  # [HV, K]
                parts_A.append((dgate[a:e] * dg_dA[a:e]).sum((0, 2)))  # [HV]
        if A_log is not None:
            acc = torch.zeros(HV, dtype=F64, device=dev)
            for p in parts_A:
                acc = acc + p
            res["dA_log"] = acc
        if dt_bias is not None:
            acc = torch.zeros(HV, K, dtype=F64, device=dev)
            for p in parts_b:
                acc = acc + p
            res["ddt_bias"] = acc.reshape(HV * K)
    else:
        res["dg"] = shape4(dgate)
    if initial_state is not None:
        res["dh0"] = dh0
    if return_intermediates:
        res["chunks"] = record
    return res


def chunk_kda_bwd_from_inputs(
    inputs: Any, do: torch.Tensor, dht: torch.Tensor | None = None
) -> dict[str, Any]:
    """`chunk_kda_bwd` with a KDAInputs (tests/kda_inputs.py) or a kwargs mapping."""
    kw = dict(inputs.as_kwargs() if hasattr(inputs, "as_kwargs") else inputs)
    q, k, v, g, beta = (kw.pop(n) for n in ("q", "k", "v", "g", "beta"))
    kw = {n: x for n, x in kw.items() if n not in ("output_final_state",)}
    return chunk_kda_bwd(q, k, v, g, beta, do, dht, **kw)
