"""Selection over the real build.json with injected machine facts: the exact arch per capability,
the twin on request, and a decision trace that names every candidate and why it lost."""

from __future__ import annotations

import pytest
from conftest import REPO

from cake.errors import ConfigError, NoCompatibleProgram
from cake.machine import arch_override
from cake.manifest import Entry
from cake.manifest import load as load_manifest
from cake.resolve import Facts, select
from cake.spec import Arch, Version
from cake.tree import Tree

MANIFEST = load_manifest(Tree(REPO).manifest)
RECORDS = sorted({(e.package, e.record) for e in MANIFEST.entries})


def facts(
    cc: tuple[int, int],
    *,
    driver: str | None = "13.5",
    nvrtc: str | None = "13.5",
    arch: Arch | None = None,
) -> Facts:
    return Facts(
        capability=cc,
        driver=Version.parse(driver) if driver else None,
        nvrtc=Version.parse(nvrtc) if nvrtc else None,
        arch_override=arch,
    )


def candidates(package: str, record: str) -> list[str]:
    return sorted(
        e.program for e in MANIFEST.entries if e.package == package and e.record == record
    )


def archs_of(package: str, record: str) -> set[Arch]:
    return {e.arch for e in MANIFEST.entries if (e.package, e.record) == (package, record)}


def records_with(arch: Arch) -> list[tuple[str, str]]:
    found = [r for r in RECORDS if arch in archs_of(*r)]
    assert found, f"no record in build.json has {arch}: the test would check nothing"
    return found


def entry_for(package: str, record: str, arch: Arch) -> Entry:
    return next(
        e for e in MANIFEST.entries if (e.package, e.record, e.arch) == (package, record, arch)
    )


def older(v: Version) -> Version:
    return (
        Version(major=v.major, minor=v.minor - 1)
        if v.minor
        else Version(major=v.major - 1, minor=9)
    )


def test_every_blackwell_record_has_its_hopper_twin() -> None:
    """What ships for Blackwell must be what was tested on Hopper (product decision 4)."""
    blackwell = {Arch.sm_100a, Arch.sm_103a, Arch.sm_107a}
    for package, record in RECORDS:
        if archs_of(package, record) & blackwell:
            assert Arch.sm_90 in archs_of(package, record), (package, record)


@pytest.mark.parametrize(
    ("cc", "arch"),
    [
        ((9, 0), Arch.sm_90a),
        ((10, 0), Arch.sm_100a),
        ((10, 3), Arch.sm_103a),
        ((10, 7), Arch.sm_107a),
    ],
    ids=lambda p: str(p) if isinstance(p, Arch) else f"cc{p[0]}.{p[1]}",
)
def test_capability_selects_its_arch(cc: tuple[int, int], arch: Arch) -> None:
    for package, record in records_with(arch):
        decision = select(MANIFEST, package, record, facts(cc))
        assert decision.entry.arch is arch
        assert decision.entry.package == package and decision.entry.record == record
        assert [name for name, _ in decision.trace] == candidates(package, record)
        assert dict(decision.trace)[decision.entry.program] == "selected"
        assert sum(reason == "selected" for _, reason in decision.trace) == 1


def test_arch_override_picks_the_twin_on_hopper() -> None:
    for package, record in records_with(Arch.sm_90):
        decision = select(MANIFEST, package, record, facts((9, 0), arch=Arch.sm_90))
        assert decision.entry.arch is Arch.sm_90
        reasons = dict(decision.trace)
        sm90a = next(n for n in reasons if n.endswith(".sm_90a"))
        assert "not the one chosen" in reasons[sm90a] and "sm_90" in reasons[sm90a]


def test_arch_override_cannot_run_hopper_code_on_blackwell() -> None:
    package, record = records_with(Arch.sm_90)[0]
    with pytest.raises(NoCompatibleProgram):
        select(MANIFEST, package, record, facts((10, 0), arch=Arch.sm_90))


@pytest.mark.parametrize("cc", [(8, 0), (12, 0)], ids=lambda c: f"cc{c[0]}.{c[1]}")
def test_unsupported_capability_lists_every_candidate(cc: tuple[int, int]) -> None:
    for package, record in RECORDS:
        with pytest.raises(NoCompatibleProgram) as info:
            select(MANIFEST, package, record, facts(cc))
        exc = info.value
        assert [name for name, _ in exc.trace] == candidates(package, record)
        message = str(exc)
        assert f"capability {cc[0]}.{cc[1]}" in message
        for name, reason in exc.trace:
            arch = name.rsplit(".", 1)[1]
            assert f"arch {arch} needs capability" in reason
            assert f"{name}: {reason}" in message


TOO_OLD = [
    # (capability, version or None for "one minor below the entry's min_cuda")
    ((10, 7), "13.0"),  # sm_107a needs 13.4
    ((10, 7), None),
    ((10, 3), None),
    ((10, 0), None),
    ((9, 0), None),
]
TOO_OLD_IDS = [f"cc{c[0]}.{c[1]}-{v or 'just-below'}" for c, v in TOO_OLD]


@pytest.mark.parametrize(("cc", "version"), TOO_OLD, ids=TOO_OLD_IDS)
@pytest.mark.parametrize("what", ["nvrtc", "driver"])
def test_too_old_compiler_or_driver_is_rejected_by_min_cuda(
    cc: tuple[int, int], version: str | None, what: str
) -> None:
    arch = Arch.for_capability(cc)
    assert arch is not None
    for package, record in records_with(arch):
        entry = entry_for(package, record, arch)
        need = Version.parse(entry.min_cuda)
        old = Version.parse(version) if version else older(need)
        assert old < need
        with pytest.raises(NoCompatibleProgram) as info:
            f = facts(cc, nvrtc=str(old)) if what == "nvrtc" else facts(cc, driver=str(old))
            select(MANIFEST, package, record, f)
        reason = dict(info.value.trace)[entry.program]
        if what == "nvrtc":
            assert reason == f"NVRTC {old} is older than min_cuda {need}"
        else:
            assert reason == f"driver supports CUDA {old}, below min_cuda {need}"
        assert f"{entry.program}: {reason}" in str(info.value)


@pytest.mark.parametrize("arch", [Arch.sm_107a, Arch.sm_103a, Arch.sm_100a, Arch.sm_90a], ids=str)
def test_exactly_min_cuda_is_enough(arch: Arch) -> None:
    for package, record in records_with(arch):
        need = entry_for(package, record, arch).min_cuda
        decision = select(
            MANIFEST, package, record, facts(arch.capability, driver=need, nvrtc=need)
        )
        assert decision.entry.arch is arch


def test_unknown_versions_do_not_reject() -> None:
    """No NVRTC (bundle-only machine) or an unknown driver: min_cuda cannot be checked here, so
    it is not held against the candidate."""
    package, record = records_with(Arch.sm_107a)[0]
    decision = select(MANIFEST, package, record, facts((10, 7), driver=None, nvrtc=None))
    assert decision.entry.arch is Arch.sm_107a


def test_unknown_record_says_there_are_no_candidates() -> None:
    with pytest.raises(NoCompatibleProgram, match="no candidates at all"):
        select(MANIFEST, "kda_det", "gate.gate-g.x-bf16", facts((9, 0)))


def test_selection_is_pure() -> None:
    f = facts((10, 0))
    package, record = RECORDS[-1]
    before = MANIFEST.dumps()
    assert select(MANIFEST, package, record, f) == select(MANIFEST, package, record, f)
    assert MANIFEST.dumps() == before


def test_facts_describe_the_machine() -> None:
    text = facts((10, 7), driver=None, nvrtc="13.0", arch=Arch.sm_107a).describe()
    assert text == "capability 10.7, driver CUDA unknown, NVRTC 13.0, CAKE_ARCH=sm_107a"


@pytest.mark.parametrize(
    ("value", "arch"),
    [("", None), ("sm_90", Arch.sm_90), ("sm_100a", Arch.sm_100a)],
    ids=["unset", "sm_90", "sm_100a"],
)
def test_cake_arch_variable(monkeypatch: pytest.MonkeyPatch, value: str, arch: Arch | None) -> None:
    monkeypatch.setenv("CAKE_ARCH", value)
    assert arch_override() is arch


def test_cake_arch_rejects_unknown_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAKE_ARCH", "sm_80")
    with pytest.raises(ConfigError, match="sm_80"):
        arch_override()
