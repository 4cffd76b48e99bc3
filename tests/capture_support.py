"""Reading a bench's captured summary (a real H200 run, kept gzipped under tests/fixtures/)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from specrig.lab.results import LoadPoint, load_summary


def captured_summary(gz: Path, folder: Path):
    """The captured ``summary.json.gz`` unpacked into ``folder`` and loaded as the bench loads it."""
    with gzip.open(gz) as src, open(folder / "summary.json", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return load_summary(folder)


def measurement(s, config: str, c: int):
    return next(m for m in s.measurements if m.config == config and m.point == LoadPoint(concurrency=c))


def pairing(s, config: str, c: int):
    return next(p for p in s.pairings if p.config == config and p.point == LoadPoint(concurrency=c))
