"""Segment-parallel ("intracard context-parallel", CP) KDA state passes, written out in PyTorch.

The blueprint of the kda_cp programs (docs/cp-design.md). Only the two CHAINED stages of the KDA
pipeline change under CP: the forward state pass (kda_fwd_state) and the reverse state pass
(kda_bwd_state). The chunk-parallel stages (fwd_chunk, bwd_chunk) are unchanged; here they are the
float64 functions of tests/kda_chunk_bwd.py (`_chunk_fwd`, `_chunk_bwd`), reused as they are.

Per chunk c (docs/kda.md "Chunk form"), with S_c the state at the chunk's start:

    Vn_c    = U_c - W_c S_c
    O_c     = Qg_c S_c + Aqk_c Vn_c
    S_{c+1} = Diag(gl_c) S_c + Kd_c^T Vn_c  =  A_c S_c + Kd_c^T U_c,   A_c = Diag(gl_c) - Kd_c^T W_c

Forward CP, per long sequence split into P segments of consecutive chunks (`segment_bounds`):

  pass 1 (local)   every segment p, in parallel: the chain above from S = 0 with an AUGMENTED state
                   [S | M] of width V + K started at [0 | I] and U_aug = [U | 0]. The first V columns
                   end at B_p (the segment's end state from a zero start), the last K columns at
                   M_p = A_last ... A_first (the segment's K x K transition). No O. This is the same
                   arithmetic as the serial pass: the transition is composed through the low-rank
                   form M <- gl M - Kd^T (W M), 2 x (64 x 128 x 128) MACs per chunk, never by
                   forming A_c (see docs/cp-design.md for the cost comparison).
  combine          X_0 = h0 (or 0); X_{p+1} = M_p X_p + B_p, p = 0..P-2, in this fixed order.
  pass 3 (fix-up)  every segment, in parallel: the SERIAL pass (with O and the per-chunk states)
                   from its true start X_p. This is kda_fwd_state unchanged, run with a segment table
                   as its sequence table and X as its h0.

Backward CP (dS_c = A_c^T dS_{c+1} + Qg_c^T dO_c - W_c^T Aqk_c^T dO_c):

  pass 1 (local)   every segment from dS = 0 at its end, reverse over its chunks: dB_p = gradient at
                   the segment's start. The transposed transition is M_p^T from the FORWARD pass 1
                   (exact in real arithmetic; `bwd_transition="compose"` composes it again in the
                   backward instead, for comparison).
  combine          Y_P = dht (or 0); Y_p = M_p^T Y_{p+1} + dB_p, p = P-1..1 (fixed reverse order);
                   Y_{p+1} is the gradient of the state at segment p's END.
  pass 3 (fix-up)  every segment: the serial reverse pass (kda_bwd_state unchanged) from Y_{p+1};
                   per chunk dS_{c+1} and dVn; segment 0's start gradient is dh0.

P = 1 is exactly the serial path (pass 1 and the combine are skipped): same operations, same bits.

Precision (`Precision`): `dtype` float64 (exact; CP == serial to ~1e-15) or float32 (the kernels'
fp32 state and accumulators). `operands` rounds every product operand like the kernels' mma.sync:
"tf32" = cvt.rna.tf32.f32 (round to nearest, ties away from zero, 13 low mantissa bits dropped);
"none" = plain fp32 products; "bf16" = bf16 operands. The per-chunk inputs (W, Qg, Kd, Aqk) are
rounded as kda_fwd_chunk stores them (TF32 under "tf32"), U and gl stay fp32, the chained state is
rounded only where it is an operand (S^T staged as TF32, Vn staged as TF32), exactly as
kda_fwd_state / kda_bwd_state do. `local_operands` overrides the rounding of pass 1 only; "bf16"
there reproduces the 000 seed's bug (transforms formed through a bf16 local recurrence).
`combine` picks the combine's operand rounding: "tf32" (mma.sync), "fp32" (FFMA), or "3xtf32"
(split hi/lo operands, three TF32 products).

What is NOT emulated: the rounding inside kda_fwd_chunk / kda_bwd_chunk (they are computed in float64
here and the chunk outputs rounded once to what the kernels store), and mma's internal accumulation
order. Both are common to the serial and the CP paths; the CP-specific error lives in the state
passes and the combine, which are emulated operand by operand.

Layouts as in tests/kda_reference.py: q, k [B,T,H,K], v [B,T,HV,V], g [B,T,HV,K] (activated log decay,
g form only), beta [B,T,HV], states [N,HV,K,V]; cu_seqlens (B = 1) for varlen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from kda_chunk_bwd import _chunk_bwd, _chunk_fwd, _seq_bounds

F64 = torch.float64
F32 = torch.float32
CHUNK = 64


# ---------------------------------------------------------------------------------------------
# Operand rounding
# ---------------------------------------------------------------------------------------------


def tf32_rna(x: torch.Tensor) -> torch.Tensor:
    """cvt.rna.tf32.f32 on a float32 tensor: keep 10 explicit mantissa bits, round to nearest with
    ties away from zero (add half an ulp of the kept part to the magnitude, then truncate). The
    result is a float32 whose low 13 bits are zero. Finite inputs only (no inf/NaN in the passes)."""
    if x.dtype != F32:
        raise TypeError(f"tf32_rna wants float32, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    bits = (bits + 0x1000) & ~0x1FFF  # sign-magnitude: +half ulp on the magnitude = ties away
    return bits.view(F32)


def _rounder(mode: str, dtype: torch.dtype):  # noqa: ANN202
    if mode == "none":
        return lambda x: x
    if dtype != F32:
        raise ValueError(f"operand rounding {mode!r} needs dtype float32, got {dtype}")
    if mode == "tf32":
        return tf32_rna
    if mode == "bf16":
        return lambda x: x.to(torch.bfloat16).to(F32)
    raise ValueError(f"operands must be 'none', 'tf32' or 'bf16', got {mode!r}")


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype = F64
    operands: str = "none"  # passes 1 and 3 (and the chunk outputs the kernels store rounded)
    local_operands: str | None = None  # pass 1 only; None = `operands`
    combine: str = "3xtf32"  # "tf32" | "fp32" | "3xtf32" | "diag_tf32"; exact for float64

    @property
    def rnd(self):  # noqa: ANN201
        return _rounder(self.operands, self.dtype)

    @property
    def rnd_local(self):  # noqa: ANN201
        return _rounder(self.local_operands or self.operands, self.dtype)

    def combine_mm(
        self, M: torch.Tensor, X: torch.Tensor, d: torch.Tensor | None = None
    ) -> torch.Tensor:
        """M @ X as the combine kernel forms it (fp32 accumulation). d: the segment's diagonal
        decay Π gl (K), used by "diag_tf32": M X = d ⊙ X (fp32, exact part) + (M - Diag(d)) X
        (TF32). Measured (tests/test_kda_cp_ref.py, docs/cp-design.md): plain "tf32" grows the
        error with P on near-non-contracting transitions (anisotropic keys: the rounding of X is
        not damped); "diag_tf32" fixes that but fails on contracting ones (isotropic keys:
        M - Diag(d) is much larger than M); "3xtf32" and "fp32" are at the serial level on both,
        and the combine is only P steps, so the plan uses 3xTF32."""
        if self.dtype == F64 or self.combine == "fp32":
            return M @ X
        if self.combine == "tf32":
            return tf32_rna(M) @ tf32_rna(X)
        if self.combine == "3xtf32":
            ah, bh = tf32_rna(M), tf32_rna(X)
            al, bl = tf32_rna(M - ah), tf32_rna(X - bh)
            return ah @ bl + al @ bh + ah @ bh
        if self.combine == "diag_tf32":
            R = M - torch.diag_embed(d)
            return d[..., None] * X + tf32_rna(R) @ tf32_rna(X)
        raise ValueError(
            f"combine must be 'tf32', 'fp32', '3xtf32' or 'diag_tf32', got {self.combine!r}"
        )


FP64 = Precision()
KERNEL = Precision(F32, "tf32", None, "3xtf32")  # what the kda_cp programs are planned to do


# ---------------------------------------------------------------------------------------------
# Segments and the automatic choice of P
# ---------------------------------------------------------------------------------------------


def segment_bounds(n_chunks: int, P: int) -> list[tuple[int, int]]:
    """Chunk ranges [c0, c1) of min(P, n_chunks) balanced non-empty segments (sizes differ by <= 1;
    the longer ones first). A sequence shorter than P chunks gets one segment per chunk; an empty
    sequence gets none."""
    if P < 1:
        raise ValueError(f"P must be >= 1, got {P}")
    p = min(P, n_chunks)
    if p == 0:
        return []
    base, extra = divmod(n_chunks, p)
    out, c = [], 0
    for i in range(p):
        n = base + (1 if i < extra else 0)
        out.append((c, c + n))
        c += n
    return out


SMS = 132  # H200
MIN_SEG_CHUNKS = 8  # below this, the combine and launch overheads outweigh the shorter chain
MAX_P = 64


def auto_segments(lengths: list[int], heads: int, sms: int = SMS) -> list[int]:
    """P per sequence (the rule docs/cp-design.md derives). Only sequences long enough to have
    >= 2 segments of >= MIN_SEG_CHUNKS chunks are split; the fix-up pass (2 blocks of 64 value
    columns per (segment, head)) should fill the SMs in one wave together with the unsplit
    sequences: P_long = floor((sms - 2 H n_short) / (2 H n_long)), clamped to [1, MAX_P] and to
    n_chunks // MIN_SEG_CHUNKS. Deterministic in (lengths, heads, sms)."""
    nch = [math.ceil(n / CHUNK) for n in lengths]
    long = [i for i, c in enumerate(nch) if c >= 2 * MIN_SEG_CHUNKS]
    if not long:
        return [1] * len(lengths)
    n_short = len(lengths) - len(long)
    free = sms - 2 * heads * n_short
    p_all = max(1, free // (2 * heads * len(long)))
    out = [1] * len(lengths)
    for i in long:
        out[i] = max(1, min(p_all, MAX_P, nch[i] // MIN_SEG_CHUNKS))
    return out


# ---------------------------------------------------------------------------------------------
# Per-chunk quantities (kda_fwd_chunk's outputs), from kda_chunk_bwd._chunk_fwd
# ---------------------------------------------------------------------------------------------


@dataclass
class SeqChunks:
    """One sequence's chunk quantities. `groups`: (first chunk, number of chunks, L, inputs, ch),
    one group for the full chunks (batched: chunk x head flattened into _chunk_fwd's head dim) and
    one for a short last chunk. `st`: the state-pass operands stacked over chunks, zero-padded to
    64 rows (exact: padded rows of W, U, Qg, Aqk and columns of Kd^T are zero), float64:
    W, U, Qg [nc,H,64,K|V], KdT [nc,H,K,64], Kd [nc,H,64,K], Aqk [nc,H,64,64], gl [nc,H,K]."""

    t0: int
    t1: int
    n_chunks: int
    groups: list[tuple[int, int, int, dict, dict]] = field(default_factory=list)
    st: dict[str, torch.Tensor] = field(default_factory=dict)


def _seq_chunks(q, k, v, g, beta, scale, t0, t1) -> SeqChunks:  # noqa: ANN001
    """q, k, v, g: [T, HV, .] float64 (q, k already repeated to HV), beta [T, HV]."""
    HV, K, V = q.shape[1], q.shape[2], v.shape[2]
    L_all = t1 - t0
    nc = math.ceil(L_all / CHUNK)
    sc = SeqChunks(t0, t1, nc)
    nfull = L_all // CHUNK
    parts = []
    if nfull:
        parts.append((0, nfull, CHUNK))
    if L_all % CHUNK:
        parts.append((nfull, 1, L_all % CHUNK))
    for c0, n, L in parts:
        a, e = t0 + c0 * CHUNK, t0 + c0 * CHUNK + n * L

        def bat(x, a=a, e=e, n=n, L=L):  # [T, HV, d] -> [n*HV, L, d]
            y = x[a:e].reshape(n, L, HV, *x.shape[2:])
            return y.movedim(2, 1).reshape(n * HV, L, *x.shape[2:])

        inp = dict(q=bat(q), k=bat(k), v=bat(v), g=bat(g), beta=bat(beta[..., None])[..., 0])
        ch = _chunk_fwd(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], scale)
        sc.groups.append((c0, n, L, inp, ch))
    z = lambda *s: torch.zeros(nc, HV, *s, dtype=F64)  # noqa: E731
    st = dict(
        W=z(CHUNK, K), U=z(CHUNK, V), Qg=z(CHUNK, K), Kd=z(CHUNK, K), Aqk=z(CHUNK, CHUNK), gl=z(K)
    )
    for c0, n, L, _inp, ch in sc.groups:
        un = lambda x, n=n: x.reshape(n, HV, *x.shape[1:])  # noqa: E731
        for name in ("W", "U", "Qg", "Kd"):
            st[name][c0 : c0 + n, :, :L] = un(ch[name])
        st["Aqk"][c0 : c0 + n, :, :L, :L] = un(ch["Aqk"])
        st["gl"][c0 : c0 + n] = un(ch["gl"])
    st["KdT"] = st["Kd"].transpose(-1, -2)
    sc.st = st
    return sc


def _stored(st: dict[str, torch.Tensor], prec: Precision) -> dict[str, torch.Tensor]:
    """The chunk outputs as the state passes read them: W, Qg, Kd, Aqk rounded as kda_fwd_chunk
    stores them (TF32 under operands="tf32"), U and gl in the working dtype."""
    out = {}
    for name, x in st.items():
        x = x.to(prec.dtype)
        if name in ("W", "Qg", "Kd", "KdT", "Aqk") and prec.operands != "none":
            x = prec.rnd(x)
        out[name] = x
    return out


# ---------------------------------------------------------------------------------------------
# The chained passes, vectorised over segments (each segment is an independent chain)
# ---------------------------------------------------------------------------------------------


def _lockstep(segs: list[tuple[int, int]], reverse: bool):  # noqa: ANN202
    """(local step j, active segment ids, chunk ids): every segment advances one chunk per step."""
    nmax = max((c1 - c0 for c0, c1 in segs), default=0)
    for j in range(nmax):
        act = [i for i, (c0, c1) in enumerate(segs) if j < c1 - c0]
        ids = [(segs[i][1] - 1 - j) if reverse else (segs[i][0] + j) for i in act]
        yield j, torch.tensor(act), torch.tensor(ids)


def fwd_pass(
    st: dict[str, torch.Tensor],
    segs: list[tuple[int, int]],
    X: torch.Tensor,
    rnd,  # noqa: ANN001
    *,
    U: torch.Tensor | None = None,
    want_o: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """kda_fwd_state over the chunk ranges `segs`, each from its start state X[i] ([nseg,H,K,Vx]).
    Returns (end states [nseg,H,K,Vx], O [nc,H,64,Vx] or None, states at each chunk's start
    [nc,H,K,Vx] or None). `U` overrides st["U"] (the augmented pass passes [U | 0])."""
    U = st["U"] if U is None else U
    S = X.clone()
    nc = st["W"].shape[0]
    Oc = X.new_zeros(nc, X.shape[1], CHUNK, X.shape[-1]) if want_o else None
    states = X.new_zeros(nc, *X.shape[1:]) if want_o else None
    for _j, act, ids in _lockstep(segs, reverse=False):
        Sa = S[act]
        if states is not None:
            states[ids] = Sa
        Sop = rnd(Sa)  # S^T staged as TF32
        Vn = U[ids] - st["W"][ids] @ Sop
        Vop = rnd(Vn)  # Vnew^T staged as TF32
        if Oc is not None:
            Oc[ids] = st["Qg"][ids] @ Sop + st["Aqk"][ids] @ Vop
        S[act] = st["gl"][ids][..., None] * Sa + st["KdT"][ids] @ Vop
    return S, Oc, states


def bwd_pass(
    st: dict[str, torch.Tensor],
    segs: list[tuple[int, int]],
    Y: torch.Tensor,
    dO: torch.Tensor,
    rnd,  # noqa: ANN001
    *,
    want_chunks: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """kda_bwd_state over `segs`, each from the gradient Y[i] of its END state, reverse over its
    chunks. dO [nc,H,64,Vx] (zero rows past L; zero columns for augmented identity columns).
    Returns (gradients at the segment starts, dS_end [nc,...] (dS_{c+1} per chunk), dVn [nc,...])."""
    dS = Y.clone()
    nc = st["W"].shape[0]
    dS_end = Y.new_zeros(nc, *Y.shape[1:]) if want_chunks else None
    dVn_all = Y.new_zeros(nc, Y.shape[1], CHUNK, Y.shape[-1]) if want_chunks else None
    for _j, act, ids in _lockstep(segs, reverse=True):
        d = dS[act]
        if dS_end is not None:
            dS_end[ids] = d
        Aqk, Kd, Qg, W, gl = (st[n][ids] for n in ("Aqk", "Kd", "Qg", "W", "gl"))
        dO_c = dO[ids]
        dVn = Aqk.transpose(-1, -2) @ dO_c + Kd @ rnd(d)  # dS rounded only as the B operand
        if dVn_all is not None:
            dVn_all[ids] = dVn  # global copy unrounded
        dS[act] = gl[..., None] * d + Qg.transpose(-1, -2) @ dO_c - W.transpose(-1, -2) @ rnd(dVn)
    return dS, dS_end, dVn_all


# ---------------------------------------------------------------------------------------------
# CP forward and backward for one sequence
# ---------------------------------------------------------------------------------------------


def cp_forward_seq(st, P: int, h0: torch.Tensor | None, prec: Precision) -> dict[str, Any]:  # noqa: ANN001
    """st: `_stored` operands of one sequence. Returns o [nc,H,64,V], states (S_c per chunk),
    ht, and the CP pieces: segs, B [p,H,K,V], M [p,H,K,K] (transitions), X [p,H,K,V] (true starts)."""
    nc, H, _, K = st["W"].shape
    V = st["U"].shape[-1]
    dt = prec.dtype
    segs = segment_bounds(nc, P)
    x0 = h0.to(dt) if h0 is not None else torch.zeros(H, K, V, dtype=dt)
    out: dict[str, Any] = dict(segs=segs)
    if len(segs) <= 1:  # serial: no transition, no combine
        X = x0[None].clone()
        out.update(B=None, M=None, D=None)
    else:
        p = len(segs)
        # pass 1: augmented [S | M] from [0 | I], U_aug = [U | 0], no O
        X1 = torch.zeros(p, H, K, V + K, dtype=dt)
        X1[..., V:] = torch.eye(K, dtype=dt)
        U_aug = torch.cat([st["U"], torch.zeros(nc, H, CHUNK, K, dtype=dt)], -1)
        E, _, _ = fwd_pass(st, segs, X1, prec.rnd_local, U=U_aug, want_o=False)
        B, M = E[..., :V], E[..., V:]
        # the diagonal part of each transition, Π gl in chunk order (fp32 products, K per head)
        D = torch.ones(p, H, K, dtype=dt)
        for i, (c0, c1) in enumerate(segs):
            for c in range(c0, c1):
                D[i] = D[i] * st["gl"][c]
        # combine: fixed order
        X = torch.empty(p, H, K, V, dtype=dt)
        X[0] = x0
        for i in range(p - 1):
            X[i + 1] = prec.combine_mm(M[i], X[i], D[i]) + B[i]
        out.update(B=B, M=M, D=D)
    # pass 3: the serial pass over each segment from its true start
    S_end, Oc, states = fwd_pass(st, segs, X, prec.rnd, want_o=True)
    out.update(X=X, o=Oc, states=states, ht=S_end[-1] if segs else x0)
    return out


def cp_backward_seq(
    st,
    fwd: dict[str, Any],
    dO: torch.Tensor,
    dht: torch.Tensor | None,
    prec: Precision,
    bwd_transition: str = "forward",
) -> dict[str, Any]:  # noqa: ANN001
    """Reverse passes for one sequence with the forward's segments. dO [nc,H,64,V] (working dtype).
    Returns dS_end, dVn per chunk, dh0, and the CP pieces dB [p,...], Y [p+1,...] (Y[i] = gradient
    of segment i's START state for i < p, Y[p] = dht), MT (transposed transitions used)."""
    nc, H, _, K = st["W"].shape
    V = st["U"].shape[-1]
    dt = prec.dtype
    segs = fwd["segs"]
    p = len(segs)
    yP = dht.to(dt) if dht is not None else torch.zeros(H, K, V, dtype=dt)
    out: dict[str, Any] = {}
    Y = torch.zeros(p + 1, H, K, V, dtype=dt)
    Y[p] = yP
    if p <= 1:
        out.update(dB=None, MT=None)
    else:
        if bwd_transition == "forward":
            Yl = torch.zeros(p, H, K, V, dtype=dt)
            dB, _, _ = bwd_pass(st, segs, Yl, dO, prec.rnd_local, want_chunks=False)
            MT = fwd["M"].transpose(-1, -2)
        elif bwd_transition == "compose":
            Yl = torch.zeros(p, H, K, V + K, dtype=dt)
            Yl[..., V:] = torch.eye(K, dtype=dt)
            dO_aug = torch.cat([dO, torch.zeros(nc, H, CHUNK, K, dtype=dt)], -1)
            E, _, _ = bwd_pass(st, segs, Yl, dO_aug, prec.rnd_local, want_chunks=False)
            dB, MT = E[..., :V], E[..., V:]
        else:
            raise ValueError(
                f"bwd_transition must be 'forward' or 'compose', got {bwd_transition!r}"
            )
        for i in range(p - 1, 0, -1):  # fixed reverse order; Y[0] comes from pass 3
            Y[i] = prec.combine_mm(MT[i], Y[i + 1], fwd["D"][i]) + dB[i]
        out.update(dB=dB, MT=MT)
    starts, dS_end, dVn = bwd_pass(st, segs, Y[1:], dO, prec.rnd, want_chunks=True)
    if p:
        Y[0] = starts[0]
    out.update(Y=Y, dS_end=dS_end, dVn=dVn, dh0=Y[0] if p else yP)
    return out


# ---------------------------------------------------------------------------------------------
# The whole call: forward, optional backward, gradients through kda_chunk_bwd._chunk_bwd
# ---------------------------------------------------------------------------------------------


def cp_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    do: torch.Tensor | None = None,
    dht: torch.Tensor | None = None,
    P: int | list[int] | None = 1,
    prec: Precision = FP64,
    bwd_transition: str = "forward",
    chunks: list[SeqChunks] | None = None,
) -> dict[str, Any]:
    """KDA (g form: g is the activated log decay) with segment-parallel state passes.

    P: an int for every sequence, a list (one per sequence), or None for `auto_segments`.
    Returns {"o", "ht"} (+ {"dq","dk","dv","dg","dbeta"} and "dh0" when an initial state was
    given, if `do` is given), in the layouts of kda_reference_grads, as float64 tensors holding the
    working-precision values; plus "seqs": per sequence the forward / backward CP pieces. `chunks`
    (from `chunk_quantities`) skips recomputing the per-chunk float64 quantities.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    grp = HV // H
    if scale is None:
        scale = K**-0.5
    flat = lambda x: x.detach().to(F64).reshape(B * T, *x.shape[2:])  # noqa: E731
    seqs = _seq_bounds(B, T, cu_seqlens)
    if chunks is None:
        chunks = chunk_quantities(q, k, v, g, beta, scale=scale, cu_seqlens=cu_seqlens)
    if P is None:
        Ps = auto_segments([b - a for a, b in seqs], HV)
    elif isinstance(P, int):
        Ps = [P] * len(seqs)
    else:
        Ps = list(P)
    dt = prec.dtype
    o = torch.zeros(B * T, HV, V, dtype=F64)
    ht = torch.zeros(len(seqs), HV, K, V, dtype=F64)
    want_bwd = do is not None
    if want_bwd:
        dof = flat(do)
        dq = torch.zeros(B * T, HV, K, dtype=F64)
        dk, dg = torch.zeros_like(dq), torch.zeros_like(dq)
        dv = torch.zeros(B * T, HV, V, dtype=F64)
        dbeta = torch.zeros(B * T, HV, dtype=F64)
        dh0 = torch.zeros(len(seqs), HV, K, V, dtype=F64)
    info = []
    for n, sc in enumerate(chunks):
        st = _stored(sc.st, prec)
        h0 = None if initial_state is None else initial_state[n].detach().to(F64)
        fw = cp_forward_seq(st, Ps[n], h0, prec)
        ht[n] = fw["ht"].to(F64)
        rec: dict[str, Any] = dict(P=Ps[n], fwd=fw)
        L_all = sc.t1 - sc.t0
        if sc.n_chunks:
            On = fw["o"].movedim(1, 2).reshape(sc.n_chunks * CHUNK, HV, V)[:L_all]
            o[sc.t0 : sc.t1] = On.to(F64)
        if want_bwd:
            dOc = torch.zeros(sc.n_chunks * CHUNK, HV, V, dtype=F64)
            dOc[:L_all] = dof[sc.t0 : sc.t1]
            dOc = dOc.reshape(sc.n_chunks, CHUNK, HV, V).movedim(2, 1).to(dt)
            dhn = None if dht is None else dht[n]
            bw = cp_backward_seq(st, fw, dOc, dhn, prec, bwd_transition)
            rec["bwd"] = bw
            dh0[n] = bw["dh0"].to(F64)
            # kda_bwd_chunk, unchanged: float64, fed the pass-3 states (S_c, dS_{c+1}, dVn)
            for c0, nb, L, inp, ch in sc.groups:
                sel = lambda x, c0=c0, nb=nb: x[c0 : c0 + nb].to(F64).reshape(nb * HV, *x.shape[2:])  # noqa: E731
                S_c, dS_e = sel(fw["states"]), sel(bw["dS_end"])
                dVn = sel(bw["dVn"])[:, :L]
                dO_g = sel(dOc)[:, :L]
                Vn = ch["U"] - ch["W"] @ S_c  # kda_bwd_chunk recomputes Vn from S_c
                dq_c, dk_c, dv_c, db_c, dg_c = _chunk_bwd(
                    inp["q"], inp["k"], inp["v"], inp["beta"], scale, ch, S_c, dS_e, Vn, dVn, dO_g
                )
                a = sc.t0 + c0 * CHUNK
                e = a + nb * L

                def back(x, nb=nb, L=L):  # noqa: ANN001, ANN202
                    y = x.reshape(nb, HV, L, *x.shape[2:]).movedim(1, 2)
                    return y.reshape(nb * L, HV, *x.shape[2:])

                dq[a:e], dk[a:e], dv[a:e], dg[a:e] = back(dq_c), back(dk_c), back(dv_c), back(dg_c)
                dbeta[a:e] = back(db_c[..., None])[..., 0]
        info.append(rec)
    shape4 = lambda x: x.reshape(B, T, *x.shape[1:])  # noqa: E731
    res: dict[str, Any] = dict(o=shape4(o), ht=ht, seqs=info)
    if want_bwd:
        if grp > 1:
            dq = dq.reshape(B * T, H, grp, K).sum(2)
            dk = dk.reshape(B * T, H, grp, K).sum(2)
        res.update(dq=shape4(dq), dk=shape4(dk), dv=shape4(dv), dg=shape4(dg), dbeta=shape4(dbeta))
        if initial_state is not None:
            res["dh0"] = dh0
    return res


def chunk_quantities(q, k, v, g, beta, *, scale=None, cu_seqlens=None) -> list[SeqChunks]:  # noqa: ANN001
    """Per-sequence chunk quantities (float64), reusable across cp_kda calls with different P or
    precision on the same inputs."""
    B, T, H, K = q.shape
    HV = v.shape[2]
    grp = HV // H
    if scale is None:
        scale = K**-0.5
    flat = lambda x: x.detach().to(F64).reshape(B * T, *x.shape[2:])  # noqa: E731
    qf, kf, vf, gf, bf = flat(q), flat(k), flat(v), flat(g), flat(beta)
    if grp > 1:
        qf, kf = qf.repeat_interleave(grp, 1), kf.repeat_interleave(grp, 1)
    return [_seq_chunks(qf, kf, vf, gf, bf, scale, a, e) for a, e in _seq_bounds(B, T, cu_seqlens)]


# ---------------------------------------------------------------------------------------------
# Error metrics per window
# ---------------------------------------------------------------------------------------------


def window_errors(out: torch.Tensor, ref: torch.Tensor, window: int) -> list[list[float]]:
    """Per-head relative L2 per token window of a [1,T,H,...] tensor: [window][head]."""
    T = ref.shape[1]
    res = []
    for a in range(0, T, window):
        o, r = out[:, a : a + window].to(F64), ref[:, a : a + window].to(F64)
        row = []
        for h in range(ref.shape[2]):
            den = r[:, :, h].norm().item()
            row.append((o[:, :, h] - r[:, :, h]).norm().item() / den if den else 0.0)
        res.append(row)
    return res


# ---------------------------------------------------------------------------------------------
# Cost model (docs/cp-design.md): FLOPs, bytes and a block-time model of the state passes
# ---------------------------------------------------------------------------------------------


def cp_cost(
    T: int,
    H: int,
    P: int,
    *,
    t_fwd=5.4,
    t_loc=4.5,
    t_bwd=6.0,
    t_bloc=5.5,
    t_comb=1.0,
    sms: int = SMS,
    bpsm: int = 1,
) -> dict[str, float]:
    """Wall-time model (microseconds) of the state passes of ONE sequence of T tokens on H heads.

    t_*: microseconds per chunk per block of 64 value columns (t_fwd measured: kda_fwd_state 5.4 us
    per chunk on the H200; the others are estimates: t_loc = forward chain without O, t_bwd =
    kda_bwd_state, t_bloc = bwd_state without per-chunk stores). A pass with nb blocks of n chunks
    takes ceil(nb / (sms * bpsm)) * n * t. Combine: P steps of t_comb each (one K x K x V product).
    """
    nc = math.ceil(T / CHUNK)
    if P <= 1:
        return dict(fwd=nc * t_fwd, bwd=nc * t_bwd)
    n = math.ceil(nc / P)
    slots = sms * bpsm
    wv = lambda nb: math.ceil(nb / slots)  # noqa: E731
    fwd = wv(4 * H * P) * n * t_loc + P * t_comb + wv(2 * H * P) * n * t_fwd
    bwd = wv(2 * H * P) * n * t_bloc + P * t_comb + wv(2 * H * P) * n * t_bwd
    return dict(fwd=fwd, bwd=bwd)
