"""Stage bookkeeping: every stage's output lives in a folder named by the
content hash of its inputs, is built in a unique staging folder beside it and
renamed into place only when complete (:mod:`specrig.core.atomic`). A rerun with
the same inputs reuses the finished folder; an interrupted stage resumes from
what its work folder kept. A stage runs under its lock: a second process waits
for the first, then reuses its folder (and never shares its work folder)."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from specrig.core import atomic, locks
from specrig.core.log import log
from specrig.core.space import Need, check_space
from specrig.drafter.facts import StageFacts

__all__ = ["StageResult", "stage_key", "run_stage", "file_digest"]

META = "stage.json"


def stage_key(name: str, inputs: dict[str, Any]) -> str:
    blob = json.dumps({"stage": name, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def file_digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


F = TypeVar("F", bound=StageFacts)


@dataclass
class StageResult(Generic[F]):
    name: str
    key: str
    path: Path
    seconds: float
    cached: bool
    facts: F = field(default_factory=StageFacts)  # type: ignore[assignment]


def run_stage(
    root: Path,
    name: str,
    inputs: dict[str, Any],
    build: Callable[[Path, Path], dict[str, Any]],
    *,
    what: str,
    facts: type[F] = StageFacts,  # type: ignore[assignment]
    need: Need | None = None,
) -> StageResult[F]:
    """``build(out, work)`` writes the stage's files into ``out`` (and may keep
    resumable state in ``work``); returns the facts recorded with the stage, checked
    against ``facts`` (the stage's model) before the stage is published. ``need``: what it
    writes, checked against the free space before it starts."""
    key = stage_key(name, inputs)
    final = root / f"{name}-{key}"
    if (final / META).is_file():
        return _cached(name, key, final, what, facts)
    with locks.hold(final, f"running the drafter stage {final.name} ({what})"):
        if (final / META).is_file():  # another process finished it while this one waited
            return _cached(name, key, final, what, facts)
        for line in check_space([need] if need else []):
            log.info(line)
        # the work folder keeps resumable state across runs (the lock keeps it to one process);
        # the output is staged in a unique folder and published in one rename
        work = root / f".{name}-{key}.work"
        work.mkdir(parents=True, exist_ok=True)
        locks.clear_leftovers(final)
        out = atomic.staging_dir(final)
        try:
            log.step(f"{what} ...")
            t0 = time.monotonic()
            made = facts.model_validate(build(out, work) or {})
            seconds = time.monotonic() - t0
            meta = {"stage": name, "key": key, "inputs": inputs, "seconds": seconds, "facts": made.model_dump()}
            atomic.write_text(out / META, json.dumps(meta, indent=2, default=str))
            atomic.publish_dir(out, final, replace=True)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    log.info(f"done in {seconds:.0f} s -> {final}")
    return StageResult(name, key, final, seconds, False, made)


def _cached(name: str, key: str, final: Path, what: str, facts: type[F]) -> StageResult[F]:
    meta = json.loads((final / META).read_text())
    log.step(f"{what}: cached ({final.name}, made in {meta['seconds']:.0f} s)")
    return StageResult(name, key, final, meta["seconds"], True, facts.model_validate(meta.get("facts", {})))
