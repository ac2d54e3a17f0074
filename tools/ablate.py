"""Ablation timing: what a kernel's time would be without one of its parts (its loads, its stores,
its tensor-core products), measured by re-launching the kernel of a real fwd+bwd with the same
arguments, once as shipped and once per ablated build. Tells which resource bounds a kernel before
an optimisation is predicted (docs/notes.md, session 9). The ablated programs compute garbage; they
are never used for anything but their time.

  # here (NVRTC): render nothing, patch the shipped sources, compile the ablated cubins
  python tools/ablate.py build --out .ablate
  # on the GPU: capture one fwd+bwd's launches, time each target kernel and its ablations
  python tools/ablate.py time --dir .ablate --row 1doc --variant g:off:saved

An ablation is a list of (old, new) text replacements on the rendered program; every `old` must
occur in it (the build fails otherwise, so an ablation cannot silently stop ablating). `NOOP:`
entries are macro definitions placed right after the helper's definition: every call of it, in the
program or in any inlined header, then does nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

NO_PREFETCH = [("NOOP:", "#define cake_prefetch_l2(p) ((void)0)")]
# cp.async pieces and bulk copies (a bulk copy's expected bytes become a plain arrival)
NO_LOAD = [
    ("NOOP:", "#define cake_cp_async16(d, s, n) ((void)0)"),
    ("NOOP:", "#define cake_bulk_load(d, s, n, b) ((void)0)"),
    ("NOOP:", "#define cake_mbar_expect_tx(b, n) cake_mbar_arrive(b)"),
    *NO_PREFETCH,
]

# fwd_state's serial chain alone: no loads, no state or o stores
_WG1_WRITE = (
    "            if (states_out != nullptr)\n"
    "                write_states(reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES);\n"
)
# fwd_state's warpgroup 1 writer (its hand-off of St stays)
NO_STATES = [(_WG1_WRITE, _WG1_WRITE.replace("if (states_out != nullptr)", "if (false)"))]
# the local program's: no St copy, no writer (warpgroup 1 only issues the loads)
_ST_COPY = "const bool st_copy = !kLocal || states_out != nullptr;"
_LOCAL_WRITE = (
    "            if (states_out != nullptr) {\n                cake_mbar_wait(mbFullS, i & 1);"
)
# (the call also stands in fwd_state's own warpgroup 1 branch, dead in the local program)
_LOCAL_WRITE_CALL = "write_states(reinterpret_cast<unsigned char*>(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES);"
_ST_FENCE = "cake_fence_proxy_async();\n                    cake_mbar_arrive(mbFullS);"
_LOCAL_ST_STORE = "St[cake_wg_idx<64>(row_of(x), 64 * hf + pcol(x))] ="
LOCAL_NO_STATES = [
    (_ST_COPY, "const bool st_copy = !kLocal;"),
    (_LOCAL_WRITE, _LOCAL_WRITE.replace("if (states_out != nullptr)", "if (false)")),
]
# o's staging in shared memory and its stores (so warpgroup 1's products go too)
_O_STORE = "if (r < L)\n                    *reinterpret_cast<uint4*>(ob + r * orow + 8 * part)"
_O_STAGE = "ostage[r * 32 + 4 * ((x >> 2) ^ (r & 7)) + t] = "
NO_O = [
    (_O_STORE, _O_STORE.replace("if (r < L)", "if (false)")),
    (_O_STAGE, "if (false) " + _O_STAGE),
]
NO_WGMMA = [
    ("NOOP:", "#define cake_wgmma_n64(...) ((void)0)"),
    ("NOOP:", "#define cake_wgmma_n64_rs(...) ((void)0)"),
]
CHAIN = NO_LOAD + NO_STATES + NO_O


# One input of kda_fwd_state left out: its bulk copy an arrival without bytes (its tile stays stale).
def _fwd_bulk(mb: str, tile: str) -> str:
    return f"if (issuer) bulk({mb}, {tile} + ((long long)ci * H + h) * "


_FWD_NO_COPY: dict[str, list[tuple[str, str]]] = {
    n: [
        (
            _fwd_bulk(mb, t),
            f"if (issuer) cake_mbar_arrive({mb}); if (false) bulk({mb}, {t} + ((long long)ci * H + h) * ",
        )
    ]
    for n, mb, t in (
        ("w", "mbW", "Ws, W"),
        ("kd", "mbK + b", "Ks + 8192 * b, Kd"),
        ("qg", "mbQ", "Qs, Qg"),
        ("aqk", "mbA", "As, Aqk"),
    )
}
_FWD_NO_COPY["u"] = [
    ("cake_mbar_expect_tx(mbUG, u ? 16384 + 512 : 512);", "cake_mbar_expect_tx(mbUG, 512);"),
    ("        if (u) cake_bulk_load(Us, ", "        if (false) cake_bulk_load(Us, "),
]
# kda_bwd_state's cp.async of one input (one line of its issue loop), to leave out by name.
_BWD_COPIES = {
    "kd": "cake_cp_async16(Ks + sKd + 2048 * (j & 3) + 32 * (j >> 2), Kd + wsi * 8192 + gI + 1024 * (j & 3) + 4096 * (j >> 2), 16);",
    "aqk": "cake_cp_async16(As + sA + 2048 * (j & 1) + 32 * (j >> 1), Aqk + wsi * 4096 + gI + 1024 * (j & 1) + 2048 * (j >> 1), 16);",
    "qg": "cake_cp_async16(Qs + sQ + sj, Qg + base + gI + gj, 16);",
    "w": "cake_cp_async16(Ws + sW + sj, W + base + gI + gj, 16);",
}


def _skip_copies(copies: dict[str, str], *names: str) -> list[tuple[str, str]]:
    return [(copies[n], "(void)0;") for n in names]


# kda_bwd_state's: without its dS_end / dVn stores, and its chain alone (no loads, no stores)
BWD_NO_STATES = [("if (dS_end != nullptr) store_global(", "if (false) store_global(")]
BWD_NO_DVN = [("if (dVn != nullptr && (x & 1) == 0)", "if (false)")]
BWD_CHAIN = NO_LOAD + BWD_NO_STATES + BWD_NO_DVN

NO_PRECISE = [
    (
        "int(precise != nullptr && precise[n] != 0)",
        "0",
    )
]

# every mma.sync of kda_bwd_chunk's sm_90a program goes through mma_k16 (two m16n8k8 tf32; its
# phases 3a, 4 and 5 are on wgmma, so it has no mma_k16q, the mma.sync programs' step of 3a and
# 4); as one m16n8k16 f16 (the same reduction slots: a lane's k = 4t..4t+3 on the f16 slots 2t,
# 2t+1, 2t+8, 2t+9), its operands converted by cvt.rn.f16x2 where they are used. Unscaled, so only
# a timing: what fp16 operands would take off the kernel with every operand routine as it is
# (docs/notes.md, session 17)
_F16X2 = 'asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"({r}) : "f"({hi}), "f"({lo}));'
_MMA_F16 = (
    'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, '
    '{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), '
    '"+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));'
)


def _f16_body(signature: str, pairs: list[tuple[str, str, str]]) -> str:
    cvts = "\n    ".join(_F16X2.format(r=r, lo=lo, hi=hi) for r, lo, hi in pairs)
    return f"{signature} {{\n    unsigned int a0, a1, a2, a3, b0, b1;\n    {cvts}\n    {_MMA_F16}\n}}\n"


_B = [("b0", "b.x", "b.y"), ("b1", "b.z", "b.w")]
_K16 = "__device__ __forceinline__ void mma_k16(float (&d)[4], const float4& a_lo, const float4& a_hi, const float4& b)"
# the f16 definition goes in front of the shipped one, which is renamed (so left unused)
F16_MMA = [
    (
        _K16 + " {",
        _f16_body(
            _K16,
            [
                ("a0", "a_lo.x", "a_lo.y"),
                ("a1", "a_hi.x", "a_hi.y"),
                ("a2", "a_lo.z", "a_lo.w"),
                ("a3", "a_hi.z", "a_hi.w"),
                *_B,
            ],
        )
        + _K16.replace("mma_k16(", "mma_k16_tf32(")
        + " {",
    ),
]


def _skip(*calls: str) -> list[tuple[str, str]]:
    """Each call (its text up to a unique point) not made: ptxas then drops what only fed it."""
    return [(c, "if (false) " + c) for c in calls]


# kda_bwd_chunk's products phase by phase, each with the operand work that only feeds it (nomma,
# all of them, is -30 %: docs/notes.md, session 17)
_MMA_BY_PHASE = {
    "nomma2": _skip("mma_k16(acc[ni], alo, ahi, r4(ldt4_at<128>(RC"),
    "nomma3a": _skip(*(f"cake_wgmma_n32_rs({a}, " for a in ("pO", "pY"))),  # sm_90a: on wgmma
    "nomma3b": _skip("mma_k16(X[ni], alo, ahi"),
    "nomma3c": _skip("mma_k16(acc[ni], alo, ahi, ldf4(RD"),
    # sm_90a: phases 4 and 5 are on wgmma
    "nomma4": _skip("cake_wgmma_n32_rs(pacc, a0, ", "cake_wgmma_n32_rs(pacc, a1, "),
    "nomma5": _skip("cake_wgmma_n32(wacc, "),
    "nomma6a": _skip(
        *(
            f"mma_k16({a}[n], {q}lo, {q}hi, {b});"
            for a, q in (("aq", "q1"), ("ak", "k1"))
            for b in ("bl", "bh")
        )
    ),
    "nomma6b": _skip(
        *(
            f"mma_k16(ac[n], {q}lo, {q}hi, {b});"
            for q, bb in (("q1", "bq"), ("k1", "bk"))
            for b in (bb + "l", bb + "h")
        )
    ),
    "nomma6c": _skip(
        *(
            f"mma_k16({a}[n], {q}lo, {q}hi, {b});"
            for a, q in (("aq", "a1"), ("ak", "a2"))
            for b in ("bkl", "bkh")
        ),
        "mma_k16(ac[n], c1lo, c1hi, bql);",
        "mma_k16(ac[n], c2lo, c2hi, bcl);",
        "mma_k16(ac[n], c1lo, c1hi, bqh);",
        "mma_k16(ac[n], c2lo, c2hi, bch);",
    ),
}


# the same products made by warps 0-7 only (one warp in two of each SM sub-partition): a phase
# bound by its throughput loses about half of nommaX's time, one bound by each warp's own latency
# about none (docs/bwd-chunk-structure.md: may two phases share the block's warps?)
_HALF_WARPS = {
    "half" + name[len("nomma") :]: [
        (old, new.replace("if (false) ", "if (warp < 8) ")) for old, new in _MMA_BY_PHASE[name]
    ]
    for name in ("nomma3a", "nomma3b", "nomma5")
}


# kda_bwd_chunk's mma k-loops of one phase each (the per-element work around them stays)
_BULK_LOOPS = {
    "no3a": [
        (
            "XOR 16 kp\n#pragma unroll 1\n        for (int k2 = 0; k2 < 4; ++k2) {",
            "XOR 16 kp\n#pragma unroll 1\n        for (int k2 = 0; k2 < 0; ++k2) {",
        )
    ],
    "no3b": [
        (
            "for (int kp = 0; kp < 8; ++kp) {\n            const float4 ka = cake_ld4_bf16_at(ks",
            "for (int kp = 0; kp < 0; ++kp) {\n            const float4 ka = cake_ld4_bf16_at(ks",
        )
    ],
    "no4": [
        (
            "auto product = [&](auto quads) {\n#pragma unroll 1\n            for (int k2 = 0; k2 < 4;",
            "auto product = [&](auto quads) {\n#pragma unroll 1\n            for (int k2 = 0; k2 < 0;",
        )
    ],
    "no5": [  # sm_90a: phase 5's wgmma steps
        (
            "for (int s = 0; s < 8; ++s)\n                    cake_wgmma_n32(wacc,",
            "for (int s = 0; s < 0; ++s)\n                    cake_wgmma_n32(wacc,",
        )
    ],
}


def _halve_loop(loop: str) -> tuple[str, str]:
    """A k-loop's header text, and the same loop running half its steps."""
    bound = re.search(r"< (\d+);", loop)
    assert bound is not None, loop
    n = int(bound.group(1))
    return loop, loop[: bound.start()] + f"< {n // 2};" + loop[bound.end() :]


# One input of kda_fwd_state (Kd^T, both buffers) through the TMA path: one cp.async.bulk of the
# whole 32 KB tile by one thread, completion on an mbarrier a buffer (in the free shared memory
# after gl), in place of 16 cp.async a thread. The tile lands unpermuted (wrong layout, the same
# bytes): what the LSU path of the copies costs next to the bulk engine's (docs/notes.md, session 18).
# the copies all kept, their waits only every fourth chunk (wrong data, the same traffic): what the
# per-chunk cp.async waits cost apart from the copies
def _every_fourth(*waits: str) -> list[tuple[str, str]]:
    return [(w, "if ((i & 3) == 0) " + w) for w in waits]


# (sm_90a since session 54: the dO wait, group A's, sits in the phase-B shadow as wait_do())
BWD_FEW_WAITS = _every_fourth(
    "wait_do();\n            __syncthreads();\n            convert_do",
    "cake_cp_async_wait<1>();  // group B",
)


# What the raw gates add to kda_bwd_chunk: the epilogue's dx / dA_log / ddt_bias work (nodx: dg
# stored as the g form stores it)
_NO_DX = [
    (
        "                if (ok) store_dx(p, dx);\n"
        "                bias_acc += ok ? dx : 0.f;\n"
        "                a_acc += ok ? dA : 0.f;",
        "                if (ok) store_dx(p, dgv);",
    ),
]
# The epilogue's other raw-only parts: x's copy into shared memory (nox: the loop reads stale words)
# and the reduction of the ddt_bias / dA_log partials with its barrier (noend: none of it runs)
_NO_X = [
    (
        "                if (r < L)\n                    cake_cp_async16(xs + r * 128",
        "                if (r < 0)\n                    cake_cp_async16(xs + r * 128",
    )
]
_NO_END = [
    (
        "        if (kGate != 0) {\n            sc[SC_BIAS + 128 * sg + d] = bias_acc;",
        "        if (kGate != 0 && H < 0) {\n            sc[SC_BIAS + 128 * sg + d] = bias_acc;",
    )
]
# What the fused L2 norm adds to kda_bwd_chunk (its programs ran ~12 % longer than the l2n-off
# ones in session 29; forming Gamma there, 5 %, went in session 30): phase 7's norm work (nol2n7:
# the row dots, their reduction and dq / dk through the norm), and the reciprocals' products in
# phases 3-6 (norq: rq = rk = 1)
_FUSED_BWD = {
    "nol2n7": [("if (kL2Norm) {", "if (kL2Norm && H < 0) {")],
    "norq": [
        (
            "auto rqf = [&](int r) { return kL2Norm ? rq[r] : 1.f; };",
            "auto rqf = [&](int r) { return 1.f; };",
        ),
        (
            "auto rkf = [&](int r) { return kL2Norm ? rk[r] : 1.f; };",
            "auto rkf = [&](int r) { return 1.f; };",
        ),
    ],
}
# kda_bwd_chunk phase 6's B operands read as (hi, lo) words instead of formed per warp: (c) the
# diagonal block's three pairs, (a) the row terms' k pair, (b) the column terms' q and k pairs
_FORM6_C = (
    "                        cake_split_tf32(ku * cake_ex2(gr - gu), e4(bkh, e), e4(bkl, e));\n"
    "                        cake_split_tf32(qu * f, e4(bqh, e), e4(bql, e));\n"
    "                        cake_split_tf32(ku * f, e4(bch, e), e4(bcl, e));"
)
_FORM6_A = (
    "cake_split_tf32(cake_bf16_to_f32(kJ[kq[n][e]]) * rkf(j) * cake_ex2(gr - gJ[gq[n][e & 1]"
    " + 128 * e]), e4(bh, e), e4(bl, e));"
)
_FORM6_B = (
    "                            const float f = cake_ex2(gI[gq[n][e & 1] + 128 * e] - ge);\n"
    "                            cake_split_tf32(cake_bf16_to_f32(qI[bq[n][e]]) * rqf(i) * f, e4(bqh, e), e4(bql, e));\n"
    "                            cake_split_tf32(cake_bf16_to_f32(kI[bq[n][e]]) * rkf(i) * f, e4(bkh, e), e4(bkl, e));"
)


def _words(base: str, *outs: str) -> str:
    """Each (hi, lo) output a load from G's tile at `base` XOR a distinct 4-word offset."""
    return " ".join(f"{o} = {base} ^ {4 * n}];" for n, o in enumerate(outs))


_NO_FORM6_PARTS = {
    "noform6c": [
        (
            _FORM6_C,
            "                        (void)ku; (void)qu; (void)f; (void)gr; "
            + _words(
                "gR[(gq0 + 128 * e)",
                *(f"e4({b}, e)" for b in ("bkh", "bkl", "bqh", "bql", "bch", "bcl")),
            ),
        )
    ],
    "noform6a": [
        (
            _FORM6_A,
            "(void)j; (void)gr; " + _words("gJ[(gq[n][e & 1] + 128 * e)", "e4(bh, e)", "e4(bl, e)"),
        )
    ],
    "noform6b": [
        (
            _FORM6_B,
            "                            (void)ge; (void)i; "
            + _words(
                "gI[(gq[n][e & 1] + 128 * e)",
                *(f"e4({b}, e)" for b in ("bqh", "bql", "bkh", "bkl")),
            ),
        )
    ],
}
_NO_FORM6 = {
    **_NO_FORM6_PARTS,
    "noform6": [patch for patches in _NO_FORM6_PARTS.values() for patch in patches],
}
_BWD_FORM_ABLATIONS = {
    "gate-sigmoid.x-fp32.l2n-off": {"nodx": _NO_DX, "nox": _NO_X, "noend": _NO_END},
    "gate-g.l2n-fused": _FUSED_BWD,
    "gate-sigmoid.x-fp32.l2n-fused": {
        **_FUSED_BWD,
        "nodx": _NO_DX,
    },
}


_WG1_STORE = "*reinterpret_cast<uint4*>(rec + d * 256 + 32 * grp + 16 * p) ="
_WG1_STORE_ALL = _WG1_STORE + (
    "\n                make_uint4(cake_f16x2(sv[0] * sc, sv[1] * sc), cake_f16x2(sv[2] * sc, sv[3] * sc),\n"
    "                           cake_f16x2(sv[4] * sc, sv[5] * sc), cake_f16x2(sv[6] * sc, sv[7] * sc));"
)
_WG1_STORE_WORDS = (
    "{ const unsigned int w0 = cake_f16x2(sv[0] * sc, sv[1] * sc), w1 = cake_f16x2(sv[2] * sc, sv[3] * sc),"
    " w2 = cake_f16x2(sv[4] * sc, sv[5] * sc), w3 = cake_f16x2(sv[6] * sc, sv[7] * sc);"
    " unsigned char* const at = rec + d * 256 + 32 * grp + 16 * p;"
)
_WG1_STORE_EVICT = _WG1_STORE_WORDS + (
    ' unsigned long long pol; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));'
    ' asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;"'
    ' :: "l"(at), "r"(w0), "r"(w1), "r"(w2), "r"(w3), "l"(pol) : "memory"); }'
)
# every value of the record formed, folded into one register that is stored only where H < 0 (never):
# the writer's work without its stores (wg1nostore's guard let ptxas sink that work into the branch)
_WG1_STORE_SINK = _WG1_STORE_WORDS + " abl_sink ^= w0 ^ w1 ^ w2 ^ w3 ^ (unsigned int)(size_t)at; }"
_WG1_END = "    } else if (!kLean) {\n        // ---- warpgroup 1 of the local program"
_WG1_EMPTY_S = (
    "            if (i + 1 < nc) cake_mbar_arrive(mbEmptyS);  // St read (Qg S and the states)\n"
)
_WG1_STORE_CS = _WG1_STORE_WORDS + (
    ' asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};"'
    ' :: "l"(at), "r"(w0), "r"(w1), "r"(w2), "r"(w3) : "memory"); }'
)


# per program (package-independent name), ablation name -> replacements
# kda_fwd_chunk's tiles for the state passes stored row-major again (timing only: fwd_state then
# reads them wrong): which of the image's stores made the kernel 4-6 % faster (session 22)
def _row_major(*names: str) -> list[tuple[str, str]]:
    sig = {
        "w": "(int r, int k)",
        "u": "(int r, int v)",
        "qg": "(int r, int k)",
        "kd": "(int d, int r)",
        "aqk": "(int r, int c)",
    }
    row = {
        "w": "r * 128 + k",
        "u": "r * 128 + v",
        "qg": "r * 128 + k",
        "kd": "d * 64 + r",
        "aqk": "r * 64 + c",
    }
    args = {n: sig[n][1:-1].replace("int ", "") for n in sig}
    return [
        (
            f"int out_{n}{sig[n]} {{ return cake_img_{n}({args[n]}); }}",
            f"int out_{n}{sig[n]} {{ return {row[n]}; }}",
        )
        for n in names
    ]


FWD_CHUNK_STORES = {
    "rowmajor": _row_major("w", "u", "qg", "kd", "aqk"),
    "rowmajor-wu": _row_major("w", "u"),
    "rowmajor-qka": _row_major("qg", "kd", "aqk"),
    # G_out as [NC, H, 64, 128] tiles (timing only; 1doc / 4doc, whose sequences are whole chunks)
    "gchunk": [
        (
            "const long long go0 = in_base + (long long)r0 * tok_stride + 4 * lane;",
            "const long long go0 = ws * 8192 + r0 * 128 + 4 * lane;",
        ),
        ("G_out + go0 + i * tok_stride", "G_out + go0 + i * 128"),
    ],
}
# The bytes of 16-bit chunk tiles (docs/wgmma-plan.md, "byte diet"): half of each of Qg and Aqk
# ("qa"), or of W, Kd, Qg and Aqk ("4"), stored / copied / loaded; no conversion work counted.
_QG_ST = "cake_st_global_v4(out + out_qg(r, 4 * c4), y);"
_AQK_ST = "cake_st_global_v4(aout + out_aqk(r, 4 * c4), y);"
_KD_ST = "cake_st_global_v4(Kd + ws * 8192 + out_kd(d, r0), make_float4(y[0], y[1], y[2], y[3]));"
_W_ST = (
    "*reinterpret_cast<float2*>(out + mi * step16) = make_float2(x.x, x.y);\n"
    "                *reinterpret_cast<float2*>(out + mi * step16 + step8) = make_float2(x.z, x.w);"
)
_CHUNK_HALF_QA = [(_QG_ST, "if (c4 < 16) " + _QG_ST), (_AQK_ST, "if (c4 < 8) " + _AQK_ST)]
_CHUNK_HALF_4 = _CHUNK_HALF_QA + [
    (_KD_ST, "if (d < 64) " + _KD_ST),
    (_W_ST, "if (!isW || mi < 2) {" + _W_ST + "}"),
]


def _state_half(tile: str, floats: int) -> tuple[str, str]:
    """kda_fwd_state's bulk copy of one [c, h] tile of `floats` fp32 values, at half its bytes."""
    at = f"{tile} + ((long long)ci * H + h) * {floats}, "
    return at + str(4 * floats), at + str(2 * floats)


_STATE_QA = [_state_half("Qg", 8192), _state_half("Aqk", 4096)]
_STATE_WK = [_state_half("W", 8192), _state_half("Kd", 8192)]
_BS_QG = "cake_cp_async16(Qs + sQ + sj, Qg + base + gI + gj, 16);"
_BS_W = "cake_cp_async16(Ws + sW + sj, W + base + gI + gj, 16);"
_BS_AQK = "cake_cp_async16(As + sA + 2048 * (j & 1) + 32 * (j >> 1),"
_BS_KD = "cake_cp_async16(Ks + sKd + 2048 * (j & 3) + 32 * (j >> 2),"
_BSTATE_QA = [(_BS_QG, "if (j < 4) " + _BS_QG), (_BS_AQK, "if (j < 2) " + _BS_AQK)]
_BSTATE_4 = _BSTATE_QA + [(_BS_W, "if (j < 4) " + _BS_W), (_BS_KD, "if (j < 4) " + _BS_KD)]
# kda_bwd_state_bulk (the split calls' reverse passes): its bulk copies at half their bytes
_BSTATE_BULK_4 = [
    (
        f"cake_bulk_load({s}, {t} + wsi * {n}, {2 * b}, {mb});",
        f"cake_bulk_load({s}, {t} + wsi * {n}, {b}, {mb});",
    )
    for s, t, n, b, mb in (
        ("Ks", "Kd", 8192, 16384, "mbA"),
        ("As", "Aqk", 4096, 8192, "mbA"),
        ("Qs", "Qg", 8192, 16384, "mbB"),
        ("Ws", "W", 8192, 16384, "mbB"),
    )
] + [
    ("cake_mbar_expect_tx(mbA, 32768 + 16384);", "cake_mbar_expect_tx(mbA, 16384 + 8192);"),
    (
        "cake_mbar_expect_tx(mbB, 32768 + 32768 + 512);",
        "cake_mbar_expect_tx(mbB, 16384 + 16384 + 512);",
    ),
]
# The states writer with its global stores guarded off (H >= 0 always, which the compiler cannot
# know). The guard can let ptxas sink the writer's work into the untaken branch, so this bounds
# the stores and the work together (fwd_state's wg1sink keeps the work).
_WG1_NO_STORE = [
    (_WG1_STORE, "if (H < 0) " + _WG1_STORE),
    ("if (p == 0) rec[CAKE_S16_EXP", "if (p == 0 && H < 0) rec[CAKE_S16_EXP"),
]
# The local program's warpgroup 1 split in two roles (timing only: warp 7's quarter of the states
# is not stored): wsplit0 leaves everything else as shipped; wsplit makes warp 7 the copy issuer,
# alone at the chain's buffer-free barriers, so the copies of the next chunks never wait for the
# states' stores of warps 4-6.
_WQ_STORES = [
    (_WG1_STORE, "if (wq != 3) " + _WG1_STORE),
    ("if (p == 0) rec[CAKE_S16_EXP", "if (p == 0 && wq != 3) rec[CAKE_S16_EXP"),
]
_WSPLIT = _WQ_STORES + [
    ("const bool issuer = tw == 0;", "const bool issuer = tw == 96;"),
    ("cake_bar_sync(kEmptyW, 256);", "if (wq == 3) cake_bar_sync(kEmptyW, 160);"),
    (
        "cake_bar_sync((i & 1) ? kEmptyK1 : kEmptyK0, 256);",
        "if (wq == 3) cake_bar_sync((i & 1) ? kEmptyK1 : kEmptyK0, 160);",
    ),
    ("cake_bar_arrive(kEmptyW, 256)", "cake_bar_arrive(kEmptyW, 160)"),
    (
        "cake_bar_arrive((i & 1) ? kEmptyK1 : kEmptyK0, 256)",
        "cake_bar_arrive((i & 1) ? kEmptyK1 : kEmptyK0, 160)",
    ),
]
# What the fused L2 norm adds to kda_fwd_chunk (sized in session 31): the norms themselves (nonorm:
# the warps' sums over q's and k's rows and the reciprocals; rq / rk left as they are), their
# products with q and k in every phase (norq: rq = rk = 1), and R_out's stores (nor)
# kda_fwd_chunk's phases, one ablation each (both gate forms' l2n-off programs)
FWD_CHUNK_PHASES = {
    # every block reads its head's first chunk (L2 hits); G_out still goes to its own rows
    "noload": [
        (
            "const long long in_base = (long long)t0 * tok_stride + (long long)h * 128;",
            "const long long in_base = (long long)h * 128;\n"
            "    const long long out_base = (long long)t0 * tok_stride + (long long)h * 128;",
        ),
        ("const long long go0 = in_base +", "const long long go0 = out_base +"),
        ("(beta, (long long)(t0 + tid) * H + h,", "(beta, (long long)tid * H + h,"),
    ],
    # every block writes the first chunk's tiles (L2 hits, no DRAM writes)
    "nostores": [
        ("float* out = Qg + ws * 8192;", "float* out = Qg;"),
        ("float* aout = Aqk + ws * 4096;", "float* aout = Aqk;"),
        (
            "cake_st_global_v4(Kd + ws * 8192 + out_kd(d, r0)",
            "cake_st_global_v4(Kd + out_kd(d, r0)",
        ),
        (
            "float* const out = (isW ? W : U) + ws * 8192 +",
            "float* const out = (isW ? W : U) +",
        ),
        ("float* ta = TA_out + ws * 4096;", "float* ta = TA_out;"),
        ("const long long go0 = in_base +", "const long long go0 = (long long)h * 128 +"),
    ],
    "nomma": [("NOOP:", "#define cake_mma_tf32(...) ((void)0)")],
    # one phase each: its share of the block's serial path
    "nocumsum": [  # both levels of Gamma's sums
        ("if (r0 + i < L) acc = cake_gamma_add", "if (false) acc = cake_gamma_add"),
        ("if (v >= warp) break;", "break;"),
    ],
    "noqk": [("if (nt > 0) qk_tiles(bi, bj0, nt);", "(void)nt;")],
    "noqg": [("idx < 64 * 32; idx += 64", "idx < 0; idx += 64")],
    "nokd": [
        (
            "auto kd_task = [&](const int task) {",
            "auto kd_task = [&](const int task) {\n        return;",
        )
    ],
    "not2": [  # the T solve's second level (the 32 x 32 lower-left block)
        ("if (s4 >= 4 * (c2 >> 2)) fma_row4", "if (false) fma_row4"),
        ("if (q4 < q4end) fma_row4", "if (false) fma_row4"),
    ],
    "nowu": [("for (int kp = 0; kp < 4; ++kp) {", "for (int kp = 0; kp < 0; ++kp) {")],
    # the qk tiles' and W | U's k-loops at half their steps (their operand formation halves
    # too, which fp16 operands would not do: an upper bound of what fp16 could take off)
    "halfk": [
        (
            "for (int kp = 0; kp < 8; ++kp) {\n            const int xk = 16 * kp;",
            "for (int kp = 0; kp < 4; ++kp) {\n            const int xk = 16 * kp;",
        ),
        (
            "for (int kp = 0; kp < 4; ++kp) {\n            unsigned int bf[4][4];",
            "for (int kp = 0; kp < 2; ++kp) {\n            unsigned int bf[4][4];",
        ),
    ],
    # what only the saved path writes (the backward's G, T and Akk): their cost in its launch
    "nokeep": [
        ("if (G_out != nullptr && r < L)", "if (false)"),
        ("if (TA_out != nullptr) {", "if (false) {"),
    ],
    "nog": [("if (G_out != nullptr && r < L)", "if (false)")],
    "nota": [("if (TA_out != nullptr) {", "if (false) {")],
    # the diagonal blocks' inverses (warps 0-1): every substitution sum skipped
    "noinv": [("for (int kk = 0; kk < i; kk += 4) {", "for (int kk = 0; kk < 0; kk += 4) {")],
    # the T solve's first level (blocks (1,0) and (3,2))
    "not1": [
        ("for (int s4 = 4 * b; s4 < 4 * a; ++s4)", "for (int s4 = 4 * b; s4 < 4 * b; ++s4)"),
        ("for (int q4 = 0; q4 < 4; ++q4) fma_row4(y", "for (int q4 = 0; q4 < 0; ++q4) fma_row4(y"),
    ],
    # Aqk's store loop (warps 2-7, beside the inverses)
    "noaqk": [("idx < 64 * 16; idx += 192", "idx < 0; idx += 192")],
    # the raw gate's activation: x taken as the log gate (kGate 0's step)
    "noact": [("acc = cake_gamma_add<kGate>(", "acc = cake_gamma_add<0>(")],
}


_FUSED_FWD = {
    "nonorm": [
        (
            "    if (kL2Norm) {\n        // One warp per row",
            "    if (kL2Norm && H < 0) {\n        // One warp per row",
        )
    ],
    "norq": [
        (
            "const float rqa = kL2Norm ? rq[ia] : 1.f, rqb = kL2Norm ? rq[ib] : 1.f;",
            "const float rqa = 1.f, rqb = 1.f;",
        ),
        (
            "const float rka = kL2Norm ? rk[ia] : 1.f, rkb = kL2Norm ? rk[ib] : 1.f;",
            "const float rka = 1.f, rkb = 1.f;",
        ),
        (
            "const float rja = kL2Norm ? rk[ja] : 1.f, rjb = kL2Norm ? rk[jb] : 1.f;",
            "const float rja = 1.f, rjb = 1.f;",
        ),
        ("const float m = kL2Norm ? scale * rq[r] : scale;", "const float m = scale;"),
        ("cake_ld1_bf16(ks, r, d) * (kL2Norm ? rk[r] : 1.f);", "cake_ld1_bf16(ks, r, d);"),
        ("mw = kL2Norm ? mu * rk[tok] : mu;", "mw = mu;"),
        (
            "if (kL2Norm) {\n                    const float rn = rk[",
            "if (false) {\n                    const float rn = rk[",
        ),
        (
            "if (kL2Norm) {\n                    const float rnq = rq[",
            "if (false) {\n                    const float rnq = rq[",
        ),
    ],
    "nor": [("if (kL2Norm && R_out != nullptr && tid < 128)", "if (false)")],
}

ABLATIONS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "fwd_state.sm_90a": {
        "halfqa": _STATE_QA,
        "half4": _STATE_QA + _STATE_WK,
        "noprecise": NO_PRECISE,
        "noload": NO_LOAD,
        "nostates": NO_STATES,
        # the same stores and loads with every chunk on chunk c0's slots (L2 hits, no DRAM
        # traffic): what the states' and the inputs' DRAM bytes cost, apart from their instructions
        "l2states": [
            (
                "(states_out) + ((long long)ci * H + h) * CAKE_S16_BYTES",
                "(states_out) + ((long long)c0 * H + h) * CAKE_S16_BYTES",
            )
        ],
        "l2loads": [
            (f"{p} + ((long long)ci * H + h)", f"{p} + ((long long)c0 * H + h)")
            for p in ("W", "Kd", "Qg", "Aqk")
        ]
        + [
            (
                "const long long wsi = (long long)ci * H + h;",
                "const long long wsi = (long long)c0 * H + h;",
            ),
            ("gl, (long long)ci * H + h, tw", "gl, (long long)c0 * H + h, tw"),
        ],
        # one input's copy left out (its tile stays stale): whose load the chain waits on
        **{"no" + name: patches for name, patches in _FWD_NO_COPY.items()},
        "nopf": NO_PREFETCH,
        "noo": NO_O,
        # the states' 16-byte stores with a cache hint (an L2 policy that evicts them first, or
        # .cs streaming): whether what they cost is the inputs they push out of L2
        "stevict": [(_WG1_STORE_ALL, _WG1_STORE_EVICT)],
        "stcs": [(_WG1_STORE_ALL, _WG1_STORE_CS)],
        # warpgroup 1's 16-bit states writer (session 21; nostates: gone, the hand-off kept):
        # computed but not stored
        "wg1sink": [
            (
                "    auto write_states = [&](unsigned char* rec) {",
                "    unsigned int abl_sink = 0u;\n    auto write_states = [&](unsigned char* rec) {",
            ),
            (_WG1_STORE_ALL, _WG1_STORE_SINK),
            ("if (p == 0) rec[CAKE_S16_EXP + grp * 128 + d] = (unsigned char)e;", "abl_sink += e;"),
            (
                _WG1_END,
                "        if (H < 0) reinterpret_cast<unsigned int*>(o)[tid] = abl_sink;\n"
                + _WG1_END,
            ),
        ],
        # St's release a relaxed arrive (no ordering of the states' stores before it; not a
        # correct program): whether the release waits for those stores
        "wg1relaxed": [
            (
                _WG1_EMPTY_S,
                '            if (i + 1 < nc) asm volatile("mbarrier.arrive.relaxed.cta.shared::cta.b64 _, [%0];"'
                ' :: "r"(cake_smem_addr(mbEmptyS)) : "memory");\n',
            )
        ],
        "wg1nostore": _WG1_NO_STORE,
        # o's stores alone (warpgroup 1's products kept: t0 >= 0 is not known to the compiler)
        "noostore": [(_O_STORE, _O_STORE.replace("if (r < L)", "if (r < L && t0 < 0)"))],
        "nowgmma": NO_WGMMA,
        "chain": CHAIN,
        # the chain without one of its parts (what each costs of the serial path per chunk):
        # its hand-offs to warpgroup 1 (named barriers), its products, its copies of S^T / Vnew^T
        "chain-nobar": CHAIN
        + [
            ("NOOP:", "#define cake_bar_sync(i, n) ((void)0)"),
            ("NOOP:", "#define cake_bar_arrive(i, n) ((void)0)"),
        ],
        "chain-nowgmma": CHAIN + NO_WGMMA,
        "chain-nostst": CHAIN
        + [
            (
                "St[cake_wg_idx<64>(row_of(x), 64 * hf + pcol(x))] =",
                "if (0) St[cake_wg_idx<64>(row_of(x), 64 * hf + pcol(x))] =",
            )
        ],
        "chain-novnew": CHAIN
        + [
            (
                "Vt[cake_wg_idx<64>(row_of(x), pcol(x))] =",
                "if (0) Vt[cake_wg_idx<64>(row_of(x), pcol(x))] =",
            )
        ],
    },
    "fwd_chunk.gate-g.l2n-off.sm_90a": {
        "halfqa": _CHUNK_HALF_QA,
        "half4": _CHUNK_HALF_4,
        **FWD_CHUNK_STORES,
        **FWD_CHUNK_PHASES,
    },
    "fwd_chunk.gate-sigmoid.x-fp32.l2n-fused.sm_90a": _FUSED_FWD,
    "fwd_chunk.gate-g.l2n-fused.sm_90a": _FUSED_FWD,
    "fwd_chunk.gate-sigmoid.x-fp32.l2n-off.sm_90a": {
        **FWD_CHUNK_STORES,
        **FWD_CHUNK_PHASES,
        "halfqa": _CHUNK_HALF_QA,
        "half4": _CHUNK_HALF_4,
    },
    "bwd_state.sm_90a": {
        "halfqa": _BSTATE_QA,
        "half4": _BSTATE_4 + _BSTATE_BULK_4,
        "noload": NO_LOAD,
        "nostates": BWD_NO_STATES,
        "nodvn": BWD_NO_DVN,
        # the tiles both value blocks read (Kd^T, Aqk, Qg, W), every other piece each (as
        # fwd_state's halfloads of session 18: what a 2-block cluster's multicast loads would move)
        "halfloads": [
            (f"for (int j = 0; j < {n}; ++j) {tail}", f"for (int j = vb; j < {n}; j += 2) {tail}")
            for n, tail in ((8, " // Kd^T"), (4, " // Aqk"), (8, "{  // Qg and W"))
        ],
        # one group's copies left out: Kd^T and Aqk (group a), Qg and W (group b); or one tile
        "noa": _skip_copies(_BWD_COPIES, "kd", "aqk"),
        "nob": _skip_copies(_BWD_COPIES, "qg", "w"),
        "noqg": _skip_copies(_BWD_COPIES, "qg"),
        "now": _skip_copies(_BWD_COPIES, "w"),
        "fewwaits": BWD_FEW_WAITS,
        # dS_end stored on chunk c0's slot for every chunk (L2 hits): its DRAM bytes alone
        "l2ds": [
            (
                "if (dS_end != nullptr) store_global(dS_end + wsi * 16384 + vb * 64);",
                "if (dS_end != nullptr) store_global(dS_end + ((long long)c0 * H + h) * 16384 + vb * 64);",
            )
        ],
        # dS_end (and dh0) at half the bytes: every block skips the odd 8-column groups, every other
        # 32-byte sector (16-bit dS_end's traffic, the conversion not counted)
        "halfds": [
            (
                "for (int x = 0; x < 32; x += 2)\n            *reinterpret_cast<float2*>(dst",
                "for (int x = 0; x < 32; x += 2)\n            if (((x >> 2) & 1) == 0) *reinterpret_cast<float2*>(dst",
            )
        ],
        # its serial chain alone, then without one of its parts (how much a register chain, as
        # kda_fwd_state's since session 10, could take off: docs/notes.md, next session)
        "chain": BWD_CHAIN,
        "chain-nobar": BWD_CHAIN + [("__syncthreads();", ";")],
        "nowgmma": NO_WGMMA + [("NOOP:", "#define cake_wgmma_n32_rs(...) ((void)0)")],
        "chain-nowgmma": BWD_CHAIN
        + [
            ("NOOP:", "#define cake_wgmma_n64_rs(...) ((void)0)"),
            ("NOOP:", "#define cake_wgmma_n32_rs(...) ((void)0)"),
        ],
        "chain-nostst": BWD_CHAIN + [("store_st();", ";")],
        "chain-novt": BWD_CHAIN
        + [
            (
                "Vt[((x & 1 ? vT1 : vT0) ^ hx(x)) + 256 * (x >> 2)] = -rtf32(",
                "if (0) Vt[((x & 1 ? vT1 : vT0) ^ hx(x)) + 256 * (x >> 2)] = -rtf32(",
            )
        ],
    },
    # the precise chain (TF32 hi + lo of S and Vnew) of the rows of split sequences: its cost
    "fwd_state_local.sm_90a": {  # kda_cp only: the local passes
        "wsplit0": _WQ_STORES,
        "wsplit": _WSPLIT,
        "nostg": _WG1_NO_STORE,
        "half4": _STATE_WK,
        # the states altogether (no St copy on the chain, no writer on warpgroup 1)
        "nostates": LOCAL_NO_STATES,
        # the states' parts apart: warpgroup 1 writes nothing (the chain still stores St and waits
        # for its release), or the chain stores no St (warpgroup 1 writes what St holds)
        "nostwrite": [(_LOCAL_WRITE_CALL, "(void)0;")],
        "nostst": [(_LOCAL_ST_STORE, "if (0) " + _LOCAL_ST_STORE)],
        # St's proxy fence (warpgroup 1 reads it with ordinary loads only in the local program)
        "nostfence": [(_ST_FENCE, _ST_FENCE.replace("cake_fence_proxy_async();", ""))],
        "noprecise": NO_PRECISE,
        "nopf": NO_PREFETCH,
        # every product left out, or every load: what the chain's tensor work / its copies cost
        "nowgmma": NO_WGMMA,
        "noload": NO_LOAD,
    },
    # kda_bwd_chunk's L2 prefetches (dS_end in phase 0; the raw gate input x in phase 6) left out
    **{
        f"bwd_chunk.{form}.sm_90a": {
            "nopf": NO_PREFETCH,
            **_BWD_FORM_ABLATIONS.get(form, {}),
            **_NO_FORM6,
        }
        for form in (
            "gate-sigmoid.x-fp32.l2n-off",
            "gate-sigmoid.x-fp32.l2n-fused",
            "gate-g.l2n-fused",
        )
    },
    "seg_combine.sm_90a": {  # kda_cp only: what one step of the walk waits on
        "noload": NO_LOAD,  # no M tiles (the products read whatever the buffers hold)
        "nob": [("if (q == 0 && s + 1 < P - 1) load_b", "if (false) load_b")],
        "nostore": [
            (
                "cake_st_global_v4(X + at(reverse ? f + p - 1 : f + p + 1, r0 + 64 * t), y[t]);",
                "(void)0;",
            )
        ],
        "noproduct": [
            ("for (int j = 0; j < 8; ++j) {", "for (int j = 0; j < 0; ++j) {"),
            ("for (int j = 0; j < 32; j += 2) {", "for (int j = 0; j < 0; j += 2) {"),
        ],
        # the walk's barriers (both, every step): wrong results, the cost of the hand-offs
        "nosync": [
            (
                "__syncthreads();  // M[p] landed for every thread; Xs holds the previous state",
                "(void)0;",
            ),
            ("__syncthreads();  // every read of Xs and of this M buffer is done", "(void)0;"),
        ],
    },
    "bwd_chunk.gate-g.l2n-off.sm_90a": {
        "nopf": NO_PREFETCH,
        # phase 3b's A operand -Kg taken as k itself (no ex2, scaling or rounding; G's loads then
        # unused): the bound on forming -Kg once a block instead of once in each of the four
        # column-quarter warps (session 40's candidate 1; forming it once keeps ~a quarter)
        "nokg": [
            (
                "alo.x = -rtf32(ka.x * rk0 * cake_ex2(ga.x)); alo.y = -rtf32(ka.y * rk0 * cake_ex2(ga.y));\n"
                "            alo.z = -rtf32(ka.z * rk0 * cake_ex2(ga.z)); alo.w = -rtf32(ka.w * rk0 * cake_ex2(ga.w));\n"
                "            ahi.x = -rtf32(kb.x * rk1 * cake_ex2(gb.x)); ahi.y = -rtf32(kb.y * rk1 * cake_ex2(gb.y));\n"
                "            ahi.z = -rtf32(kb.z * rk1 * cake_ex2(gb.z)); ahi.w = -rtf32(kb.w * rk1 * cake_ex2(gb.w));",
                "alo = ka; ahi = kb; (void)ga; (void)gb; (void)rk0; (void)rk1;",
            )
        ],
        # phase 2's B operand (dVn) taken unrounded (the tensor core truncates it): the bound on a
        # rounded copy of dVn made once (session 40's candidate 1, its other half)
        "nodvnr": [
            (
                "mma_k16(acc[ni], alo, ahi, r4(ldt4_at<128>(RC, bq[ni][0], bq[ni][1], kp)));",
                "mma_k16(acc[ni], alo, ahi, ldt4_at<128>(RC, bq[ni][0], bq[ni][1], kp));",
            )
        ],
        # the copies' waits left out one at a time (wrong data, the same traffic): how much of
        # each copy's landing the block waits for. S_c at the end of phase 2; group 2 (k, dO, q,
        # Akk, rq, rk) before phase 3a; dS_end's second half in phase 5
        "noscwait": [
            (
                "cake_cp_async_wait<1>();  // S_c (issued in phase 0: landed by now)",
                "cake_cp_async_wait<2>();  // S_c (issued in phase 0: landed by now)",
            )
        ],
        "nog2wait": [
            (
                "cake_cp_async_wait<0>();  // group 2: k, dO, q, Akk's copy, rq, rk",
                "cake_cp_async_wait<1>();  // group 2: k, dO, q, Akk's copy, rq, rk",
            )
        ],
        "nods1wait": [
            (
                "else cake_cp_async_wait<0>();\n                dgls = ds_land",
                "else cake_cp_async_wait<1>();\n                dgls = ds_land",
            )
        ],
        # no dS_end copies at all (its L2 prefetch stays): what landing 64 KB a block costs
        "nods": [
            (
                "for (int i = 0; i < 4; ++i) cake_cp_async16(tile + (own ^ (4 * i)), src + 4 * i, 16);",
                "for (int i = 0; i < 0; ++i) cake_cp_async16(tile + (own ^ (4 * i)), src + 4 * i, 16);",
            )
        ],
        # phase 5's epilogue (dk, dGamma, the column sums; Dq / Dk moved to RC / DK) left out
        "no5epi": [
            (
                "for (int np = 0; np < 4 / kNi; ++np) {",
                "for (int np = 0; np < 0; ++np) {",
            )
        ],
        # every block reads its head's first chunk (L2 hits; its own rows are still written):
        # what the DRAM side of its ~290 KB of inputs costs
        "l2in": [
            (
                "const long long ws = (long long)c * H + h;",
                "const long long ws = (long long)c * H + h;\n"
                "    const long long rd_base = (long long)h * 128, rws = (long long)h;",
            ),
            (
                "const long long o0 = in_base + (long long)r0 * tok_stride",
                "const long long o0 = rd_base + (long long)r0 * tok_stride",
            ),
            (
                "G + in_base + (long long)gr0 * tok_stride",
                "G + rd_base + (long long)gr0 * tok_stride",
            ),
            (
                "G + in_base + (long long)(L - 1) * tok_stride",
                "G + rd_base + (long long)(L - 1) * tok_stride",
            ),
        ]
        + [
            (f"{t} + ws * {n}", f"{t} + rws * {n}")
            for t, n in (("dVn", 8192), ("TA", 4096), ("dS_end", 16384))
        ]
        + [("(states) + ws * CAKE_S16_BYTES", "(states) + rws * CAKE_S16_BYTES")],
        "nomma": [
            ("NOOP:", "#define cake_mma_tf32(...) ((void)0)"),
            ("NOOP:", "#define cake_wgmma_n32_rs(...) ((void)0)"),  # sm_90a: phases 3a, 4
            ("NOOP:", "#define cake_wgmma_n32(...) ((void)0)"),  # sm_90a: phase 5
        ],
        # dS_end at half its DRAM bytes (rows 64..127 read rows 0..63's lines again, from L2): what
        # a 16-bit dS_end would give bwd_chunk, its widening not counted
        "halfsd": [
            (
                "cake_prefetch_l2(dS_end + ws * 16384 + 32 * tid);",
                "cake_prefetch_l2(dS_end + ws * 16384 + ((32 * tid) & 8191));",
            ),
            (  # both copies (value columns 0..63, 64..127): a thread's row is ds_row(tid)
                "const float* src = half_src + 128 * ds_row(tid)",
                "const float* src = half_src + 128 * (ds_row(tid) & 63)",
            ),
        ],
        # the mma k-loops of one phase each (the per-element work around them stays)
        **_BULK_LOOPS,
        # the four [64 x 128] products' k-loops (3a, 3b, 4, 5) at half their steps: what fp16
        # operands (m16n8k16, two per register) could take off them at most, if they were stored
        # as fp16 in shared memory; and the same loops gone (nok), for scale
        "halfk": [_halve_loop(old) for patches in _BULK_LOOPS.values() for old, _ in patches],
        "f16mma": F16_MMA,
        **_MMA_BY_PHASE,
        **_HALF_WARPS,
        "nok": [patch for patches in _BULK_LOOPS.values() for patch in patches],
        # phase 6's three parts, whole (each n-tile pair runs (c), (a), (b) into one accumulator set,
        # then one epilogue; without (c) the epilogue adds no diagonal pair)
        "no6a": [
            (
                "if (rb > 0) {\n                CAKE_REIDX;",
                "if (false) {\n                CAKE_REIDX;",
            )
        ],
        "no6b": [
            (
                "if (rb < 3) {\n                CAKE_REIDX;",
                "if (false) {\n                CAKE_REIDX;",
            )
        ],
        "no6c": [
            ("bool fast = fast_span;", "bool fast = false;"),
            ("if (!fast) {  // (c) in exact", "if (false) {  // (c) in exact"),
        ],
        # every ex2 of the program as the identity (the MUFU pipe's share, at most; values garbage)
        "noex2": [("NOOP:", "#define cake_ex2(x) (x)")],
        # phase 6's gated B operands not formed per warp (bf16 loads, scales, ex2, hi + lo splits)
        # but read as hi / lo words from shared memory (G's tile: values garbage, finite), two
        # scalar loads an element: the bound on forming them once a block into shared tiles
        # (docs/bwd-chunk-structure.md, session 53), apart from that one formation pass
        **_NO_FORM6,
    },
}


def apply(source: str, patches: list[tuple[str, str]]) -> str:
    for old, new in patches:
        if old == "NOOP:":
            continue
        if old not in source:
            raise SystemExit(f"ablation text not found: {old!r}")
        source = source.replace(old, new)
    for define in [new for old, new in patches if old == "NOOP:"]:
        source = _define_after_definition(source, define)
    return source


def helper_calls(source: str, name: str) -> list[int]:
    """Where `name(` occurs in the program outside line comments: its definition first (headers
    define before they use), then its calls."""
    return [
        m.start()
        for m in re.finditer(rf"\b{name}\s*\(", source)
        if "//" not in source[source.rfind("\n", 0, m.start()) + 1 : m.start()]
    ]


def _define_after_definition(source: str, define: str) -> str:
    """A NOOP macro placed right after its helper's definition, so that every later call sees it:
    in the program's own code, in the headers inlined after (session 55: placed after the last
    header, it missed kda_seg_fold's walk, which lives in cake/fold.cuh), and in the helper's own
    header (cake_ex2's callers in cake/fmath.cuh). A helper the program does not have is left
    alone."""
    name = re.match(r"#define (\w+)", define)
    assert name is not None, define
    calls = helper_calls(source, name.group(1))
    if not calls:
        return source
    depth, i = 0, source.index("{", calls[0])  # the definition's body
    while True:
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        if depth == 0:
            break
        i += 1
    at = source.index("\n", i) + 1
    if any(c < at for c in calls[1:]):
        raise SystemExit(
            f"{name.group(1)}: a call before its definition ends: {define!r} would miss it"
        )
    return source[:at] + define + "\n" + source[at:]


def program_source(tree: Path, name: str) -> str:
    """A rendered program of `tree` by its package-independent name: kda_det's, or kda_cp's for
    the programs only kda_cp has (the combine, the local state program)."""
    det = tree / "artifacts" / "kda_det" / f"{name}.cu"
    return (det if det.exists() else tree / "artifacts" / "kda_cp" / f"{name}.cu").read_text()


def compile_variant(out: Path, name: str, tag: str, source: str) -> None:
    """source compiled for sm_90a into out/<name>.<tag>.cubin; prints its registers and spills."""
    from cake.compile import compile_source
    from cake.spec import Arch

    compiled = compile_source(source, Arch("sm_90a"), f"{name}.{tag}")
    (out / f"{name}.{tag}.cubin").write_bytes(compiled.cubin)
    res = {k: vars(r) for k, r in compiled.resources.items()}
    print(f"{name} {tag}: {json.dumps(res)}", flush=True)


def build(out: Path, only: list[str] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    known = set(ABLATIONS) | {
        f"{n}:{ab}" for n, abs_ in ABLATIONS.items() for ab in [*abs_, "same"]
    }
    unknown = sorted(set(only or []) - known)
    if unknown:
        raise SystemExit(f"ablate build: no such program or ablation: {', '.join(unknown)}")
    for name, ablations in ABLATIONS.items():
        chosen = [ab for ab in ablations if not only or f"{name}:{ab}" in only or name in only]
        if not chosen and f"{name}:same" not in (only or []):
            continue
        # "same", always built beside them: the shipped source compiled here, the harness's
        # control (against it a stale bundle or another NVRTC shows; `time` warns)
        src = program_source(ROOT, name)
        for ab in ["same", *chosen]:
            compile_variant(out, name, ab, apply(src, ablations.get(ab, [])))


def tree_kernels(tree: Path, name: str) -> dict[str, dict[str, int]]:
    """The launch shape (threads, dynamic shared memory) of each kernel of program `name` as
    `tree` declares it (its generators/packages.toml, read by cake's own matrix loader): a tree
    may change them."""
    from cake.matrix import load_matrix
    from cake.spec import Stage
    from cake.tree import Tree

    spec = load_matrix(Tree(tree)).stages[Stage(name.split(".", 1)[0])]
    return {k.symbol: {"threads": k.threads, "smem": k.smem} for k in spec.kernels}


def build_trees(out: Path, trees: list[str], programs: list[str]) -> None:
    """Variants that are other versions of a program: NAME=DIR compiles DIR's rendered program
    (a worktree of another branch or commit) as variant `tree-NAME`, with DIR's launch shape of
    its kernels beside it (<name>.tree-NAME.json; time launches the variant with it)."""
    out.mkdir(parents=True, exist_ok=True)
    for spec in trees:
        tag, _, where = spec.partition("=")
        for name in programs:
            compile_variant(out, name, f"tree-{tag}", program_source(Path(where), name))
            shape = json.dumps(tree_kernels(Path(where), name))
            (out / f"{name}.tree-{tag}.json").write_text(shape + "\n")


def variant_function(fn: Any, cubin: Path) -> Any:
    """The kernel of `cubin` standing in for the shipped `fn`, launched with the shape recorded
    beside the cubin (a tree variant's own threads and shared memory) or else the shipped one."""
    from cake.launch import Module

    entry = fn.entry
    shape = cubin.with_suffix(".json")
    if shape.exists():
        kernels = json.loads(shape.read_text())
        entry = entry.model_copy(
            update={
                "kernels": tuple(
                    k.model_copy(update=kernels.get(k.symbol, {})) for k in entry.kernels
                )
            }
        )
    return Module(entry, cubin.read_bytes(), fn.device)[fn.meta.symbol]


def capture(step: Any) -> tuple[list[tuple[Any, tuple[int, ...], tuple[Any, ...]]], list[Any]]:
    """Every launch of one step: (Function, grid, args), the tensors kept alive, and every
    workspace the step carved (their flat tensors), to be kept alive by the caller: a launch takes
    a carved buffer by its bare address, which would otherwise dangle once autograd frees the
    workspace (the next allocations, the bit check's reference copies among them, would land on a
    kernel's inputs)."""
    import torch

    import cake.launch as launch
    from cake.kda.workspace import Carved

    calls: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]] = []
    carved: list[Any] = []
    original = launch.Function.__call__
    carve = Carved.__init__

    def recording(self: Any, grid: tuple[int, ...], *args: Any, stream: int | None = None) -> None:
        calls.append((self, grid, args))
        original(self, grid, *args, stream=stream)

    def keeping(self: Any, layout: Any, flat: Any, extra: Any) -> None:
        carve(self, layout, flat, extra)
        carved.append(flat)

    launch.Function.__call__ = recording  # type: ignore[method-assign]
    launch.GRAPHS = False  # every kernel through Function.__call__, so that each is recorded
    Carved.__init__ = keeping  # type: ignore[method-assign]
    try:
        step()
        torch.cuda.synchronize()
    finally:
        launch.Function.__call__ = original  # type: ignore[method-assign]
        launch.GRAPHS = None
        Carved.__init__ = carve  # type: ignore[method-assign]
    return calls, carved


def time_calls(fn: Any, grid: tuple[int, ...], args: tuple[Any, ...], reps: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn(grid, *args)
    start.record()
    for _ in range(reps):
        fn(grid, *args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def same_bits(
    fn: Any, grid: tuple[int, ...], args: tuple[Any, ...], carved: list[Any], ref: list[Any]
) -> str:
    """Run fn once and compare every tensor argument, then every carved workspace (the buffers a
    launch takes by address), with ref (the reference kernel's state after its run, in that
    order): the kernel's outputs, bit for bit. Differing workspaces are numbered after the
    arguments (w0, w1, ...)."""
    import torch

    fn(grid, *args)
    torch.cuda.synchronize()
    now = [*args, *carved]
    bad = [
        str(i) if i < len(args) else f"w{i - len(args)}"
        for i, (a, r) in enumerate(zip(now, ref, strict=True))
        if isinstance(a, torch.Tensor) and not torch.equal(a, r)
    ]
    return "same bits" if not bad else f"bits differ in args {bad}"


CONTROL_SLACK = 0.03  # run-to-run spread of a kernel's median is ~1 %


def time_main(
    d: Path, row: str, variant: str, reps: int, rounds: int, check: bool, ref_tag: str = "shipped"
) -> None:
    import torch
    from bench import cake_step, parse_variants

    (v,) = parse_variants(variant)
    _, step = cake_step(row, v)
    step()
    calls, carved = capture(step)
    out: dict[str, dict[str, float]] = {}
    bits: dict[str, dict[str, str]] = {}
    for fn, grid, args in calls:
        name = fn.entry.program.split(".", 1)[1]
        key = f"{name} {fn.meta.symbol} grid={grid}"
        cubins = sorted(d.glob(f"{name}.*.cubin"))
        if not cubins or key in out:
            continue
        variants = {"shipped": fn}
        for cubin in cubins:
            tag = cubin.name[len(name) + 1 : -len(".cubin")]
            variants[tag] = variant_function(fn, cubin)
        samples: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(rounds):
            for tag, f in variants.items():
                samples[tag].append(time_calls(f, grid, args, reps))
        out[key] = {tag: statistics.median(s) for tag, s in samples.items()}
        if check:
            variants.get(ref_tag, fn)(grid, *args)
            torch.cuda.synchronize()
            ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in (*args, *carved)]
            bits[key] = {
                tag: same_bits(f, grid, args, carved, ref)
                for tag, f in variants.items()
                if tag != ref_tag
            }
            del ref
        torch.cuda.synchronize()
    print(f"{row} {variant}: median of {rounds} rounds of {reps} launches, us")
    for key, res in out.items():
        base = res["shipped"]
        mark = f"  [{bits[key]['shipped']}]" if "shipped" in bits.get(key, {}) else ""
        print(f"  {key}: shipped {base:.1f}{mark}")
        for tag, t in res.items():
            if tag != "shipped":
                note = f"  [{bits[key].get(tag, 'the reference')}]" if key in bits else ""
                print(f"    {tag:12} {t:9.1f} ({100 * (t / base - 1):+.1f} %){note}")
        for line in control_warning(res):
            print(line)


def control_warning(res: dict[str, float]) -> list[str]:
    """A line when the shipped program runs apart from this checkout's source compiled here (the
    `same` or `tree-p0` variant): the device then ran another build of it (a stale bundle makes
    it compile the program with its own NVRTC: session 19's first call measured a 45 % slower
    kda_fwd_state so), and the percentages against `shipped` measure that build."""
    control = next((t for t in ("same", "tree-p0") if t in res), None)
    if control is None or abs(res[control] / res["shipped"] - 1) <= CONTROL_SLACK:
        return []
    return [
        f"    warning: shipped runs {100 * (res['shipped'] / res[control] - 1):+.1f} % from "
        f"{control} (the same source compiled here): a stale bundle or another NVRTC? read the "
        f"variants against {control}"
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", type=Path, default=ROOT / ".ablate")
    b.add_argument("--only", default=None, help="program or program:ablation, comma-separated")
    b.add_argument(
        "--tree", action="append", default=[], help="NAME=DIR: DIR's programs as variant tree-NAME"
    )
    b.add_argument("--programs", default="", help="with --tree: the programs, comma-separated")
    t = sub.add_parser("time")
    t.add_argument("--dir", type=Path, default=ROOT / ".ablate")
    t.add_argument("--row", default="1doc")
    t.add_argument("--variant", default="g:off:saved")
    t.add_argument("--reps", type=int, default=10)
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument(
        "--check",
        action="store_true",
        help="also compare each variant's outputs with the reference's",
    )
    t.add_argument("--ref", default="shipped", help="with --check: the reference variant (its tag)")
    args = p.parse_args()
    if args.cmd == "build" and args.tree:
        build_trees(args.out, args.tree, [p for p in args.programs.split(",") if p])
    elif args.cmd == "build":
        build(args.out, args.only.split(",") if args.only else None)
    else:
        time_main(args.dir, args.row, args.variant, args.reps, args.rounds, args.check, args.ref)


if __name__ == "__main__":
    main()
