"""Shared fixtures: a throwaway copy of the repository tree, an isolated cubin cache, and the
central skip of GPU tests on machines without one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cake.compile import nvrtc_version
from cake.manifest import Entry, Manifest
from cake.spec import Version
from cake.tree import Tree

REPO = Path(__file__).resolve().parent.parent
# Everything render/verify/compile read: the generator code is part of every identity closure.
TREE_PARTS = ("cake", "generators", "artifacts", "build.json", "pyproject.toml")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def copy_tree(dest: Path) -> Tree:
    dest.mkdir(parents=True, exist_ok=True)
    for part in TREE_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=_IGNORE)
        else:
            shutil.copy2(src, dest / part)
    return Tree(dest)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    """A private copy of the repository tree that a test may edit, render or break."""
    return copy_tree(tmp_path / "tree")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty CAKE_CACHE_DIR for this test only; no bundle, online, quiet."""
    path = tmp_path / "cache"
    monkeypatch.setenv("CAKE_CACHE_DIR", str(path))
    monkeypatch.delenv("CAKE_BUNDLE_DIR", raising=False)
    monkeypatch.delenv("CAKE_OFFLINE", raising=False)
    monkeypatch.delenv("CAKE_ARCH", raising=False)
    monkeypatch.setenv("CAKE_QUIET", "1")
    return path


def cake_env(**overrides: str) -> dict[str, str]:
    """The environment for a `python -m cake` child: no CAKE_* from the caller unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAKE_")}
    env["CAKE_QUIET"] = "1"
    env.update(overrides)
    return env


def run_cake(
    *args: str, tree: Tree | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m cake [--tree ROOT] ARGS...` in a child process, output captured."""
    argv = [sys.executable, "-m", "cake"]
    if tree is not None:
        argv += ["--tree", str(tree.root)]
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        env=env if env is not None else cake_env(),
        # Not the tree itself: `-m` would import the tree's copy of cake/ and litter it.
        cwd=tree.root.parent if tree is not None else REPO,
        timeout=timeout,
    )


def snapshot(root: Path, *, backdate: bool = True) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime (ns) of every file under root: what "changed nothing" is checked against.
    Files are first backdated by a day, so a rewrite shows in the mtime even on a filesystem whose
    clock ticks coarser than the time a render takes."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    if backdate:
        old = time.time_ns() - 86_400 * 10**9
        for p in files:
            os.utime(p, ns=(old, old))
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def assert_unchanged(before: dict[str, tuple[bytes, int]], root: Path) -> None:
    """No file under root was created, deleted, rewritten or touched since `before`."""
    after = snapshot(root, backdate=False)
    assert after.keys() == before.keys(), f"files appeared/vanished: {after.keys() ^ before.keys()}"
    changed = [p for p in before if before[p] != after[p]]
    assert not changed, f"files were rewritten or touched: {changed}"


def _cuda_capability() -> tuple[int, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests are skipped here, in one place, when this machine has no CUDA GPU (and `sm90`
    tests when the GPU is not compute capability 9.0). torch is imported only if needed."""
    wants_gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    wants_sm90 = [item for item in items if item.get_closest_marker("sm90") is not None]
    if not wants_gpu and not wants_sm90:
        return
    capability = _cuda_capability()
    if capability is None:
        skip = pytest.mark.skip(reason="needs a CUDA GPU; torch.cuda.is_available() is False")
        for item in wants_gpu + wants_sm90:
            item.add_marker(skip)
        return
    if capability != (9, 0):
        skip = pytest.mark.skip(reason=f"needs compute capability 9.0, this GPU is {capability}")
        for item in wants_sm90:
            item.add_marker(skip)


GATE_TEMPLATE = "generators/templates/kda/gate.cu.j2"
GATE_HEADER = "generators/include/cake/gate.cuh"


def append_line(tree: Tree, rel: str, line: str) -> None:
    path = tree.root / rel
    path.write_text(path.read_text() + line + "\n")


def edit_manifest(tree: Tree, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit build.json as JSON, written back in its own layout, so the planted change is the only
    difference."""
    text = tree.manifest.read_text()
    data = json.loads(text)
    assert json.dumps(data, indent=2) + "\n" == text, "build.json is not in its canonical layout"
    edit(data)
    tree.manifest.write_text(json.dumps(data, indent=2) + "\n")


def manifest_entry(data: dict[str, Any], program: str) -> dict[str, Any]:
    (entry,) = [e for e in data["entries"] if e["program"] == program]
    return entry


def a_copied_source(manifest: Manifest) -> Entry:
    """A generated program that some package copies."""
    copied = {e.copy_of.program for e in manifest.entries if e.copy_of is not None}
    return next(e for e in manifest.entries if e.program in copied)


def a_copy(manifest: Manifest) -> Entry:
    return next(e for e in manifest.entries if e.copy_of is not None)


def copies_of(manifest: Manifest, program: str) -> list[Entry]:
    return [e for e in manifest.entries if e.copy_of is not None and e.copy_of.program == program]


def require_nvrtc() -> Version:
    version = nvrtc_version()
    if version is None:
        message = (
            "!!! NVRTC IS NOT AVAILABLE: NO PROGRAM WAS COMPILED. Install cuda-bindings and "
            "nvidia-cuda-nvrtc (pip install -e '.[dev]'); CI must have them. !!!"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return version
