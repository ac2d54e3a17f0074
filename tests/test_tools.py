"""The tools' pure parts, on the CPU: tools/ab_table.py reads the `ab` step's log; tools/bench.py
keeps what a cut-short run measured; tools/state_precision.py's operand formats round as the
byte-diet plan says; tools/ablate.py always builds its control and warns when the shipped program
runs apart from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import pytest  # noqa: E402
import torch  # noqa: E402
from ab_table import parse  # noqa: E402
from state_precision import f16_hilo, f16_scaled, tf32  # noqa: E402
from wall_table import main as wall_table  # noqa: E402

LOG = """== raw:off:saved new
1doc raw:off:saved segments=auto: per fwd+bwd, us
     5363.2  x1   kda_bwd_chunk
     9960.5  total kernel time, 10022.9 wall; peak memory of one fwd+bwd 8468 MiB
R2 raw:off:saved segments=auto: per fwd+bwd, us
      289.2  x3   kda_fwd_state
== raw:off:saved base
1doc raw:off:saved segments=auto: per fwd+bwd, us
     6272.2  x1   kda_bwd_chunk
     10871.4  total kernel time, 10911.2 wall; peak memory of one fwd+bwd 8468 MiB
"""


def test_ab_table_keys_times_by_variant_row_kernel_and_tree():
    times = parse(LOG)
    assert times[("raw:off:saved", "1doc", "kda_bwd_chunk")] == {"new": 5363.2, "base": 6272.2}
    assert times[("raw:off:saved", "1doc", "total")] == {"new": 9960.5, "base": 10871.4}
    assert times[("raw:off:saved", "R2", "kda_fwd_state")] == {"new": 289.2}
    assert len(times) == 3


def test_ab_table_lists_the_bulk_state_kernel_under_its_pass():
    log = """== g:off:saved new
R2 g:off:saved segments=auto (seg_chunks=18 fill_blocks=2): per fwd+bwd, us
      132.5  x2   kda_bwd_state_bulk
== g:off:saved base
R2 g:off:saved segments=auto (seg_chunks=18 fill_blocks=2): per fwd+bwd, us
      138.5  x2   kda_bwd_state
"""
    assert parse(log) == {("g:off:saved", "R2", "kda_bwd_state"): {"new": 132.5, "base": 138.5}}


def test_ab_table_adds_the_lean_local_launch_to_its_pass():
    log = """== g:off:saved new
R2 g:off:saved segments=auto (seg_chunks=18 fill_blocks=2): per fwd+bwd, us
       63.7  x1   kda_fwd_state_lean
       62.8  x1   kda_fwd_state
== g:off:saved base
R2 g:off:saved segments=auto (seg_chunks=18 fill_blocks=2): per fwd+bwd, us
      139.4  x2   kda_fwd_state
"""
    assert parse(log) == {("g:off:saved", "R2", "kda_fwd_state"): {"new": 126.5, "base": 139.4}}


def test_wall_table_compares_the_mean_of_the_two_runs_with_the_base(tmp_path, capsys):
    def bench_json(name, ms):
        rec = {"row": "R2", "gate": "g", "l2n": "off", "op": "fwd+bwd", "cake_ms": ms}
        recs = [{**rec, "path": "replay"}, {**rec, "path": "saved", "cake_ms": None}]
        (tmp_path / name).write_text(json.dumps({"speed": recs}))
        return str(tmp_path / name)

    paths = [bench_json("a", 0.9), bench_json("b", 1.0), bench_json("c", 0.8)]
    assert wall_table(paths) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "g:off:replay" in lines[1] and lines[1].endswith("-15.0%")
    assert wall_table(paths[:2]) == 2


def _spread(shape, seed=0):
    """fp32-exact values over ~40 binades, signs mixed, so rows hold tiny and large entries."""
    gen = torch.Generator().manual_seed(seed)
    mag = torch.ldexp(
        torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5,
        torch.randint(-30, 10, shape, generator=gen, dtype=torch.int32),
    )
    return (
        (mag * torch.sign(torch.randn(shape, generator=gen, dtype=torch.float64))).float().double()
    )


def test_fp16_with_a_power_of_two_row_scale_rounds_like_tf32():
    x = _spread((64, 128))
    y = f16_scaled(x, -1)
    rowmax = x.abs().amax(-1, keepdim=True)
    big = x.abs() >= rowmax * 2.0**-28
    assert big.float().mean() > 0.3 and (~big).any()
    assert torch.equal(y[big], tf32(x)[big])  # the same bits TF32's cvt.rn gives
    assert ((y - x).abs() <= rowmax * 2.0**-39)[~big].all()  # the rest: fp16 subnormals


def test_hi_lo_fp16_with_a_column_scale_keeps_22_bits():
    x = _spread((128, 64), seed=1)
    y = f16_hilo(x, -2)
    colmax = x.abs().amax(-2, keepdim=True)
    err = (y - x).abs()
    assert (err <= torch.maximum(x.abs() * 2.0**-22, colmax * 2.0**-39)).all()
    assert not torch.equal(y, tf32(x))  # more than TF32 alone


def test_bench_accuracy_compares_every_output_and_gradient_with_an_initial_state(monkeypatch):
    """tools/bench.py --accuracy on the CPU with stand-ins: the reference itself as "cake" (o and
    ht exact, gradients rounded to their inputs' dtypes) and a copy that scales o and ht by 1.01 as "fla" (so those read 1e-2 and
    the gradients, which the scaling also changes, are nonzero). Guards the plumbing: ht, dh0 and
    the raw gate's dA_log / ddt_bias are compared, per head too."""
    import bench
    from kda_reference import kda_reference

    def reference(*, disable_recompute, cu_seqlens_cpu=None, safe_gate=False, **kw):
        return kda_reference(**kw)

    def scaled(**kw):
        o, ht = reference(**kw)
        return 1.01 * o, 1.01 * ht

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "load_impls", lambda impls: ({"cake": reference, "fla": scaled}, []))
    argv = ["--accuracy", "--acc-cases", "g-mixed-off,raw-lb-fused", "--acc-lengths", "5,70"]
    args = bench.build_parser().parse_args([*argv, "--acc-heads", "2", "--acc-initial-state"])
    args.argv = argv
    recs = {(r["case"], r["impl"]): r for r in bench.run_accuracy(args)["accuracy"]}
    wanted = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"}
    for case in ("g-mixed-off", "raw-lb-fused"):
        cake, fla = recs[(case, "cake")], recs[(case, "fla")]
        names = wanted | ({"dA_log", "ddt_bias"} if case.startswith("raw") else set())
        assert set(cake["rel_l2"]) == names == set(cake["per_head"])
        assert cake["rel_l2"]["o"] == cake["rel_l2"]["ht"] == 0.0
        # the stand-in's gradients come back in their inputs' dtypes: bf16 rounding, ~1.6e-3
        assert max(cake["rel_l2"].values()) < 3e-3
        assert all(len(v) == 2 for v in cake["per_head"].values())  # two heads
        for name in ("o", "ht"):
            assert abs(fla["rel_l2"][name] - 1e-2) < 1e-9
        assert min(fla["rel_l2"][n] for n in names - {"o", "ht"}) > 1e-4
    table = bench.format_acc_table(list(recs.values()), worst_head=True)
    assert "1.0e-02" in table


def test_every_ablation_applies_to_the_shipped_programs():
    """tools/ablate.py's text patches must each find their text in today's rendered programs (a
    template change that moves it must update the ablation, or the ablation stops ablating)."""
    import pytest
    from ablate import ABLATIONS, apply, helper_calls, program_source

    root = Path(__file__).resolve().parent.parent
    for name, ablations in ABLATIONS.items():
        src = program_source(root, name)
        for ab, patches in ablations.items():
            out = apply(src, patches)
            assert out != src, f"{name} {ab} changed nothing"
            for old, new in patches:
                if old == "NOOP:" and new in out:  # the macro between definition and every call
                    definition, *calls = helper_calls(out, new.split()[1].split("(")[0])
                    at = out.index(new)
                    assert definition < at and all(c > at for c in calls), f"{name} {ab}: {new}"
    with pytest.raises(SystemExit, match="ablation text not found"):
        apply("int main() {}", [("no such text", "")])


def test_an_ablation_macro_reaches_every_call_after_its_helper():
    """A NOOP macro sits right after its helper's definition, so a call in a header inlined later
    (kda_seg_fold's walk lives in cake/fold.cuh) or later in the same header is ablated too;
    placed after the last header, as before session 55, it missed such calls and the ablation
    timed the shipped code."""
    from ablate import apply

    def header(name: str, body: str) -> str:
        return f"// ---- begin cake/{name} ----\n{body}\n// ---- end cake/{name} ----\n"

    src = (
        header("a.cuh", "void h(int x) {}")
        + header("b.cuh", "void w() { h(1); }")
        + "void k() { h(2); }\n"
    )
    out = apply(src, [("NOOP:", "#define h(x) ((void)0)")])
    assert out.index("#define h(x)") < out.index("h(1)") and out.index("#define h(x)") > out.index(
        "void h("
    )
    assert apply(src, [("NOOP:", "#define g(x) ((void)0)")]) == src  # a helper the program lacks
    same = (
        header("a.cuh", "void h(int x) { if (x) {} }\nvoid u() { h(0); }") + "void k() { h(2); }\n"
    )
    out = apply(same, [("NOOP:", "#define h(x) ((void)0)")])
    assert out.index("if (x) {} }") < out.index("#define h(x)") < out.index("h(0)")


def test_bench_speed_json_keeps_the_finished_variants_of_a_run_cut_short(monkeypatch, tmp_path):
    """tools/bench.py's speed mode writes its JSON after every variant (marked partial), so a run
    that a device call's time limit kills keeps what it measured; the finished run overwrites it
    whole. CPU stand-ins: timing and peak memory are stubbed, the second variant's timing stops
    the run as a kill would."""
    import bench

    def standin(*, v, **kw):
        return v * 1.0, None

    timed: list[int] = []

    def fake_time(fn, samples, calls):
        timed.append(1)
        if len(timed) > 2:  # fwd and fwd+bwd of the first variant, then the cut
            raise KeyboardInterrupt
        return 1.0

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "load_impls", lambda impls: ({"cake": standin}, []))
    monkeypatch.setattr(bench, "cuda_time_ms", fake_time)
    monkeypatch.setattr(bench, "peak_mib", lambda fn: 1.0)
    out = tmp_path / "speed.json"
    argv = ["--rows", "m2", "--impl", "cake", "--ops", "fwd,fwd+bwd", "--json", str(out)]
    args = bench.build_parser().parse_args([*argv, "--variants", "g:off:saved,g:off:replay"])
    args.argv = argv
    with pytest.raises(KeyboardInterrupt):
        bench.run_speed(args)
    saved = json.loads(out.read_text())
    assert saved["partial"] is True
    assert [(r["path"], r["op"], r["cake_ms"]) for r in saved["speed"]] == [
        ("saved", "fwd", 1.0),
        ("saved", "fwd+bwd", 1.0),
    ]


def test_ablate_warns_when_shipped_runs_apart_from_the_same_source_compiled_here():
    """Session 19's first call timed ablations against a kda_fwd_state the device had compiled
    itself (a stale bundle, NVRTC 13.0: 1 737 us against 1 188 for the same source built here)."""
    from ablate import control_warning

    assert control_warning({"shipped": 1737.3, "same": 1188.2, "fewwaits": 1058.1}) != []
    assert "tree-p0" in control_warning({"shipped": 1752.5, "tree-p0": 1213.0})[0]
    assert control_warning({"shipped": 1187.2, "same": 1188.8, "tmakd": 900.0}) == []
    assert control_warning({"shipped": 1187.2, "tmakd": 900.0}) == []  # no control: nothing to say


def test_ablate_build_adds_the_control_to_any_chosen_ablation(monkeypatch, tmp_path):
    import ablate

    built: list[str] = []
    monkeypatch.setattr(ablate, "program_source", lambda root, name: "src")
    monkeypatch.setattr(ablate, "apply", lambda src, patches: src)
    monkeypatch.setattr(
        ablate, "compile_variant", lambda out, name, tag, src: built.append(f"{name}:{tag}")
    )
    ablate.build(tmp_path, ["fwd_state.sm_90a:nokd"])
    assert built == ["fwd_state.sm_90a:same", "fwd_state.sm_90a:nokd"]
    built.clear()
    ablate.build(tmp_path, ["fwd_state.sm_90a:same", "fwd_state.sm_90a:wg1sink"])
    assert built == ["fwd_state.sm_90a:same", "fwd_state.sm_90a:wg1sink"]
    built.clear()
    ablate.build(tmp_path, ["bwd_state.sm_90a:same"])
    assert built == ["bwd_state.sm_90a:same"]


def test_ablate_build_refuses_a_name_it_does_not_know(monkeypatch, tmp_path):
    import ablate

    built: list[str] = []
    monkeypatch.setattr(ablate, "program_source", lambda root, name: "src")
    monkeypatch.setattr(ablate, "apply", lambda src, patches: src)
    monkeypatch.setattr(
        ablate, "compile_variant", lambda out, name, tag, src: built.append(f"{name}:{tag}")
    )
    with pytest.raises(SystemExit, match="fwd_state.sm_90a:nosuch"):
        ablate.build(tmp_path, ["fwd_state.sm_90a:nokd", "fwd_state.sm_90a:nosuch"])
    assert built == []  # nothing built before the check


def test_ncu_phases_static_report_counts_each_instruction_once():
    """--static (no device): every SASS instruction of the build lands in one section and one
    source line, and the whole-kernel row counts them, their integer share and their moves."""
    import ncu_phases  # noqa: PLC0415
    from test_compile import nvdisasm  # noqa: PLC0415

    tool = nvdisasm()
    if tool is None:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    art = Path(__file__).resolve().parent.parent / "artifacts/kda_det/gate.gate-g.sm_90a.cu"
    listing = ncu_phases.sass_listing(art, "sm_90a", tool)
    assert listing and all(line > 0 for line, _ in listing)
    rows = ncu_phases.static_report(art, "sm_90a", tool, top=2).splitlines()
    whole = next(r for r in rows if r.startswith("whole kernel")).split()[2:]
    ints = sum(ncu_phases.kind(insn) == "int" for _, insn in listing)
    moves = sum(ncu_phases.is_move(insn) for _, insn in listing)
    assert [int(x) for x in whole] == [len(listing), ints, moves]
    section_rows = rows[1 : rows.index(next(r for r in rows if r.startswith("whole kernel")))]
    assert sum(int(r.split()[-3]) for r in section_rows) == len(listing)


def test_bench_seeds_the_triton_cache_with_kept_autotuning_results_without_overwriting(tmp_path):
    from bench import seed_triton_cache  # noqa: PLC0415

    tuned, cache = tmp_path / "tuned", tmp_path / "cache"
    (tuned / "abc").mkdir(parents=True)
    (tuned / "abc" / "chunk_fwd.autotune.json").write_text('{"configs": 1}')
    (tuned / "def").mkdir()
    (tuned / "def" / "kernel.autotune.json").write_text('{"configs": 2}')
    (tuned / "README.md").write_text("not a result")
    (cache / "def").mkdir(parents=True)
    (cache / "def" / "kernel.autotune.json").write_text('{"configs": "newer"}')
    assert seed_triton_cache(cache, tuned) == 1
    assert (cache / "abc" / "chunk_fwd.autotune.json").read_text() == '{"configs": 1}'
    assert (cache / "def" / "kernel.autotune.json").read_text() == '{"configs": "newer"}'
    assert not (cache / "README.md").exists()
    assert seed_triton_cache(cache, tmp_path / "absent") == 0


def test_phase6_block_reference_form_matches_the_twin_at_the_kernel_rounding():
    """tools/phase6_model.py's block-reference form of kda_bwd_chunk phase 6 (docs/bwd-chunk-
    structure.md, session 53) and its model of today's form: each within 2e-6 of the float64 twin
    fed the same TF32 dA in every gate regime (a wrong reference, mask or select is O(1) off), and
    both at the TF32 dA floor (~2e-4) against the exact twin."""
    from phase6_model import F64, chunk_inputs, phase6, rel, tf32

    for regime in ("mixed", "fast", "raw-lb5"):
        gen = torch.Generator().manual_seed(7)
        q, k, dA1, dA2, G = chunk_inputs(regime, 2, gen)
        ref = phase6(q, k, dA1, dA2, G, None)
        ref_t = phase6(q, k, tf32(dA1).to(F64), tf32(dA2).to(F64), G, None)
        for form in ("current", "blockref"):
            out = phase6(q, k, dA1, dA2, G, form)
            for name in ("dq", "dk", "dg"):
                assert rel(out[name], ref_t[name]) < 2e-6, (regime, form, name)
                assert 1e-4 < rel(out[name], ref[name]) < 4e-4, (regime, form, name)


def test_phase6_model_tf32_rounds_to_nearest_even():
    from phase6_model import tf32

    one = 1.0
    ulp = 2.0**-10  # TF32's spacing at 1
    x = torch.tensor([one + ulp / 2, one + 1.5 * ulp, one + 0.49 * ulp, -(one + 0.51 * ulp)])
    assert tf32(x).tolist() == [one, one + 2 * ulp, one, -(one + ulp)]
