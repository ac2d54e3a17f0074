"""NVRTC: source text to a cubin for one arch (never PTX left for the driver to JIT)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import CompileError, DeviceError
from .spec import Arch, Version

# Everything here is part of every cache key. -Xptxas -v only adds the resource report to the log.
FLAGS: tuple[str, ...] = ("-std=c++17", "--ptxas-options=-v", "-default-device")


def _nvrtc():  # noqa: ANN202 - module object
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise DeviceError(
            "NVRTC is not available",
            expected="the cuda-bindings and nvidia-cuda-nvrtc packages",
            found=str(exc),
            fix="pip install cuda-bindings nvidia-cuda-nvrtc, or use a bundle with CAKE_OFFLINE=1",
        ) from None
    return nvrtc


def nvrtc_version() -> Version | None:
    try:
        nvrtc = _nvrtc()
        err, major, minor = nvrtc.nvrtcVersion()
    except (DeviceError, RuntimeError, OSError):
        return None
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None
    return Version(major=major, minor=minor)


@dataclass(frozen=True)
class Resources:
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    smem_static: int = 0


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    log: str
    resources: dict[str, Resources] = field(default_factory=dict)


_FUNC = re.compile(r"Compiling entry function '([^']+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resources(log: str) -> dict[str, Resources]:
    """Per-kernel registers, spills, stack and static shared memory from ptxas -v output."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := _FUNC.search(line):
            current = m.group(1)
            out[current] = {}
            continue
        if current is None:
            continue
        if m := _STACK.search(line):
            out[current].update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        if m := _REGS.search(line):
            out[current]["registers"] = int(m[1])
        if m := _SMEM.search(line):
            out[current]["smem_static"] = int(m[1])
    return {name: Resources(**vals) for name, vals in out.items()}


def _check(nvrtc, result, what: str) -> None:  # noqa: ANN001
    err = result[0] if isinstance(result, tuple) else result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed", found=str(err))


def compile_source(source: str, arch: Arch, name: str) -> Compiled:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(nvrtc, err, "create")
    try:
        opts = [f.encode() for f in FLAGS] + [f"-arch={arch}".encode()]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log_buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.rstrip(b"\x00 ").decode(errors="replace")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(
                f"NVRTC could not compile {name} for {arch}",
                found=log.strip()[-2000:] or str(result),
                fix="fix the template or header, then `cake render`",
            )
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "cubin size")
        cubin = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "get cubin")
        return Compiled(cubin=bytes(cubin), log=log, resources=parse_resources(log))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
