"""`cake verify`: recompute every digest and identity from the tree and report typed violations."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from . import identity
from .errors import CakeError
from .manifest import Entry
from .manifest import load as load_manifest
from .matrix import load_matrix
from .render import artifact_files, body_of, plan_migrate, plan_render
from .spec import Version
from .tree import Tree


class Kind(StrEnum):
    missing_file = "missing-file"  # an entry's artifact does not exist
    unknown_file = "unknown-file"  # an artifact no entry names
    digest_mismatch = "digest-mismatch"  # an artifact's bytes differ from its entry's digest
    stale_identity = "stale-identity"  # templates/headers/generator/params changed since render
    missing_entry = "missing-entry"  # the matrix declares a program build.json lacks
    unknown_entry = "unknown-entry"  # build.json names a program the matrix does not declare
    copy_out_of_sync = "copy-out-of-sync"  # a copy no longer matches its source program
    copy_min_cuda = "copy-min-cuda"  # a copy's min_cuda is below its source's


@dataclass(frozen=True)
class Violation:
    kind: Kind
    program: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.program}: {self.detail}"


def verify(tree: Tree) -> list[Violation]:
    matrix = load_matrix(tree)
    manifest = load_manifest(tree.manifest)
    entries = manifest.by_program()
    out: list[Violation] = []

    for entry in manifest.entries:
        out += _check_file(tree, entry)

    expected = {r.entry.program: r.entry for r in plan_render(tree, matrix)}
    for name, want in expected.items():
        have = entries.get(name)
        if have is None:
            out.append(
                Violation(Kind.missing_entry, name, "declared by the matrix; run `cake render`")
            )
        elif have.identity != want.identity or have.min_cuda != want.min_cuda:
            out.append(
                Violation(
                    Kind.stale_identity,
                    name,
                    f"build.json has {have.identity[:19]}… (min_cuda {have.min_cuda}), the tree gives "
                    f"{want.identity[:19]}… (min_cuda {want.min_cuda}); run `cake render`",
                )
            )
        elif have.source_digest != want.source_digest:
            # The file may match build.json, but both were edited by hand: a render differs.
            out.append(
                Violation(
                    Kind.digest_mismatch,
                    name,
                    f"build.json says {have.source_digest[:19]}…, a render of the tree gives "
                    f"{want.source_digest[:19]}…; run `cake render`",
                )
            )
        elif have != want:
            fields = sorted(f for f in Entry.model_fields if getattr(have, f) != getattr(want, f))
            out.append(
                Violation(
                    Kind.stale_identity,
                    name,
                    f"build.json differs from the matrix in {', '.join(fields)}; run `cake render`",
                )
            )

    for entry in manifest.entries:
        if entry.copy_of is None:
            if entry.program not in expected:
                out.append(Violation(Kind.unknown_entry, entry.program, "not in the matrix"))
            continue
        out += _check_copy(tree, entry, entries)

    planned_copies: set[str] | None
    try:
        planned_copies = {r.entry.program for r in plan_migrate(tree, matrix, manifest)}
    except (OSError, CakeError):
        planned_copies = None  # a missing source file is already reported above
    if planned_copies is not None:
        for entry in manifest.entries:
            if entry.copy_of is not None and entry.program not in planned_copies:
                out.append(Violation(Kind.unknown_entry, entry.program, "no copy map declares it"))
        for name in sorted(planned_copies - set(entries)):
            out.append(
                Violation(Kind.missing_entry, name, "declared by a copy map; run `cake migrate`")
            )

    referenced = {e.source for e in manifest.entries}
    for path in sorted(artifact_files(tree) - referenced):
        out.append(Violation(Kind.unknown_file, path, "no build.json entry names this file"))
    return out


def _check_file(tree: Tree, entry: Entry) -> list[Violation]:
    path = tree.root / entry.source
    if not path.is_file():
        return [Violation(Kind.missing_file, entry.program, f"{entry.source} does not exist")]
    digest = identity.digest_file(path)
    if digest != entry.source_digest:
        return [
            Violation(
                Kind.digest_mismatch,
                entry.program,
                f"{entry.source} hashes to {digest[:19]}…, build.json says {entry.source_digest[:19]}…",
            )
        ]
    return []


# What a copy must share with its source: it is the same program under another name.
_SHARED_WITH_SOURCE = ("record", "arch", "template", "generator_revision", "kernels")


def _check_copy(tree: Tree, entry: Entry, entries: dict[str, Entry]) -> list[Violation]:
    assert entry.copy_of is not None
    out = []
    source = entries.get(entry.copy_of.program)
    if source is None:
        return [
            Violation(
                Kind.copy_out_of_sync, entry.program, f"source {entry.copy_of.program} is gone"
            )
        ]
    differ = [f for f in _SHARED_WITH_SOURCE if getattr(entry, f) != getattr(source, f)]
    if differ:
        out.append(
            Violation(
                Kind.copy_out_of_sync,
                entry.program,
                f"differs from {source.program} in {', '.join(differ)}; run `cake migrate`",
            )
        )
    if (
        source.identity != entry.copy_of.identity
        or source.source_digest != entry.copy_of.source_digest
    ):
        out.append(
            Violation(
                Kind.copy_out_of_sync,
                entry.program,
                f"{source.program} changed since it was copied; run `cake migrate`",
            )
        )
    else:
        mine, theirs = tree.root / entry.source, tree.root / source.source
        if (
            mine.is_file()
            and theirs.is_file()
            and body_of(mine.read_text()) != body_of(theirs.read_text())
        ):
            out.append(
                Violation(
                    Kind.copy_out_of_sync, entry.program, f"body differs from {source.program}"
                )
            )
    if Version.parse(entry.min_cuda) < Version.parse(source.min_cuda):
        out.append(
            Violation(
                Kind.copy_min_cuda,
                entry.program,
                f"min_cuda {entry.min_cuda} is below its source's {source.min_cuda}",
            )
        )
    return out
