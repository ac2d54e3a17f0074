"""The `cake` command: exit codes, one-line errors (a traceback only with --debug), and the
register/shared-memory table `cake build` prints."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import cake_env, require_nvrtc, run_cake

from cake.manifest import load as load_manifest
from cake.spec import Arch
from cake.tree import Tree


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cake: error: ")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    ("args", "stdout"),
    [
        (["verify"], "cake verify: ok\n"),
        (["render", "--check"], "cake render: up to date\n"),
        (["migrate", "--check"], "cake migrate: up to date\n"),
        (["render"], "cake render: up to date\n"),
    ],
    ids=lambda a: "-".join(a) if isinstance(a, list) else None,
)
def test_clean_tree_exits_zero(tree: Tree, args: list[str], stdout: str) -> None:
    proc = run_cake(*args, tree=tree)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == stdout
    assert proc.stderr == ""


BROKEN_MATRIX = {
    "not-toml": ("[packages.kda_det\narchs = [", "cannot read generators/packages.toml"),
    "unknown-arch": (
        'generator_revision = 1\n[stages.gate]\ntemplate = "kda/gate.cu.j2"\nkernels = []\n'
        '[packages.kda_det]\narchs = ["sm_80"]\n',
        "packages.kda_det.archs.0",
    ),
    "copy-from-nowhere": (
        'generator_revision = 1\n[stages.gate]\ntemplate = "kda/gate.cu.j2"\nkernels = []\n'
        '[packages.kda_cp]\narchs = ["sm_90a"]\ncopies = [{ source = "nope", records = ["*"] }]\n',
        "unknown package 'nope'",
    ),
    "package-not-a-table": ("generator_revision = 1\n[packages]\nkda_det = 3\n", "does not match"),
}


@pytest.mark.parametrize(("text", "says"), list(BROKEN_MATRIX.values()), ids=list(BROKEN_MATRIX))
@pytest.mark.parametrize("command", ["verify", "render"])
def test_broken_matrix_is_a_one_line_error(tree: Tree, command: str, text: str, says: str) -> None:
    tree.matrix.write_text(text)
    assert_one_line_error(run_cake(command, tree=tree), says)


def test_debug_shows_the_traceback(tree: Tree) -> None:
    tree.matrix.write_text("[packages.kda_det\n")
    proc = run_cake("--debug", "verify", tree=tree)
    assert proc.returncode != 0
    assert "Traceback (most recent call last)" in proc.stderr
    assert "cake.errors.ConfigError" in proc.stderr
    assert "cake: error:" not in proc.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{ not json", "not valid JSON"),
        ('{"schema_version": 99, "entries": []}', "schema_version 99"),
    ],
    ids=["not-json", "future-schema"],
)
def test_broken_manifest_is_a_one_line_error(tree: Tree, text: str, says: str) -> None:
    tree.manifest.write_text(text)
    assert_one_line_error(run_cake("verify", tree=tree), "build.json", says)


def test_missing_tree_is_a_one_line_error(tmp_path: Path) -> None:
    proc = run_cake("verify", env=cake_env(CAKE_TREE=str(tmp_path / "nowhere")))
    assert_one_line_error(proc, "no cake tree at", "CAKE_TREE")


def test_bad_environment_variable_is_a_one_line_error(tmp_path: Path) -> None:
    env = cake_env(CAKE_OFFLINE="maybe", CAKE_CACHE_DIR=str(tmp_path))
    assert_one_line_error(run_cake("doctor", env=env), "CAKE_OFFLINE is not a boolean", "'maybe'")


def test_usage_errors_exit_two(tree: Tree) -> None:
    assert run_cake(tree=tree).returncode == 2
    assert run_cake("build", "--arch", "sm_80", tree=tree).returncode == 2


def test_build_nothing_is_an_error(tree: Tree, tmp_path: Path) -> None:
    require_nvrtc()
    proc = run_cake(
        "build",
        "--package",
        "no_such_package",
        tree=tree,
        env=cake_env(CAKE_CACHE_DIR=str(tmp_path)),
    )
    assert_one_line_error(proc, "nothing to build")


def test_build_prints_the_register_and_smem_table(tree: Tree, tmp_path: Path) -> None:
    require_nvrtc()
    env = cake_env(CAKE_CACHE_DIR=str(tmp_path / "cache"), CAKE_JOBS="2")
    entries = [
        e
        for e in load_manifest(tree.manifest).entries
        if e.package == "kda_det" and e.arch is Arch.sm_90a
    ]
    rows = {(e.program, k.symbol, k.smem) for e in entries for k in e.kernels}

    for run, how in ((1, "compiled"), (2, "cache")):
        proc = run_cake("build", "--arch", "sm_90a", "--package", "kda_det", tree=tree, env=env)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert re.split(r"\s{2,}", lines[0].strip()) == [
            "program", "kernel", "how", "s", "regs", "spill st/ld", "stack", "smem st+dyn",
        ]  # fmt: skip
        table = [re.split(r"\s{2,}", ln.strip()) for ln in lines[1:-1]]
        assert {(r[0], r[1], int(r[7].split("+")[1])) for r in table} == rows
        for r in table:
            assert r[2] == how, f"run {run}: {r}"
            assert int(r[4]) > 0, f"no register count parsed: {r}"
            assert re.fullmatch(r"\d+/\d+", r[5]) and re.fullmatch(r"\d+\+\d+", r[7])
        compiled = len(entries) if how == "compiled" else 0
        assert lines[-1].startswith(
            f"cake build: {len(entries)} programs ({compiled} compiled) into cache "
        )
        assert f"/{len(entries)} " in proc.stderr  # the progress lines


def test_doctor_describes_this_machine(tmp_path: Path) -> None:
    proc = run_cake("doctor", env=cake_env(CAKE_CACHE_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"cache dir   : {tmp_path}\n" in proc.stdout
    assert "offline     : False\n" in proc.stdout
    assert re.search(r"^GPU", proc.stdout, re.M)
