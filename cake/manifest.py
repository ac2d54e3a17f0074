"""build.json: its schema, and reading/writing it canonically (sorted, stable, trailing newline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ManifestError
from .spec import Arch, ArgType

SCHEMA_VERSION = 1


class Kernel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    symbol: str
    threads: int
    smem: int  # dynamic shared memory bytes
    args: tuple[ArgType, ...]


class CopyOf(BaseModel):
    """Where a migrated copy came from, as it was when copied."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    program: str
    identity: str
    source_digest: str


class Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    program: str
    package: str
    record: str
    arch: Arch
    min_cuda: str
    source: str  # repo-relative path of the rendered CUDA file
    source_digest: str
    identity: str
    template: str
    generator_revision: int
    kernels: tuple[Kernel, ...]
    copy_of: CopyOf | None = None


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = SCHEMA_VERSION
    entries: tuple[Entry, ...] = ()

    def by_program(self) -> dict[str, Entry]:
        return {e.program: e for e in self.entries}

    def with_entries(self, entries: list[Entry]) -> Manifest:
        return Manifest(entries=tuple(sorted(entries, key=lambda e: e.program)))

    def dumps(self) -> str:
        """Canonical text: schema_version first, entries sorted by program, keys sorted."""
        entries = [_sort_keys(e.model_dump(mode="json")) for e in self.entries]
        entries.sort(key=lambda e: e["program"])
        data = {"schema_version": self.schema_version, "entries": entries}
        return json.dumps(data, indent=2) + "\n"


def _sort_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _sort_keys(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [_sort_keys(v) for v in obj]
    return obj


def loads(text: str, where: str = "build.json") -> Manifest:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{where} is not valid JSON", found=str(exc)) from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise ManifestError(
            f"{where} has an unsupported schema",
            expected=f"schema_version {SCHEMA_VERSION}",
            found=f"schema_version {version!r}",
            fix="regenerate it with `cake render` and `cake migrate`",
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ManifestError(
            f"{where} does not match the schema",
            found=f"{'.'.join(map(str, first['loc']))}: {first['msg']}",
            fix="regenerate it with `cake render` and `cake migrate`",
        ) from None


def load(path: Path) -> Manifest:
    if not path.exists():
        return Manifest()
    return loads(path.read_text(), str(path))
