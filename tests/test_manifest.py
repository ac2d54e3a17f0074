"""build.json: its text is canonical (what `dumps` writes is what is checked in), and malformed
manifests are typed one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO

from cake.errors import ManifestError
from cake.manifest import SCHEMA_VERSION, Manifest, load, loads
from cake.tree import Tree

TEXT = Tree(REPO).manifest.read_text()


def test_checked_in_manifest_is_canonical() -> None:
    manifest = loads(TEXT)
    assert manifest.entries
    assert manifest.dumps() == TEXT
    assert TEXT.endswith("}\n") and not TEXT.endswith("\n\n")
    data = json.loads(TEXT)
    assert list(data) == ["schema_version", "entries"]
    assert data["schema_version"] == SCHEMA_VERSION
    programs = [e["program"] for e in data["entries"]]
    assert programs == sorted(programs) and len(set(programs)) == len(programs)
    for entry in data["entries"]:
        assert list(entry) == sorted(entry)


def test_dumps_sorts_whatever_order_it_is_given() -> None:
    manifest = loads(TEXT)
    shuffled = Manifest(entries=tuple(reversed(manifest.entries)))
    assert shuffled.dumps() == TEXT
    assert Manifest().with_entries(list(reversed(manifest.entries))).entries == manifest.entries


def test_missing_manifest_is_empty(tmp_path: Path) -> None:
    assert load(tmp_path / "build.json") == Manifest()


def _first_entry_with(**extra: object) -> str:
    data = json.loads(TEXT)
    data["entries"][0].update(extra)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not valid JSON"),
        ("[]", "unsupported schema"),
        ('{"entries": []}', "schema_version None"),
        (_first_entry_with(extra_field=1), "entries.0.extra_field"),
        (_first_entry_with(arch="sm_80"), "entries.0.arch"),
        (_first_entry_with(kernels="none"), "entries.0.kernels"),
    ],
    ids=["not-json", "not-an-object", "no-schema", "extra-field", "bad-arch", "bad-kernels"],
)
def test_malformed_manifest_is_a_typed_one_line_error(text: str, says: str) -> None:
    with pytest.raises(ManifestError) as info:
        loads(text)
    assert says in str(info.value)
    assert "\n" not in str(info.value)
