"""Value types: variant keys round-trip, versions parse and order numerically, min_cuda is derived
from the arch and the declared PTX features."""

from __future__ import annotations

import pytest
from conftest import REPO
from pydantic import ValidationError

from cake.errors import ConfigError
from cake.manifest import Entry
from cake.manifest import load as load_manifest
from cake.matrix import load_matrix
from cake.spec import Arch, Feature, GateForm, Stage, Variant, Version, min_cuda, program_name
from cake.tree import Tree

MATRIX = load_matrix(Tree(REPO))
MANIFEST = load_manifest(Tree(REPO).manifest)
MATRIX_KEYS = sorted({v.key for p in MATRIX.packages.values() for v in p.records})
MANIFEST_KEYS = sorted({e.record for e in MANIFEST.entries})


def test_the_real_tree_has_records() -> None:
    # The parametrized round-trips below would pass vacuously on an empty matrix.
    assert MATRIX_KEYS
    assert set(MANIFEST_KEYS) >= set(MATRIX_KEYS)


@pytest.mark.parametrize("key", MATRIX_KEYS + sorted(set(MANIFEST_KEYS) - set(MATRIX_KEYS)))
def test_record_key_round_trips(key: str) -> None:
    variant = Variant.parse(key)
    assert variant.key == key
    assert Variant.parse(variant.key) == variant


@pytest.mark.parametrize(
    "variant",
    [
        Variant(stage=Stage.gate),
        Variant(stage=Stage.fwd_chunk, gate="sigmoid", x="fp32", l2n="fused"),
        Variant(stage=Stage.fwd_state, l2n="off"),
        Variant(stage=Stage.gate, x="bf16"),
    ],
    ids=lambda v: v.key,
)
def test_every_knob_round_trips(variant: Variant) -> None:
    assert Variant.parse(variant.key) == variant


def test_key_is_stage_then_knobs_in_field_order() -> None:
    v = Variant(stage=Stage.fwd_chunk, l2n="fused", x="bf16", gate="softplus")
    assert v.key == "fwd_chunk.gate-softplus.x-bf16.l2n-fused"


@pytest.mark.parametrize(
    "key",
    [
        "",
        "bogus",
        "GATE",
        "gate.",
        "gate..gate-g",
        "gate.gate",
        "gate.gate-",
        "gate.gate-bogus",
        "gate.foo-bar",
        "gate.stage-gate",
        "gate.gate-g.gate-g",
        "gate.x-bf16.gate-softplus",
        "gate.gate-g ",
    ],
    ids=repr,
)
def test_malformed_record_key_is_rejected(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Variant.parse(key)
    assert repr(key) in str(info.value)
    assert "\n" not in str(info.value)


def test_variant_is_frozen_and_strict() -> None:
    v = Variant(stage=Stage.gate, gate="g")
    with pytest.raises(ValidationError):
        v.gate = GateForm.sigmoid  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Variant(stage=Stage.gate, bogus="x")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("text", "major", "minor"),
    [("12.8", 12, 8), ("13.4", 13, 4), (" 12.0 ", 12, 0), ("12.10", 12, 10), ("13.5.37", 13, 5)],
)
def test_version_parses(text: str, major: int, minor: int) -> None:
    v = Version.parse(text)
    assert (v.major, v.minor) == (major, minor)
    assert str(v) == f"{major}.{minor}"


@pytest.mark.parametrize("text", ["", "12", "twelve", "12.x", "a.b", "12,8"], ids=repr)
def test_version_rejects_garbage(text: str) -> None:
    with pytest.raises(ConfigError, match="MAJOR.MINOR"):
        Version.parse(text)


def test_version_orders_numerically() -> None:
    texts = ["13.4", "12.10", "12.0", "13.0", "12.9", "12.8"]
    ordered = sorted(Version.parse(t) for t in texts)
    assert [str(v) for v in ordered] == ["12.0", "12.8", "12.9", "12.10", "13.0", "13.4"]
    assert Version.parse("12.9") < Version.parse("12.10")
    assert Version.parse("13.0") > Version.parse("12.10")
    assert Version.parse("12.8") <= Version.parse("12.8") >= Version.parse("12.8")
    assert Version.parse("12.8") == Version.parse("12.8")
    assert len({Version.parse("12.8"), Version.parse(" 12.8")}) == 1


@pytest.mark.parametrize(("value", "text"), [(12080, "12.8"), (13040, "13.4"), (12000, "12.0")])
def test_version_from_driver_int(value: int, text: str) -> None:
    assert Version.from_int(value) == Version.parse(text)


@pytest.mark.parametrize(
    ("arch", "features", "want"),
    [
        (Arch.sm_90a, [], "12.0"),
        (Arch.sm_90a, [Feature.ld256, Feature.min3], "12.0"),
        (Arch.sm_90, [Feature.ld256], "12.0"),
        (Arch.sm_100a, [], "12.8"),
        (Arch.sm_100a, [Feature.ld256], "12.9"),
        (Arch.sm_100a, [Feature.min3], "12.9"),
        (Arch.sm_100a, [Feature.ld256, Feature.min3], "12.9"),
        (Arch.sm_103a, [], "12.9"),
        (Arch.sm_103a, [Feature.min3], "12.9"),
        (Arch.sm_107a, [], "13.4"),
        (Arch.sm_107a, [Feature.ld256], "13.4"),
    ],
    ids=lambda p: p if isinstance(p, str) else "+".join(map(str, p)) or "none",
)
def test_min_cuda_is_derived(arch: Arch, features: list[Feature], want: str) -> None:
    assert min_cuda(arch, features) == Version.parse(want)


@pytest.mark.parametrize("entry", MANIFEST.entries, ids=lambda e: e.program)
def test_build_json_min_cuda_is_the_derived_one(entry: Entry) -> None:
    """min_cuda in build.json is data derived from the matrix; copies may only raise it."""
    stage = MATRIX.stages[Variant.parse(entry.record).stage]
    derived = min_cuda(entry.arch, list(stage.features))
    if entry.copy_of is None:
        assert Version.parse(entry.min_cuda) == derived
    else:
        assert Version.parse(entry.min_cuda) >= derived


@pytest.mark.parametrize(
    ("capability", "arch"),
    [
        ((9, 0), Arch.sm_90a),
        ((10, 0), Arch.sm_100a),
        ((10, 3), Arch.sm_103a),
        ((10, 7), Arch.sm_107a),
    ],
    ids=lambda p: p if isinstance(p, Arch) else f"cc{p[0]}.{p[1]}",
)
def test_capability_maps_to_exactly_one_arch(capability: tuple[int, int], arch: Arch) -> None:
    assert Arch.for_capability(capability) is arch
    assert arch.capability == capability
    assert not arch.is_twin


@pytest.mark.parametrize(
    "capability", [(8, 0), (8, 9), (12, 0), (10, 1)], ids=lambda c: f"cc{c[0]}.{c[1]}"
)
def test_unsupported_capability_maps_to_nothing(capability: tuple[int, int]) -> None:
    assert Arch.for_capability(capability) is None


def test_twin_is_hopper_and_never_chosen_by_capability() -> None:
    assert Arch.sm_90.is_twin
    assert Arch.sm_90.capability == (9, 0)
    assert Arch.for_capability((9, 0)) is not Arch.sm_90


def test_program_name() -> None:
    assert program_name("kda_det", "gate.gate-g", Arch.sm_100a) == "kda_det.gate.gate-g.sm_100a"


def test_a_kernel_that_names_its_archs_is_in_those_programs_only() -> None:
    # packages.toml: fwd_state_local's kda_fwd_state_lean is sm_90a's (its warpgroup chain)
    spec = MATRIX.stages[Stage.fwd_state_local]
    symbols = {a: [k.symbol for k in spec.kernels_for(a)] for a in Arch}
    assert symbols[Arch.sm_90a] == ["kda_fwd_state", "kda_fwd_state_lean"]
    assert all(symbols[a] == ["kda_fwd_state"] for a in Arch if a is not Arch.sm_90a)
    records = {
        (e.arch, tuple(k.symbol for k in e.kernels))
        for e in MANIFEST.entries
        if e.record == "fwd_state_local"
    }
    assert records == {(a, tuple(symbols[a])) for a in {e for e, _ in records}}
    assert {a for a, _ in records} == {
        Arch.sm_90a,
        Arch.sm_90,
        Arch.sm_100a,
        Arch.sm_103a,
        Arch.sm_107a,
    }


def test_a_kernel_naming_an_unknown_arch_is_a_config_error(tmp_path) -> None:  # noqa: ANN001
    import shutil

    shutil.copytree(REPO / "generators", tmp_path / "generators")
    toml = tmp_path / "generators" / "packages.toml"
    toml.write_text(
        toml.read_text().replace('archs = ["sm_90a"], threads', 'archs = ["sm_91"], threads')
    )
    with pytest.raises(ConfigError, match="does not match its schema"):
        load_matrix(Tree(tmp_path))


def test_a_kernel_naming_an_arch_no_package_renders_its_stage_for_is_a_config_error(
    tmp_path,  # noqa: ANN001
) -> None:
    # kernels naming sm_90a only (kda_fwd_state_lean, ...): with no package building sm_90a they
    # would never be rendered
    import shutil

    shutil.copytree(REPO / "generators", tmp_path / "generators")
    toml = tmp_path / "generators" / "packages.toml"
    text = toml.read_text()
    assert text.count('archs = ["sm_90a", "sm_90", ') == 2  # both packages
    toml.write_text(text.replace('archs = ["sm_90a", "sm_90", ', 'archs = ["sm_90", '))
    with pytest.raises(ConfigError, match=r"kernel kda_\w+ names archs no package renders it for"):
        load_matrix(Tree(tmp_path))
