"""EmuLoader: cake.loader.Loader's interface (`ensure`, `module`) over the CPU emulator, and
`emulate()`, which makes cake.kda launch through it on CPU tensors."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from cake.launch import ArgBlock
from cake.manifest import Entry, Kernel, Manifest
from cake.manifest import load as load_manifest
from cake.matrix import load_matrix
from cake.render import render_program
from cake.resolve import Facts, select
from cake.spec import Arch, ArgType
from cake.tree import Tree, default_tree

from . import compiler
from .source import translation_unit

SOURCES = ("templates", "artifacts")
_KIND = {ArgType.ptr: "p", ArgType.i32: "i", ArgType.i64: "l", ArgType.f32: "f"}
_ERR_BYTES = 2048


class EmuError(RuntimeError):
    """An emulated launch failed: a deadlock, divergent warp collectives, a cp.async or shared
    memory violation, or a launch the hardware would refuse."""


@dataclass(frozen=True)
class Options:
    """workers: OS threads that run blocks (0: one per CPU core); schedule: the order in which
    released threads run (0 ascending, 1 descending, >= 2 shuffled with that seed); eager_copies:
    cp.async lands when issued rather than at the wait that covers it; stack_kb: the stack of
    each CUDA thread."""

    workers: int = 0
    schedule: int = 0
    eager_copies: bool = False
    stack_kb: int = 256

    def worker_count(self) -> int:
        return self.workers if self.workers > 0 else (os.cpu_count() or 1)


class EmuFunction:
    """One kernel; called like cake.launch.Function: fn(grid, *args)."""

    def __init__(self, lib: ctypes.CDLL, entry: Entry, meta: Kernel, options: Options) -> None:
        self.entry = entry
        self.meta = meta
        self.options = options
        self._launch = getattr(lib, f"emu_launch_{meta.symbol}")
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [
            ctypes.POINTER(ctypes.c_longlong),
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        signature = getattr(lib, f"emu_signature_{meta.symbol}")
        signature.restype = ctypes.c_char_p
        found = signature().decode()
        expected = "".join(_KIND[a] for a in meta.args)
        if found != expected:
            raise EmuError(
                f"{entry.program}:{meta.symbol} takes ({found}) but its metadata says "
                f"({expected}) (p pointer, i i32, l i64, f f32)"
            )

    def _check(self, args: tuple[Any, ...]) -> None:
        for i, (kind, arg) in enumerate(zip(self.meta.args, args, strict=False)):
            if kind is not ArgType.ptr or not hasattr(arg, "data_ptr"):
                continue
            if arg.device.type != "cpu":
                raise EmuError(f"{self.meta.symbol} argument {i} is on {arg.device}, not the CPU")
            if not arg.is_contiguous():
                raise EmuError(f"{self.meta.symbol} argument {i} is not contiguous")

    def __call__(self, grid: tuple[int, ...], *args: Any, stream: int | None = None) -> None:
        self._check(args)
        block = ArgBlock(
            self.meta.args, self.meta.symbol
        )  # cake's own, as a device launch fills it
        block.set(args)
        gx, gy, gz = (*grid, 1, 1)[:3]
        if min(gx, gy, gz) <= 0:
            return
        argv = block.params
        opts = self.options
        cfg = (ctypes.c_longlong * 9)(
            gx,
            gy,
            gz,
            self.meta.threads,
            self.meta.smem,
            opts.worker_count(),
            opts.schedule,
            opts.stack_kb * 1024,
            int(opts.eager_copies),
        )
        err = ctypes.create_string_buffer(_ERR_BYTES)
        if self._launch(cfg, argv, err, _ERR_BYTES) != 0:
            raise EmuError(f"{self.entry.program}: {err.value.decode(errors='replace')}")


class EmuModule:
    """One compiled program: its kernels by symbol, like cake.launch.Module."""

    def __init__(self, entry: Entry, library: Path, options: Options) -> None:
        self.entry = entry
        self.library = library
        self._lib = ctypes.CDLL(str(library))
        self.kernels = {k.symbol: EmuFunction(self._lib, entry, k, options) for k in entry.kernels}

    def __getitem__(self, symbol: str) -> EmuFunction:
        return self.kernels[symbol]

    def __contains__(self, symbol: object) -> bool:
        return symbol in self.kernels


@dataclass(frozen=True)
class Program:
    entry: Entry  # its kernels (symbol, threads, smem, args) are what launches use
    text: str  # the rendered CUDA program


class EmuLoader:
    """Programs for the CPU. source="templates" renders each record from generators/ now (so a
    template edit is checked before `cake render`); source="artifacts" reads the rendered file that
    cake's selection picks with the arch forced to `arch` (the portable sm_90 twin by default)."""

    def __init__(
        self,
        tree: Tree | None = None,
        *,
        source: str = "templates",
        arch: Arch = Arch.sm_90,
        options: Options | None = None,
        jobs: int = 0,
    ) -> None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        self._tree = tree
        self.source = source
        self.arch = Arch(arch)
        self.options = options or Options()
        self.jobs = jobs if jobs > 0 else (os.cpu_count() or 1)
        self._lock = threading.RLock()
        self._programs: dict[tuple[str, str], Program] = {}
        self._libraries: dict[tuple[str, str], Path] = {}
        self._modules: dict[tuple[str, str], EmuModule] = {}

    @cached_property
    def tree(self) -> Tree:
        return self._tree or default_tree()

    @cached_property
    def manifest(self) -> Manifest:
        return load_manifest(self.tree.manifest)

    def program(self, package: str, record: str) -> Program:
        key = (package, record)
        with self._lock:
            if key not in self._programs:
                self._programs[key] = (
                    self._from_templates(package, record)
                    if self.source == "templates"
                    else self._from_artifacts(package, record)
                )
            return self._programs[key]

    def _from_artifacts(self, package: str, record: str) -> Program:
        from cake.loader import read_source

        facts = Facts(self.arch.capability, driver=None, nvrtc=None, arch_override=self.arch)
        entry = select(self.manifest, package, record, facts).entry
        return Program(entry, read_source(self.tree, entry))

    def _from_templates(self, package: str, record: str) -> Program:
        matrix = load_matrix(self.tree)
        spec = matrix.packages.get(package)
        if spec is None:
            raise EmuError(f"no package {package!r} in {self.tree.rel(self.tree.matrix)}")
        for variant in spec.records:
            if variant.key == record:
                rendered = render_program(self.tree, matrix, package, variant, self.arch)
                return Program(rendered.entry, rendered.text)
        for copy in spec.copies:
            if copy.matches(record):
                return self._from_templates(copy.source, record)
        raise EmuError(f"package {package} has no record {record!r}")

    def library(self, package: str, record: str) -> Path:
        """Compile (or find in the cache) the program of one record."""
        key = (package, record)
        if key not in self._libraries:
            program = self.program(package, record)
            unit = translation_unit(
                program.text,
                program.entry.program,
                [k.symbol for k in program.entry.kernels],
                self.tree.include,
            )
            library = compiler.library(unit, program.entry.program)
            with self._lock:
                self._libraries[key] = library
        return self._libraries[key]

    # ---- cake.loader.Loader's interface ---------------------------------------------------------

    def ensure(self, wanted: list[tuple[str, str]], device: int = 0) -> list[Entry]:
        """Compile every wanted program (in parallel) before the first launch."""
        todo = sorted(set(wanted) - set(self._libraries))
        if len(todo) > 1:
            with ThreadPoolExecutor(min(self.jobs, len(todo))) as pool:
                list(pool.map(lambda key: self.library(*key), todo))
        for key in todo:
            self.library(*key)
        return [self.program(p, r).entry for p, r in wanted]

    def module(self, package: str, record: str, device: int = 0) -> EmuModule:
        key = (package, record)
        if key not in self._modules:
            library = self.library(package, record)
            with self._lock:
                if key not in self._modules:
                    entry = self.program(package, record).entry
                    self._modules[key] = EmuModule(entry, library, self.options)
        return self._modules[key]


_DEFAULT: EmuLoader | None = None


def default_emu_loader() -> EmuLoader:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = EmuLoader()
    return _DEFAULT


@contextmanager
def emulate(loader: EmuLoader | None = None) -> Iterator[EmuLoader]:
    """Within the block, cake.kda (forward, backward, stages, and chunk_kda through autograd) runs
    its programs on the CPU emulator and accepts CPU tensors. Not thread-safe: it patches module
    attributes."""
    import cake.kda.api
    import cake.kda.backward
    import cake.kda.forward
    import cake.kda.stages
    import cake.loader

    emu = loader or default_emu_loader()
    real = cake.loader.default_loader
    patched: list[tuple[object, str, object]] = []
    for name, module in list(sys.modules.items()):
        ours = name == "cake.loader" or name.startswith("cake.kda")
        if ours and getattr(module, "default_loader", None) is real:
            patched.append((module, "default_loader", real))
    patched.append((cake.kda.api, "check_device", cake.kda.api.check_device))
    try:
        for module, attr, _ in patched:
            setattr(module, attr, (lambda: emu) if attr == "default_loader" else _cpu_ok)
        yield emu
    finally:
        for module, attr, old in patched:
            setattr(module, attr, old)


def _cpu_ok(q: Any) -> None:
    if q.device.type != "cpu":
        raise ValueError(
            f"under tools.emu.emulate() the inputs must be CPU tensors, got {q.device}"
        )
