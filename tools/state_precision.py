"""What the state pass's operand formats cost in accuracy: a float64 model of the chunked forward
whose tensor-core operands are rounded the way a kernel would store and multiply them, against the
same model without rounding. For docs/wgmma-plan.md's byte diet (fp16 tiles with power-of-two row
scales, hi / lo fp16 B operands) before any kernel is written.

  .venv/bin/python tools/state_precision.py                 # the default cases, a table
  .venv/bin/python tools/state_precision.py --cases long --seqlen 65536

Formats (the A operands W, Qg, Kd, Aqk; the B operands S and Vnew; U, Vnew and S themselves are
fp32, and every product accumulates exactly, i.e. below fp32's rounding):
  tf32          A and B rounded to TF32 (cvt.rn): kda_fwd_state's default rows today
  tf32-precise  A TF32, B as hi + lo TF32: the precise rows (long sequences)
  f16-scaled    A as fp16 times a power-of-two scale per row (row maximum in [2^14, 2^15)), B as hi
                + lo fp16 under a power-of-two scale per column: the plan
  bf16          A and B rounded to bf16 (what a bf16 pipeline would store), for scale
Reported: relative L2 of o (before its bf16 rounding) and of the final state against the unrounded
model, whole tensor and worst window of 8192 tokens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kda_inputs import make_inputs, make_long_input  # noqa: E402
from kda_reference import chunk_tiles  # noqa: E402

FORMATS = ("exact", "tf32", "tf32-precise", "f16-scaled", "bf16")
C = 64


def tf32(x: torch.Tensor) -> torch.Tensor:
    """float64 -> fp32 (rn) -> TF32 (rn, ties to even), back to float64."""
    b = x.float().view(torch.int32)
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~0x1FFF
    return b.view(torch.float32).double()


def pow2_scale(x: torch.Tensor, dim: int) -> torch.Tensor:
    """A power of two per row (dim=-1) or column (dim=-2) putting the maximum in [2^14, 2^15)."""
    m = x.abs().amax(dim=dim, keepdim=True)
    _, e = torch.frexp(m)  # m = f 2^e, f in [0.5, 1): m / 2^(e - 15) in [2^14, 2^15)
    return torch.where(
        m > 0, torch.ldexp(torch.ones_like(m), (e - 15).to(torch.int32)), torch.ones_like(m)
    )


def f16_scaled(x: torch.Tensor, dim: int) -> torch.Tensor:
    s = pow2_scale(x, dim)
    return (x / s).half().double() * s


def f16_hilo(x: torch.Tensor, dim: int) -> torch.Tensor:
    s = pow2_scale(x, dim)
    y = x / s
    hi = y.half().double()
    lo = (y - hi).half().double()
    return (hi + lo) * s


def operands(fmt: str):
    """(A rounding, B rounding) for one format: A scaled per row, B per column (of [K, V])."""
    ident = lambda x: x  # noqa: E731
    if fmt == "exact":
        return ident, ident
    if fmt == "tf32":
        return tf32, tf32
    if fmt == "tf32-precise":
        return tf32, lambda x: tf32(x) + tf32(x.float().double() - tf32(x))
    if fmt == "f16-scaled":
        return (lambda x: f16_scaled(x, -1)), (lambda x: f16_hilo(x, -2))
    if fmt == "bf16":
        r = lambda x: x.bfloat16().double()  # noqa: E731
        return r, r
    raise ValueError(fmt)


def fp32(x: torch.Tensor) -> torch.Tensor:
    return x.float().double()


def run(q, k, v, g, beta, scale, fmt: str):
    """The state pass of one (sequence, head) in format fmt: o [T, V], final S [K, V]."""
    T = q.shape[0]
    NC = (T + C - 1) // C
    pad = NC * C - T

    def chunks(x):
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])]) if pad else x
        return x.reshape(NC, C, *x.shape[1:])

    ra, rb = operands(fmt)
    rnd = fmt != "exact"
    ins = [chunks(x) for x in (q, k, v, g, beta)]
    S = torch.zeros(q.shape[1], v.shape[1], dtype=torch.float64)
    outs = []
    for c in range(NC):
        if c % 32 == 0:  # tiles 32 chunks at a time (the decay tensor is C x C x K per chunk)
            W, U, Qg, Kd, Aqk, gl = chunk_tiles(*(x[c : c + 32] for x in ins), scale)
            gl = gl[:, 0]  # [n, K]
            if rnd:  # stored tiles: A operands in their format (Kd's rows are key dims), U, gl fp32
                W, Qg, Aqk, Kd, U, gl = ra(W), ra(Qg), ra(Aqk), ra(Kd), fp32(U), fp32(gl)
        W_, U_, Qg_, Kd_, Aqk_, gl_ = (x[c % 32] for x in (W, U, Qg, Kd, Aqk, gl))
        Sb = rb(S)
        Vn = U_ - W_ @ Sb
        if rnd:
            Vn = fp32(Vn)
        Vb = rb(Vn)
        outs.append(Qg_ @ Sb + Aqk_ @ Vb)
        S = gl_[:, None] * S + Kd_ @ Vb
        if rnd:
            S = fp32(S)
    return torch.cat(outs)[:T], S


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def case_inputs(name: str, seqlen: int):
    if name == "long":
        inp = make_long_input(seqlen, 1)
    else:
        inp = make_inputs(batch=1, seqlen=seqlen, heads=1, regime=name)
    q, k, v, g, beta = (x[0, :, 0].double() for x in (inp.q, inp.k, inp.v, inp.g, inp.beta))
    return q, k, v, g, beta, q.shape[-1] ** -0.5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cases",
        default="mixed,fast,slow,long",
        help="gate regimes (mixed, fast, slow) and long (the seed's)",
    )
    p.add_argument("--seqlen", type=int, default=16384)
    p.add_argument("--formats", default=",".join(FORMATS[1:]))
    p.add_argument("--window", type=int, default=8192)
    a = p.parse_args()
    print(f"{'case':8s} {'format':13s} {'o rel-L2':>9s} {'worst win':>9s} {'S rel-L2':>9s}")
    for name in a.cases.split(","):
        q, k, v, g, beta, scale = case_inputs(name, a.seqlen)
        o_ref, S_ref = run(q, k, v, g, beta, scale, "exact")
        for fmt in a.formats.split(","):
            o, S = run(q, k, v, g, beta, scale, fmt)
            wins = [
                rel(o[i : i + a.window], o_ref[i : i + a.window])
                for i in range(0, len(o), a.window)
            ]
            print(f"{name:8s} {fmt:13s} {rel(o, o_ref):9.2e} {max(wins):9.2e} {rel(S, S_ref):9.2e}")


if __name__ == "__main__":
    main()
