"""kda_bwd_chunk phase 6 (the intra-chunk terms of dAqk and dAkk) in two forms, with the kernel's
roundings emulated, against the float64 twin (tests/kda_chunk_bwd.py): the numerics of the
block-reference form sized in docs/bwd-chunk-structure.md (session 53; not built: it moves the
per-block-pair elementwise work instead of removing it), and a model of today's form to compare
any later form of phase 6 against.

  current  as kda_bwd_chunk computes today: row terms of row block I against source blocks J < I
           with I's first row as reference (B = k_J e^(G_r - G_J), formed per output block),
           column terms of block J against I > J with J's last row as reference, the diagonal
           block with the start reference for rows and the end reference for columns;
  blockref one reference per SOURCE block, so each gated B tile is formed once and each product
           runs over all rows: row terms B_J = k_J e^(G_eJ - G_J) (eJ = J's last row), output
           factor e^(G_i - G_eJ); column terms B_I = a_I e^(G_I - G_sI) (sI = I's first row),
           output factor e^(G_sI - G_j). Rows the block cannot reach are selected out (their
           factor may overflow; their product is zero).

Both take dA as one TF32 value and every B as TF32 hi + lo (products summed in float32 per source
block), factors and formation in float32, as the kernel does. A diagonal block whose decay span
(log2) reaches KFAST_SPAN in a column runs exactly (float64) in both forms, as the kernel's
elementwise fallback. The table: relative L2 error against float64 of the row terms (dq's),
the column terms (dk's) and the reverse cumsum of the dGamma terms (dg's, where the row and
column members of each pair cancel), per gate regime.

  python tools/phase6_model.py [--heads 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kda_chunk_bwd import _col_grad, _diag_decays, _no_diag, _row_grad  # noqa: E402

F64, F32 = torch.float64, torch.float32
BLOCK = 16
KFAST_SPAN = 96.0  # log2 units: kda_bwd_chunk's kFastSpan
LN2 = math.log(2.0)


def tf32(x: torch.Tensor) -> torch.Tensor:
    """x (float32) rounded to TF32 (10 explicit mantissa bits, to nearest even), as cvt.rn."""
    b = x.to(F32).contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    lsb = (b >> 13) & 1
    r = ((b + 0x0FFF + lsb) & ~0x1FFF) & 0xFFFFFFFF
    r = torch.where(r >= 2**31, r - 2**32, r)
    return r.to(torch.int32).view(F32)


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hi = tf32(x)
    return hi, tf32(x.to(F32) - hi)


def product(dA: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """dA (one TF32 value) times B (hi + lo), each product exact, summed in float32."""
    hi, lo = split(B)
    a = tf32(dA).to(F64)
    return ((a @ lo.to(F64)).to(F32) + (a @ hi.to(F64)).to(F32)).to(F32)


def _blocks(L: int) -> list[tuple[int, int]]:
    return [(b, min(b + BLOCK, L)) for b in range(0, L, BLOCK)]


def wide(G: torch.Tensor, b0: int, b1: int) -> torch.Tensor:
    """[H, 1, K]: columns whose decay span over rows b0..b1-1 reaches KFAST_SPAN (log2)."""
    span = (G[:, b0 : b0 + 1] - G[:, b1 - 1 : b1]) / LN2
    return span >= KFAST_SPAN


def exact_diag(dP: torch.Tensor, x: torch.Tensor, G: torch.Tensor, b0: int, b1: int):
    """The diagonal block's row terms in float64 (the kernel's elementwise fallback)."""
    Ed = _diag_decays(G[:, b0:b1].to(F64))[0]
    d = dP[:, b0:b1, b0:b1].to(F64)
    return torch.einsum("hij,hjd,hijd->hid", d, x[:, b0:b1].to(F64), Ed)


def row_terms(dP, b, G, form: str) -> torch.Tensor:  # noqa: ANN001
    """out_i = sum_{j <= i} dP_ij b_j e^(G_i - G_j) (dP lower triangular) in `form`."""
    H, L, K = b.shape
    out = torch.zeros(H, L, K, dtype=F32)
    g32 = G.to(F32)
    for bj, (j0, j1) in enumerate(_blocks(L)):
        w = wide(G, j0, j1)
        if form == "blockref":
            e = j1 - 1  # one B tile for every row block at or after J
            Bt = b[:, j0:j1] * torch.exp(g32[:, e : e + 1] - g32[:, j0:j1])
            P = product(dP[:, :, j0:j1], Bt)  # all rows at once
            f = torch.exp(g32 - g32[:, e : e + 1])
            f = torch.where(torch.arange(L)[None, :, None] >= j0, f, 0.0)  # rows before J: 0
            f[:, j0:j1] = torch.where(w, 0.0, f[:, j0:j1])
            out += torch.where(f != 0, f * P, 0.0)
        else:
            for bi, (i0, i1) in enumerate(_blocks(L)):
                if bi < bj:
                    continue
                r = i0  # the output block's first row
                Bt = b[:, j0:j1] * torch.exp(g32[:, r : r + 1] - g32[:, j0:j1])
                P = product(dP[:, i0:i1, j0:j1], Bt)
                f = torch.exp(g32[:, i0:i1] - g32[:, r : r + 1])
                term = f * P
                if bi == bj:
                    term = torch.where(w, 0.0, term)
                out[:, i0:i1] += term
        out[:, j0:j1] += torch.where(w, exact_diag(dP, b, G, j0, j1), 0.0).to(F32)
    return out


def col_terms(dP, a, G, form: str) -> torch.Tensor:  # noqa: ANN001
    """out_j = sum_{i >= j} dP_ij a_i e^(G_i - G_j) (dP lower triangular) in `form`: the row terms
    of the mirrored chunk (rows reversed, dP transposed, G negated: still a decreasing cumsum), so
    each form's references mirror too (the column terms' first row of a source block, last row of
    an output block). Full chunks only: the mirror keeps the 16-row blocks when L % 16 == 0."""
    assert a.shape[1] % BLOCK == 0, "col_terms mirrors whole 16-row blocks"
    rev = [1]
    out = row_terms(dP.transpose(-1, -2).flip(1, 2), a.flip(rev), -G.flip(rev), form)
    return out.flip(rev)


def phase6(q, k, dA1, dA2, G, form: str | None) -> dict[str, torch.Tensor]:  # noqa: ANN001
    """The phase's row terms (dq: dA1 off the diagonal through k; dk: dA2 through k), column
    terms (dk: dA1 through q, dA2 through k) and the reverse cumsum of their dGamma terms; form
    None is the float64 twin."""
    dA1o = _no_diag(dA1)
    if form is None:
        Ed = _diag_decays(G)
        rq, rk = _row_grad(dA1o, k, G, Ed), _row_grad(dA2, k, G, Ed)
        cc = _col_grad(dA1o, q, G, Ed) + _col_grad(dA2, k, G, Ed)
    else:
        q32, k32 = q.to(F32), k.to(F32)
        rq, rk = row_terms(dA1o, k32, G, form), row_terms(dA2, k32, G, form)
        cc = col_terms(dA1o, q32, G, form) + col_terms(dA2, k32, G, form)
        rq, rk, cc = (x.to(F64) for x in (rq, rk, cc))
    dG = q * rq + k * rk - k * cc
    return {"dq": rq, "dk": rk + cc, "dg": dG.flip(1).cumsum(1).flip(1)}


def regime_g(regime: str, H: int, L: int, K: int, gen: torch.Generator) -> torch.Tensor:
    """Per-token log gates of docs/measuring.md's regimes (raw: the lower-bound sigmoid form)."""
    if regime == "mixed":
        return torch.nn.functional.logsigmoid(torch.randn(H, L, K, generator=gen, dtype=F64)) / 16
    if regime == "fast":
        return -0.1 - 4.9 * torch.rand(H, L, K, generator=gen, dtype=F64)
    if regime == "slow":
        return -1e-3 * torch.rand(H, L, K, generator=gen, dtype=F64)
    if regime == "raw-lb5":
        z = torch.randn(H, L, K, generator=gen, dtype=F64) + 0.5 * torch.randn(
            H, 1, K, generator=gen, dtype=F64
        )
        a = torch.exp(torch.rand(H, 1, 1, generator=gen, dtype=F64))
        return -5.0 * torch.sigmoid(a * z)
    raise ValueError(f"unknown regime {regime!r}")


def chunk_inputs(regime: str, H: int, gen: torch.Generator, L: int = 64, K: int = 128):  # noqa: ANN201
    """q, k unit rows in bf16, dA1 (lower incl. diagonal) and dA2 (strictly lower) of the size a
    chunk's [dO; Y] Vn^T has, Γ in float32 (as kda_fwd_chunk writes it)."""

    def unit() -> torch.Tensor:
        x = torch.randn(H, L, K, generator=gen, dtype=F64)
        return (x / x.norm(dim=-1, keepdim=True)).to(torch.bfloat16).to(F64)

    q, k = unit(), unit()
    dA1 = torch.tril(torch.randn(H, L, L, generator=gen, dtype=F64) * math.sqrt(K))
    dA2 = torch.tril(torch.randn(H, L, L, generator=gen, dtype=F64) * math.sqrt(K), -1)
    G = regime_g(regime, H, L, K, gen).cumsum(1).to(F32).to(F64)
    return q, k, dA1, dA2, G


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm())


def table(heads: int, seed: int) -> list[str]:
    """Per regime and output: each form against the float64 twin, and against the twin fed the
    same TF32 dA (what is left is the form's own: B's hi + lo, the float32 factors and sums)."""
    out = [
        f"{'regime':8s} {'output':6s} {'current':>10s} {'blockref':>10s}"
        f" {'current*':>10s} {'blockref*':>10s}   (* against the twin on TF32 dA)"
    ]
    for regime in ("mixed", "fast", "slow", "raw-lb5"):
        gen = torch.Generator().manual_seed(seed)
        q, k, dA1, dA2, G = chunk_inputs(regime, heads, gen)
        ref = phase6(q, k, dA1, dA2, G, None)
        ref_t = phase6(q, k, tf32(dA1).to(F64), tf32(dA2).to(F64), G, None)
        cur = phase6(q, k, dA1, dA2, G, "current")
        new = phase6(q, k, dA1, dA2, G, "blockref")
        for name in ("dq", "dk", "dg"):
            errs = [rel(f[name], r[name]) for r in (ref, ref_t) for f in (cur, new)]
            out.append(f"{regime:8s} {name:6s} " + " ".join(f"{e:10.3e}" for e in errs))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print("\n".join(table(a.heads, a.seed)))


if __name__ == "__main__":
    main()
