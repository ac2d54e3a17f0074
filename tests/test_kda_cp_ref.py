"""CPU tests of the segment-parallel (CP) KDA reference, tests/kda_cp_ref.py (docs/cp-design.md).

1. float64: CP == serial to 1e-12 for P in {1, 2, 3, 8} on ragged varlen input (sequences shorter
   than P chunks, an empty one), with and without initial state and dht; the pieces (transition,
   carry, carries of the backward) equal what the serial pass and the explicit product of the
   per-chunk A_c give; gradients equal torch.autograd of the float64 reference.
2. float32 with TF32 operands (the kernels' arithmetic, emulated operand by operand) on the 000
   seed's long slow-decay input: per-window error flat across windows, no growth with P, CP close
   to serial. The same checks flag the seed's bug (pass 1 with bf16 operands).
3. Negative controls: a wrong transition or combine order is caught by the exactness checks.
"""

from __future__ import annotations

import pytest
import torch
from kda_cp_ref import (
    FP64,
    KERNEL,
    Precision,
    _stored,
    auto_segments,
    chunk_quantities,
    cp_kda,
    fwd_pass,
    segment_bounds,
    tf32_rna,
    window_errors,
)
from kda_inputs import make_inputs, make_long_input
from kda_reference import kda_reference_grads, rel_l2

F64 = torch.float64
F32 = torch.float32
RAGGED = [1, 63, 0, 65, 130, 200, 700]  # chunks: 1, 1, 0, 2, 3, 4, 11
GRADS = ("dq", "dk", "dv", "dg", "dbeta")
EXACT = 1e-12


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# Small pieces
# ---------------------------------------------------------------------------------------------


def test_segment_bounds():
    assert segment_bounds(10, 1) == [(0, 10)]
    assert segment_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert segment_bounds(2, 8) == [(0, 1), (1, 2)]
    assert segment_bounds(0, 4) == []
    for n in range(0, 40):
        for P in (1, 2, 3, 8, 64):
            s = segment_bounds(n, P)
            assert len(s) == min(n, P)
            assert all(b > a for a, b in s)
            assert [a for a, _ in s[1:]] == [b for _, b in s[:-1]]
            if s:
                assert s[0][0] == 0 and s[-1][1] == n
                sizes = [b - a for a, b in s]
                assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError):
        segment_bounds(4, 0)


def test_tf32_rna():
    one = 1.0
    ulp = 2.0**-10  # TF32 keeps 10 explicit mantissa bits
    x = torch.tensor(
        [one + ulp / 2, -(one + ulp / 2), one + ulp / 4, one + 3 * ulp / 4, one + ulp * 1.5, 3.0],
        dtype=F32,
    )
    want = torch.tensor(
        [one + ulp, -(one + ulp), one, one + ulp, one + 2 * ulp, 3.0], dtype=F32
    )  # ties away from zero (1.5 ulp -> 2 ulp, away), not to even
    assert torch.equal(tf32_rna(x), want)
    r = tf32_rna(torch.randn(1000, dtype=F32))
    assert int((r.view(torch.int32) & 0x1FFF).abs().sum()) == 0


def test_auto_segments():
    # one 64K sequence: the fix-up pass (2 blocks per (segment, head)) fills 132 SMs
    assert auto_segments([65536], 1) == [64]
    assert auto_segments([65536], 4) == [16]
    assert auto_segments([65536], 64) == [1]
    # short sequences are never split and take their share of the SMs
    assert auto_segments([65536, 100, 100], 4) == [14, 1, 1]  # (132 - 16) // 8
    assert auto_segments([600], 1) == [1]  # 10 chunks < 2 * 8
    assert auto_segments([1024 * 8], 1) == [16]  # 128 chunks, at least 8 chunks per segment


# ---------------------------------------------------------------------------------------------
# float64 exactness
# ---------------------------------------------------------------------------------------------


def _small(state: str, heads=2, hv_mult=1, K=16, seed=0):
    x = make_inputs(
        RAGGED,
        heads=heads,
        head_k=K,
        head_v=K,
        regime="mixed",
        initial_state=state in ("h0", "both"),
        seed=seed,
    )
    if hv_mult > 1:  # grouped value heads: v, g, beta, h0 per value head
        rep = lambda t: None if t is None else t.repeat_interleave(hv_mult, dim=2)  # noqa: E731
        x = type(x)(
            **{
                **x.__dict__,
                "v": rep(x.v),
                "g": rep(x.g),
                "beta": rep(x.beta),
                "initial_state": None
                if x.initial_state is None
                else x.initial_state.repeat_interleave(hv_mult, dim=1),
            }
        )
    gen = torch.Generator().manual_seed(100 + seed)
    do = torch.randn(x.v.shape, generator=gen, dtype=F64)
    N = len(RAGGED)
    dht = (
        torch.randn(N, x.v.shape[2], K, K, generator=gen, dtype=F64)
        if state in ("dht", "both")
        else None
    )
    return x, do, dht


def _run(x, do, dht, P, **kw):
    return cp_kda(
        x.q,
        x.k,
        x.v,
        x.g,
        x.beta,
        initial_state=x.initial_state,
        cu_seqlens=x.cu_seqlens,
        do=do,
        dht=dht,
        P=P,
        **kw,
    )


def _max_diff(a: dict, b: dict) -> dict[str, float]:
    names = ["o", "ht", *GRADS] + (["dh0"] if "dh0" in b else [])
    out = {n: rel_l2(a[n], b[n]) for n in names}
    # per-chunk intermediates of pass 3 (what kda_bwd_chunk reads)
    for key, part in (("states", "fwd"), ("dS_end", "bwd"), ("dVn", "bwd")):
        worst = 0.0
        for ra, rb in zip(a["seqs"], b["seqs"], strict=True):
            ta, tb = ra[part][key], rb[part][key]
            if ta is not None and ta.numel():
                worst = max(worst, rel_l2(ta, tb))
        out[key] = worst
    return out


@pytest.mark.parametrize("state", ["none", "h0", "dht", "both"])
def test_cp_equals_serial_fp64(state):
    x, do, dht = _small(state)
    serial = _run(x, do, dht, 1)
    for P in (2, 3, 8):
        cp = _run(x, do, dht, P)
        # the split really happened: min(P, chunks) segments per sequence, transitions formed
        for n_tok, rec in zip(RAGGED, cp["seqs"], strict=True):
            nc = -(-n_tok // 64)
            assert len(rec["fwd"]["segs"]) == min(P, nc)
            assert (rec["fwd"]["M"] is not None) == (min(P, nc) > 1)
        diff = _max_diff(cp, serial)
        bad = {n: e for n, e in diff.items() if not e <= EXACT}
        assert not bad, f"P={P}, {state}: CP differs from serial: {bad}"


def test_cp_grouped_heads_and_compose_fp64():
    x, do, dht = _small("both", heads=1, hv_mult=2, seed=3)
    serial = _run(x, do, dht, 1)
    for bt in ("forward", "compose"):
        cp = _run(x, do, dht, 3, bwd_transition=bt)
        diff = _max_diff(cp, serial)
        assert max(diff.values()) <= EXACT, (bt, diff)


def test_cp_grads_match_autograd_reference():
    x, do, dht = _small("both", seed=1)
    ref = kda_reference_grads(x, do, dht)
    cp = _run(x, do, dht, 3)
    for n in ("o", "ht", *GRADS, "dh0"):
        assert rel_l2(cp[n], ref[n]) <= 1e-10, (n, rel_l2(cp[n], ref[n]))


def test_pieces_transition_and_carries_fp64():
    """The exposed pieces, one by one: M_p = explicit product of A_c = Diag(gl) - Kd^T W;
    B_p = serial pass from zero over the segment; X_p = serial state at the segment's start;
    backward Y_p = serial dS at the segment's start, and Y_p = M_p^T Y_{p+1} + dB_p."""
    x, do, dht = _small("both", heads=1, K=16, seed=2)
    serial = _run(x, do, dht, 1)
    cp = _run(x, do, dht, 4)
    chunks = chunk_quantities(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)
    n = RAGGED.index(700)
    st = _stored(chunks[n].st, FP64)
    fw, bw = cp["seqs"][n]["fwd"], cp["seqs"][n]["bwd"]
    s_fw, s_bw = serial["seqs"][n]["fwd"], serial["seqs"][n]["bwd"]
    K = st["W"].shape[-1]
    for p, (c0, c1) in enumerate(fw["segs"]):
        A = torch.eye(K, dtype=F64).expand(1, K, K)
        for c in range(c0, c1):
            Ac = torch.diag_embed(st["gl"][c]) - st["KdT"][c] @ st["W"][c]
            A = Ac @ A
        assert rel_l2(fw["M"][p], A) <= EXACT
        Bp, _, _ = fwd_pass(
            st, [(c0, c1)], torch.zeros(1, *fw["X"].shape[1:], dtype=F64), lambda t: t
        )
        assert rel_l2(fw["B"][p], Bp[0]) <= EXACT
        assert rel_l2(fw["X"][p], s_fw["states"][c0]) <= EXACT  # the carry = the true start
        # backward: the carry Y_p is the serial gradient of the segment's start state
        want = s_bw["dS_end"][c0 - 1] if c0 > 0 else serial["dh0"][n]
        assert rel_l2(bw["Y"][p], want) <= EXACT
    # carry identity of the backward: Y_p = M_p^T Y_{p+1} + dB_p for p >= 1
    for p in range(1, len(fw["segs"])):
        y = fw["M"][p].transpose(-1, -2) @ bw["Y"][p + 1] + bw["dB"][p]
        assert rel_l2(bw["Y"][p], y) <= EXACT


def test_exactness_checks_can_fail():
    """Negative controls: transposed transitions or a wrong combine order must be caught."""
    import kda_cp_ref as ref_mod

    x, do, dht = _small("both", seed=4)
    serial = _run(x, do, dht, 1)
    orig = ref_mod.fwd_pass

    def transposed(st, segs, X, rnd, *, U=None, want_o=True):
        S, Oc, states = orig(st, segs, X, rnd, U=U, want_o=want_o)
        V = st["U"].shape[-1]
        if U is not None:  # pass 1: corrupt the transition columns
            S = S.clone()
            S[..., V:] = S[..., V:].transpose(-1, -2)
        return S, Oc, states

    ref_mod.fwd_pass = transposed
    try:
        bad = _run(x, do, dht, 3)
    finally:
        ref_mod.fwd_pass = orig
    assert rel_l2(bad["o"], serial["o"]) > 1e-6
    # reverse combine order in the forward: skip one carry
    orig_seq = ref_mod.cp_forward_seq

    def drop_carry(st, P, h0, prec):
        out = orig_seq(st, P, h0, prec)
        if out["M"] is not None:
            X = out["X"].clone()
            X[-1] = out["B"][-2]  # forgets M X
            S_end, Oc, states = orig(st, out["segs"], X, prec.rnd, want_o=True)
            out.update(X=X, o=Oc, states=states, ht=S_end[-1])
        return out

    ref_mod.cp_forward_seq = drop_carry
    try:
        bad = _run(x, do, dht, 3)
    finally:
        ref_mod.cp_forward_seq = orig_seq
    assert rel_l2(bad["o"], serial["o"]) > 1e-6


# ---------------------------------------------------------------------------------------------
# float32 / TF32 on the 000 seed's long slow-decay input
# ---------------------------------------------------------------------------------------------

LONG_T = 8192
WINDOW = 1024
LONG_PS = (1, 8, 64)
ANISO_T = 4096
LEVEL = 2.5e-3  # acceptance: per-head, per window vs float64
VS_SERIAL = 1e-3  # acceptance: CP vs serial
FLAT = 1.2  # acceptance: last window within 1.2x of the first
NO_GROWTH = 1.5  # worst window at P vs worst window at P = 1
FIELDS = ("o", *GRADS)


def _aniso_keys(x, dims: int = 16, leak: float = 0.05, seed: int = 7):
    """The seed input with keys concentrated in `dims` of the 128 dimensions (the rest scaled by
    `leak`): the state remembers the other directions for a long time, so the segment transitions
    are close to non-contracting there (the regime of the seed's real slow-decay heads). With
    isotropic unit keys a 2K-token transition is ~1e-5 and hides composition errors."""
    gen = torch.Generator().manual_seed(seed)
    kk = torch.randn(x.k.shape, generator=gen)
    kk[..., dims:] *= leak
    k = (kk / kk.norm(dim=-1, keepdim=True)).to(torch.bfloat16)
    return type(x)(**{**x.__dict__, "k": k})


def _long(kind: str, T: int, Ps, precs):
    x = make_long_input(T, 1)
    if kind == "aniso":
        x = _aniso_keys(x)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(x.v.shape, generator=gen).to(torch.bfloat16).to(F64)
    dht = torch.randn(1, 1, 128, 128, generator=gen, dtype=F64)
    chunks = chunk_quantities(x.q, x.k, x.v, x.g, x.beta)
    kw = dict(do=do, dht=dht, chunks=chunks)
    ref = cp_kda(x.q, x.k, x.v, x.g, x.beta, P=1, prec=FP64, **kw)
    runs = {
        (P, name): cp_kda(x.q, x.k, x.v, x.g, x.beta, P=P, prec=prec, **kw)
        for name, prec in precs.items()
        for P in Ps
    }
    return x, kw, ref, runs


@pytest.fixture(scope="module")
def long_case():
    return _long("seed", LONG_T, LONG_PS, {"kernel": KERNEL})


@pytest.fixture(scope="module")
def aniso_case():
    plain = Precision(F32, "tf32", None, "tf32")  # TF32 combine without the fp32 diagonal
    return _long("aniso", ANISO_T, (1, 64), {"kernel": KERNEL, "plain": plain})


def _check(run, ref, serial) -> list[str]:
    """The acceptance checks on one emulated run; returns the violations."""
    bad = []
    for f in FIELDS:
        w = [e[0] for e in window_errors(run[f], ref[f], WINDOW)]
        if max(w) > LEVEL:
            bad.append(f"{f}: window error {max(w):.2e} > {LEVEL}")
        if w[-1] > FLAT * w[0]:
            bad.append(f"{f}: last window {w[-1]:.2e} > {FLAT} x first {w[0]:.2e}")
        if serial is not None:
            s = max(e[0] for e in window_errors(run[f], serial[f], WINDOW))
            if s > VS_SERIAL:
                bad.append(f"{f}: CP vs serial {s:.2e} > {VS_SERIAL}")
            ws = max(e[0] for e in window_errors(serial[f], ref[f], WINDOW))
            if max(w) > NO_GROWTH * ws:
                bad.append(f"{f}: worst window {max(w):.2e} > {NO_GROWTH} x serial's {ws:.2e}")
    for f in ("ht",):
        e = rel_l2(run[f], ref[f])
        if e > LEVEL:
            bad.append(f"{f}: {e:.2e} > {LEVEL}")
    return bad


def _table(title, ref, runs, serial_key) -> str:
    lines = [title, "per-window rel-L2 vs float64: first / last / max (max CP-vs-serial)"]
    for (P, name), run in runs.items():
        row = f"{name:6s} P={P:3d} ht {rel_l2(run['ht'], ref['ht']):.2e}"
        for f in FIELDS:
            w = [e[0] for e in window_errors(run[f], ref[f], WINDOW)]
            s = (
                max(e[0] for e in window_errors(run[f], runs[serial_key][f], WINDOW))
                if P > 1
                else 0.0
            )
            row += f" | {f} {w[0]:.2e} {w[-1]:.2e} {max(w):.2e} ({s:.1e})"
        lines.append(row)
    return "\n".join(lines)


def test_long_slow_decay_tf32_flat_and_no_growth(long_case):
    _x, _kw, ref, runs = long_case
    print(
        "\n"
        + _table(
            f"seed input, T={LONG_T}, H=1, fp32 state, TF32 operands", ref, runs, (1, "kernel")
        )
    )
    for (P, _name), run in runs.items():
        bad = _check(run, ref, runs[(1, "kernel")] if P > 1 else None)
        assert not bad, f"P={P}: {bad}"


def test_long_diag_split_combine_is_caught(long_case):
    """Negative control: the combine with the fp32 diagonal split (Diag(Π gl) exact, remainder
    TF32) fails on CONTRACTING transitions (isotropic keys: M - Diag(d) >> M), in the backward
    carries (dht enters through M^T)."""
    x, kw, ref, runs = long_case
    diag = Precision(F32, "tf32", None, "diag_tf32")
    run = cp_kda(x.q, x.k, x.v, x.g, x.beta, P=8, prec=diag, **kw)
    bad = _check(run, ref, runs[(1, "kernel")])
    print(f"\ndiag_tf32 combine, P=8: {bad}")
    assert bad


def test_aniso_keys_plain_tf32_combine_is_caught(aniso_case):
    """Near-non-contracting transitions: the planned combine (3xTF32) stays at the serial level at
    P = 64; a plain TF32 combine grows with P (caught by the same checks)."""
    _x, _kw, ref, runs = aniso_case
    print("\n" + _table(f"anisotropic keys, T={ANISO_T}, H=1", ref, runs, (1, "kernel")))
    serial = runs[(1, "kernel")]
    assert not _check(serial, ref, None)
    bad = _check(runs[(64, "kernel")], ref, serial)
    assert not bad, bad
    assert _check(runs[(64, "plain")], ref, serial), "plain TF32 combine should have been caught"


def test_long_bf16_local_pass_is_caught(long_case):
    """The 000 seed's bug: pass 1 (which forms B_p and the transitions) with bf16 operands. The
    same acceptance checks must reject it (forward only; o and ht)."""
    x, kw, ref, runs = long_case
    seed_bug = Precision(F32, "tf32", "bf16", "tf32")
    kw = {n: t for n, t in kw.items() if n not in ("do", "dht")}
    run = cp_kda(x.q, x.k, x.v, x.g, x.beta, P=64, prec=seed_bug, **kw)
    w = [e[0] for e in window_errors(run["o"], ref["o"], WINDOW)]
    s = max(e[0] for e in window_errors(run["o"], runs[(1, "kernel")]["o"], WINDOW))
    print(
        f"\nbf16 local pass, P=64: o per window {[f'{e:.1e}' for e in w]}, vs serial {s:.2e}, "
        f"ht {rel_l2(run['ht'], ref['ht']):.2e}"
    )
    assert s > VS_SERIAL or max(w) > LEVEL or w[-1] > FLAT * w[0]
