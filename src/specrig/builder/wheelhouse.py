"""The wheelhouse: built wheels stored under a fingerprint of everything that
changes their bytes.

Layout (a folder that can be copied to another host as it is)::

    <wheelhouse>/<fingerprint>/<wheel filename>
    <wheelhouse>/<fingerprint>/manifest.json   # inputs, sha256, size, when

An entry is written into a unique temporary sibling folder and renamed into
place in one step (:mod:`specrig.core.atomic`), under the entry's lock, so an
interrupted build leaves no entry at all and two stores never mix.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from specrig.core import atomic, locks
from specrig.core.digest import sha256_file
from specrig.lock.built import MANIFEST, find_wheel, read_manifest

__all__ = ["fingerprint", "sha256_file", "store_wheel", "find_wheel", "read_manifest", "explain_mismatch", "MANIFEST"]


def fingerprint(inputs: dict[str, Any]) -> str:
    """A stable hash of the build inputs (canonical JSON; key order does not matter)."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def store_wheel(
    wheel: Path, wheelhouse: Path, fp: str, inputs: dict[str, Any], extra: dict[str, Any] | None = None
) -> Path:
    """Copy ``wheel`` into ``<wheelhouse>/<fp>/`` atomically; return the stored path."""
    wheelhouse = Path(wheelhouse)
    wheelhouse.mkdir(parents=True, exist_ok=True)
    digest = sha256_file(wheel)
    dest = wheelhouse / fp
    with locks.hold(dest, f"storing {wheel.name} in the wheelhouse"):
        locks.clear_leftovers(dest)
        tmp = atomic.staging_dir(dest)
        try:
            _fill(tmp, wheel, digest, fp, inputs, extra)
            os.chmod(tmp, 0o755)
            atomic.publish_dir(tmp, dest, replace=True)  # an older entry is moved aside, then swapped out
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest / wheel.name


def _fill(tmp: Path, wheel: Path, digest: str, fp: str, inputs: dict[str, Any], extra: dict[str, Any] | None) -> None:
    """The entry's files: the wheel and its manifest, on disk (fsynced) before the publishing rename."""
    shutil.copy2(wheel, tmp / wheel.name)
    manifest = {
        "filename": wheel.name,
        "sha256": digest,
        "size": wheel.stat().st_size,
        "fingerprint": fp,
        "inputs": inputs,
        "stored_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **(extra or {}),
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    atomic.write_bytes(tmp / MANIFEST, text.encode(), mode=0o644)
    with open(tmp / wheel.name, "rb") as f:
        os.fsync(f.fileno())


def explain_mismatch(wheelhouse: Path, inputs: dict[str, Any]) -> list[str]:
    """Why no stored wheel matches ``inputs``: for the closest entry of the same
    name, the inputs that differ (``archs: ['90'] -> ['120']``)."""
    best: tuple[int, list[str]] | None = None
    for manifest_path in Path(wheelhouse).glob(f"*/{MANIFEST}"):
        try:
            other = json.loads(manifest_path.read_text()).get("inputs", {})
        except (OSError, ValueError):
            continue
        if other.get("name") != inputs.get("name"):
            continue
        diffs = [
            f"{k}: {other.get(k)!r} -> {inputs.get(k)!r}"
            for k in sorted(set(other) | set(inputs))
            if other.get(k) != inputs.get(k)
        ]
        if best is None or len(diffs) < best[0]:
            best = (len(diffs), [f"closest entry {manifest_path.parent.name}:", *diffs])
    return best[1] if best else []
