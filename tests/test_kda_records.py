"""Every chunk_kda variant's programs exist in build.json for every arch, and selection picks the
right one per GPU (CPU: injected machine facts, the real manifest)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from cake.errors import NoCompatibleProgram
from cake.kda.forward import Config, records
from cake.kda.layout import layout_for
from cake.kda.stages import PACKAGE
from cake.manifest import load
from cake.resolve import Facts, select
from cake.spec import Arch, GateForm, L2Norm, Version

MANIFEST = load(Path(__file__).resolve().parent.parent / "build.json")
VARIANTS = [
    (gate, dtype, l2n)
    for gate, dtype, l2n in itertools.product(GateForm, (torch.float32, torch.bfloat16), L2Norm)
    if not (gate is GateForm.g and dtype is torch.bfloat16)  # the g form takes fp32 log gates only
]


def config(gate: GateForm, l2n: L2Norm) -> Config:
    return Config(
        cu_seqlens=(0, 10),
        scale=1.0,
        gate=gate,
        l2n=l2n,
        beta_sigmoid=False,
        lower_bound=-1.0,
        store_final_state=False,
        saved=False,
    )


@pytest.mark.parametrize(
    "gate,dtype,l2n", VARIANTS, ids=[f"{g}-{str(d)[6:]}-{n}" for g, d, n in VARIANTS]
)
@pytest.mark.parametrize(
    "capability,arch",
    [
        ((9, 0), Arch.sm_90a),
        ((10, 0), Arch.sm_100a),
        ((10, 3), Arch.sm_103a),
        ((10, 7), Arch.sm_107a),
    ],
)
def test_forward_records_select_the_arch_of_the_gpu(gate, dtype, l2n, capability, arch):
    facts = Facts(capability=capability, driver=Version.parse("13.4"), nvrtc=Version.parse("13.4"))
    for record in records(config(gate, l2n), dtype):
        assert select(MANIFEST, PACKAGE, record, facts).entry.arch is arch


def test_twin_is_selected_only_on_request():
    facts = Facts(
        capability=(9, 0), driver=None, nvrtc=Version.parse("13.0"), arch_override=Arch.sm_90
    )
    for record in records(config(GateForm.softplus, L2Norm.fused), torch.bfloat16):
        assert select(MANIFEST, PACKAGE, record, facts).entry.arch is Arch.sm_90


def test_old_nvrtc_on_blackwell_names_min_cuda():
    facts = Facts(capability=(10, 7), driver=None, nvrtc=Version.parse("13.0"))
    with pytest.raises(NoCompatibleProgram, match="NVRTC 13.0 is older than min_cuda 13.4"):
        select(MANIFEST, PACKAGE, records(config(GateForm.g, L2Norm.off), torch.float32)[0], facts)


@pytest.mark.parametrize(
    "cu,chunks,seq_chunks",
    [
        ((0, 1), [[0, 1]], [[0, 1]]),
        ((0, 64, 129), [[0, 64], [64, 64], [128, 1]], [[0, 1], [1, 2]]),
        ((0, 0, 65, 65), [[0, 64], [64, 1]], [[0, 0], [0, 2], [2, 0]]),
        ((0, 0), [], [[0, 0]]),
    ],
    ids=["one-token", "64-then-65", "empty-sequences", "all-empty"],
)
def test_chunk_tables_align_chunks_to_each_sequence(cu, chunks, seq_chunks):
    layout = layout_for(cu, torch.device("cpu"))
    assert layout.chunks.tolist() == chunks
    assert layout.seq_chunks.tolist() == seq_chunks
    assert layout.chunks.dtype == torch.int32


def test_replay_runs_the_state_pass_without_o_from_kda_det():
    """The backward's replay recomputes only the chunk-start states: the no-O state program, which
    kda_det ships for every arch (and kda_cp copies)."""
    from cake.kda.backward import records as backward_records
    from cake.kda.forward import STATE, STATE_LOCAL

    facts = Facts(capability=(9, 0), driver=Version.parse("13.4"), nvrtc=Version.parse("13.4"))
    replay = backward_records(config(GateForm.g, L2Norm.off), torch.float32, replay=True)
    saved = backward_records(config(GateForm.g, L2Norm.off), torch.float32, replay=False)
    assert STATE_LOCAL in replay and STATE not in replay
    assert STATE_LOCAL not in saved and STATE not in saved
    for record in replay:
        assert select(MANIFEST, PACKAGE, record, facts).entry.arch is Arch.sm_90a
    assert records(config(GateForm.g, L2Norm.off), torch.float32)[-1] == STATE
