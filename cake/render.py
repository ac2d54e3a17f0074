"""The generator: one strict Jinja environment renders each (package, record, arch) of the matrix
into a self-contained CUDA file, and `cake render` / `cake migrate` write only what changed.

Rendered files inline cake's device headers (`#include "cake/x.cuh"`, each once), so an artifact is
the exact text NVRTC compiles and its digest covers everything."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from . import identity
from .errors import RenderError
from .manifest import CopyOf, Entry, Manifest
from .manifest import load as load_manifest
from .matrix import Matrix, load_matrix
from .spec import Arch, Variant, Version, min_cuda, program_name
from .tree import Tree

# Bump when the way this module turns templates into text changes meaning (its own bytes are part
# of every identity anyway; the revision records intent in build.json).
GENERATOR_REVISION = 1
GENERATOR_CODE = ("cake/render.py",)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"(cake/[^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")
_ANY_INCLUDE = re.compile(r"^\s*#\s*include\b")


def environment(tree: Tree) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(tree.templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def inline_headers(text: str, tree: Tree, used: dict[str, bytes]) -> str:
    """Replace each `#include "cake/..."` with that header's text, once per program. Any other
    include is an error: generated CUDA must not depend on the toolkit's headers."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        match = _INCLUDE.match(line)
        if match is None:
            if _ANY_INCLUDE.match(line):
                raise RenderError(
                    "a program includes a header that is not cake's own",
                    expected='#include "cake/NAME.cuh" from generators/include',
                    found=line.strip(),
                )
            out.append(line)
            continue
        name = match.group(1)
        if name in used:
            continue
        path = tree.include / name
        if not path.is_file():
            raise RenderError(f"missing header {name}", expected=f"a file {tree.rel(path)}")
        data = path.read_bytes()
        used[name] = data
        body = "".join(
            ln for ln in data.decode().splitlines(keepends=True) if not _PRAGMA_ONCE.match(ln)
        )
        out.append(f"// ---- begin {name} ----\n")
        out.append(inline_headers(body, tree, used))
        out.append(f"// ---- end {name} ----\n")
    return "".join(out)


@dataclass(frozen=True)
class Rendered:
    entry: Entry
    text: str


def _header(entry: Entry, origin: str) -> str:
    return (
        "// GENERATED FILE, DO NOT EDIT.\n"
        f"// {origin}\n"
        f"// record: {entry.package}/{entry.record}  program: {entry.program}\n"
        f"// identity: {entry.identity}\n"
    )


HEADER_LINES = 4


def body_of(text: str) -> str:
    """The program text below the generated header (what a copy shares with its source)."""
    return "".join(text.splitlines(keepends=True)[HEADER_LINES:])


def render_program(
    tree: Tree, matrix: Matrix, package: str, variant: Variant, arch: Arch
) -> Rendered:
    stage = matrix.stage(variant)
    params = {**variant.template_params(), "stage": str(variant.stage), "arch": str(arch)}
    try:
        template = environment(tree).get_template(stage.template)
        raw = template.render(**params)
    except jinja2.TemplateError as exc:
        raise RenderError(
            f"template {stage.template} failed for {package}/{variant.key} on {arch}",
            found=f"{type(exc).__name__}: {exc}",
        ) from None
    used: dict[str, bytes] = {}
    body = inline_headers(raw, tree, used)
    files = {
        f"{tree.rel(tree.templates)}/{stage.template}": (
            tree.templates / stage.template
        ).read_bytes()
    }
    files.update({f"{tree.rel(tree.include)}/{name}": data for name, data in used.items()})
    files.update({path: (tree.root / path).read_bytes() for path in GENERATOR_CODE})
    ident = identity.identity_closure(
        files=files, params=params, generator_revision=matrix.generator_revision
    )
    name = program_name(package, variant.key, arch)
    source = f"{tree.rel(tree.artifacts)}/{package}/{variant.key}.{arch}.cu"
    partial = Entry(
        program=name,
        package=package,
        record=variant.key,
        arch=arch,
        min_cuda=str(min_cuda(arch, list(stage.features))),
        source=source,
        source_digest="",
        identity=ident,
        template=stage.template,
        generator_revision=matrix.generator_revision,
        kernels=stage.kernels_for(arch),
    )
    text = (
        _header(partial, f"generator: cake render from generators/templates/{stage.template}")
        + body
    )
    entry = partial.model_copy(update={"source_digest": identity.digest_bytes(text.encode())})
    return Rendered(entry, text)


def plan_render(tree: Tree, matrix: Matrix, packages: list[str] | None = None) -> list[Rendered]:
    out = []
    for name, package in sorted(matrix.packages.items()):
        if packages and name not in packages:
            continue
        for variant in package.records:
            for arch in package.archs:
                out.append(render_program(tree, matrix, name, variant, arch))
    return out


def plan_migrate(tree: Tree, matrix: Matrix, manifest: Manifest) -> list[Rendered]:
    """A copy is the source program's body under the target package's name and header."""
    out = []
    entries = sorted((e for e in manifest.entries if e.copy_of is None), key=lambda e: e.program)
    for name, package in sorted(matrix.packages.items()):
        for copy in package.copies:
            for src in entries:
                if src.package != copy.source or not copy.matches(src.record):
                    continue
                if src.arch not in package.archs:
                    continue
                src_text = (tree.root / src.source).read_text()
                program = program_name(name, src.record, src.arch)
                own_min = min_cuda(
                    src.arch, list(matrix.stages[Variant.parse(src.record).stage].features)
                )
                partial = src.model_copy(
                    update={
                        "program": program,
                        "package": name,
                        "source": f"{tree.rel(tree.artifacts)}/{name}/{src.record}.{src.arch}.cu",
                        "identity": identity.copy_identity(
                            source_identity=src.identity, package=name, program=program
                        ),
                        "min_cuda": str(max(own_min, Version.parse(src.min_cuda))),
                        "copy_of": CopyOf(
                            program=src.program,
                            identity=src.identity,
                            source_digest=src.source_digest,
                        ),
                    }
                )
                text = _header(partial, f"copy of {src.program} by cake migrate") + body_of(
                    src_text
                )
                entry = partial.model_copy(
                    update={"source_digest": identity.digest_bytes(text.encode())}
                )
                out.append(Rendered(entry, text))
    return out


# ---------------------------------------------------------------- writing only what changed


@dataclass(frozen=True)
class Change:
    path: str
    action: str  # "write" | "delete"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def apply(tree: Tree, files: dict[str, bytes], delete: list[str], check: bool) -> list[Change]:
    """Write each file whose bytes differ and delete the listed ones; with check, only report."""
    changes = []
    for rel, data in sorted(files.items()):
        path = tree.root / rel
        if not path.exists() or path.read_bytes() != data:
            changes.append(Change(rel, "write"))
            if not check:
                _write_atomic(path, data)
    for rel in sorted(delete):
        if (tree.root / rel).exists():
            changes.append(Change(rel, "delete"))
            if not check:
                (tree.root / rel).unlink()
    return changes


def artifact_files(tree: Tree) -> set[str]:
    if not tree.artifacts.exists():
        return set()
    return {tree.rel(p) for p in tree.artifacts.rglob("*") if p.is_file()}


def render(tree: Tree, packages: list[str] | None = None, check: bool = False) -> list[Change]:
    matrix = load_matrix(tree)
    unknown = set(packages or []) - set(matrix.packages)
    if unknown:
        raise RenderError(
            f"unknown package(s) {', '.join(sorted(unknown))}", expected=", ".join(matrix.packages)
        )
    manifest = load_manifest(tree.manifest)
    rendered = plan_render(tree, matrix, packages)
    mine = {r.entry.program for r in rendered}
    # Keep copies and entries of packages not rendered now; drop generated entries that the
    # matrix no longer declares.
    kept = [
        e
        for e in manifest.entries
        if e.program not in mine
        and (e.copy_of is not None or (packages is not None and e.package not in packages))
    ]
    new = manifest.with_entries(kept + [r.entry for r in rendered])
    files = {r.entry.source: r.text.encode() for r in rendered}
    files[tree.rel(tree.manifest)] = new.dumps().encode()
    referenced = {e.source for e in new.entries}
    stale = sorted(artifact_files(tree) - referenced)
    return apply(tree, files, stale, check)


def migrate(tree: Tree, check: bool = False) -> list[Change]:
    matrix = load_matrix(tree)
    manifest = load_manifest(tree.manifest)
    copies = plan_migrate(tree, matrix, manifest)
    kept = [e for e in manifest.entries if e.copy_of is None]
    new = manifest.with_entries(kept + [c.entry for c in copies])
    files = {c.entry.source: c.text.encode() for c in copies}
    files[tree.rel(tree.manifest)] = new.dumps().encode()
    old_copies = {e.source for e in manifest.entries if e.copy_of is not None}
    stale = sorted(old_copies - {e.source for e in new.entries})
    return apply(tree, files, stale, check)
