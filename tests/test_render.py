"""Render and migrate: the checked-in tree is their fixed point, they write only what changed (no
byte and no mtime otherwise), `--check` writes nothing and fails on every kind of staleness, and
rendered programs are self-contained with an identity that covers exactly what made them."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from conftest import (
    GATE_HEADER,
    GATE_TEMPLATE,
    REPO,
    a_copied_source,
    a_copy,
    append_line,
    assert_unchanged,
    edit_manifest,
    manifest_entry,
    run_cake,
    snapshot,
)

from cake import render as render_mod
from cake.errors import RenderError
from cake.manifest import Entry, Manifest
from cake.manifest import load as load_manifest
from cake.matrix import load_matrix
from cake.render import migrate, render, render_program
from cake.spec import Variant
from cake.tree import Tree
from cake.verify import Kind, verify

REAL = load_manifest(Tree(REPO).manifest)


def users_of_template(manifest: Manifest, template: str) -> set[str]:
    return {e.program for e in manifest.entries if e.copy_of is None and e.template == template}


def changed_paths(changes: list) -> set[str]:
    return {c.path for c in changes}


def test_checked_in_tree_is_a_fixed_point(tree: Tree) -> None:
    """The CI gate: on a clean checkout, render and migrate have nothing to do."""
    before = snapshot(tree.root)
    assert render(tree, check=True) == []
    assert migrate(tree, check=True) == []
    assert render(tree) == []
    assert migrate(tree) == []
    assert_unchanged(before, tree.root)


PLANTS: dict[str, Callable[[Tree], None]] = {
    "clean": lambda t: None,
    "template-edit": lambda t: append_line(t, GATE_TEMPLATE, "// edited by a test"),
    "header-edit": lambda t: append_line(t, GATE_HEADER, "// edited by a test"),
    "artifact-hand-edit": lambda t: append_line(
        t, a_copied_source(load_manifest(t.manifest)).source, "// hand edit"
    ),
}


@pytest.mark.parametrize("plant", list(PLANTS.values()), ids=list(PLANTS))
def test_second_run_changes_no_byte_and_no_mtime(tree: Tree, plant: Callable[[Tree], None]) -> None:
    plant(tree)
    render(tree)
    migrate(tree)
    assert verify(tree) == []
    before = snapshot(tree.root)
    assert render(tree) == []
    assert migrate(tree) == []
    assert render(tree, check=True) == []
    assert migrate(tree, check=True) == []
    assert_unchanged(before, tree.root)


def _edit_threads(program_of: Callable[[Manifest], Entry]) -> Callable[[Tree], None]:
    def plant(tree: Tree) -> None:
        program = program_of(load_manifest(tree.manifest)).program

        def edit(data: dict) -> None:
            manifest_entry(data, program)["kernels"][0]["threads"] = 1024

        edit_manifest(tree, edit)

    return plant


def _reindent_manifest(tree: Tree) -> None:
    tree.manifest.write_text(tree.manifest.read_text().replace("\n  ", "\n    "))


def _hand_edit(entry_of: Callable[[Manifest], Entry]) -> Callable[[Tree], str]:
    def plant(tree: Tree) -> str:
        rel = entry_of(load_manifest(tree.manifest)).source
        append_line(tree, rel, "// hand edit")
        return rel

    return plant


# (what is planted, which command must notice it, which paths it must name)
STALE: dict[str, tuple[Callable[[Tree], object], str, Callable[[Tree], set[str]]]] = {
    "template-edit": (
        PLANTS["template-edit"],
        "render",
        lambda t: (
            {e.source for e in REAL.entries if e.copy_of is None and e.template == "kda/gate.cu.j2"}
            | {"build.json"}
        ),
    ),
    "header-edit": (
        PLANTS["header-edit"],
        "render",
        lambda t: (
            {
                e.source
                for e in REAL.entries
                if e.copy_of is None
                and "// ---- begin cake/gate.cuh" in (t.root / e.source).read_text()
            }
            | {"build.json"}
        ),
    ),
    "artifact-hand-edit": (
        _hand_edit(a_copied_source),
        "render",
        lambda t: {a_copied_source(REAL).source},
    ),
    "copy-artifact-hand-edit": (_hand_edit(a_copy), "migrate", lambda t: {a_copy(REAL).source}),
    "build.json-edit": (_edit_threads(a_copied_source), "render", lambda t: {"build.json"}),
    "build.json-copy-edit": (_edit_threads(a_copy), "migrate", lambda t: {"build.json"}),
    "build.json-reindent-render": (_reindent_manifest, "render", lambda t: {"build.json"}),
    "build.json-reindent-migrate": (_reindent_manifest, "migrate", lambda t: {"build.json"}),
}


@pytest.mark.parametrize(("plant", "command", "names"), list(STALE.values()), ids=list(STALE))
def test_check_writes_nothing_and_names_what_is_stale(
    tree: Tree,
    plant: Callable[[Tree], object],
    command: str,
    names: Callable[[Tree], set[str]],
) -> None:
    plant(tree)
    expected = names(tree)
    assert len(expected) >= 1
    before = snapshot(tree.root)

    changes = (render if command == "render" else migrate)(tree, check=True)
    assert changed_paths(changes) == expected
    assert {c.action for c in changes} == {"write"}
    assert_unchanged(before, tree.root)

    cli = run_cake(command, "--check", tree=tree)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert {line.removeprefix("stale: ") for line in cli.stdout.splitlines()} == expected
    assert cli.stderr.startswith("cake: error:"), cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1
    assert_unchanged(before, tree.root)

    # The real command repairs exactly that, and then the check passes.
    assert changed_paths((render if command == "render" else migrate)(tree)) == expected
    assert (render if command == "render" else migrate)(tree, check=True) == []


def test_render_deletes_artifacts_no_entry_names(tree: Tree) -> None:
    stray = tree.artifacts / "kda_det" / "stray.sm_90a.cu"
    stray.write_text("// not rendered by cake\n")
    before = snapshot(tree.root)
    changes = render(tree, check=True)
    assert [(c.path, c.action) for c in changes] == [(tree.rel(stray), "delete")]
    assert_unchanged(before, tree.root)
    assert changed_paths(render(tree)) == {tree.rel(stray)}
    assert not stray.exists()


@pytest.mark.parametrize("template", ["gate.cu.j2", "fwd_state.cu.j2", "bwd_chunk.cu.j2"])
def test_render_alone_leaves_copies_stale_until_migrate(tree: Tree, template: str) -> None:
    """A kda_det template edit reaches kda_cp's copies (the segment-parallel runs' programs) only
    through `cake migrate`; until then migrate --check and verify name every stale copy."""
    append_line(tree, f"generators/templates/kda/{template}", "// edited by a test")
    rerendered = users_of_template(load_manifest(tree.manifest), f"kda/{template}")
    copies = {
        e.program
        for e in load_manifest(tree.manifest).entries
        if e.copy_of is not None and e.copy_of.program in rerendered
    }
    assert copies, "the tree has no copies of gate programs: this test would prove nothing"

    render(tree)
    assert render(tree, check=True) == []
    copy_sources = {e.source for e in load_manifest(tree.manifest).entries if e.program in copies}
    assert changed_paths(migrate(tree, check=True)) == copy_sources | {"build.json"}
    violations = verify(tree)
    assert {v.kind for v in violations} == {Kind.copy_out_of_sync}
    assert {v.program for v in violations} == copies
    cli = run_cake("migrate", "--check", tree=tree)
    assert cli.returncode == 1

    migrate(tree)
    assert verify(tree) == []
    assert migrate(tree, check=True) == []
    assert render(tree, check=True) == []


def test_render_one_package_keeps_the_others(tree: Tree) -> None:
    before = snapshot(tree.root)
    assert render(tree, packages=["kda_det"]) == []
    assert_unchanged(before, tree.root)
    with pytest.raises(RenderError, match="unknown package"):
        render(tree, packages=["no_such_package"])


@pytest.mark.parametrize("entry", REAL.entries, ids=lambda e: e.program)
def test_artifact_is_self_contained_with_a_header(entry: Entry) -> None:
    text = (REPO / entry.source).read_text()
    lines = text.splitlines()
    assert lines[0] == "// GENERATED FILE, DO NOT EDIT."
    assert f"program: {entry.program}" in lines[2]
    assert lines[3] == f"// identity: {entry.identity}"
    assert "#include" not in text
    for header in {ln.split()[3] for ln in lines if ln.startswith("// ---- begin ")}:
        assert text.count(f"// ---- begin {header} ----") == 1
    for kernel in entry.kernels:
        decl = re.search(
            rf'extern "C"\s+__global__\s+void\s+(?:__launch_bounds__\((\d+)[^)]*\)\s+)?'
            rf"{re.escape(kernel.symbol)}\s*\(",
            text,
        )
        assert decl, f'no extern "C" __global__ {kernel.symbol} in {entry.source}'
        if decl[1] is not None:
            assert int(decl[1]) == kernel.threads, "launch bounds disagree with build.json threads"


def _identity(tree: Tree) -> str:
    matrix = load_matrix(tree)
    spec = matrix.packages["kda_det"]
    variant = next(v for v in spec.records if matrix.stage(v).template == "kda/gate.cu.j2")
    return render_program(tree, matrix, "kda_det", variant, spec.archs[0]).entry.identity


IDENTITY_INPUTS: dict[str, tuple[Callable[[Tree], object], bool]] = {
    "template": (PLANTS["template-edit"], True),
    "included-header": (PLANTS["header-edit"], True),
    "generator-code": (lambda t: append_line(t, "cake/render.py", "# edited by a test"), True),
    "generator-revision": (
        lambda t: t.matrix.write_text(
            t.matrix.read_text().replace("generator_revision = 1", "generator_revision = 2")
        ),
        True,
    ),
    "unrelated-header": (
        lambda t: (t.include / "cake" / "unused_by_gate.cuh").write_text("#pragma once\n"),
        False,
    ),
    "unrelated-cake-module": (lambda t: append_line(t, "cake/cli.py", "# edited"), False),
}


@pytest.mark.parametrize(
    ("edit", "changes"), list(IDENTITY_INPUTS.values()), ids=list(IDENTITY_INPUTS)
)
def test_identity_covers_exactly_its_inputs(
    tree: Tree, edit: Callable[[Tree], object], changes: bool
) -> None:
    before = _identity(tree)
    edit(tree)
    assert (_identity(tree) != before) is changes


def test_identity_follows_params() -> None:
    tree = Tree(REPO)
    matrix = load_matrix(tree)
    spec = matrix.packages["kda_det"]
    variants = [v for v in spec.records if matrix.stage(v).template == "kda/gate.cu.j2"]
    ids = {
        render_program(tree, matrix, "kda_det", v, a).entry.identity
        for v in variants
        for a in spec.archs
    }
    assert len(ids) == len(variants) * len(spec.archs)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{{ not_a_param }}", "UndefinedError"),
        ("#include <cuda_fp16.h>", "not cake's own"),
        ('#include "cake/no_such_header.cuh"', "missing header"),
    ],
    ids=["undefined-variable", "toolkit-include", "missing-header"],
)
def test_render_errors_are_typed(tree: Tree, line: str, match: str) -> None:
    append_line(tree, GATE_TEMPLATE, line)
    before = snapshot(tree.root)
    with pytest.raises(RenderError, match=match):
        render(tree)
    assert_unchanged(before, tree.root)


def test_variant_params_reach_the_template() -> None:
    v = Variant.parse("gate.gate-softplus.x-bf16")
    assert v.template_params() == {"gate": "softplus", "x": "bf16"}
    assert render_mod.GENERATOR_CODE == ("cake/render.py",)
