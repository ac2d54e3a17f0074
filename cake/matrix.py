"""The declarative variant matrix of every package (generators/packages.toml), as typed data."""

from __future__ import annotations

import fnmatch
import itertools
import tomllib
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError, validation_summary
from .manifest import Kernel
from .spec import Arch, Feature, Stage, Variant
from .tree import Tree


class KernelSpec(Kernel):
    """A kernel as packages.toml declares it: its launch record, and the archs whose programs have
    it (None: every program of the stage). A kernel that only one arch's code has (sm_90a's
    warpgroup forms) names that arch; the host asks the program whether it has the kernel."""

    archs: tuple[Arch, ...] | None = None

    def launch(self) -> Kernel:
        return Kernel(**self.model_dump(exclude={"archs"}))


class StageSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    template: str  # relative to generators/templates
    features: tuple[Feature, ...] = ()
    kernels: tuple[KernelSpec, ...]

    def kernels_for(self, arch: Arch) -> tuple[Kernel, ...]:
        """The kernels of this stage's program for `arch` (build.json's record of them)."""
        return tuple(k.launch() for k in self.kernels if k.archs is None or arch in k.archs)


class CopySpec(BaseModel):
    """Copy programs of package `source` whose record key matches one of `records` (fnmatch)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    source: str
    records: tuple[str, ...]

    def matches(self, record: str) -> bool:
        return any(fnmatch.fnmatchcase(record, pattern) for pattern in self.records)


class PackageSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    archs: tuple[Arch, ...]
    records: tuple[Variant, ...] = ()
    copies: tuple[CopySpec, ...] = ()


class Matrix(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    generator_revision: int
    stages: dict[Stage, StageSpec]
    packages: dict[str, PackageSpec]

    def stage(self, variant: Variant) -> StageSpec:
        return self.stages[variant.stage]


def _expand(record: dict[str, Any]) -> list[Variant]:
    """A record whose knob is a list stands for one record per value (cartesian product)."""
    names = list(record)
    values = [v if isinstance(v, list) else [v] for v in record.values()]
    return [Variant(**dict(zip(names, combo, strict=True))) for combo in itertools.product(*values)]


def load_matrix(tree: Tree) -> Matrix:
    try:
        raw = tomllib.loads(tree.matrix.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {tree.rel(tree.matrix)}", found=str(exc)) from None
    try:
        for package in raw.get("packages", {}).values():
            package["records"] = [v for r in package.get("records", []) for v in _expand(r)]
        matrix = Matrix.model_validate(raw)
    except (ValidationError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{tree.rel(tree.matrix)} does not match its schema", found=validation_summary(exc)
        ) from None
    for name, package in matrix.packages.items():
        keys = [v.key for v in package.records]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ConfigError(
                f"package {name} declares records twice", found=", ".join(sorted(dup))
            )
        missing = {str(v.stage) for v in package.records} - {str(s) for s in matrix.stages}
        if missing:
            raise ConfigError(
                f"package {name} uses undeclared stages", found=", ".join(sorted(missing))
            )
        for copy in package.copies:
            if copy.source not in matrix.packages:
                raise ConfigError(f"package {name} copies from unknown package {copy.source!r}")
    rendered = _stage_archs(matrix)
    for stage, spec in matrix.stages.items():
        for kernel in spec.kernels:
            unbuilt = sorted(set(kernel.archs or ()) - rendered.get(stage, set()))
            if unbuilt:
                raise ConfigError(
                    f"stage {stage} kernel {kernel.symbol} names archs no package renders it for",
                    found=", ".join(unbuilt),
                    fix="drop them from its archs, or add them to a package that has the stage",
                )
    return matrix


def _stage_archs(matrix: Matrix) -> dict[Stage, set[Arch]]:
    """The archs each stage's programs are rendered for: those of every package with a record of
    the stage, its own or copied."""
    out: dict[Stage, set[Arch]] = {}
    for package in matrix.packages.values():
        stages = {v.stage for v in package.records}
        for copy in package.copies:
            source = matrix.packages[copy.source].records
            stages |= {v.stage for v in source if copy.matches(v.key)}
        for stage in stages:
            out.setdefault(stage, set()).update(package.archs)
    return out
