"""Typed errors. Every error says what happened, what was expected, what was found and how to fix it."""

from __future__ import annotations


class CakeError(Exception):
    """Base of every error cake raises on purpose; the CLI prints it as one line."""

    def __init__(self, what: str, *, expected: str = "", found: str = "", fix: str = "") -> None:
        self.what = what
        self.expected = expected
        self.found = found
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [self.what]
        if self.expected:
            parts.append(f"expected {self.expected}")
        if self.found:
            parts.append(f"found {self.found}")
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return "; ".join(parts)


def validation_summary(exc: Exception) -> str:
    """A pydantic ValidationError as one line (`loc: msg (got input)` per error); its str() spans
    many lines, and the CLI promises one."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return " ".join(str(exc).split())
    parts = []
    for err in errors():
        loc = ".".join(map(str, err.get("loc", ()))) or "value"
        parts.append(f"{loc}: {err.get('msg', '')} (got {err.get('input')!r})")
    return "; ".join(parts)


class ConfigError(CakeError):
    """A CAKE_* variable, a package matrix or a command-line value is malformed."""


class ManifestError(CakeError):
    """build.json cannot be read, or does not match its schema."""


class RenderError(CakeError):
    """A template failed to render (undefined variable, missing header, bad include)."""


class StaleTree(CakeError):
    """`render --check` / `migrate --check` found files that a run would change."""


class VerifyFailed(CakeError):
    """`cake verify` found violations; `violations` holds them."""

    def __init__(self, violations: list) -> None:  # list[Violation]; typed loosely to avoid a cycle
        self.violations = violations
        kinds = sorted({v.kind for v in violations})
        super().__init__(
            f"cake verify found {len(violations)} violation(s) ({', '.join(kinds)})",
            expected="a tree whose files, digests and identities match build.json",
            fix="run `cake render` then `cake migrate`, and review the diff",
        )


class UnsupportedArch(CakeError):
    """The GPU's compute capability maps to no arch that cake builds for."""


class NoCompatibleProgram(CakeError):
    """Selection rejected every candidate; the message holds the decision trace."""

    def __init__(self, record: str, trace: list[tuple[str, str]], facts: str) -> None:
        self.record = record
        self.trace = trace
        lines = "; ".join(f"{name}: {reason}" for name, reason in trace) or "no candidates at all"
        super().__init__(
            f"no program for record {record!r} fits this machine ({facts})",
            expected="one candidate whose arch, min_cuda and NVRTC fit",
            found=lines,
            fix="run on a supported GPU, upgrade the driver/NVRTC, or render the missing arch",
        )


class CompileError(CakeError):
    """NVRTC rejected a program."""


class OfflineMiss(CakeError):
    """Compiling is forbidden (CAKE_OFFLINE=1) or impossible (no NVRTC), and some programs are
    neither cached nor in a bundle."""

    def __init__(self, programs: list[str], why: str = "CAKE_OFFLINE=1 forbids compiling") -> None:
        self.programs = programs
        self.why = why
        super().__init__(
            f"{why}, and {len(programs)} program(s) are not cached: " + ", ".join(programs),
            fix="run `cake build --arch ARCH` on a machine with NVRTC and point CAKE_BUNDLE_DIR "
            "at the bundle, or unset CAKE_OFFLINE / install NVRTC",
        )


class LaunchError(CakeError):
    """The CUDA driver refused a module load or kernel launch."""


class DeviceError(CakeError):
    """No usable CUDA device or driver."""
