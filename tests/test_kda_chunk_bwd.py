"""CPU tests of the explicit chunked float64 backward (tests/kda_chunk_bwd.py) against torch.autograd
of the float64 reference (tests/kda_reference.py).

The explicit backward is the blueprint of the GPU backward kernels (docs/backward-design.md): if it
agrees with autograd to 1e-10 on ragged varlen inputs, every gate form, L2 norm, beta sigmoid,
initial state / dht and fast or extreme decays, then its stage structure (state pairing, reverse
dS pass, dM = -Y Vn^T, chunk-end decay on the last valid row, reverse cumsum, dropped diagonal
pairs, bounded exponents) is right and the kernels can be checked against it stage by stage.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from kda_chunk_bwd import _exp, chunk_kda_bwd, chunk_kda_bwd_from_inputs
from kda_inputs import KDAInputs, make_inputs
from kda_reference import kda_reference_grads, rel_l2

F64 = torch.float64
RAGGED = [1, 63, 65, 130]
TOL = 1e-10


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # The tensors are tiny: intra-op threads only add overhead (and fight other processes).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


GATES: dict[str, dict[str, Any]] = {
    "g-mixed": dict(gate="g", regime="mixed"),
    "g-fast": dict(gate="g", regime="fast"),
    "raw-softplus": dict(gate="raw"),
    "raw-sigmoid": dict(gate="raw", lower_bound=-5.0),
}


def _grads_out(x: KDAInputs, state: str, seed: int):
    """Random dO (and dht) for x; state in none / h0 / dht / both."""
    if state in ("h0", "both") and x.initial_state is None:
        raise AssertionError("inputs must carry an initial state")
    gen = torch.Generator().manual_seed(1000 + seed)
    do = torch.randn(x.v.shape, generator=gen, dtype=F64)
    N = len(x.lengths)
    H, K, V = x.v.shape[2], x.q.shape[3], x.v.shape[3]
    dht = torch.randn(N, H, K, V, generator=gen, dtype=F64) if state in ("dht", "both") else None
    return do, dht


def _inputs(lengths, K, gate, l2n, bsig, state, seed, heads=2, **kw) -> KDAInputs:
    return make_inputs(
        lengths,
        heads=heads,
        head_k=K,
        head_v=K,
        l2norm_in_kernel=l2n,
        beta_sigmoid_in_kernel=bsig,
        initial_state=state in ("h0", "both"),
        seed=seed,
        **GATES[gate],
        **kw,
    )


def _compare(x: KDAInputs, state: str, seed: int, *, tol: float = TOL) -> dict[str, float]:
    do, dht = _grads_out(x, state, seed)
    ref = kda_reference_grads(x, do, dht)
    out = chunk_kda_bwd_from_inputs(x, do, dht)
    expected = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta"}
    if x.use_gate_in_kernel:
        expected |= {"dA_log", "ddt_bias"}
    if x.initial_state is not None:
        expected.add("dh0")
    assert expected <= set(ref) and expected <= set(out), (sorted(ref), sorted(out))
    errs = {}
    for name in sorted(expected):
        assert out[name].shape == ref[name].shape, name
        assert torch.isfinite(out[name]).all(), name
        errs[name] = rel_l2(out[name], ref[name])
    bad = {n: e for n, e in errs.items() if not e < tol}
    assert not bad, f"relative L2 above {tol}: {bad} (all: {errs})"
    return errs


@pytest.mark.parametrize("state", ["none", "both"])
@pytest.mark.parametrize("bsig", [False, True], ids=["beta", "beta-sigmoid"])
@pytest.mark.parametrize("l2n", [False, True], ids=["l2n-off", "l2n-fused"])
@pytest.mark.parametrize("gate", list(GATES))
def test_ragged_k8(gate, l2n, bsig, state):
    seed = 17 * list(GATES).index(gate) + 4 * l2n + 2 * bsig + (state == "both")
    _compare(_inputs(RAGGED, 8, gate, l2n, bsig, state, seed), state, seed)


@pytest.mark.parametrize("state", ["h0", "dht"])
@pytest.mark.parametrize("gate", ["g-fast", "raw-sigmoid"])
def test_initial_state_or_dht_alone(gate, state):
    _compare(_inputs(RAGGED, 8, gate, True, False, state, seed=5), state, seed=5)


@pytest.mark.parametrize(
    "gate,l2n,bsig,state",
    [
        ("g-fast", False, False, "both"),
        ("g-mixed", True, True, "none"),
        ("raw-sigmoid", True, True, "both"),
        ("raw-softplus", False, False, "dht"),
    ],
)
def test_head_dim_128(gate, l2n, bsig, state):
    # small T: the autograd reference builds [N, H, 64, 64, 128] decay tensors per chunk
    _compare(_inputs([1, 63, 65], 128, gate, l2n, bsig, state, seed=21, heads=1), state, seed=21)


def test_plain_batch_and_grouped_value_heads():
    # no cu_seqlens (B = 2, T = 70), then HV = 2 H (value head hv reads key head hv // 2)
    x = make_inputs(
        batch=2, seqlen=70, heads=2, head_k=8, head_v=8, regime="fast", initial_state=True, seed=3
    )
    _compare(x, "both", seed=3)
    gen = torch.Generator().manual_seed(9)
    HV = 4
    wide = dataclasses.replace(
        x,
        v=torch.randn(2, 70, HV, 8, generator=gen).bfloat16(),
        g=torch.rand(2, 70, HV, 8, generator=gen) * -4.9 - 0.1,
        beta=torch.rand(2, 70, HV, generator=gen).bfloat16(),
        initial_state=torch.randn(2, HV, 8, 8, generator=gen),
    )
    _compare(wide, "both", seed=4)


def test_extreme_gate_all_minus_1000():
    """g = -1000 everywhere: Γ reaches -64000 inside a chunk. Everything must stay finite and
    match; the true dg is exactly 0 (every decay factor except exp(0) underflows), and the explicit
    backward gives exactly 0 because the exp(0) terms come in dropped pairs. The autograd reference
    carries ~1e-16 rounding residues of those pairs, so dg is compared on an absolute scale."""
    x = make_inputs(
        RAGGED, heads=2, head_k=8, head_v=8, regime="extreme", initial_state=True, seed=8
    )
    do, dht = _grads_out(x, "both", 8)
    ref = kda_reference_grads(x, do, dht)
    out = chunk_kda_bwd_from_inputs(x, do, dht)
    for name in ("o", "ht", "dq", "dk", "dv", "dbeta", "dh0", "dg"):
        assert torch.isfinite(out[name]).all(), name
    for name in ("o", "ht", "dq", "dk", "dv", "dbeta", "dh0"):
        assert rel_l2(out[name], ref[name]) < TOL, name
    scale = (ref["dq"].norm() + ref["dk"].norm()).item()
    assert (out["dg"] - ref["dg"]).norm().item() < 1e-13 * scale
    assert out["dg"].abs().max().item() == 0.0


@pytest.mark.parametrize("K", [8, 128])
def test_extreme_gate_mixed_with_fast(K):
    """-1000 on half the key dims (and on a few whole tokens), fast decay elsewhere: dg is nonzero
    and must match to 1e-10 while the -1000 lanes stay finite."""
    lengths = RAGGED if K == 8 else [63, 65]
    x = make_inputs(
        lengths,
        heads=1 if K == 128 else 2,
        head_k=K,
        head_v=K,
        regime="fast",
        initial_state=True,
        seed=11,
    )
    g = x.g.clone()
    g[..., ::2] = -1000.0
    g[:, 70:72] = -1000.0
    _compare(dataclasses.replace(x, g=g), "both", seed=11)


def test_state_pairing_and_chunk_end_gradient():
    """The reverse state pass pairs S at a chunk's START with dS at its END: the last chunk of a
    sequence sees dS_end = dht, the first chunk sees S = h0, and dh0 is what leaves chunk 0."""
    x = _inputs(RAGGED, 8, "g-fast", False, False, "both", seed=2)
    do, dht = _grads_out(x, "both", 2)
    kw = x.as_kwargs()
    out = chunk_kda_bwd(kw.pop("q"), kw.pop("k"), kw.pop("v"), kw.pop("g"), kw.pop("beta"), do, dht,
                        return_intermediates=True, **kw)  # fmt: skip
    recs = out["chunks"]
    assert [r["span"] for r in recs] == [
        (0, 1),
        (1, 64),
        (64, 128),
        (128, 129),
        (129, 193),
        (193, 257),
        (257, 259),
    ]
    h0 = x.initial_state
    assert h0 is not None and dht is not None
    for n in range(4):
        mine = [r for r in recs if r["seq"] == n]
        assert torch.equal(mine[0]["S"], h0[n].to(F64))
        assert torch.equal(mine[-1]["dS_end"], dht[n])
    ref = kda_reference_grads(x, do, dht)
    assert rel_l2(out["dh0"], ref["dh0"]) < TOL


def test_exponent_guard():
    """Every exponential goes through _exp, which refuses positive exponents (exp(-Γ) alone)."""
    with pytest.raises(AssertionError):
        _exp(torch.tensor([0.0, 1e-9], dtype=F64))
    assert _exp(torch.tensor([-64000.0, 0.0], dtype=F64)).tolist() == [0.0, 1.0]
