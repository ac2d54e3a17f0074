"""Content-addressed cubin cache and relocatable bundles.

Contract (as FlashInfer's JIT and DeepGEMM's cache do it): look without a lock; on a miss take an
OS file lock, look again, compile, write a temporary file and publish it by atomic rename. Every
load checks the payload's sha256, so a corrupt or half-written file is a miss, never a crash."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from . import identity
from .compile import FLAGS, Resources
from .manifest import Entry
from .spec import Version

# Version 2: the digest covers the resource metadata as well as the cubin.
MAGIC = b"CAKECUBIN2\n"


@dataclass(frozen=True)
class Blob:
    cubin: bytes
    resources: dict[str, Resources]


def _digest(resources: dict, cubin: bytes) -> str:
    return identity.sha256_hex(identity.canonical_json(resources) + b"\n" + cubin)


def encode(blob: Blob) -> bytes:
    resources = {k: asdict(v) for k, v in sorted(blob.resources.items())}
    meta = {"sha256": _digest(resources, blob.cubin), "resources": resources}
    return MAGIC + json.dumps(meta, sort_keys=True).encode() + b"\n" + blob.cubin


def decode(data: bytes) -> Blob | None:
    """The blob, or None when the bytes are not a whole, intact cache file."""
    if not data.startswith(MAGIC):
        return None
    head, sep, payload = data[len(MAGIC) :].partition(b"\n")
    if not sep:
        return None
    try:
        meta = json.loads(head)
        if _digest(meta["resources"], payload) != meta["sha256"]:
            return None
        resources = {k: Resources(**v) for k, v in meta["resources"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return Blob(payload, resources)


def publish(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_blob(path: Path) -> Blob | None:
    try:
        return decode(path.read_bytes())
    except OSError:
        return None


def key_for(entry: Entry, nvrtc: Version) -> str:
    return identity.cache_key(
        identity=entry.identity,
        source_digest=entry.source_digest,
        nvrtc=str(nvrtc),
        flags=list(FLAGS),
        arch=str(entry.arch),
    )


@dataclass(frozen=True)
class Cache:
    root: Path

    def path(self, key: str) -> Path:
        return self.root / "cubin" / key[:2] / f"{key}.cubin"

    def lock(self, key: str) -> FileLock:
        lock_path = self.root / "locks" / f"{key}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(lock_path))

    def get(self, key: str) -> Blob | None:
        return read_blob(self.path(key))

    def put(self, key: str, blob: Blob) -> None:
        publish(self.path(key), encode(blob))


# ------------------------------------------------------------------------------------- bundles

BUNDLE_INDEX = "index.json"


@dataclass(frozen=True)
class Bundle:
    """A directory another machine can load cubins from with no compiler: index.json names each
    program with the identity and source digest it was built from; files are cache-format blobs."""

    root: Path

    def _index(self) -> dict:
        try:
            return json.loads((self.root / BUNDLE_INDEX).read_text())["programs"]
        except (OSError, ValueError, KeyError):
            return {}

    def get(self, entry: Entry) -> Blob | None:
        row = self._index().get(entry.program)
        if (
            not row
            or row["identity"] != entry.identity
            or row["source_digest"] != entry.source_digest
        ):
            return None
        if row["flags"] != list(FLAGS):
            return None
        return read_blob(self.root / row["file"])

    def add(self, entries: list[tuple[Entry, Version, Blob]]) -> None:
        index = self._index()
        for entry, nvrtc, blob in entries:
            rel = f"cubins/{entry.program}.cubin"
            publish(self.root / rel, encode(blob))
            index[entry.program] = {
                "identity": entry.identity,
                "source_digest": entry.source_digest,
                "arch": str(entry.arch),
                "flags": list(FLAGS),
                "nvrtc": str(nvrtc),
                "file": rel,
            }
        text = json.dumps({"schema_version": 1, "programs": index}, indent=2, sort_keys=True) + "\n"
        publish(self.root / BUNDLE_INDEX, text.encode())
