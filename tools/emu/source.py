"""A rendered cake program -> one C++ translation unit for the CPU emulator.

The rendered text inlines cake's device headers between `// ---- begin cake/X ----` and
`// ---- end cake/X ----`. A header with inline PTX is swapped for its CPU twin in
tools/emu/include/cake/X; a header without asm is kept as it is. In the program body, the dynamic
shared memory declaration becomes a pointer to the emulated block's shared memory and
`prefetch` asm is dropped; any other PTX there is an error. The unit is the runtime
(include/emu/runtime.h), that text, and one C entry point per kernel."""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
RUNTIME = INCLUDE / "emu" / "runtime.h"

_SECTION = re.compile(
    r"^// ---- begin (cake/[\w.]+) ----\n(.*?)^// ---- end \1 ----\n", re.S | re.M
)
_TWIN_DIGEST = re.compile(r"^// twin of (\S+) sha256:([0-9a-f]{64})$", re.M)
_DYN_SMEM = re.compile(
    r"extern\s+__shared__\s+(?:__attribute__\s*\(\(\s*aligned\s*\(\s*\d+\s*\)\s*\)\)\s*)?"
    r"unsigned\s+char\s+(\w+)\s*\[\s*\]\s*;"
)
_ASM = re.compile(r'\basm\s*(?:volatile\s*)?\(\s*"([^"]*)"[^;]*;')
_NAME = re.compile(r"\b(cake_\w+)\s*\(")


class SourceError(RuntimeError):
    """The program uses something the emulator does not model."""


def twin_path(header: str) -> Path:
    return INCLUDE / header


def twin_drift(header: str, gpu_header: Path) -> str | None:
    """Why the CPU twin of `header` may not match the GPU header it was written for, or None."""
    twin = twin_path(header).read_text()
    match = _TWIN_DIGEST.search(twin)
    if match is None:
        return f"{twin_path(header)} lacks its '// twin of ... sha256:...' line"
    if not gpu_header.is_file():
        return f"{gpu_header} does not exist"
    digest = hashlib.sha256(gpu_header.read_bytes()).hexdigest()
    if digest != match.group(2):
        return (
            f"{gpu_header} changed since its CPU twin {twin_path(header)} was written "
            f"(sha256 {digest[:12]}..., twin written for {match.group(2)[:12]}...): review the twin "
            "and update its digest line"
        )
    return None


def _without_pragma_once(text: str) -> str:
    return "".join(ln for ln in text.splitlines(keepends=True) if ln.strip() != "#pragma once")


def _swap_header(match: re.Match[str], include_dir: Path | None) -> str:
    """One inlined header, with the headers it includes (nested sections, handled the same way
    first): a header with a CPU twin is replaced by the twin, one without asm is kept."""
    name, body = match.group(1), match.group(2)
    nested = [(m, _swap_header(m, include_dir)) for m in _SECTION.finditer(body)]
    own = _SECTION.sub("", body)  # the header's own text
    twin = twin_path(name)
    if twin.is_file():
        text = twin.read_text()
        missing = sorted({n for n in _NAME.findall(own) if not re.search(rf"\b{n}\b", text)})
        if missing:
            raise SourceError(f"{twin} lacks {', '.join(missing)}, which {name} defines")
        if include_dir is not None and (why := twin_drift(name, include_dir / name)):
            warnings.warn(why, stacklevel=4)
        swapped = "".join(out for _, out in nested) + _without_pragma_once(text)
        return f"// ---- begin {name} (emu twin) ----\n{swapped}// ---- end {name} ----\n"
    if re.search(r"\basm\b", own):
        raise SourceError(f"{name} holds inline asm and has no CPU twin at {twin}")
    if not nested:
        return match.group(0)
    pieces, pos = [], 0
    for m, out in nested:
        pieces += [body[pos : m.start()], out]
        pos = m.end()
    pieces.append(body[pos:])
    return f"// ---- begin {name} ----\n{''.join(pieces)}// ---- end {name} ----\n"


def _body(text: str, program: str) -> str:
    """The program body outside the headers, made emulable."""
    text, n = _DYN_SMEM.subn(r"unsigned char* const \1 = ::emu::dynamic_smem();", text)
    if "__shared__" in text:
        raise SourceError(f"{program}: only `extern __shared__ unsigned char x[];` is emulated")

    def asm(match: re.Match[str]) -> str:
        ptx = match.group(1).strip()
        if ptx == "":
            return match.group(0)  # a compiler-only barrier: valid GCC as it is
        if ptx.startswith("prefetch"):
            return "(void)0; /* emu: prefetch dropped */"
        raise SourceError(f"{program}: the emulator has no model of `{ptx}` in the program body")

    return _ASM.sub(asm, text)


def translation_unit(
    text: str, program: str, symbols: Iterable[str], include_dir: Path | None = None
) -> str:
    """The C++ source the emulator compiles for one rendered program. include_dir (the tree's
    generators/include) is where twin digests are checked; None skips that check."""
    pieces: list[str] = []
    pos = 0
    for match in _SECTION.finditer(text):
        pieces.append(_body(text[pos : match.start()], program))
        pieces.append(_swap_header(match, include_dir))
        pos = match.end()
    pieces.append(_body(text[pos:], program))
    entries = [
        f'extern "C" __attribute__((visibility("default"))) int emu_launch_{s}('
        "const long long* cfg, void** args, char* err, int errlen) {\n"
        f'    return ::emu::launch(&{s}, "{s}", cfg, args, err, errlen);\n}}\n'
        f'extern "C" __attribute__((visibility("default"))) const char* emu_signature_{s}() {{\n'
        f"    return ::emu::signature(&{s});\n}}\n"
        for s in symbols
    ]
    return "".join(
        [
            f"// cake emu translation unit of {program}\n",
            _without_pragma_once(RUNTIME.read_text()),
            "\n// ---- program ----\n",
            *pieces,
            "\n// ---- emu entry points ----\n",
            *entries,
        ]
    )
