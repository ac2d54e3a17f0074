"""Every CAKE_* environment variable, declared once: name, type, default and meaning.

Nothing else in cake reads os.environ for CAKE_* names."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError


@dataclass(frozen=True)
class Var:
    name: str
    kind: type
    default: str
    meaning: str


VARS: tuple[Var, ...] = (
    Var("CAKE_CACHE_DIR", Path, "~/.cache/cake", "where compiled cubins are cached"),
    Var("CAKE_OFFLINE", bool, "0", "1 forbids compiling; missing programs raise OfflineMiss"),
    Var("CAKE_BUNDLE_DIR", Path, "", "bundle made by `cake build --out` to load cubins from"),
    Var("CAKE_ARCH", str, "", "force an arch (e.g. sm_90 to run the arch-neutral twins on Hopper)"),
    Var("CAKE_JOBS", int, "0", "parallel compiles for `cake build` (0: one per CPU core)"),
    Var("CAKE_TREE", Path, "", "repository tree holding build.json (default: next to the package)"),
    Var("CAKE_QUIET", bool, "0", "1 hides the one-line progress shown while compiling"),
    Var(
        "CAKE_GRAPHS",
        bool,
        "1",
        "0 launches a call's kernels one by one instead of as one CUDA graph (for launch hooks)",
    ),
)
_BY_NAME = {v.name: v for v in VARS}


def _raw(name: str) -> str:
    var = _BY_NAME[name]
    return os.environ.get(name, var.default)


def get_bool(name: str) -> bool:
    raw = _raw(name).strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{name} is not a boolean", expected="0 or 1", found=repr(raw))


def get_int(name: str) -> int:
    raw = _raw(name).strip()
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"{name} is not an integer", expected="an integer", found=repr(raw)
        ) from None


def get_str(name: str) -> str:
    return _raw(name).strip()


def get_path(name: str) -> Path | None:
    raw = _raw(name).strip()
    return Path(raw).expanduser() if raw else None


def cache_dir() -> Path:
    path = get_path("CAKE_CACHE_DIR")
    assert path is not None  # has a default
    return path


def offline() -> bool:
    return get_bool("CAKE_OFFLINE")
