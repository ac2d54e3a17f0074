"""Value types: arches, CUDA versions, PTX features, kernel variants and their key strings."""

from __future__ import annotations

from enum import StrEnum
from functools import total_ordering
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .errors import ConfigError, validation_summary


@total_ordering
class Version(BaseModel):
    """A CUDA toolkit / driver / NVRTC version, major.minor."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Version:
        try:
            major, minor = text.strip().split(".")[:2]
            return cls(major=int(major), minor=int(minor))
        except ValueError:
            raise ConfigError(
                "bad CUDA version", expected="MAJOR.MINOR", found=repr(text)
            ) from None

    @classmethod
    def from_int(cls, value: int) -> Version:
        """CUDA's integer form: 12080 -> 12.8."""
        return cls(major=value // 1000, minor=(value % 1000) // 10)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return (self.major, self.minor) < (other.major, other.minor)


class Arch(StrEnum):
    """Targets cake renders for. sm_90 is the arch-neutral twin of the Blackwell programs: the same
    portable code compiled for Hopper, so that what ships for Blackwell is what was tested."""

    sm_90a = "sm_90a"
    sm_90 = "sm_90"
    sm_100a = "sm_100a"
    sm_103a = "sm_103a"
    sm_107a = "sm_107a"

    @property
    def capability(self) -> tuple[int, int]:
        return _CAPABILITY[self]

    @property
    def base_min_cuda(self) -> Version:
        return Version.parse(_BASE_MIN_CUDA[self])

    @property
    def is_twin(self) -> bool:
        return self is Arch.sm_90

    @classmethod
    def for_capability(cls, capability: tuple[int, int]) -> Arch | None:
        """The exact arch that ships for a compute capability (twins are never chosen here)."""
        for arch in cls:
            if not arch.is_twin and arch.capability == capability:
                return arch
        return None


_CAPABILITY = {
    Arch.sm_90a: (9, 0),
    Arch.sm_90: (9, 0),
    Arch.sm_100a: (10, 0),
    Arch.sm_103a: (10, 3),
    Arch.sm_107a: (10, 7),
}
_BASE_MIN_CUDA = {
    Arch.sm_90a: "12.0",
    Arch.sm_90: "12.0",
    Arch.sm_100a: "12.8",
    Arch.sm_103a: "12.9",
    Arch.sm_107a: "13.4",
}


class Feature(StrEnum):
    """PTX features a program may declare; each raises min_cuda on the arches that have it."""

    ld256 = "ld256"  # 256-bit global loads/stores
    min3 = "min3"  # three-input min/max

    def min_cuda(self, arch: Arch) -> Version:
        need = _FEATURE_MIN_CUDA[self].get(arch)
        return Version.parse(need) if need else arch.base_min_cuda


_FEATURE_MIN_CUDA: dict[Feature, dict[Arch, str]] = {
    Feature.ld256: {Arch.sm_100a: "12.9", Arch.sm_103a: "12.9", Arch.sm_107a: "13.4"},
    Feature.min3: {Arch.sm_100a: "12.9", Arch.sm_103a: "12.9", Arch.sm_107a: "13.4"},
}


def min_cuda(arch: Arch, features: list[Feature]) -> Version:
    return max([arch.base_min_cuda, *(f.min_cuda(arch) for f in features)])


class Stage(StrEnum):
    gate = "gate"
    fwd_chunk = "fwd_chunk"
    fwd_state = "fwd_state"
    bwd_state = "bwd_state"
    bwd_chunk = "bwd_chunk"
    bwd_reduce = "bwd_reduce"
    seg_combine = "seg_combine"  # kda_cp only: the segment-boundary walk of long sequences
    fwd_state_local = "fwd_state_local"  # fwd_state without O: local passes, replay states


class GateForm(StrEnum):
    g = "g"  # the caller passes the log gate
    softplus = "softplus"  # -exp(A_log) * softplus(x + dt_bias)
    sigmoid = "sigmoid"  # lower_bound * sigmoid(exp(A_log) * (x + dt_bias))


class DType(StrEnum):
    bf16 = "bf16"
    fp32 = "fp32"


class L2Norm(StrEnum):
    off = "off"
    fused = "fused"


class Variant(BaseModel):
    """One record: a stage and the knobs that change its code. Its key names it everywhere:
    `stage` then `.name-value` for each set knob, in field order (`gate.gate-softplus.x-bf16`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    KNOBS: ClassVar[tuple[str, ...]] = ("gate", "x", "l2n")

    stage: Stage
    gate: GateForm | None = None
    x: DType | None = None
    l2n: L2Norm | None = None

    @property
    def key(self) -> str:
        knobs = [f"{name}-{getattr(self, name)}" for name in self.KNOBS if getattr(self, name)]
        return ".".join([str(self.stage), *knobs])

    @classmethod
    def parse(cls, key: str) -> Variant:
        stage, *knobs = key.split(".")
        fields: dict[str, Any] = {"stage": stage}
        for knob in knobs:
            name, sep, value = knob.partition("-")
            if not sep or name not in cls.KNOBS or name in fields:
                raise ConfigError(
                    f"bad record key {key!r}",
                    expected=f"stage(.knob-value)* with knobs from {', '.join(cls.KNOBS)}",
                    found=repr(knob),
                )
            fields[name] = value
        try:
            variant = cls(**fields)
        except ValueError as exc:
            raise ConfigError(f"bad record key {key!r}", found=validation_summary(exc)) from None
        if variant.key != key:
            raise ConfigError(f"record key {key!r} is not canonical", expected=variant.key)
        return variant

    def template_params(self) -> dict[str, str]:
        return {name: str(getattr(self, name)) for name in self.KNOBS if getattr(self, name)}


class ArgType(StrEnum):
    ptr = "ptr"
    i32 = "i32"
    i64 = "i64"
    f32 = "f32"


def program_name(package: str, record: str, arch: Arch) -> str:
    return f"{package}.{record}.{arch}"
