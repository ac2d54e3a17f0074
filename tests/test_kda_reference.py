"""CPU tests of the float64 KDA reference (tests/kda_reference.py) and its input generators.

The reference is the ground truth for every kernel test, so it is itself checked three ways:
against a deliberately naive per-(sequence, head) loop of docs/kda.md's four steps, chunk form
against token form, and autograd gradients against finite differences.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from kda_inputs import (
    GATE_REGIMES,
    LONG_LOG_DECAY,
    KDAInputs,
    make_inputs,
    make_long_input,
    pack_lengths,
)
from kda_reference import (
    chunk_kda_ref,
    kda_reference,
    kda_reference_grads,
    l2norm,
    raw_gate,
    recurrent_kda,
    rel_l2,
    rel_l2_per_head,
)

F64 = torch.float64
RAGGED = [1, 63, 65, 200]


def naive_kda(q, k, v, g, beta, scale, h0, cu_seqlens):
    """docs/kda.md's recurrence with explicit loops over sequences, heads and tokens.

    Shares no code with the reference: no padding, no batching, no einsum.
    """
    q, k, v, g, beta = (x[0].to(F64) for x in (q, k, v, g, beta))
    cu = cu_seqlens.tolist()
    H, V = v.shape[1], v.shape[2]
    o = torch.zeros(q.shape[0], H, V, dtype=F64)
    finals = []
    for n in range(len(cu) - 1):
        per_head = []
        for h in range(H):
            S = h0[n, h].to(F64).clone()
            for t in range(cu[n], cu[n + 1]):
                S = torch.diag(torch.exp(g[t, h])) @ S
                e = v[t, h] - S.T @ k[t, h]
                S = S + beta[t, h] * torch.outer(k[t, h], e)
                o[t, h] = S.T @ (scale * q[t, h])
            per_head.append(S)
        finals.append(torch.stack(per_head))
    return o.unsqueeze(0), torch.stack(finals)


def small(lengths=RAGGED, **kw) -> KDAInputs:
    kw.setdefault("heads", 2)
    kw.setdefault("head_k", 8)
    kw.setdefault("head_v", 4)
    return make_inputs(lengths, **kw)


# forward: the two forms against the definition and each other


@pytest.mark.parametrize("regime", ["mixed", "fast"])
def test_recurrent_matches_naive_loop(regime):
    x = small([1, 5, 17], regime=regime, initial_state=True, seed=3)
    scale = 0.37
    o, ht = recurrent_kda(x.q, x.k, x.v, x.g, x.beta, scale, x.initial_state, x.cu_seqlens)
    o_ref, ht_ref = naive_kda(x.q, x.k, x.v, x.g, x.beta, scale, x.initial_state, x.cu_seqlens)
    assert o.dtype == F64 and ht.dtype == F64
    assert rel_l2(o, o_ref) < 1e-14
    assert rel_l2(ht, ht_ref) < 1e-14


@pytest.mark.parametrize("regime", GATE_REGIMES)
@pytest.mark.parametrize("h0", [False, True], ids=["h0-zero", "h0-given"])
def test_chunk_matches_recurrent_ragged(regime, h0):
    x = small(regime=regime, initial_state=h0, seed=7)
    scale = x.q.shape[-1] ** -0.5
    args = (x.q, x.k, x.v, x.g, x.beta, scale, x.initial_state, x.cu_seqlens)
    o_c, ht_c = chunk_kda_ref(*args)
    o_r, ht_r = recurrent_kda(*args)
    assert o_c.shape == (1, sum(RAGGED), 2, 4) and ht_c.shape == (len(RAGGED), 2, 8, 4)
    assert torch.isfinite(o_c).all() and torch.isfinite(ht_c).all()
    assert rel_l2(o_c, o_r) < 1e-12
    assert rel_l2(ht_c, ht_r) < 1e-12
    # per sequence too, so a short sequence cannot hide behind the long one's norm
    cu = x.cu_seqlens.tolist()
    for n in range(len(RAGGED)):
        assert rel_l2(o_c[:, cu[n] : cu[n + 1]], o_r[:, cu[n] : cu[n + 1]]) < 1e-12


def test_chunk_matches_recurrent_plain_batch_and_gva():
    # plain [B,T] batch (T not a multiple of the chunk) and 2 value heads per query/key head
    gen = torch.Generator().manual_seed(11)
    B, T, H, HV, K, V = 2, 70, 1, 2, 8, 4
    q = torch.randn(B, T, H, K, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=F64), dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen, dtype=F64)
    g = -torch.rand(B, T, HV, K, generator=gen, dtype=F64)
    beta = torch.rand(B, T, HV, generator=gen, dtype=F64)
    o_c, ht_c = chunk_kda_ref(q, k, v, g, beta, 0.5)
    o_r, ht_r = recurrent_kda(q, k, v, g, beta, 0.5)
    assert o_c.shape == (B, T, HV, V) and ht_c.shape == (B, HV, K, V)
    assert rel_l2(o_c, o_r) < 1e-12 and rel_l2(ht_c, ht_r) < 1e-12
    # value head 1 reads query/key head 0: same as running it alone with H = 1
    o_1, _ = recurrent_kda(q, k, v[:, :, 1:], g[:, :, 1:], beta[:, :, 1:], 0.5)
    assert rel_l2(o_r[:, :, 1:], o_1) < 1e-14


def test_extreme_gate_wipes_state():
    # g = -1000 makes exp(g) underflow to 0: the state before a token is forgotten, so
    # o_t = s * beta_t * (k_t . q_t) v_t exactly, whatever the initial state.
    x = small([3, 70], regime="extreme", initial_state=True, seed=5)
    scale = 0.25
    o, _ = chunk_kda_ref(x.q, x.k, x.v, x.g, x.beta, scale, x.initial_state, x.cu_seqlens)
    q, k, v, beta = (t.to(F64) for t in (x.q, x.k, x.v, x.beta))
    expected = scale * (beta * (q * k).sum(-1))[..., None] * v
    assert rel_l2(o, expected) < 1e-14


# pack invariance


def test_pack_invariance():
    x = small(
        [40, 65, 130], regime="mixed", gate="raw", lower_bound=-5.0, initial_state=True, seed=9
    )
    do = torch.randn(x.v.shape, generator=torch.Generator().manual_seed(1))
    packed = kda_reference_grads(x, do)
    cu = x.cu_seqlens.tolist()
    for n in range(3):
        sl = slice(cu[n], cu[n + 1])
        alone = KDAInputs(
            q=x.q[:, sl],
            k=x.k[:, sl],
            v=x.v[:, sl],
            g=x.g[:, sl],
            beta=x.beta[:, sl],
            cu_seqlens=pack_lengths([cu[n + 1] - cu[n]]),
            initial_state=x.initial_state[n : n + 1],
            A_log=x.A_log,
            dt_bias=x.dt_bias,
            use_gate_in_kernel=True,
            lower_bound=-5.0,
        )
        res = kda_reference_grads(alone, do[:, sl])
        for name in ("o", "dq", "dk", "dv", "dg", "dbeta"):
            assert rel_l2(res[name], packed[name][:, sl]) < 1e-14, name
        assert rel_l2(res["ht"], packed["ht"][n : n + 1]) < 1e-14
        assert rel_l2(res["dh0"], packed["dh0"][n : n + 1]) < 1e-14


def test_varlen_equal_lengths_matches_plain_batch():
    x = small([50, 50], regime="fast", seed=2)
    o_v, ht_v = kda_reference(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)

    def unpack(t):
        return t.reshape(2, 50, *t.shape[2:])

    o_b, ht_b = kda_reference(unpack(x.q), unpack(x.k), unpack(x.v), unpack(x.g), unpack(x.beta))
    assert rel_l2(o_v.reshape(2, 50, 2, 4), o_b) < 1e-14
    assert rel_l2(ht_v, ht_b) < 1e-14


# gradients

GRADCHECK_CASES = {
    "g": dict(gate="g", regime="fast"),
    "g-l2n-sigmoid": dict(
        gate="g", regime="mixed", l2norm_in_kernel=True, beta_sigmoid_in_kernel=True
    ),
    "raw-softplus": dict(gate="raw"),
    "raw-lb": dict(gate="raw", lower_bound=-5.0, l2norm_in_kernel=True),
}


@pytest.mark.parametrize("form", ["chunk", "recurrent"])
@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck(case, form):
    # lengths 3 and 6 with chunk size 4 in the chunk form: two chunks, a short last chunk and a
    # sequence shorter than a chunk all carry gradient.
    x = make_inputs(
        [3, 6],
        heads=2,
        head_k=4,
        head_v=4,
        initial_state=True,
        dtype=F64,
        gate_dtype=F64,
        seed=4,
        **GRADCHECK_CASES[case],
    )
    names = x.grad_names()
    leaves = [getattr(x, n).detach().to(F64).clone().requires_grad_(True) for n in names]
    flags = {n: t for n, t in x.as_kwargs().items() if n not in names}

    def fn(*tensors):
        kw = {**flags, **dict(zip(names, tensors, strict=True)), "scale": 0.5}
        if form == "recurrent":
            return kda_reference(**kw, form="recurrent")
        # A chunk size of 4 needs chunk_kda_ref itself; the input transforms are the ones
        # kda_reference applies (checked separately in test_fused_flags_equal_explicit_*).
        q, k, beta, g = kw["q"], kw["k"], kw["beta"], kw["g"]
        if x.use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        if x.use_beta_sigmoid_in_kernel:
            beta = torch.sigmoid(beta)
        if x.use_gate_in_kernel:
            g = raw_gate(g, kw["A_log"], kw["dt_bias"], x.lower_bound)
        return chunk_kda_ref(
            q, k, kw["v"], g, beta, 0.5, kw["initial_state"], x.cu_seqlens, chunk_size=4
        )

    # Full Jacobian comparison for the case with the most inputs (L2 norm, lower-bound gate with
    # A_log and dt_bias, initial state); the random-projection fast mode for the rest keeps the
    # file well under its time budget.
    full = form == "chunk" and case == "raw-lb"
    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=not full)


@pytest.mark.parametrize("regime", GATE_REGIMES)
def test_chunk_gradients_match_recurrent(regime):
    x = small(regime=regime, initial_state=True, seed=13)
    gen = torch.Generator().manual_seed(0)
    do = torch.randn(x.v.shape, generator=gen, dtype=F64)
    dht = torch.randn(x.initial_state.shape, generator=gen, dtype=F64)
    chunk = kda_reference_grads(x, do, dht, form="chunk")
    token = kda_reference_grads(x, do, dht, form="recurrent")
    assert set(chunk) == {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"}
    for name, ref in token.items():
        assert torch.isfinite(chunk[name]).all(), name
        if regime == "extreme" and name == "dg":
            # exp(-1000) underflows, so the exact dg is 0; the chunk form's diagonal pair terms
            # (exp(Γ_i - Γ_i) = 1, one member per side) cancel only to rounding.
            assert torch.count_nonzero(ref) == 0
            assert chunk[name].abs().max() < 1e-15 * token["dq"].abs().max()
            continue
        assert rel_l2(chunk[name], ref) < 1e-11, name


def test_reference_grads_shapes_and_dtypes():
    x = small([5, 9], gate="raw", seed=1)
    do = torch.randn(x.v.shape, generator=torch.Generator().manual_seed(2))
    res = kda_reference_grads(x, do)
    assert set(res) == {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias"}
    for name in ("q", "k", "v", "g", "beta", "A_log", "dt_bias"):
        grad = res["d" + name if name != "dt_bias" else "ddt_bias"]
        assert grad.shape == getattr(x, name).shape and grad.dtype == F64
        assert grad.abs().sum() > 0, name
    # the inputs themselves are left untouched
    assert not x.q.requires_grad and x.q.grad is None


# gate, norm and beta forms


def test_raw_gate_softplus_and_lower_bound_values():
    x = torch.tensor([[[[-3.0, 0.5], [40.0, -40.0]]]], dtype=F64)  # [1,1,2,2]
    A_log = torch.tensor([0.3, -0.2], dtype=F64)
    dt_bias = torch.tensor([0.1, -0.2, 0.0, 0.5], dtype=F64)
    g = raw_gate(x, A_log, dt_bias)
    g_lb = raw_gate(x, A_log, dt_bias, lower_bound=-4.0)
    for h in range(2):
        for d in range(2):
            z = x[0, 0, h, d].item() + dt_bias[2 * h + d].item()
            a = math.exp(A_log[h].item())
            softplus = math.log1p(math.exp(-abs(z))) + max(z, 0.0)
            assert g[0, 0, h, d].item() == pytest.approx(-a * softplus, rel=1e-15)
            assert g_lb[0, 0, h, d].item() == pytest.approx(
                -4.0 / (1.0 + math.exp(-a * z)), rel=1e-15
            )
    # no linear cut-off: softplus(40) differs from 40 by exp(-40), visible here only as exactness
    assert g[0, 0, 1, 0].item() == pytest.approx(-math.exp(-0.2) * 40.0, rel=1e-15)
    assert (g < 0).all() and (g_lb >= -4.0).all() and (g_lb < 0).all()


def test_raw_gate_optional_params_and_errors():
    x = torch.randn(1, 3, 2, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    # A_log None (lower-bound form only): the factor in front of x is 1
    assert torch.equal(raw_gate(x, None, None, lower_bound=-2.0), -2.0 * torch.sigmoid(x))
    with pytest.raises(ValueError, match="A_log"):
        raw_gate(x, None, None)
    for bad in (-5.5, 0.0, 1.0):
        with pytest.raises(ValueError, match="lower_bound"):
            raw_gate(x, torch.zeros(2, dtype=F64), None, lower_bound=bad)


def test_fused_flags_equal_explicit_preprocessing():
    x = small(
        [7, 20],
        gate="raw",
        lower_bound=-5.0,
        l2norm_in_kernel=True,
        beta_sigmoid_in_kernel=True,
        seed=8,
    )
    o_fused, ht_fused = kda_reference(**x.as_kwargs())
    g = raw_gate(x.g, x.A_log, x.dt_bias, -5.0)
    o_explicit, ht_explicit = kda_reference(
        l2norm(x.q), l2norm(x.k), x.v, g, torch.sigmoid(x.beta.to(F64)), cu_seqlens=x.cu_seqlens
    )
    assert rel_l2(o_fused, o_explicit) < 1e-15 and rel_l2(ht_fused, ht_explicit) < 1e-15
    # and the flags matter: ignoring the gate activation gives a different result
    o_wrong, _ = kda_reference(
        l2norm(x.q), l2norm(x.k), x.v, x.g, torch.sigmoid(x.beta.to(F64)), cu_seqlens=x.cu_seqlens
    )
    assert rel_l2(o_wrong, o_explicit) > 1e-2


def test_l2norm():
    x = torch.randn(5, 16, dtype=F64, generator=torch.Generator().manual_seed(0)) * 10
    y = l2norm(x)
    assert torch.allclose(y.norm(dim=-1), torch.ones(5, dtype=F64), atol=1e-8)
    # eps sits inside the root: a zero row stays zero instead of NaN, a tiny row shrinks
    assert torch.equal(l2norm(torch.zeros(1, 4)), torch.zeros(1, 4, dtype=F64))
    tiny = torch.full((1, 4), 1e-4, dtype=F64)
    assert l2norm(tiny)[0, 0].item() == pytest.approx(1e-4 / math.sqrt(4e-8 + 1e-6), rel=1e-14)


def test_output_final_state_flag_and_default_scale():
    x = small([10], seed=0)
    o, ht = kda_reference(**{**x.as_kwargs(), "scale": None}, output_final_state=False)
    assert ht is None
    o2, _ = kda_reference(**{**x.as_kwargs(), "scale": 8**-0.5})
    assert torch.equal(o, o2)
    o3, _ = kda_reference(**{**x.as_kwargs(), "scale": 1.0})
    assert rel_l2(o3, o2) > 0.1


# metrics


def test_rel_l2_helpers():
    ref = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    out = torch.tensor([[3.0, 4.5], [1.0, 0.0]], dtype=torch.bfloat16)
    assert rel_l2(out, ref) == pytest.approx(0.5 / math.sqrt(26.0), rel=1e-12)
    assert rel_l2_per_head(out, ref, 0) == pytest.approx([0.1, 0.0], rel=1e-12)
    assert rel_l2_per_head(out, ref, 1) == pytest.approx([0.0, 0.5 / 4.0], rel=1e-12)
    assert rel_l2(torch.zeros(2), torch.zeros(2)) == 0.0
    assert rel_l2(torch.ones(2), torch.zeros(2)) == math.inf
    with pytest.raises(ValueError):
        rel_l2(torch.zeros(2), torch.zeros(3))


# input generators


def test_inputs_are_seeded_and_shaped():
    a = make_inputs([3, 5], heads=2, head_k=8, head_v=4, gate="raw", lower_bound=-5.0, seed=1)
    b = make_inputs([3, 5], heads=2, head_k=8, head_v=4, gate="raw", lower_bound=-5.0, seed=1)
    c = make_inputs([3, 5], heads=2, head_k=8, head_v=4, gate="raw", lower_bound=-5.0, seed=2)
    for name in ("q", "k", "v", "g", "beta", "A_log", "dt_bias"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert not torch.equal(getattr(a, name), getattr(c, name)), name
    assert a.cu_seqlens.dtype == torch.int64 and a.cu_seqlens.tolist() == [0, 3, 8]
    assert a.lengths == [3, 5]
    assert (
        a.q.dtype == torch.bfloat16
        and a.beta.dtype == torch.bfloat16
        and a.g.dtype == torch.float32
    )
    assert a.q.shape == (1, 8, 2, 8) and a.v.shape == (1, 8, 2, 4) and a.beta.shape == (1, 8, 2)
    assert a.A_log.shape == (2,) and a.dt_bias.shape == (16,)
    kw = a.as_kwargs()
    assert kw["use_gate_in_kernel"] and kw["lower_bound"] == -5.0 and kw["A_log"] is a.A_log
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.q = a.k  # type: ignore[misc]


@pytest.mark.parametrize(
    "regime,lo,hi",
    [
        ("mixed", -math.inf, 0.0),
        ("fast", -5.0, -0.1),
        ("slow", -1e-3, 0.0),
        ("extreme", -1000.0, -1000.0),
    ],
)
def test_gate_regimes(regime, lo, hi):
    x = make_inputs(seqlen=256, heads=2, head_k=16, head_v=16, regime=regime, seed=0)
    assert lo <= x.g.min().item() and x.g.max().item() <= hi
    if regime != "extreme":
        assert x.g.std().item() > 0
    # q, k unit-normalised (up to bf16 rounding) unless the fused norm is tested
    assert torch.allclose(x.q.float().norm(dim=-1), torch.ones(1, 256, 2), atol=1e-2)
    raw = make_inputs(
        seqlen=256, heads=2, head_k=16, head_v=16, regime=regime, l2norm_in_kernel=True, seed=0
    )
    assert raw.q.float().norm(dim=-1).mean() > 2.0
    assert x.beta.min().item() >= 0.0 and x.beta.max().item() <= 1.0


def test_long_input():
    x = make_long_input(seqlen=256, heads=1)
    assert x.q.shape == (1, 256, 1, 128) and x.cu_seqlens is None
    assert abs(LONG_LOG_DECAY / -2.2700e-4 - 1) < 1e-4
    assert torch.all(x.g == torch.tensor(LONG_LOG_DECAY, dtype=torch.float32))
    assert torch.all(x.beta == 0.5)
    raw = make_long_input(seqlen=256, heads=1, gate="raw")
    assert torch.equal(raw.q, x.q) and torch.equal(raw.v, x.v)
    g = raw_gate(raw.g, raw.A_log, raw.dt_bias, raw.lower_bound)
    assert torch.allclose(g, torch.full_like(g, LONG_LOG_DECAY), rtol=1e-12, atol=0)
