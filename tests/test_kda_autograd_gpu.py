"""GPU: chunk_kda through torch.autograd: both paths against the float64 reference, saved ==
replay bitwise, and a small KDA layer trained for a few hundred steps (loss falls, two runs give
identical loss curves)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kda_inputs import make_inputs
from kda_reference import kda_reference_grads, rel_l2

from cake.kda import chunk_kda

pytestmark = [pytest.mark.gpu]

BOUND = 2.5e-3
GRAD_OF = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "dbeta": "beta", "dA_log": "A_log",
           "ddt_bias": "dt_bias", "dh0": "initial_state"}  # fmt: skip
CASES = {
    "g-mixed-off-h0": dict(regime="mixed", initial_state=True),
    "g-fast-fused": dict(regime="fast", l2norm_in_kernel=True),
    "sigmoid-lb5-off-h0": dict(gate="raw", lower_bound=-5.0, initial_state=True),
    "softplus-fused": dict(gate="raw", l2norm_in_kernel=True),
}


def grads(inp, disable_recompute: bool, seed: int, segments: int | None = None):
    leaf = inp.with_grad()
    o, ht = chunk_kda(
        **leaf.as_kwargs(),
        output_final_state=True,
        disable_recompute=disable_recompute,
        segments=segments,
    )
    gen = torch.Generator(device="cuda").manual_seed(seed)
    do = torch.randn(o.shape, generator=gen, device="cuda").to(o.dtype)
    dht = torch.randn(ht.shape, generator=gen, device="cuda")
    torch.autograd.backward((o, ht), (do, dht))
    return {d: getattr(leaf, n).grad for d, n in GRAD_OF.items() if n in leaf.grad_names()}, do, dht


@pytest.mark.parametrize("kw", list(CASES.values()), ids=list(CASES))
def test_saved_and_replay_paths_agree_bitwise_and_match_float64(kw):
    inp = make_inputs([1, 63, 65, 700], heads=3, seed=5, device="cuda", **kw)
    saved, do, dht = grads(inp, True, seed=11)
    replay, _, _ = grads(inp, False, seed=11)
    ref = kda_reference_grads(inp, do, dht)
    for name, got in saved.items():
        assert torch.equal(got, replay[name]), name
        assert got.dtype == getattr(inp, GRAD_OF[name]).dtype, name
        want = ref["dx"] if name == "dg" and "dx" in ref else ref[name]
        assert rel_l2(got, want) <= BOUND, name


@pytest.mark.parametrize("kw", [CASES["g-mixed-off-h0"], CASES["softplus-fused"]], ids=["g", "raw"])
def test_split_calls_replay_from_the_forwards_carries_with_the_saved_paths_bits(kw):
    """A split sequence (kda_cp): the replay path's backward starts its states pass from the
    carries the forward kept, and gets the saved path's bits."""
    inp = make_inputs([70, 2200], heads=2, seed=6, device="cuda", **kw)
    saved, _, _ = grads(inp, True, seed=12, segments=3)
    replay, _, _ = grads(inp, False, seed=12, segments=3)
    for name, got in saved.items():
        assert torch.equal(got, replay[name]), name


def misaligned(x: torch.Tensor) -> torch.Tensor:
    """x's values in a view that starts one element past a 16-byte boundary."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = flat[1:].view(x.shape)
    view.copy_(x)
    assert view.data_ptr() % 16 != 0
    return view


@pytest.mark.parametrize("gate", ["g", "raw"])
def test_misaligned_views_give_the_aligned_results(gate):
    """Inputs, initial state, raw-gate parameters and output gradients that are views at an odd
    element offset (which the programs' 16-byte copies would fault on) give the same bits."""
    kw = dict(gate="raw", lower_bound=-5.0) if gate == "raw" else dict(regime="mixed")
    inp = make_inputs([1, 65, 300], heads=2, seed=3, device="cuda", initial_state=True, **kw)
    want, do, dht = grads(inp, False, seed=4)
    names = ["q", "k", "v", "g", "beta", "initial_state"] + (["dt_bias"] if gate == "raw" else [])
    leaves = {n: misaligned(getattr(inp, n)).requires_grad_(True) for n in names}
    o, ht = chunk_kda(**dataclasses.replace(inp, **leaves).as_kwargs(), output_final_state=True)
    torch.autograd.backward((o, ht), (misaligned(do), misaligned(dht)))
    for d, n in GRAD_OF.items():
        if n in leaves:
            assert torch.equal(leaves[n].grad, want[d]), d


class TinyKDALayer(torch.nn.Module):
    """Projections into chunk_kda's raw-gate, L2-normed, beta-sigmoid form, and back out."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.h = heads
        self.qkvg = torch.nn.Linear(d, 4 * heads * 128, bias=False)
        self.b = torch.nn.Linear(d, heads, bias=False)
        self.out = torch.nn.Linear(heads * 128, d, bias=False)
        self.A_log = torch.nn.Parameter(torch.zeros(heads))
        self.dt_bias = torch.nn.Parameter(torch.zeros(heads * 128))

    def forward(self, x: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        q, k, v, g = self.qkvg(x).view(1, T, 4, self.h, 128).unbind(2)
        o, _ = chunk_kda(
            q.bfloat16().contiguous(), k.bfloat16().contiguous(), v.bfloat16().contiguous(),
            g.float().contiguous(), self.b(x).bfloat16().contiguous(), cu_seqlens=cu,
            use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
            A_log=self.A_log, dt_bias=self.dt_bias,
        )  # fmt: skip
        return self.out(o.float().reshape(1, T, -1))


def train(seed: int, steps: int = 300) -> list[float]:
    torch.manual_seed(seed)
    layer = TinyKDALayer(64, 2).cuda()
    opt = torch.optim.Adam(layer.parameters(), lr=3e-3)
    cu = torch.tensor([0, 100, 300, 301, 512], device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(1, 512, 64, generator=gen, device="cuda")
    target = torch.roll(x, 1, dims=1)  # recall the previous token: needs the state
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(layer(x, cu), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_loop_learns_and_is_reproducible():
    first = train(0)
    assert first[-1] < 0.5 * first[0]
    assert first == train(0)  # bitwise identical loss curves


DIGEST_SCRIPT = """
import hashlib, sys
sys.path.insert(0, "tests")
import torch
from kda_inputs import make_inputs
from cake.kda import chunk_kda
inp = make_inputs(lengths=[1000, 65, 1, 300], heads=4, gate="raw", lower_bound=-5.0,
                  l2norm_in_kernel=True, initial_state=True, seed=7, device="cuda")
gen = torch.Generator(device="cuda").manual_seed(8)
do = torch.randn(inp.v.shape, generator=gen, device="cuda").to(inp.v.dtype)
dht = torch.randn(inp.initial_state.shape, generator=gen, device="cuda")
for saved in (True, False):
    first = None
    for _ in range(20):
        leaf = inp.with_grad()
        o, ht = chunk_kda(**leaf.as_kwargs(), output_final_state=True, disable_recompute=saved)
        torch.autograd.backward((o, ht), (do, dht))
        got = [o, ht] + [getattr(leaf, n).grad for n in leaf.grad_names()]
        if first is None:
            first = got
        elif not all(torch.equal(a, b) for a, b in zip(first, got)):
            sys.exit("not bitwise reproducible over 20 calls (saved=%s)" % saved)
    print(" ".join(hashlib.sha256(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
                   .hexdigest()[:16] for t in first))
"""


def test_gradients_bitwise_over_20_calls_and_in_a_second_process(tmp_path):
    """Both paths: 20 fwd+bwd calls give the same bits; a second process with a fresh cache and no
    bundle (so every program is compiled again) gives the same bits; saved == replay."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    runs = []
    for i in range(2):
        env = {**os.environ, "CAKE_CACHE_DIR": str(tmp_path / f"cache{i}"), "CAKE_QUIET": "1"}
        env.pop("CAKE_BUNDLE_DIR", None)
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT], cwd=root, env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(out.stdout.split("\n")[:2])
    assert runs[0] == runs[1]
    saved, replay = runs[0]
    assert saved == replay and len(saved.split()) == 10  # o, ht and 8 gradients
