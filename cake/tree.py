"""Where the repository tree is: build.json, generators/ and artifacts/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import env
from .errors import ConfigError

MANIFEST = "build.json"
GENERATORS = "generators"
TEMPLATES = "generators/templates"
INCLUDE = "generators/include"
MATRIX = "generators/packages.toml"
ARTIFACTS = "artifacts"


@dataclass(frozen=True)
class Tree:
    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def matrix(self) -> Path:
        return self.root / MATRIX

    @property
    def templates(self) -> Path:
        return self.root / TEMPLATES

    @property
    def include(self) -> Path:
        return self.root / INCLUDE

    @property
    def artifacts(self) -> Path:
        return self.root / ARTIFACTS

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def default_tree() -> Tree:
    root = env.get_path("CAKE_TREE") or Path(__file__).resolve().parent.parent
    if not (root / MATRIX).exists():
        raise ConfigError(
            f"no cake tree at {root}",
            expected=f"a directory holding {MATRIX} and {MANIFEST}",
            fix="run from a cake checkout or set CAKE_TREE",
        )
    return Tree(root)
