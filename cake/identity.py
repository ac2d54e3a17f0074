"""All hashing in cake lives here: source digests, identity closures and cache keys."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PREFIX = "sha256:"


def digest_bytes(data: bytes) -> str:
    return PREFIX + hashlib.sha256(data).hexdigest()


def digest_file(path: Path) -> str:
    return digest_bytes(path.read_bytes())


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def digest_json(obj: Any) -> str:
    return digest_bytes(canonical_json(obj))


def identity_closure(
    *,
    files: Mapping[str, bytes],
    params: Mapping[str, Any],
    generator_revision: int,
) -> str:
    """Digest over everything that determines a rendered program's bytes: every file that took
    part (template, each header it includes, the generator code), keyed by repo-relative path, the
    canonical parameters and the generator revision."""
    return digest_json(
        {
            "files": {path: digest_bytes(data) for path, data in sorted(files.items())},
            "params": dict(params),
            "generator_revision": generator_revision,
        }
    )


def copy_identity(*, source_identity: str, package: str, program: str) -> str:
    """A migrated copy is its source's bytes under another name; its identity follows both."""
    return digest_json({"copy_of": source_identity, "package": package, "program": program})


def cache_key(*, identity: str, source_digest: str, nvrtc: str, flags: list[str], arch: str) -> str:
    """What determines a cubin: the program (identity and bytes), the compiler, flags and target."""
    return hashlib.sha256(
        canonical_json(
            {
                "identity": identity,
                "source": source_digest,
                "nvrtc": nvrtc,
                "flags": flags,
                "arch": arch,
            }
        )
    ).hexdigest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
