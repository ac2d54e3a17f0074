"""The cubin cache and bundles: racing processes compile once, a killed compile publishes nothing
and holds no lock, corrupt files are misses, offline misses name every program, and a bundle
serves another machine with no compiler."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import GATE_TEMPLATE, append_line, cake_env, require_nvrtc, run_cake

from cake import cache as cache_mod
from cake import env
from cake.cache import MAGIC, Blob, Bundle, Cache, decode, encode, key_for
from cake.compile import Resources
from cake.errors import OfflineMiss
from cake.loader import Loader, Obtained, obtain
from cake.machine import Gpu
from cake.manifest import Entry
from cake.manifest import load as load_manifest
from cake.render import migrate, render
from cake.resolve import Facts
from cake.spec import Arch, Version
from cake.tree import Tree

N_RACERS = 8


def small_entry(tree: Tree) -> Entry:
    """The generated sm_90a program with the smallest source: the cheapest compile."""
    entries = [
        e
        for e in load_manifest(tree.manifest).entries
        if e.copy_of is None and e.arch is Arch.sm_90a
    ]
    return min(entries, key=lambda e: ((tree.root / e.source).stat().st_size, e.program))


def get(tree: Tree, entry: Entry, cache: Cache, **kw: object) -> Obtained:
    kw.setdefault("nvrtc", require_nvrtc())
    kw.setdefault("bundle", None)
    kw.setdefault("offline", False)
    return obtain(tree, entry, cache=cache, progress=False, **kw)  # type: ignore[arg-type]


def assert_cubin(blob: Blob, entry: Entry) -> None:
    assert blob.cubin[:4] == b"\x7fELF"
    assert {k.symbol for k in entry.kernels} <= set(blob.resources)


def _racer(root: str, program: str, cache_root: str, barrier: Any, results: Any) -> None:
    from cake.compile import nvrtc_version

    tree = Tree(Path(root))
    entry = load_manifest(tree.manifest).by_program()[program]
    nvrtc = nvrtc_version()
    barrier.wait(timeout=60)
    got = obtain(
        tree,
        entry,
        nvrtc=nvrtc,
        cache=Cache(Path(cache_root)),
        bundle=None,
        offline=False,
        progress=False,
    )
    results.put((got.how, got.blob.cubin))


def test_racing_processes_compile_once(tree: Tree, cache_dir: Path) -> None:
    require_nvrtc()
    entry = small_entry(tree)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(N_RACERS), ctx.Queue()
    procs = [
        ctx.Process(
            target=_racer, args=(str(tree.root), entry.program, str(cache_dir), barrier, results)
        )
        for _ in range(N_RACERS)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    hows = sorted(how for how, _ in got)
    assert hows == ["cache"] * (N_RACERS - 1) + ["compiled"]
    assert len({cubin for _, cubin in got}) == 1
    cached = Cache(cache_dir).get(key_for(entry, require_nvrtc()))
    assert cached is not None and cached.cubin == got[0][1]


_STUCK_CHILD = """
import os, sys, tempfile, time
from collections.abc import Callable
from pathlib import Path
from typing import Any
import cake.cache
from cake.compile import nvrtc_version
from cake.loader import obtain
from cake.manifest import load
from cake.tree import Tree

def stuck_publish(path, data):
    # What a process killed half-way through writing its temporary file leaves behind.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.write(fd, data[: len(data) // 2])
    os.fsync(fd)
    time.sleep(600)

cake.cache.publish = stuck_publish
root, program, cache_root = sys.argv[1:4]
tree = Tree(Path(root))
entry = load(tree.manifest).by_program()[program]
obtain(tree, entry, nvrtc=nvrtc_version(), cache=cake.cache.Cache(Path(cache_root)),
       bundle=None, offline=False, progress=False)
"""


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _obtain_with_timeout(timeout: float, *args: object, **kw: object) -> Obtained:
    """obtain() in a daemon thread: a lock left held would hang it, and must fail the test."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["got"] = get(*args, **kw)  # type: ignore[arg-type]
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"obtain() did not return in {timeout} s: the cache lock was not released")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["got"]  # type: ignore[return-value]


def test_killed_compile_publishes_nothing_and_releases_the_lock(
    tree: Tree, cache_dir: Path
) -> None:
    nvrtc = require_nvrtc()
    entry = small_entry(tree)
    cache = Cache(cache_dir)
    key = key_for(entry, nvrtc)
    child = subprocess.Popen(
        [sys.executable, "-c", _STUCK_CHILD, str(tree.root), entry.program, str(cache_dir)],
        env=cake_env(),
    )
    try:
        _wait_for(lambda: any(cache_dir.glob("cubin/*/.*.tmp")), 60, "the child's temporary file")
        assert child.poll() is None, "the child exited before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    assert not cache.path(key).exists(), "a killed compile published a cubin"
    assert cache.get(key) is None
    lock = cache.lock(key)
    lock.acquire(timeout=10)  # the dead child's lock is gone with it
    lock.release()

    got = _obtain_with_timeout(60, tree, entry, cache)
    assert got.how == "compiled"
    assert_cubin(got.blob, entry)
    assert decode(cache.path(key).read_bytes()) == got.blob
    assert get(tree, entry, cache).how == "cache"


def test_publish_writes_a_whole_temp_file_then_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real publish: the destination never exists half-written, because the only way bytes
    reach it is an atomic rename of a complete temporary file in the same directory."""
    data = encode(Blob(b"\x7fELF" + bytes(1000), {}))
    dest = tmp_path / "cubin" / "ab" / "abc.cubin"
    real_replace = os.replace
    seen = []

    def spy(src: str, dst: str | Path) -> None:
        assert Path(src).parent == Path(dst).parent
        assert not Path(dst).exists()
        assert Path(src).read_bytes() == data
        seen.append(src)
        real_replace(src, dst)

    monkeypatch.setattr(cache_mod.os, "replace", spy)
    cache_mod.publish(dest, data)
    assert len(seen) == 1 and dest.read_bytes() == data


def test_publish_that_fails_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(cache_mod.os, "replace", refuse)
    dest = tmp_path / "cubin" / "ab" / "abc.cubin"
    with pytest.raises(OSError, match="disk full"):
        cache_mod.publish(dest, b"data")
    assert list(dest.parent.iterdir()) == []


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


CORRUPTIONS = {
    "empty": lambda d: b"",
    "truncated-in-magic": lambda d: d[: len(MAGIC) // 2],
    "truncated-in-metadata": lambda d: d[: len(MAGIC) + 10],
    "truncated-half": lambda d: d[: len(d) // 2],
    "truncated-last-byte": lambda d: d[:-1],
    "bitflip-in-magic": lambda d: _flip(d, 0),
    "bitflip-in-metadata": lambda d: _flip(d, len(MAGIC) + 20),
    "bitflip-in-cubin": lambda d: _flip(d, len(d) - 100),
    "bitflip-last-byte": lambda d: _flip(d, len(d) - 1),
}


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS.values()), ids=list(CORRUPTIONS))
def test_corrupt_cache_file_is_a_miss_and_gets_replaced(
    tree: Tree, cache_dir: Path, corrupt: Callable[[bytes], bytes]
) -> None:
    entry = small_entry(tree)
    cache = Cache(cache_dir)
    first = get(tree, entry, cache)
    assert first.how == "compiled"
    path = cache.path(key_for(entry, require_nvrtc()))
    good = path.read_bytes()
    bad = corrupt(good)
    assert bad != good
    path.write_bytes(bad)

    assert decode(bad) is None
    assert cache.get(key_for(entry, require_nvrtc())) is None
    again = get(tree, entry, cache)
    assert again.how == "compiled"
    assert again.blob == first.blob
    assert path.read_bytes() == good


def test_encode_decode_round_trip() -> None:
    blob = Blob(b"\x7fELF" + bytes(range(256)) * 3, {"k": Resources(registers=40, smem_static=128)})
    assert decode(encode(blob)) == blob
    assert decode(b"not a cache file") is None


def test_cache_key_covers_compiler_program_and_arch(tree: Tree) -> None:
    entry = small_entry(tree)
    base = key_for(entry, Version.parse("13.5"))
    assert key_for(entry, Version.parse("13.5")) == base
    variants = [
        key_for(entry, Version.parse("13.4")),
        key_for(entry.model_copy(update={"identity": "sha256:" + "1" * 64}), Version.parse("13.5")),
        key_for(
            entry.model_copy(update={"source_digest": "sha256:" + "2" * 64}), Version.parse("13.5")
        ),
        key_for(entry.model_copy(update={"arch": Arch.sm_90}), Version.parse("13.5")),
    ]
    assert len({base, *variants}) == 1 + len(variants)


def test_offline_miss_names_the_program(tree: Tree, cache_dir: Path) -> None:
    entry = small_entry(tree)
    with pytest.raises(OfflineMiss) as info:
        get(tree, entry, Cache(cache_dir), offline=True)
    assert info.value.programs == [entry.program]
    assert entry.program in str(info.value)
    assert str(info.value).startswith("CAKE_OFFLINE=1 forbids compiling")
    assert not cache_dir.exists() or not any(cache_dir.rglob("*.cubin"))


def test_no_nvrtc_and_no_bundle_is_a_miss_that_says_so(tree: Tree, cache_dir: Path) -> None:
    entry = small_entry(tree)
    with pytest.raises(OfflineMiss) as info:
        get(tree, entry, Cache(cache_dir), nvrtc=None)
    assert info.value.programs == [entry.program]
    assert str(info.value).startswith("there is no NVRTC here to compile with, and 1 program(s)")
    assert "CAKE_OFFLINE=1 forbids" not in str(info.value)


def test_offline_uses_a_warm_cache(tree: Tree, cache_dir: Path) -> None:
    entry = small_entry(tree)
    assert get(tree, entry, Cache(cache_dir)).how == "compiled"
    assert get(tree, entry, Cache(cache_dir), offline=True).how == "cache"


def loader_on(
    tree: Tree, monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int], nvrtc: Version | None
) -> Loader:
    """A Loader that believes it runs on one GPU of capability cc, with this NVRTC."""
    loader = Loader(tree)
    loader.gpus = [Gpu(0, "injected test GPU", cc)]
    facts = Facts(capability=cc, driver=Version.parse("13.5"), nvrtc=nvrtc)
    monkeypatch.setattr("cake.loader.facts_for", lambda gpu: facts)
    return loader


def test_offline_ensure_names_every_missing_program(
    tree: Tree, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvrtc = require_nvrtc()
    manifest = load_manifest(tree.manifest)
    records = sorted({(e.package, e.record) for e in manifest.entries if e.package == "kda_det"})
    assert len(records) >= 3
    warm = small_entry(tree)
    assert get(tree, warm, Cache(cache_dir)).how == "compiled"

    monkeypatch.setenv("CAKE_OFFLINE", "1")
    loader = loader_on(tree, monkeypatch, (9, 0), nvrtc)
    with pytest.raises(OfflineMiss) as info:
        loader.ensure(records, device=0)
    expected = sorted(
        e.program
        for e in manifest.entries
        if (e.package, e.record) in records and e.arch is Arch.sm_90a and e.program != warm.program
    )
    assert sorted(info.value.programs) == expected
    for program in expected:
        assert program in str(info.value)
    assert warm.program not in str(info.value)
    assert not list(cache_dir.rglob(".*.tmp"))


@pytest.fixture(scope="module")
def sm90a_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`cake build --arch sm_90a --package kda_det --out DIR` by the CLI, then the bundle copied
    somewhere else and the original deleted. Returns (tree root, relocated bundle)."""
    require_nvrtc()
    from conftest import copy_tree

    base = tmp_path_factory.mktemp("bundle")
    tree = copy_tree(base / "tree")
    out = base / "made-here"
    cli = run_cake(
        "build", "--arch", "sm_90a", "--package", "kda_det", "--out", str(out),
        tree=tree, env=cake_env(CAKE_CACHE_DIR=str(base / "build-cache")),
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    moved = base / "elsewhere" / "bundle"
    shutil.copytree(out, moved)
    shutil.rmtree(out)
    return tree.root, moved


def test_bundle_serves_offline_with_no_compiler(
    sm90a_bundle: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, bundle_dir = sm90a_bundle
    tree = Tree(root)
    monkeypatch.setenv("CAKE_OFFLINE", "1")
    monkeypatch.setenv("CAKE_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CAKE_BUNDLE_DIR", str(bundle_dir))
    entries = [
        e
        for e in load_manifest(tree.manifest).entries
        if e.package == "kda_det" and e.arch is Arch.sm_90a
    ]
    assert entries
    for entry in entries:
        bundle_path = env.get_path("CAKE_BUNDLE_DIR")
        assert bundle_path is not None
        got = obtain(
            tree, entry, nvrtc=None, cache=Cache(env.cache_dir()), bundle=Bundle(bundle_path),
            offline=env.offline(), progress=False,
        )  # fmt: skip
        assert got.how == "bundle", entry.program
        assert_cubin(got.blob, entry)
    assert not (tmp_path / "empty-cache").exists() or not any(
        (tmp_path / "empty-cache").rglob("*.cubin")
    )

    # The same through the Loader, which reads CAKE_OFFLINE / CAKE_BUNDLE_DIR itself.
    loader = loader_on(tree, monkeypatch, (9, 0), None)
    records = sorted({(e.package, e.record) for e in entries})
    assert {e.program for e in loader.ensure(records, device=0)} == {e.program for e in entries}


def test_bundle_lacks_other_arches(sm90a_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    root, bundle_dir = sm90a_bundle
    tree = Tree(root)
    other = next(
        e
        for e in load_manifest(tree.manifest).entries
        if e.package == "kda_det" and e.arch is Arch.sm_100a
    )
    with pytest.raises(OfflineMiss, match=other.program.replace(".", r"\.")):
        obtain(
            tree,
            other,
            nvrtc=None,
            cache=Cache(tmp_path),
            bundle=Bundle(bundle_dir),
            offline=True,
            progress=False,
        )


def test_stale_bundle_is_a_miss(
    sm90a_bundle: tuple[Path, Path], tree: Tree, tmp_path: Path
) -> None:
    """After the program changes, the bundle's cubin no longer matches its entry: not used."""
    _, bundle_dir = sm90a_bundle
    append_line(tree, GATE_TEMPLATE, "// edited by a test")
    render(tree)
    migrate(tree)
    entry = next(
        e
        for e in load_manifest(tree.manifest).entries
        if e.package == "kda_det" and e.arch is Arch.sm_90a and e.template == "kda/gate.cu.j2"
    )
    assert Bundle(bundle_dir).get(entry) is None
    with pytest.raises(OfflineMiss):
        obtain(
            tree,
            entry,
            nvrtc=None,
            cache=Cache(tmp_path),
            bundle=Bundle(bundle_dir),
            offline=True,
            progress=False,
        )
