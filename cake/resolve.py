"""Selection: a pure function from (manifest entries, machine facts) to one entry, or a decision
trace that says for each candidate why it was rejected."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import NoCompatibleProgram
from .manifest import Entry, Manifest
from .spec import Arch, Version


@dataclass(frozen=True)
class Facts:
    """What selection needs to know about this machine."""

    capability: tuple[int, int]
    driver: Version | None  # CUDA version the driver supports
    nvrtc: Version | None  # None: no NVRTC here, programs must come from a cache or bundle
    arch_override: Arch | None = None  # CAKE_ARCH, e.g. sm_90 to run the twins on Hopper

    def describe(self) -> str:
        cc = f"{self.capability[0]}.{self.capability[1]}"
        parts = [
            f"capability {cc}",
            f"driver CUDA {self.driver or 'unknown'}",
            f"NVRTC {self.nvrtc or 'absent'}",
        ]
        if self.arch_override:
            parts.append(f"CAKE_ARCH={self.arch_override}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Decision:
    entry: Entry
    trace: tuple[tuple[str, str], ...]  # (program, reason) for every candidate, chosen one included


def wanted_arch(facts: Facts) -> Arch | None:
    return facts.arch_override or Arch.for_capability(facts.capability)


def reject_reason(entry: Entry, facts: Facts) -> str | None:
    """Why this entry cannot run here, or None when it can. Checked in a fixed order."""
    want = wanted_arch(facts)
    cc = f"{facts.capability[0]}.{facts.capability[1]}"
    if entry.arch.capability != facts.capability:
        return f"arch {entry.arch} needs capability {'.'.join(map(str, entry.arch.capability))}, this GPU is {cc}"
    if entry.arch != want:
        return f"arch {entry.arch} is not the one chosen for capability {cc} ({want})"
    need = Version.parse(entry.min_cuda)
    if facts.driver is not None and facts.driver < need:
        return f"driver supports CUDA {facts.driver}, below min_cuda {need}"
    if facts.nvrtc is not None and facts.nvrtc < need:
        return f"NVRTC {facts.nvrtc} is older than min_cuda {need}"
    return None


def select(manifest: Manifest, package: str, record: str, facts: Facts) -> Decision:
    candidates = sorted(
        (e for e in manifest.entries if e.package == package and e.record == record),
        key=lambda e: e.program,
    )
    trace: list[tuple[str, str]] = []
    chosen: Entry | None = None
    for entry in candidates:
        reason = reject_reason(entry, facts)
        if reason is None and chosen is None:
            chosen = entry
            trace.append((entry.program, "selected"))
        else:
            trace.append((entry.program, reason or "another candidate was selected first"))
    if chosen is None:
        raise NoCompatibleProgram(f"{package}/{record}", trace, facts.describe())
    return Decision(chosen, tuple(trace))
