"""Compile emulator translation units with the host C++ compiler into cached shared libraries.

The cache key is the sha256 of the compiler's identity, the flags and the whole translation unit
(runtime, header twins and program are all in its text), so any edit recompiles and nothing
else does. The unit is kept next to its library: compiler messages refer to it."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# -ffp-contract=fast contracts a * b + c into an fma as nvcc/NVRTC do by default (with -mfma where
# the CPU has it); -fno-strict-aliasing because CUDA code type-puns through reinterpret_cast.
FLAGS = (
    "-std=c++20",
    "-O2",
    "-fPIC",
    "-shared",
    "-pthread",
    "-fno-strict-aliasing",
    "-fno-math-errno",
    "-ffp-contract=fast",
    "-fvisibility=hidden",
    "-Wno-unknown-pragmas",
)


class CompileError(RuntimeError):
    pass


def compiler() -> str:
    return os.environ.get("CAKE_EMU_CXX", "g++")


def available() -> bool:
    return shutil.which(compiler()) is not None


def cache_dir() -> Path:
    raw = os.environ.get("CAKE_EMU_CACHE", "")
    return Path(raw).expanduser() if raw else REPO / ".cache" / "emu"


@functools.cache
def _cpu_has_fma() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return " fma " in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
    except OSError:
        return False


def flags() -> tuple[str, ...]:
    return FLAGS + (("-mfma",) if _cpu_has_fma() else ())


@functools.cache
def identity(cxx: str) -> str:
    """The compiler's version and target, part of every cache key."""
    try:
        out = subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        machine = subprocess.run(
            [cxx, "-dumpmachine"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileError(
            f"cannot run the C++ compiler {cxx!r} (set CAKE_EMU_CXX)", str(exc)
        ) from None
    return out.splitlines()[0] + " " + machine.strip()


def library(unit: str, name: str) -> Path:
    """The shared library for a translation unit: from the cache, else compiled now."""
    cxx = compiler()
    opts = flags()
    key = hashlib.sha256("\n".join([identity(cxx), *opts, unit]).encode()).hexdigest()[:24]
    out_dir = cache_dir()
    so = out_dir / f"{name}.{key}.so"
    if so.is_file():
        return so
    out_dir.mkdir(parents=True, exist_ok=True)
    cpp = out_dir / f"{name}.{key}.cpp"
    cpp.write_text(unit)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".so")
    os.close(fd)
    try:
        proc = subprocess.run(
            [cxx, *opts, "-o", tmp, str(cpp)], capture_output=True, text=True, timeout=1800
        )
        if proc.returncode != 0:
            raise CompileError(
                f"{cxx} failed on {cpp} (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
            )
        os.replace(tmp, so)  # atomic: a concurrent compile of the same key is harmless
    finally:
        Path(tmp).unlink(missing_ok=True)
    return so
