"""Cache entries checked before they are reused: a folder specrig made (a converted
model, a generated or trained drafter, a drafter copied for another engine) carries
``specrig-manifest.json``, written in its staging folder before the publishing rename:
every file's size and, up to :data:`HASH_LIMIT` bytes, its sha256.

Reuse checks the manifest: sizes always (a ``stat`` per file), sha256 of every file
that had one recorded (models up to 512 MiB, every drafter), and the header of every
``*.safetensors`` file against its size (what safetensors itself reads first: a
truncated file fails here instead of in a server 77 s later). Larger files are
checked by size and header only: hashing a multi-GB model on every run costs more
than the damage it would find that a size check misses.

A folder without a manifest (made before manifests existed) is checked as far as
its files allow (``config.json`` parses, every safetensors header matches its file)
and, when that passes, its manifest is written then (:func:`check_entry` with
``adopt``): later runs check it like any other.

The readers here parse safetensors headers with the standard library only (the
format: 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the data)."""

from __future__ import annotations

import json
import math
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from specrig.core import atomic
from specrig.core.digest import sha256_file

__all__ = [
    "MANIFEST",
    "HASH_LIMIT",
    "EntryCheck",
    "check_entry",
    "write_manifest",
    "safetensors_problem",
    "safetensors_header",
    "tensor_bytes",
    "folder_problems",
]

MANIFEST = "specrig-manifest.json"
HASH_LIMIT = 512 * 2**20
"""Files up to this size get a sha256 in the manifest (and are hashed on every reuse)."""
DERIVED = frozenset({"offline_eval.json"})
"""Files written into a finished entry later, bound to its bytes on their own (model/drafters.py)."""

_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int
    sha256: str | None = None
    """None: larger than HASH_LIMIT, checked by size (and header) only."""


class EntryManifest(BaseModel):
    """``specrig-manifest.json``."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = 1
    made_at: str
    adopted: bool = False
    """Written for a folder made before manifests, after its files were checked as far as they allow."""
    files: dict[str, FileEntry]


@dataclass(frozen=True)
class EntryCheck:
    ok: bool
    problems: tuple[str, ...] = ()
    adopted: bool = False
    """The folder had no manifest; it was checked as far as possible and its manifest written now."""

    @property
    def reason(self) -> str:
        return "; ".join(self.problems)


# --------------------------------------------------------------------------- safetensors, read by hand


def safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and the byte offset where its data starts.
    Raises ValueError naming what is wrong."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{size} bytes: too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise ValueError(f"its header claims {n} bytes but the file has {size}")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    return header, 8 + n


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (None: its header parses and every
    tensor's byte range lies inside the file, sized for its dtype and shape)."""
    try:
        header, start = safetensors_header(path)
    except (OSError, ValueError) as exc:
        return f"{path.name}: {exc}"
    size = path.stat().st_size
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(x) for x in t["data_offsets"])
            shape = [int(x) for x in t["shape"]]
        except (KeyError, TypeError, ValueError):
            return f"{path.name}: tensor {name!r} has no valid data_offsets/shape in its header"
        width = _DTYPE_BYTES.get(str(t.get("dtype")))
        if width is not None and stop - begin != width * math.prod(shape):
            return f"{path.name}: tensor {name!r} spans {stop - begin} bytes, its shape {shape} needs {width * math.prod(shape)}"
        end = max(end, stop)
    if start + end != size:
        return f"{path.name} is {size} bytes but its header places data up to byte {start + end} (truncated or appended to)"
    return None


def tensor_bytes(path: Path, name: str) -> tuple[str, list[int], bytes] | None:
    """``(dtype, shape, raw little-endian bytes)`` of one tensor, or None when the file has no such tensor."""
    header, start = safetensors_header(path)
    t = header.get(name)
    if not isinstance(t, dict):
        return None
    begin, stop = (int(x) for x in t["data_offsets"])
    with open(path, "rb") as f:
        f.seek(start + begin)
        data = f.read(stop - begin)
    if len(data) != stop - begin:
        raise ValueError(f"{path.name}: tensor {name!r} is cut short")
    return str(t["dtype"]), [int(x) for x in t["shape"]], data


# --------------------------------------------------------------------------- the manifest


def _files(folder: Path) -> list[Path]:
    """The entry's files: everything but the manifest, derived figures and temporary names (``.x``)."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
        and p.name != MANIFEST
        and p.relative_to(folder).as_posix() not in DERIVED
    )


def write_manifest(folder: Path, *, adopted: bool = False) -> EntryManifest:
    """Record every file's size (and sha256 up to HASH_LIMIT) in ``folder``'s manifest."""
    files = {}
    for p in _files(folder):
        size = p.stat().st_size
        files[p.relative_to(folder).as_posix()] = FileEntry(
            size=size, sha256=sha256_file(p) if size <= HASH_LIMIT else None
        )
    manifest = EntryManifest(made_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), adopted=adopted, files=files)
    atomic.write_text(folder / MANIFEST, manifest.model_dump_json(indent=2) + "\n")
    return manifest


def folder_problems(folder: Path) -> list[str]:
    """What can be checked without a manifest: ``config.json`` parses, every safetensors
    file is whole, every shard a ``*.safetensors.index.json`` names is there."""
    problems = []
    cfg = folder / "config.json"
    try:
        json.loads(cfg.read_text())
    except FileNotFoundError:
        problems.append("config.json is missing")
    except (OSError, ValueError) as exc:
        problems.append(f"config.json does not parse ({exc})")
    for index in sorted(folder.glob("*.safetensors.index.json")):
        try:
            shards = set((json.loads(index.read_text()).get("weight_map") or {}).values())
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(f"{index.name} does not parse ({exc})")
            continue
        problems += [f"{index.name} names {s}, which is missing" for s in sorted(shards) if not (folder / s).is_file()]
    for p in sorted(folder.glob("*.safetensors")):
        if problem := safetensors_problem(p):
            problems.append(problem)
    return problems


def _read_manifest(folder: Path) -> tuple[EntryManifest | None, str | None]:
    """(the manifest or None when there is none, why it cannot be read)."""
    path = folder / MANIFEST
    try:
        return EntryManifest.model_validate_json(path.read_bytes()), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValidationError, ValueError) as exc:
        return None, f"{MANIFEST} is damaged ({str(exc).splitlines()[0]})"


def check_entry(folder: Path, *, adopt: bool = True) -> EntryCheck:
    """Is ``folder`` the entry its manifest describes? Sizes of every file, sha256 where
    recorded, safetensors headers. Without a manifest: :func:`folder_problems`, and with
    ``adopt`` the manifest is written when they pass."""
    folder = Path(folder)
    manifest, damaged = _read_manifest(folder)
    if damaged:
        return EntryCheck(False, (damaged,))
    if manifest is None:
        problems = folder_problems(folder)
        if problems or not adopt:
            return EntryCheck(not problems, tuple(problems))
        try:
            write_manifest(folder, adopted=True)
        except OSError:  # a read-only cache: checked all the same, adopted another time
            return EntryCheck(True)
        return EntryCheck(True, adopted=True)
    problems = [_file_problem(folder / rel, rel, want) for rel, want in manifest.files.items()]
    problems += [
        f"{p.name} was added after it was made" for p in folder.glob("*.safetensors") if p.name not in manifest.files
    ]
    found = tuple(p for p in problems if p)
    return EntryCheck(not found, found)


def _file_problem(path: Path, rel: str, want: FileEntry) -> str | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{rel} is missing"
    if size != want.size:
        return f"{rel} is {size} bytes, {want.size} when it was made"
    if want.sha256 is not None:
        got = sha256_file(path)
        return (
            None
            if got == want.sha256
            else f"{rel} changed since it was made (sha256 {got[:16]}…, recorded {want.sha256[:16]}…)"
        )
    return safetensors_problem(path) if path.suffix == ".safetensors" else None
