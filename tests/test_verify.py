"""`cake verify`: each violation kind is found when exactly it is planted on a copy of the tree, a
clean tree has none, and the CLI prints them and exits 1."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import (
    GATE_TEMPLATE,
    a_copied_source,
    a_copy,
    append_line,
    copies_of,
    edit_manifest,
    manifest_entry,
    run_cake,
)

from cake.manifest import load as load_manifest
from cake.render import migrate, render
from cake.tree import Tree
from cake.verify import Kind, verify

Expected = set[tuple[Kind, str]]


def _remove(data: dict, programs: set[str]) -> None:
    data["entries"] = [e for e in data["entries"] if e["program"] not in programs]


def missing_file_of_copy(tree: Tree) -> Expected:
    copy = a_copy(load_manifest(tree.manifest))
    (tree.root / copy.source).unlink()
    return {(Kind.missing_file, copy.program)}


def missing_file_of_source(tree: Tree) -> Expected:
    src = a_copied_source(load_manifest(tree.manifest))
    (tree.root / src.source).unlink()
    return {(Kind.missing_file, src.program)}


def unknown_file(tree: Tree) -> Expected:
    stray = tree.artifacts / "kda_det" / "stray.sm_90a.cu"
    stray.write_text("// nobody rendered this\n")
    return {(Kind.unknown_file, tree.rel(stray))}


def digest_mismatch(tree: Tree) -> Expected:
    """A hand edit of an artifact's header comment: the body, and so every copy, is unchanged."""
    src = a_copied_source(load_manifest(tree.manifest))
    path = tree.root / src.source
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = "// generator: a hand edit\n"
    path.write_text("".join(lines))
    return {(Kind.digest_mismatch, src.program)}


def digest_forged_in_build_json(tree: Tree) -> Expected:
    """A hand edit whose new digest was also written into build.json (and the copies' copy_of):
    only a fresh render tells that the artifact is not what the generator gives."""
    manifest = load_manifest(tree.manifest)
    src = a_copied_source(manifest)
    digest_mismatch(tree)
    from cake.identity import digest_file

    forged = digest_file(tree.root / src.source)

    def edit(data: dict) -> None:
        manifest_entry(data, src.program)["source_digest"] = forged
        for copy in copies_of(manifest, src.program):
            manifest_entry(data, copy.program)["copy_of"]["source_digest"] = forged

    edit_manifest(tree, edit)
    return {(Kind.digest_mismatch, src.program)}


def stale_identity_after_template_edit(tree: Tree) -> Expected:
    manifest = load_manifest(tree.manifest)
    append_line(tree, GATE_TEMPLATE, "// edited by a test")
    users = [e for e in manifest.entries if e.copy_of is None and e.template == "kda/gate.cu.j2"]
    return {(Kind.stale_identity, e.program) for e in users}


def stale_min_cuda(tree: Tree) -> Expected:
    """A source entry's min_cuda lowered by hand (its copies keep theirs, which is allowed)."""
    manifest = load_manifest(tree.manifest)
    src = next(
        e
        for e in manifest.entries
        if e.copy_of is None and e.min_cuda != "12.0" and copies_of(manifest, e.program)
    )

    def edit(data: dict) -> None:
        manifest_entry(data, src.program)["min_cuda"] = "12.0"

    edit_manifest(tree, edit)
    return {(Kind.stale_identity, src.program)}


def stale_kernel_metadata(tree: Tree) -> Expected:
    """Launch metadata edited in build.json, consistently in the source and its copies: the
    matrix says otherwise."""
    manifest = load_manifest(tree.manifest)
    src = a_copied_source(manifest)

    def edit(data: dict) -> None:
        for program in [src.program, *(c.program for c in copies_of(manifest, src.program))]:
            manifest_entry(data, program)["kernels"][0]["threads"] = 1024

    edit_manifest(tree, edit)
    return {(Kind.stale_identity, src.program)}


def missing_copy_entry(tree: Tree) -> Expected:
    copy = a_copy(load_manifest(tree.manifest))
    (tree.root / copy.source).unlink()
    edit_manifest(tree, lambda data: _remove(data, {copy.program}))
    return {(Kind.missing_entry, copy.program)}


def missing_generated_entry(tree: Tree) -> Expected:
    """A generated entry gone with its file, and with the copies that depend on it."""
    manifest = load_manifest(tree.manifest)
    src = a_copied_source(manifest)
    gone = [src, *copies_of(manifest, src.program)]
    for e in gone:
        (tree.root / e.source).unlink()
    edit_manifest(tree, lambda data: _remove(data, {e.program for e in gone}))
    return {(Kind.missing_entry, src.program)}


def unknown_generated_entry(tree: Tree) -> Expected:
    src = a_copied_source(load_manifest(tree.manifest))
    bogus = src.program.replace(src.package, "kda_bogus", 1)

    def edit(data: dict) -> None:
        entry = dict(manifest_entry(data, src.program), program=bogus, package="kda_bogus")
        data["entries"].append(entry)
        data["entries"].sort(key=lambda e: e["program"])

    edit_manifest(tree, edit)
    return {(Kind.unknown_entry, bogus)}


def unknown_copy_entry(tree: Tree) -> Expected:
    copy = a_copy(load_manifest(tree.manifest))
    bogus = copy.program.replace(copy.package, "kda_nocopies", 1)

    def edit(data: dict) -> None:
        entry = dict(manifest_entry(data, copy.program), program=bogus, package="kda_nocopies")
        data["entries"].append(entry)
        data["entries"].sort(key=lambda e: e["program"])

    edit_manifest(tree, edit)
    return {(Kind.unknown_entry, bogus)}


def copy_map_removed(tree: Tree) -> Expected:
    """The matrix stops declaring copies: every copy left in build.json is unknown."""
    copies = [e for e in load_manifest(tree.manifest).entries if e.copy_of is not None]
    text = tree.matrix.read_text()
    start = text.index("copies = [")
    end = text.index("]\n", start) + 2
    tree.matrix.write_text(text[:start] + text[end:])
    return {(Kind.unknown_entry, e.program) for e in copies}


def copy_out_of_sync_after_render(tree: Tree) -> Expected:
    manifest = load_manifest(tree.manifest)
    append_line(tree, GATE_TEMPLATE, "// edited by a test")
    render(tree)
    users = {
        e.program for e in manifest.entries if e.copy_of is None and e.template == "kda/gate.cu.j2"
    }
    return {
        (Kind.copy_out_of_sync, e.program)
        for e in manifest.entries
        if e.copy_of is not None and e.copy_of.program in users
    }


def copy_of_identity_edited(tree: Tree) -> Expected:
    copy = a_copy(load_manifest(tree.manifest))

    def edit(data: dict) -> None:
        manifest_entry(data, copy.program)["copy_of"]["identity"] = "sha256:" + "0" * 64

    edit_manifest(tree, edit)
    return {(Kind.copy_out_of_sync, copy.program)}


def copy_body_edited(tree: Tree) -> Expected:
    """A copy's body edited and its digest updated to match: the file is consistent with its
    entry, but it is no longer its source's program."""
    from cake.identity import digest_file

    copy = a_copy(load_manifest(tree.manifest))
    append_line(tree, copy.source, "// hand edit")
    digest = digest_file(tree.root / copy.source)
    edit_manifest(
        tree, lambda data: manifest_entry(data, copy.program).update(source_digest=digest)
    )
    return {(Kind.copy_out_of_sync, copy.program)}


def copy_kernels_edited(tree: Tree) -> Expected:
    copy = a_copy(load_manifest(tree.manifest))

    def edit(data: dict) -> None:
        manifest_entry(data, copy.program)["kernels"][0]["smem"] = 4096

    edit_manifest(tree, edit)
    return {(Kind.copy_out_of_sync, copy.program)}


def copy_min_cuda_lowered(tree: Tree) -> Expected:
    copy = next(
        e
        for e in load_manifest(tree.manifest).entries
        if e.copy_of is not None and e.min_cuda > "12.0"
    )

    def edit(data: dict) -> None:
        manifest_entry(data, copy.program)["min_cuda"] = "12.0"

    edit_manifest(tree, edit)
    return {(Kind.copy_min_cuda, copy.program)}


PLANTS: list[tuple[Kind, Callable[[Tree], Expected]]] = [
    (Kind.missing_file, missing_file_of_copy),
    (Kind.missing_file, missing_file_of_source),
    (Kind.unknown_file, unknown_file),
    (Kind.digest_mismatch, digest_mismatch),
    (Kind.digest_mismatch, digest_forged_in_build_json),
    (Kind.stale_identity, stale_identity_after_template_edit),
    (Kind.stale_identity, stale_min_cuda),
    (Kind.stale_identity, stale_kernel_metadata),
    (Kind.missing_entry, missing_copy_entry),
    (Kind.missing_entry, missing_generated_entry),
    (Kind.unknown_entry, unknown_generated_entry),
    (Kind.unknown_entry, unknown_copy_entry),
    (Kind.unknown_entry, copy_map_removed),
    (Kind.copy_out_of_sync, copy_out_of_sync_after_render),
    (Kind.copy_out_of_sync, copy_of_identity_edited),
    (Kind.copy_out_of_sync, copy_body_edited),
    (Kind.copy_out_of_sync, copy_kernels_edited),
    (Kind.copy_min_cuda, copy_min_cuda_lowered),
]


def test_clean_tree_has_no_violations(tree: Tree) -> None:
    assert verify(tree) == []
    cli = run_cake("verify", tree=tree)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == "cake verify: ok\n"


def test_every_kind_is_planted_below() -> None:
    assert {kind for kind, _ in PLANTS} == set(Kind)


@pytest.mark.parametrize(("kind", "plant"), PLANTS, ids=[f"{k}-by-{p.__name__}" for k, p in PLANTS])
def test_planted_violation_is_found_exactly(
    tree: Tree, kind: Kind, plant: Callable[[Tree], Expected]
) -> None:
    expected = plant(tree)
    assert expected
    assert {k for k, _ in expected} == {kind}
    violations = verify(tree)
    assert {(v.kind, v.program) for v in violations} == expected
    assert len(violations) == len(expected), "a violation was reported twice"

    cli = run_cake("verify", tree=tree)
    assert cli.returncode == 1
    assert cli.stdout.splitlines() == [str(v) for v in violations]
    kinds = ", ".join(sorted({str(k) for k, _ in expected}))
    assert cli.stderr.startswith(
        f"cake: error: cake verify found {len(expected)} violation(s) ({kinds})"
    )
    assert len(cli.stderr.strip().splitlines()) == 1


def test_render_and_migrate_repair_what_they_own(tree: Tree) -> None:
    """Planted staleness of every kind that the generator owns goes away with render + migrate."""
    for plant in (stale_identity_after_template_edit, copy_kernels_edited, unknown_file):
        plant(tree)
    assert verify(tree)
    render(tree)
    migrate(tree)
    assert verify(tree) == []
