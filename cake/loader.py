"""The JIT loader: select a program for this GPU, get its cubin (cache, bundle, or NVRTC compile)
and load it. Everything it decides is memoised per process."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from functools import cached_property

from . import env, identity
from .cache import Blob, Bundle, Cache, key_for
from .compile import compile_source
from .errors import CakeError, ManifestError, OfflineMiss
from .machine import Gpu, facts_for, gpus
from .manifest import Entry, Manifest
from .manifest import load as load_manifest
from .resolve import Decision, Facts, select
from .spec import Version
from .tree import Tree, default_tree


@dataclass(frozen=True)
class Obtained:
    blob: Blob
    how: str  # "cache" | "bundle" | "compiled"


def obtain(
    tree: Tree,
    entry: Entry,
    *,
    nvrtc: Version | None,
    cache: Cache,
    bundle: Bundle | None,
    offline: bool,
    progress: bool = True,
) -> Obtained:
    """The cubin for one entry: from the cache, else a bundle, else compiled once under a lock."""
    key = key_for(entry, nvrtc) if nvrtc is not None else None
    if key is not None and (blob := cache.get(key)) is not None:
        return Obtained(blob, "cache")
    if bundle is not None and (blob := bundle.get(entry)) is not None:
        return Obtained(blob, "bundle")
    if offline:
        raise OfflineMiss([entry.program])
    if key is None:
        raise OfflineMiss([entry.program], why="there is no NVRTC here to compile with")
    with cache.lock(key):
        if (blob := cache.get(key)) is not None:
            return Obtained(blob, "cache")  # another process compiled it while we waited
        source = read_source(tree, entry)
        start = time.perf_counter()
        if progress:
            print(
                f"cake: compiling {entry.program} with NVRTC {nvrtc} ...",
                end="",
                file=sys.stderr,
                flush=True,
            )
        compiled = compile_source(source, entry.arch, entry.program)
        if progress:
            print(f" {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        blob = Blob(compiled.cubin, compiled.resources)
        cache.put(key, blob)
        return Obtained(blob, "compiled")


def read_source(tree: Tree, entry: Entry) -> str:
    data = (tree.root / entry.source).read_bytes()
    if identity.digest_bytes(data) != entry.source_digest:
        raise ManifestError(
            f"{entry.source} does not match build.json",
            expected=entry.source_digest,
            found=identity.digest_bytes(data),
            fix="run `cake render` (never edit artifacts by hand), or `cake verify` for details",
        )
    return data.decode()


class Loader:
    def __init__(self, tree: Tree | None = None) -> None:
        self._tree = tree
        self._lock = threading.Lock()
        self._modules: dict[tuple[int, str], object] = {}
        self._facts: dict[int, Facts] = {}
        self._decisions: dict[tuple[str, str, int], Decision] = {}

    @cached_property
    def tree(self) -> Tree:
        return self._tree or default_tree()

    @cached_property
    def manifest(self) -> Manifest:
        return load_manifest(self.tree.manifest)

    @cached_property
    def gpus(self) -> list[Gpu]:
        return gpus()

    def facts(self, device: int) -> Facts:
        if device not in self._facts:
            self._facts[device] = facts_for(self.gpus[device])
        return self._facts[device]

    def decide(self, package: str, record: str, device: int) -> Decision:
        """Selection is pure and the facts are fixed for a process: decide once per record."""
        key = (package, record, device)
        if key not in self._decisions:
            self._decisions[key] = select(self.manifest, package, record, self.facts(device))
        return self._decisions[key]

    def ensure(self, wanted: list[tuple[str, str]], device: int) -> list[Entry]:
        """Select and obtain several records at once, so an offline miss names them all."""
        facts = self.facts(device)
        entries = [self.decide(p, r, device).entry for p, r in wanted]
        missing: list[str] = []
        why = ""
        for entry in entries:
            if (device, entry.program) in self._modules:
                continue
            try:
                self._obtain(entry, facts)
            except OfflineMiss as exc:
                missing += exc.programs
                why = exc.why
        if missing:
            raise OfflineMiss(missing, why)
        return entries

    def _obtain(self, entry: Entry, facts: Facts) -> Obtained:
        bundle_dir = env.get_path("CAKE_BUNDLE_DIR")
        return obtain(
            self.tree,
            entry,
            nvrtc=facts.nvrtc,
            cache=Cache(env.cache_dir()),
            bundle=Bundle(bundle_dir) if bundle_dir else None,
            offline=env.offline(),
            progress=not env.get_bool("CAKE_QUIET"),
        )

    def module(self, package: str, record: str, device: int):  # noqa: ANN201 - launch.Module
        from .launch import Module

        entry = self.decide(package, record, device).entry
        key = (device, entry.program)
        with self._lock:
            if key not in self._modules:
                obtained = self._obtain(entry, self.facts(device))
                self._modules[key] = Module(entry, obtained.blob.cubin, device)
            return self._modules[key]


_DEFAULT: Loader | None = None


def default_loader() -> Loader:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Loader()
    return _DEFAULT


__all__ = ["CakeError", "Loader", "default_loader", "obtain"]
