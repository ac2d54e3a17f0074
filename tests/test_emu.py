"""CPU emulator (tools/emu): cake's KDA programs, launched by cake.kda's own Python code, run on the
CPU and match the float64 reference under the GPU tests' bounds; every output element is written;
other legal thread orders give the same bits; and programs with a planted bug fail."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kda_reference import kda_reference_grads, rel_l2  # noqa: E402

import cake.kda.backward as backward_module  # noqa: E402
import cake.kda.forward as forward_module  # noqa: E402
import cake.kda.stages as stages_module  # noqa: E402
from cake.errors import LaunchError  # noqa: E402
from cake.kda import chunk_kda  # noqa: E402
from cake.kda.layout import layout_for  # noqa: E402
from cake.spec import Arch, GateForm  # noqa: E402
from tools.emu import compiler  # noqa: E402
from tools.emu.check import (  # noqa: E402
    BOUND,
    CASES,
    case_inputs,
    check_case,
    compare,
    config_for,
    output_names,
    run_emulated,
    schedule_differences,
)
from tools.emu.loader import EmuError, EmuLoader, EmuModule, Options, Program, emulate  # noqa: E402
from tools.emu.source import INCLUDE, translation_unit, twin_drift  # noqa: E402

needs_cxx = pytest.mark.skipif(
    not compiler.available(), reason=f"no C++ compiler {compiler.compiler()!r} for tools/emu"
)
FAST_CASES = ("g-mixed-off", "sigmoid-lb5-fused")  # g and raw gate, L2 norm off and fused


@pytest.fixture(scope="module")
def loader() -> EmuLoader:
    return EmuLoader()


class Mutated(EmuLoader):
    """Renders one record with a planted change (the first occurrence of `old` replaced)."""

    def __init__(self, record: str, old: str, new: str, **kw) -> None:
        super().__init__(**kw)
        self.record, self.old, self.new = record, old, new

    def program(self, package: str, record: str) -> Program:
        program = super().program(package, record)
        if record != self.record:
            return program
        assert self.old in program.text, f"{self.old!r} is not in {record}: update the test"
        return Program(program.entry, program.text.replace(self.old, self.new, 1))


def forward_outputs(inp, loader: EmuLoader) -> tuple[torch.Tensor, torch.Tensor]:
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        o, ht, *_ = forward_module.forward(*args, config_for(inp))
    return o, ht


# ---- without a compiler -------------------------------------------------------------------------


@pytest.mark.parametrize("twin", sorted(p.name for p in (INCLUDE / "cake").glob("*.cuh")))
def test_header_twins_match_the_gpu_headers(twin):
    """A CPU twin names the digest of the GPU header it models; an edited header must be reviewed
    against its twin (and the digest line updated)."""
    assert twin_drift(f"cake/{twin}", REPO / "generators/include/cake" / twin) is None


@pytest.mark.parametrize("arch", [Arch.sm_90, Arch.sm_90a])
def test_every_sm90_program_translates(arch):
    """Every program has a CPU form: no PTX outside the modelled headers (sm_90a: wgmma too)."""
    emu = EmuLoader(arch=arch)
    records = {(e.package, e.record) for e in emu.manifest.entries if e.arch is arch}
    assert records
    for package, record in sorted(records):
        program = emu.program(package, record)
        unit = translation_unit(
            program.text, program.entry.program, [k.symbol for k in program.entry.kernels]
        )
        assert "emu_launch_" in unit


def test_nested_headers_keep_their_own_form():
    """A header inlined inside another (wgmma.cuh includes wgmma_layout.cuh): the outer one is
    swapped for its twin, the inner one (no asm) stays as rendered, ahead of the twin."""
    text = (
        "// ---- begin cake/wgmma.cuh ----\n#pragma once\n"
        "// ---- begin cake/wgmma_layout.cuh ----\nint cake_layout_marker() { return 7; }\n"
        "// ---- end cake/wgmma_layout.cuh ----\n"
        'void cake_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }\n'
        "// ---- end cake/wgmma.cuh ----\n"
        "__global__ void k() {}\n"
    )
    unit = translation_unit(text, "nested", ["k"])
    inner = unit.index("int cake_layout_marker()")
    twin = unit.index("(emu twin)")
    assert twin < inner < unit.index("::emu::wgmma_n64(")
    assert "wgmma.fence.sync.aligned" not in unit


# ---- against the float64 reference --------------------------------------------------------------


@needs_cxx
@pytest.mark.parametrize(
    "case", [c if c in FAST_CASES else pytest.param(c, marks=pytest.mark.slow) for c in CASES]
)
def test_forward_backward_match_float64(case, loader):
    rows, out = check_case(CASES[case], loader)
    bad = [row for row in rows if not row.ok]
    assert not bad, bad
    assert out["o"].dtype == torch.bfloat16 and out["ht"].dtype == torch.float32


@needs_cxx
def test_extreme_gates_give_exact_zero_dg(loader):
    """As on the GPU: every decay but exp(0) underflows (ex2.approx.ftz flushes), dg is exactly 0."""
    inp, do, dht = case_inputs(dict(regime="extreme", initial_state=True), lengths=[1, 65, 200])
    out = run_emulated(inp, do, dht, loader)
    assert torch.count_nonzero(out["dg"]) == 0
    rows = compare(out, kda_reference_grads(inp, do, dht), ["o", "dq", "dk", "dv", "dbeta"])
    assert all(row.ok for row in rows), rows


@needs_cxx
def test_chunk_kda_autograd_on_cpu(loader):
    """The public entry point, autograd included, under emulate()."""
    inp, do, dht = case_inputs(CASES["g-mixed-off"])
    leaves = inp.with_grad()
    with emulate(loader):
        o, ht = chunk_kda(**leaves.as_kwargs(), output_final_state=True)
        torch.autograd.backward([o, ht], [do, dht])
    ref = kda_reference_grads(inp, do, dht)
    assert rel_l2(o, ref["o"]) <= BOUND and rel_l2(ht, ref["ht"]) <= BOUND
    names = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta", "initial_state": "dh0"}
    for leaf, name in names.items():
        assert rel_l2(getattr(leaves, leaf).grad, ref[name]) <= BOUND, name


@needs_cxx
@pytest.mark.parametrize(
    "form,x_dtype,l2n",
    [
        (GateForm.sigmoid, torch.float32, False),
        pytest.param(GateForm.g, torch.float32, False, marks=pytest.mark.slow),
        (GateForm.g, torch.float32, True),
        pytest.param(GateForm.softplus, torch.bfloat16, False, marks=pytest.mark.slow),
        pytest.param(GateForm.softplus, torch.bfloat16, True, marks=pytest.mark.slow),
    ],
    ids=["sigmoid-fp32", "g", "g-fused", "softplus-bf16", "softplus-bf16-fused"],
)
def test_gate_stage_matches_float64_and_fwd_chunk_bits(form, x_dtype, l2n, loader):
    """stages.gate_cumsum against float64, and bitwise equal to the Γ that fwd_chunk computes."""
    from test_kda_gate_gpu import reference

    kw = dict(regime="mixed") if form is GateForm.g else dict(gate="raw", gate_dtype=x_dtype)
    kw["l2norm_in_kernel"] = l2n
    if form is GateForm.sigmoid:
        kw["lower_bound"] = -5.0
    inp, _, _ = case_inputs(kw)
    config = config_for(inp)
    x = inp.g.view(inp.g.shape[1], inp.g.shape[2], 128)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        layout = layout_for(config.cu_seqlens, x.device)
        G = stages_module.gate_cumsum(
            x, layout, form, A_log=inp.A_log, dt_bias=inp.dt_bias, lower_bound=config.lower_bound
        )
        fwd_G = forward_module.forward(*args, config, keep=True)[2]["G"]
    ref = reference(x, config.cu_seqlens, form, inp.A_log, inp.dt_bias, config.lower_bound)
    assert rel_l2(G, ref) <= 1e-5
    assert torch.equal(G, fwd_G)


# ---- orchestration and emulator guarantees ------------------------------------------------------


@needs_cxx
@pytest.mark.parametrize("arch", [Arch.sm_90, Arch.sm_90a])
def test_every_output_element_is_written(monkeypatch, loader, arch):
    """Every allocation of the forward, the replay and the backward starts as NaN (ints as -1)."""
    loader = loader if arch is Arch.sm_90 else EmuLoader(arch=arch)
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-1)

    for mod in (backward_module, forward_module, stages_module):
        monkeypatch.setattr(mod.torch, "empty", lambda *s, **kw: poison(real_empty(*s, **kw)))
    monkeypatch.setattr(
        backward_module.torch, "empty_like", lambda x, **kw: poison(real_empty_like(x, **kw))
    )
    inp, do, dht = case_inputs(CASES["sigmoid-lb5-fused"])
    out = run_emulated(inp, do, dht, loader)
    assert set(out) == {"o", "ht", *output_names(inp)}
    for name, t in out.items():
        assert not torch.isnan(t).any(), name


@needs_cxx
def test_forward_keeps_the_chunk_solve_the_backward_reads(loader):
    """kda_fwd_chunk's TA_out (what kda_bwd_chunk reads instead of solving again): T on and below
    its diagonal, Akk turned by 180 degrees above it. Akk is k_i k_j exp(G_i - G_j) below the
    diagonal, T is unit lower triangular and inverts I + diag(beta) Akk, per chunk, in float64."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    config = config_for(inp)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        saved = forward_module.forward(*args, config, keep=True)[2]
        x = inp.g.view(-1, inp.g.shape[-2], 128)
        G = stages_module.gate_cumsum(x, layout_for(config.cu_seqlens, x.device), GateForm.g)
    assert saved is not None
    chunks = layout_for(config.cu_seqlens, torch.device("cpu")).chunks.tolist()
    k = inp.k.reshape(-1, inp.k.shape[-2], 128).double()
    G, beta = G.double(), inp.beta.reshape(-1, inp.beta.shape[-1]).double()  # fwd_chunk's Γ bits
    eye = torch.eye(64, dtype=torch.float64)
    worst_akk = worst_inv = 0.0
    for c, (t0, L) in enumerate(chunks):
        for h in range(k.shape[1]):
            TA = saved["TA"][c, h].double()
            assert torch.equal(torch.diagonal(TA), torch.ones(64, dtype=torch.float64))
            T = torch.tril(TA, -1) + eye  # unit lower triangular
            A = torch.triu(TA, 1).flip(0, 1)  # TA[63 - i][63 - j] = Akk[i][j]: strictly lower
            kk, gg = k[t0 : t0 + L, h], G[t0 : t0 + L, h]
            ref = torch.zeros(64, 64, dtype=torch.float64)
            decay = torch.exp(gg[:, None, :] - gg[None, :, :])  # [i, j, d]
            ref[:L, :L] = torch.tril((kk[:, None, :] * kk[None, :, :] * decay).sum(-1), -1)
            worst_akk = max(worst_akk, rel_l2(A, ref))
            M = torch.zeros(64, dtype=torch.float64)
            M[:L] = beta[t0 : t0 + L, h]
            worst_inv = max(worst_inv, (T @ (eye + M[:, None] * A) - eye).abs().max().item())
    assert worst_akk < 2e-3, worst_akk  # TF32 operands, fp32 sums
    assert worst_inv < 1e-6, worst_inv  # an fp32 solve of the kernel's own Akk


def decode_states(records: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The saved chunk-start states [NC, H, 128, 128] (float64) and their exponent bytes
    [NC, H, 128 keys, 8 groups] from the 16-bit records, decoded independently of the kernels
    (generators/include/cake/state16.cuh: fp16 [key][value], value 16 G + r of a group at
    position 2 (r & 7) + (r >> 3), times 2^(E - 141); E u8 [group][key] after them)."""
    nc, h = records.shape[:2]
    raw = records.contiguous().view(torch.uint8).reshape(nc, h, -1)
    assert raw.shape[-1] == 33792
    half = raw[..., :32768].contiguous().view(torch.float16).reshape(nc, h, 128, 8, 16).double()
    pos = [2 * (r & 7) + (r >> 3) for r in range(16)]
    values = half[..., pos]  # [nc, h, key, group, r]
    exps = raw[..., 32768:].reshape(nc, h, 8, 128).transpose(-1, -2).to(torch.int64)
    scale = torch.pow(2.0, (exps - 141).double())
    return (values * scale[..., None]).reshape(nc, h, 128, 128), exps


@needs_cxx
@pytest.mark.parametrize("arch", [None, Arch.sm_90a], ids=["sm_90", "sm_90a"])
def test_saved_states_are_the_chunk_start_states_in_16_bits(arch):
    """kda_fwd_state's 16-bit records decode to TF32-exact values (what every product of S_c
    uses), within TF32 rounding of the float64 recurrence's state at each chunk's start, and
    each group's exponent puts its largest value in [2^14, 2^15) (fp16's top binade)."""
    loader = EmuLoader(arch=arch) if arch is not None else EmuLoader()
    inp, _, _ = case_inputs(CASES["g-mixed-off"], lengths=[300, 65, 1])
    config = config_for(inp)
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        saved = forward_module.forward(*args, config, keep=True)[2]
    assert saved is not None
    S_c, exps = decode_states(saved["states"])
    bits = S_c.float().view(torch.int32)
    assert bool(((bits & 0x1FFF) == 0).all()), "not TF32-exact"
    # the float64 recurrence (tests/kda_reference.recurrent_kda's steps), its state at chunk starts
    q, k, v, g = (x[0].double() for x in (inp.q, inp.k, inp.v, inp.g))
    beta = inp.beta[0].double()
    worst, c = 0.0, 0
    for n, (start, length) in enumerate(zip([0, 300, 365], inp.lengths, strict=True)):
        S = inp.initial_state[n].double()
        for t in range(start, start + length):
            if (t - start) % 64 == 0:
                worst = max(worst, rel_l2(S_c[c], S))
                c += 1
            S = torch.exp(g[t])[..., None] * S
            e = v[t] - torch.einsum("hkv,hk->hv", S, k[t])
            S = S + beta[t][:, None, None] * k[t][..., None] * e[:, None, :]
    assert c == S_c.shape[0]
    assert worst < 1e-3, worst  # TF32 rounding of S (2^-12) and the chain's own TF32 products
    grp = S_c.abs().reshape(*S_c.shape[:3], 8, 16).amax(-1)  # [nc, h, key, group]
    top = grp * torch.pow(2.0, (141 - exps).double())
    ok = ((top >= 2**14) & (top < 2**15)) | ((exps == 15) & (top < 2**15))
    assert bool(ok.all())


@needs_cxx
@pytest.mark.parametrize("segments", [None, 2], ids=["serial", "split"])
@pytest.mark.parametrize("arch", [None, Arch.sm_90a], ids=["sm_90", "sm_90a"])
def test_saved_and_replay_paths_agree_bitwise(loader, segments, arch):
    """The replay reruns the state pass without O (fwd_state_local): the same states, so the same
    gradients; also when sequences are split into segments (kda_cp), and on the wgmma bodies. A
    split call's replay from the forward's carries (no local passes, no combine) too."""
    loader = loader if arch is None else EmuLoader(arch=arch)
    inp, do, dht = case_inputs(CASES["g-mixed-off"], lengths=[300, 65, 1])
    config = dataclasses.replace(config_for(inp), segments=segments)
    if segments is not None:
        assert forward_module.segment_plan(config, inp.q.shape[2], inp.q.device).any_split
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    with emulate(loader):
        _, _, saved, carries = forward_module.forward(*args, config, keep=True)
        from_saved = backward_module.backward(*args, do, dht, config, saved)
        replays = {"replay": backward_module.backward(*args, do, dht, config)}
        if segments is not None:
            assert carries is not None
            replays["carried"] = backward_module.backward(*args, do, dht, config, None, carries)
        else:
            assert carries is None
    for path, replayed in replays.items():
        for name, t in replayed.items():
            assert torch.equal(from_saved[name], t), (path, name)


@needs_cxx
def test_other_thread_orders_give_the_same_bits(loader):
    """Descending and shuffled thread orders, cp.async landing at issue: a race-free program with a
    fixed reduction order gives the same bits under each."""
    kw = CASES["g-mixed-off"]
    inp, do, dht = case_inputs(kw)
    base = run_emulated(inp, do, dht, loader)
    assert schedule_differences(kw, base, lambda options: EmuLoader(options=options)) == []


@needs_cxx
@pytest.mark.parametrize("case", ["g-mixed-off", "sigmoid-lb5-fused"])
def test_sm90a_programs_wgmma_state_pass(case):
    """The sm_90a programs (kda_fwd_state on wgmma, emulated by the layout and fragment map of
    cake/wgmma.cuh) within the bounds against float64, and the same bits under other thread orders
    (a missing barrier around the warpgroup products changes them)."""
    kw = CASES[case]
    rows, base = check_case(kw, EmuLoader(arch=Arch.sm_90a))
    assert all(row.ok for row in rows), rows
    make = lambda options: EmuLoader(arch=Arch.sm_90a, options=options)  # noqa: E731
    assert schedule_differences(kw, base, make) == []


@needs_cxx
def test_workers_do_not_change_the_bits(loader):
    inp, do, dht = case_inputs(CASES["g-mixed-off"])
    one = forward_outputs(inp, EmuLoader(options=Options(workers=1)))
    three = forward_outputs(inp, EmuLoader(options=Options(workers=3)))
    assert all(torch.equal(a, b) for a, b in zip(one, three, strict=True))


@needs_cxx
def test_launch_checks(loader):
    module = loader.module("kda_det", "bwd_reduce")
    fn = module["kda_bwd_gate_reduce"]
    part, bias = torch.zeros(3, 2), torch.zeros(3, 2, 128)
    dA, dbias = torch.empty(2), torch.empty(256)
    fn((2,), part, bias, dA, dbias, 3, 2)
    assert torch.equal(dA, torch.zeros(2))
    with pytest.raises(EmuError, match="not contiguous"):
        fn((2,), part, bias.transpose(0, 1), dA, dbias, 3, 2)
    with pytest.raises(LaunchError, match="called with 5 arguments"):
        fn((2,), part, bias, dA, dbias, 3)
    entry, (kernel,) = module.entry, module.entry.kernels
    fewer = entry.model_copy(
        update={"kernels": (kernel.model_copy(update={"args": kernel.args[1:]}),)}
    )
    with pytest.raises(EmuError, match=r"takes \(ppppii\) but its metadata says \(pppii\)"):
        EmuModule(fewer, module.library, Options())
    big = entry.model_copy(update={"kernels": (kernel.model_copy(update={"smem": 300_000}),)})
    with pytest.raises(EmuError, match="sm_90 allows at most"):
        EmuModule(big, module.library, Options())["kda_bwd_gate_reduce"](
            (2,), part, bias, dA, dbias, 3, 2
        )


# ---- planted bugs must fail ---------------------------------------------------------------------

G_OFF = "fwd_chunk.gate-g.l2n-off"


@needs_cxx
def test_missing_cp_async_wait_reads_poison():
    """cp.async lands at its wait: without the wait, the tiles are the NaN poison."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    o, ht = forward_outputs(inp, Mutated(G_OFF, "cake_cp_async_wait<0>();", ""))
    assert torch.isnan(o).any() and torch.isnan(ht).any()


@needs_cxx
def test_divergent_warp_collective_is_reported():
    """Half a warp skips an __all_sync: its other half waits there while the first reaches the
    next collective (or a barrier, which would be reported as a deadlock)."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    old = "if (__all_sync(0xffffffffu,"
    with pytest.raises(EmuError, match="meet at different warp collectives: __all_sync|deadlock"):
        forward_outputs(inp, Mutated(G_OFF, old, "if (lane < 16 && __all_sync(0xffffffffu,"))


@needs_cxx
@pytest.mark.slow
def test_missing_syncthreads_changes_bits_across_thread_orders():
    """The last barrier of the T solve's distance loop removed: the next distance reads blocks of T
    that other threads may not have written yet, so ascending and descending orders disagree."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    text = EmuLoader().program("kda_det", G_OFF).text
    tail = re.search(r"-y\.w\);\n        \}\n        __syncthreads\(\);\n", text)
    assert tail is not None, "update the test: the T solve changed"
    old = tail.group(0)
    new = old.replace("__syncthreads();", "")
    outs = [
        forward_outputs(inp, Mutated(G_OFF, old, new, options=Options(schedule=s))) for s in (0, 1)
    ]
    assert not torch.equal(outs[0][0], outs[1][0])


F_FUSED = "fwd_chunk.gate-g.l2n-fused"
HALVED_NORMS = """        cake_halve<8, 16>(ss, lane);
        cake_halve<4, 8>(ss, lane);
        cake_halve<2, 4>(ss, lane);
        cake_halve<1, 2>(ss, lane);
        ss[0] += __shfl_xor_sync(0xffffffffu, ss[0], 1);
"""


@needs_cxx
@pytest.mark.parametrize(
    "levels, same",
    [
        # the butterflies cake_halve replaced: every row summed at lane bits 4, 3, 2, 1, 0
        ("for (int m = 16; m >= 1; m >>= 1)", True),
        # the same pairs in the opposite order: another tree, other bits
        ("for (int m = 1; m <= 16; m <<= 1)", False),
    ],
)
def test_halved_row_norms_keep_the_butterflys_bits(levels, same):
    """cake/warp_halve.cuh pairs the lanes of a butterfly in the butterfly's order, so the fused
    kda_fwd_chunk's L2 norms (16 rows a warp, halved) have the bits of one butterfly per row;
    a butterfly over the same lanes in another order is a different tree, which this inputs'
    o tells apart (so the comparison can fail)."""
    inp, _, _ = case_inputs(CASES["g-slow-fused"])
    butterfly = (
        "#pragma unroll\n"
        f"        {levels}\n"
        "#pragma unroll\n"
        "            for (int j = 0; j < 16; ++j) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], m);\n"
        "        for (int j = 1; j < 16; ++j) ss[0] = (lane >> 1) == j ? ss[j] : ss[0];\n"
    )
    shipped = forward_outputs(inp, EmuLoader())
    planted = forward_outputs(inp, Mutated(F_FUSED, HALVED_NORMS, butterfly))
    assert all(torch.equal(a, b) for a, b in zip(shipped, planted, strict=True)) is same


@needs_cxx
def test_missing_hand_off_wait_reads_poison():
    """kda_fwd_state (sm_90a): warpgroup 1 without its wait for warpgroup 0's copy of S^T (an
    mbarrier, cake/mbar.cuh) reads the chunk-0 tile before it is written: the NaN poison reaches
    o. Threads in descending order, so warpgroup 1 runs first."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    planted = Mutated(
        "fwd_state",
        "cake_mbar_wait(mbFullS, i & 1);",
        ";",
        arch=Arch.sm_90a,
        options=Options(schedule=1),
    )
    o, ht = forward_outputs(inp, planted)
    assert torch.isnan(o).any() and not torch.isnan(ht).any()
    o, ht = forward_outputs(inp, EmuLoader(arch=Arch.sm_90a, options=Options(schedule=1)))
    assert not torch.isnan(o).any()


@needs_cxx
def test_bulk_copy_lands_only_for_its_waiters():
    """kda_fwd_state (sm_90a) copies each chunk tile with one bulk copy on a transaction mbarrier:
    without the chain's wait for W's, the copies never land (nothing waits for them: a block that
    exits with copies in flight is reported, and so is the next chunk's arrival on the phase that
    still waits for its bytes)."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    planted = Mutated("fwd_state", "cake_mbar_wait(mbW, i & 1);", ";", arch=Arch.sm_90a)
    with pytest.raises(EmuError, match="bulk copies in flight|arrivals are all in"):
        forward_outputs(inp, planted)


@needs_cxx
def test_a_wgmma_is_performed_at_the_wait_that_covers_it():
    """kda_fwd_state (sm_90a) without the wait after S^T's update (Vnew^T Kd): the emulator performs
    a wgmma at the wait that covers its commit group, so the next chunk's TF32 copy of S^T reads
    the accumulators before the update, and the last chunk's update is never waited for, which
    the block's end reports (on the H200 ptxas would wait there itself, C7517, or the copy would
    read whatever the tensor cores had written by then)."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    old = "cake_wgmma_wait<0>();\n                if (!kSelfCopy && i + 2 < nc)"
    planted = Mutated("fwd_state", old, old.replace("cake_wgmma_wait<0>();", ";"), arch=Arch.sm_90a)
    with pytest.raises(EmuError, match="never waited for"):
        forward_outputs(inp, planted)


@needs_cxx
def test_a_tile_released_before_its_wgmma_is_done_changes_bits_across_orders():
    """kda_fwd_state of the local program (sm_90a; the replay's state pass): warpgroup 0 releasing W
    (named barrier kEmptyW: warpgroup 1 then copies the next chunk's W over it) before the wait of
    the W S product that reads it. The emulator performs the product at that wait, and in the other
    orders the arrival that completes the barrier yields to warpgroup 1, whose copy (landing at
    issue) overwrites the tile first: the bits differ from the ascending order's."""
    kw = CASES["g-mixed-off"]
    shipped = (
        "cake_wgmma_wait<0>();\n"
        "                if (!kSelfCopy) {\n"
        "                    if (i + 1 < nc) cake_bar_arrive(kEmptyW, 256);"
    )
    early = (
        "if (!kSelfCopy) {\n"
        "                    if (i + 1 < nc) cake_bar_arrive(kEmptyW, 256);\n"
        "                }\n"
        "                cake_wgmma_wait<0>();\n"
        "                if (!kSelfCopy) {"
    )

    def make(options: Options) -> EmuLoader:
        return Mutated("fwd_state_local", shipped, early, arch=Arch.sm_90a, options=options)

    _, base = check_case(kw, make(Options()))
    assert schedule_differences(kw, base, make) != []


@needs_cxx
def test_operand_that_is_not_tf32_is_reported():
    """kda_fwd_state (sm_90a) handing S's raw fp32 bits to the tensor cores as a register A operand
    instead of TF32(S): refused (what the tensor cores do with such bits is not modelled)."""
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    planted = Mutated(
        "fwd_state",
        "FS[hf][x] = cake_tf32(ST[hf][x]);",
        "FS[hf][x] = __float_as_uint(ST[hf][x]);",
        arch=Arch.sm_90a,
    )
    with pytest.raises(EmuError, match="is not a TF32 value"):
        forward_outputs(inp, planted)


@needs_cxx
@pytest.mark.slow
def test_shared_memory_overrun_is_reported():
    inp, _, _ = case_inputs(CASES["g-mixed-off"])
    with pytest.raises(EmuError, match="past the end of the 115456 bytes of shared memory"):
        forward_outputs(inp, Mutated(G_OFF, "bs[tid] = b;", "bs[tid + 320] = b;"))


def test_check_compare_reports_any_differing_bit(tmp_path):
    """tools.emu.check --compare, the template A/B: equal files pass, one flipped bit fails."""
    from tools.emu.check import compare_saved

    out = {"case": {"o": torch.randn(4, 3), "dk": torch.randn(5)}}
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(out, a)
    torch.save({"case": {k: v.clone() for k, v in out["case"].items()}}, b)
    assert compare_saved(a, b) == 0
    flipped = out["case"]["dk"].clone()
    flipped.view(torch.int32)[2] ^= 1
    torch.save({"case": {"o": out["case"]["o"], "dk": flipped}}, b)
    assert compare_saved(a, b) == 1
    torch.save({"case": {"o": out["case"]["o"]}}, b)
    assert compare_saved(a, b) == 1
