"""Installed files of an environment against their RECORD: what a truncated or deleted file
looks like, which a version check cannot see (``specrig env`` checks it before reusing one)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from specrig.env.provided import PATCH_GUARD

__all__ = ["damaged_files"]


def _patched_paths(site: Path) -> set[str]:
    """Files a patch set replaced on purpose: its stamp's and an interrupted apply's journal's
    (read as plain JSON: the patches room's files, named in specrig.patches.stamp/transaction)."""
    out: set[str] = set()
    guard = PATCH_GUARD.replace("-", "_")  # the guard's package folder
    for name, pick in (
        (f"{guard}/stamp.json", lambda d: [f for s in d.get("sets", {}).values() for f in s.get("files", {})]),
        (f"{guard}.journal/journal.json", lambda d: [f.get("path") for f in d.get("files", [])]),
    ):
        try:
            out.update(str(p) for p in pick(json.loads((site / name).read_text())) if p)
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    return out


def damaged_files(path: Path) -> list[str]:
    """Installed files of a venv that are gone or whose size is not the one their RECORD
    lists: what a truncated or deleted file looks like, which the version check cannot see.
    Sizes only, a stat per file (an environment is GBs: hashing it on every reuse would
    take minutes); files a patch set replaced on purpose, and bytecode, are skipped."""
    problems = []
    for site in sorted(path.glob("lib/python3*/site-packages")):
        patched = _patched_paths(site)
        for record in sorted(site.glob("*.dist-info/RECORD")):
            try:
                rows = list(csv.reader(record.read_text(errors="replace").splitlines()))
            except OSError:
                continue
            for row in rows:
                if len(row) < 3 or not row[2].isdigit() or row[0] in patched or row[0].endswith(".pyc"):
                    continue  # bytecode is derived: the install compiles it again, an import rewrites it
                try:
                    size = (site / row[0]).stat().st_size
                except OSError:
                    problems.append(f"damaged: {row[0]} is missing ({record.parent.name})")
                    continue
                if size != int(row[2]):
                    problems.append(f"damaged: {row[0]} is {size} bytes, its RECORD says {row[2]}")
    return problems
