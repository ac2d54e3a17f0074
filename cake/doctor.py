"""`cake doctor`: this machine, and per record the entry that would be chosen or why none can."""

from __future__ import annotations

from . import env
from .compile import nvrtc_version
from .errors import CakeError, DeviceError
from .machine import driver_version, facts_for, gpus
from .manifest import load as load_manifest
from .resolve import select
from .tree import Tree


def doctor(tree: Tree) -> int:
    print(f"driver CUDA : {driver_version() or 'none (no CUDA driver)'}")
    print(f"NVRTC       : {nvrtc_version() or 'none'}")
    print(f"cache dir   : {env.cache_dir()}")
    print(f"offline     : {env.offline()}")
    print(f"bundle dir  : {env.get_path('CAKE_BUNDLE_DIR') or '-'}")
    print(f"CAKE_ARCH   : {env.get_str('CAKE_ARCH') or '-'}")
    try:
        found = gpus()
    except DeviceError as exc:
        print(f"GPUs        : none ({exc.one_line()})")
        return 0
    if not found:
        print("GPUs        : none")
        return 0
    manifest = load_manifest(tree.manifest)
    records = sorted({(e.package, e.record) for e in manifest.entries})
    failures = 0
    for gpu in found:
        facts = facts_for(gpu)
        print(
            f"GPU {gpu.index}       : {gpu.name}, capability {gpu.capability[0]}.{gpu.capability[1]}"
        )
        for package, record in records:
            try:
                print(
                    f"  {package}/{record}: {select(manifest, package, record, facts).entry.program}"
                )
            except CakeError as exc:
                failures += 1
                print(f"  {package}/{record}: NONE ({exc.one_line()})")
    return 1 if failures else 0
