"""GPU: the KDA backward programs (cake.kda.backward: bwd_state, bwd_chunk, bwd_reduce) against the
float64 autograd reference, bitwise reproducibility, NaN-poisoned allocations, pack invariance."""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch
from kda_inputs import kda_config, make_inputs
from kda_reference import kda_reference_grads, rel_l2, rel_l2_per_head

import cake.kda.backward as backward_module
import cake.kda.forward as forward_module
import cake.kda.stages as stages_module
from cake.kda.forward import Config

pytestmark = [pytest.mark.gpu]

BOUND = 2.5e-3
RAGGED = [1, 63, 65, 1000]

CASES = {
    "g-mixed-off": dict(regime="mixed"),
    "g-fast-off": dict(regime="fast"),
    "g-slow-off": dict(regime="slow"),
    "g-fast-fused-bsig": dict(regime="fast", l2norm_in_kernel=True, beta_sigmoid_in_kernel=True),
    "g-mixed-fused": dict(regime="mixed", l2norm_in_kernel=True),
    "softplus-off": dict(gate="raw"),
    "softplus-fused-xbf16": dict(gate="raw", l2norm_in_kernel=True, gate_dtype=torch.bfloat16),
    "sigmoid-lb5-off-xbf16": dict(gate="raw", lower_bound=-5.0, gate_dtype=torch.bfloat16),
    "sigmoid-lb5-fused": dict(gate="raw", lower_bound=-5.0, l2norm_in_kernel=True),
}


def config_for(inp, *, saved: bool = False) -> Config:
    return kda_config(inp, saved=saved)


def grads_out(inp, seed: int, dht: bool = True):
    gen = torch.Generator(device="cuda").manual_seed(1000 + seed)
    do = torch.randn(inp.v.shape, generator=gen, device="cuda").to(inp.v.dtype)
    N, H = len(inp.lengths), inp.v.shape[2]
    ht = torch.randn(N, H, 128, 128, generator=gen, device="cuda") if dht else None
    return do, ht


def run_backward(inp, do, dht):
    return backward_module.backward(
        inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state, do, dht,
        config_for(inp),
    )  # fmt: skip


def names_for(inp) -> list[str]:
    names = ["dq", "dk", "dv", "dg", "dbeta"]
    if inp.use_gate_in_kernel:
        names += ["dA_log", "ddt_bias"]
    if inp.initial_state is not None:
        names.append("dh0")
    return names


@pytest.mark.parametrize("kw", list(CASES.values()), ids=list(CASES))
def test_backward_matches_float64(kw):
    """dbeta is checked as the kernel computes it, in fp32, and the returned bf16 dbeta must be
    exactly its rounding: on these ragged inputs the rounding of the float64 dbeta to bf16 alone
    costs up to 2.9e-3 per head (a few large entries dominate a 1000-token head), so no bf16 output
    can meet 2.5e-3 there. On the measuring.md suite (T = 4096) bf16 dbeta is checked as shipped
    (tools/bench.py --accuracy)."""
    seed = zlib.crc32(str(kw).encode()) % 1000
    inp = make_inputs(RAGGED, heads=4, initial_state=True, seed=seed, device="cuda", **kw)
    do, dht = grads_out(inp, seed)
    out = run_backward(inp, do, dht)
    # the same kernels with beta given as fp32: identical inputs to every launch, fp32 dbeta out
    fp32_beta = dataclasses.replace(inp, beta=inp.beta.float())
    dbeta32 = run_backward(fp32_beta, do, dht)["dbeta"]
    assert torch.equal(out["dbeta"], dbeta32.to(inp.beta.dtype))
    out["dbeta"] = dbeta32
    ref = kda_reference_grads(inp, do, dht)
    for name in names_for(inp):
        o, r = out[name], ref[name]
        assert o.shape == r.shape, name
        assert torch.isfinite(o).all(), name
        assert rel_l2(o, r) <= BOUND, (name, rel_l2(o, r))
        if name in ("dq", "dk", "dv", "dg", "dbeta"):
            assert max(rel_l2_per_head(o, r, 2)) <= BOUND, name
        elif name == "dh0":
            assert max(rel_l2_per_head(o, r, 1)) <= BOUND, name


def test_extreme_gates_give_exact_zero_dg():
    """g = -1000 everywhere: every decay except exp(0) underflows, the true dg is 0, and the
    kernel's diagonal pairs are left out of dGamma, so dg must be exactly 0 and all else finite."""
    inp = make_inputs([1, 65, 200], heads=2, regime="extreme", initial_state=True, device="cuda")
    do, dht = grads_out(inp, 3)
    out = run_backward(inp, do, dht)
    ref = kda_reference_grads(inp, do, dht)
    assert torch.count_nonzero(out["dg"]) == 0
    for name in ("dq", "dk", "dv", "dbeta", "dh0"):
        assert torch.isfinite(out[name]).all(), name
        assert rel_l2(out[name], ref[name]) <= BOUND, name


def test_no_initial_state_no_dht():
    inp = make_inputs([1, 63, 65], heads=2, l2norm_in_kernel=True, device="cuda")
    do, _ = grads_out(inp, 5, dht=False)
    out = run_backward(inp, do, None)
    ref = kda_reference_grads(inp, do, None)
    assert "dh0" not in out
    for name in names_for(inp):
        assert rel_l2(out[name], ref[name]) <= BOUND, name


@pytest.mark.parametrize("gate", ["g", "sigmoid"])
def test_bitwise_reproducible(gate):
    kw = dict(gate="raw", lower_bound=-5.0) if gate == "sigmoid" else dict(regime="fast")
    inp = make_inputs([1000, 65, 1], heads=4, l2norm_in_kernel=True, initial_state=True,
                      device="cuda", **kw)  # fmt: skip
    do, dht = grads_out(inp, 7)
    first = run_backward(inp, do, dht)
    for _ in range(10):
        again = run_backward(inp, do, dht)
        for name, t in first.items():
            assert torch.equal(again[name], t), name


def test_every_output_element_is_written(monkeypatch):
    """Every allocation of the forward replay and the backward starts as NaN (ints as -1)."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-1)

    def nan_empty(*shape, **kw):
        return poison(real_empty(*shape, **kw))

    def nan_empty_like(x, **kw):
        return poison(real_empty_like(x, **kw))

    for mod in (backward_module, forward_module, stages_module):
        monkeypatch.setattr(mod.torch, "empty", nan_empty)
    monkeypatch.setattr(backward_module.torch, "empty_like", nan_empty_like)
    inp = make_inputs([1, 63, 65, 130], heads=3, gate="raw", l2norm_in_kernel=True,
                      initial_state=True, device="cuda")  # fmt: skip
    do, dht = grads_out(inp, 11)
    out = run_backward(inp, do, dht)
    for name, t in out.items():
        assert not torch.isnan(t).any(), name


@pytest.mark.parametrize("l2n", [False, True], ids=["off", "fused"])
def test_pack_invariance(l2n):
    """A sequence's dq, dk, dv, dg, dbeta (and dh0) are bitwise the same alone and packed."""
    lengths = [77, 1000, 1, 64, 300]
    packed = make_inputs(lengths, heads=2, l2norm_in_kernel=l2n, initial_state=True,
                         regime="fast", device="cuda")  # fmt: skip
    do, dht = grads_out(packed, 13)
    out = run_backward(packed, do, dht)
    cu = packed.cu_seqlens.tolist()
    for n in (1, 3):
        s, e = cu[n], cu[n + 1]
        alone = dataclasses.replace(
            packed,
            **{
                "q": packed.q[:, s:e].contiguous(),
                "k": packed.k[:, s:e].contiguous(),
                "v": packed.v[:, s:e].contiguous(),
                "g": packed.g[:, s:e].contiguous(),
                "beta": packed.beta[:, s:e].contiguous(),
                "initial_state": packed.initial_state[n : n + 1].contiguous(),
                "cu_seqlens": torch.tensor([0, e - s], device="cuda"),
            },
        )
        o1 = run_backward(alone, do[:, s:e].contiguous(), dht[n : n + 1].contiguous())
        for name in ("dq", "dk", "dv", "dg", "dbeta"):
            assert torch.equal(o1[name], out[name][:, s:e]), name
        assert torch.equal(o1["dh0"][0], out["dh0"][n])
