"""`cake build`: compile every program for some arches in parallel, into the cache or a bundle."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from . import env
from .cache import Blob, Bundle, Cache
from .compile import Resources, nvrtc_version
from .errors import CakeError, DeviceError
from .loader import obtain
from .manifest import Entry
from .manifest import load as load_manifest
from .spec import Arch, Version
from .tree import Tree


@dataclass(frozen=True)
class Built:
    entry: Entry
    how: str
    seconds: float
    blob: Blob


def _build_one(root: str, entry: Entry, cache_root: str, nvrtc: Version) -> tuple[str, float, Blob]:
    start = time.perf_counter()
    got = obtain(
        Tree(Path(root)),
        entry,
        nvrtc=nvrtc,
        cache=Cache(Path(cache_root)),
        bundle=None,
        offline=False,
        progress=False,
    )
    return got.how, time.perf_counter() - start, got.blob


class Progress:
    """One self-rewriting line on a terminal, one line per step elsewhere (CI logs)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.tty = total, 0, sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        width = 30
        filled = width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        print(
            ("\r" + line + "\033[K") if self.tty else line,
            end="" if self.tty else "\n",
            file=sys.stderr,
            flush=True,
        )
        if self.tty and self.done == self.total:
            print(file=sys.stderr)


def build(
    tree: Tree, archs: list[Arch], packages: list[str] | None, out: Path | None, jobs: int
) -> list[Built]:
    nvrtc = nvrtc_version()
    if nvrtc is None:
        raise DeviceError(
            "cake build needs NVRTC", fix="pip install nvidia-cuda-nvrtc cuda-bindings"
        )
    manifest = load_manifest(tree.manifest)
    entries = [
        e for e in manifest.entries if e.arch in archs and (not packages or e.package in packages)
    ]
    if not entries:
        raise CakeError(
            "nothing to build",
            expected=f"programs for {', '.join(map(str, archs))}",
            fix="check --arch / --package",
        )
    too_new = [e.program for e in entries if nvrtc < Version.parse(e.min_cuda)]
    if too_new:
        raise CakeError(
            f"NVRTC {nvrtc} is older than the min_cuda of {len(too_new)} program(s)",
            found=", ".join(too_new[:5]),
            fix="install a newer nvidia-cuda-nvrtc or drop those arches",
        )
    cache_root = str(env.cache_dir())
    jobs = jobs or env.get_int("CAKE_JOBS") or os.cpu_count() or 1
    progress = Progress(len(entries))
    built: list[Built] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(_build_one, str(tree.root), e, cache_root, nvrtc): e for e in entries
        }
        for fut in as_completed(futures):
            entry = futures[fut]
            how, seconds, blob = fut.result()
            built.append(Built(entry, how, seconds, blob))
            progress.step(f"{entry.program} ({how}, {seconds:.1f} s)")
    built.sort(key=lambda b: b.entry.program)
    if out is not None:
        Bundle(out).add([(b.entry, nvrtc, b.blob) for b in built])
    return built


def report(built: list[Built]) -> str:
    rows = [("program", "kernel", "how", "s", "regs", "spill st/ld", "stack", "smem st+dyn")]
    for b in built:
        for k in b.entry.kernels:
            r = b.blob.resources.get(k.symbol, Resources())
            rows.append(
                (
                    b.entry.program,
                    k.symbol,
                    b.how,
                    f"{b.seconds:.2f}",
                    str(r.registers),
                    f"{r.spill_stores}/{r.spill_loads}",
                    str(r.stack),
                    f"{r.smem_static}+{k.smem}",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )
