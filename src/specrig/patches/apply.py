"""check / apply / revert of patch sets on one site-packages folder, returning
typed results (:class:`~.state.PatchRun`); nothing here prints.

Apply is a transaction:

1. preflight (:func:`~.assess.assess`): the installed distribution's version
   is the set's, and every target file's sha256 equals both the installed
   RECORD and the set's ``[base]`` (the released wheel). Any difference is
   refused before anything is touched, naming the file, the expected and the
   found hash;
2. stage (:func:`~.transaction.stage`): the whole series is applied to copies
   of the targets with ``git apply`` (exact context, no fuzz), and every
   staged ``.py`` is compiled;
3. commit (:func:`~.transaction.commit`): each file is replaced atomically; if
   any step fails, every file already written is put back byte for byte and
   the guard is restored to what it was.

Originals are kept inside the guard package so ``revert`` restores the RECORD
bytes exactly; re-applying an applied, unchanged set is a no-op.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path

from specrig.core.errors import HashMismatchError
from specrig.patches import transaction
from specrig.patches.assess import assess
from specrig.patches.model import Patch, PatchSet
from specrig.patches.record import InstalledDist, bytes_hash, file_hash, find_dist
from specrig.patches.stamp import AppliedSet, FileHashes, Stamp, guard_files, originals_dir, read_stamp
from specrig.patches.state import Action, GuardChange, PatchInfo, PatchRun, RestoredFile, SetResult, State

__all__ = ["apply", "check", "patch_info", "revert"]


def patch_info(patch: Patch, state: State) -> PatchInfo:
    upstream = str(patch.upstream) if patch.upstream else "no"
    return PatchInfo(name=patch.name, subject=patch.subject, upstream=upstream, state=state)


def _result(pset: PatchSet, dist: InstalledDist | None, action: Action, state: State) -> SetResult:
    return SetResult(
        family=pset.name,
        version=pset.version,
        action=action,
        distribution=dist.name if dist else None,
        installed_version=dist.version if dist else None,
        targets=pset.targets,
        patches=tuple(patch_info(p, state) for p in pset.patches),
    )


def _preflight(
    psets: list[PatchSet], site: Path, stamp: Stamp
) -> tuple[list[SetResult], list[tuple[PatchSet, InstalledDist]]]:
    """Sets already applied (as results) and sets to apply; raises for any other state."""
    done, todo = [], []
    for pset in psets:
        found = assess(pset, site, stamp)
        if found.state is State.APPLIED:
            done.append(_result(pset, found.dist, Action.ALREADY_APPLIED, State.APPLIED))
        elif found.state is State.NOT_APPLIED:
            assert found.dist is not None
            todo.append((pset, found.dist))
        else:
            assert found.error is not None
            raise found.error
    return done, todo


def check(psets: list[PatchSet], site: Path) -> PatchRun:
    """Everything ``apply`` would verify, without writing anything."""
    done, todo = _preflight(psets, site, read_stamp(site))
    if todo:
        transaction.stage([p for p, _ in todo], site)
    checked = [_result(p, d, Action.CHECKED, State.NOT_APPLIED) for p, d in todo]
    return PatchRun(command="check", site_packages=site, sets=(*done, *checked))


def _originals_of(site: Path, stamp: Stamp) -> dict[str, bytes]:
    return {
        f"{name}/{rel}": (originals_dir(site, name) / rel).read_bytes()
        for name, entry in stamp.sets.items()
        for rel in entry.files
    }


def apply(psets: list[PatchSet], site: Path) -> PatchRun:
    """Apply every set or none (see the module docstring)."""
    stamp = read_stamp(site)
    done, todo = _preflight(psets, site, stamp)
    if not todo:
        return PatchRun(command="apply", site_packages=site, sets=tuple(done))
    staged = transaction.stage([p for p, _ in todo], site)
    had_guard = bool(stamp.sets)
    originals = _originals_of(site, stamp)
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    writes: dict[Path, bytes] = {}
    for pset, dist in todo:
        files = {}
        for rel in pset.targets:
            original = (site / rel).read_bytes()
            originals[f"{pset.name}/{rel}"] = original
            files[rel] = FileHashes(original=bytes_hash(original), patched=bytes_hash(staged[rel]))
            writes[site / rel] = staged[rel]
        stamp.sets[pset.name] = AppliedSet(
            distribution=dist.name,
            version=pset.version,
            series_digest=pset.digest,
            patch_set=str(pset.path),
            patches=[p.name for p in pset.patches],
            files=files,
            applied_at=now,
        )
    stamp.site_packages = str(site)
    writes.update(guard_files(site, stamp, originals))
    transaction.commit(site, writes)
    applied = [_result(p, d, Action.APPLIED, State.APPLIED) for p, d in todo]
    guard = GuardChange.UPDATED if had_guard else GuardChange.REGISTERED
    return PatchRun(command="apply", site_packages=site, sets=(*done, *applied), guard=guard)


def revert(names: list[str], site: Path) -> PatchRun:
    """Put every target of the named sets back to its RECORD bytes."""
    stamp = read_stamp(site)
    writes: dict[Path, bytes] = {}
    results: list[SetResult] = []
    reverted: list[str] = []
    for name in names:
        entry = stamp.sets.get(name)
        if entry is None:
            results.append(SetResult(family=name, version="", action=Action.NOT_APPLIED))
            continue
        dist = find_dist(site, (entry.distribution,))
        record = dist.record() if dist else {}
        restored = []
        for rel, hashes in entry.files.items():
            data = (originals_dir(site, name) / rel).read_bytes()
            if bytes_hash(data) != hashes.original or (record and record.get(rel) != hashes.original):
                raise HashMismatchError(
                    f"{name}: the kept original of {rel} does not match RECORD "
                    f"(expected {record.get(rel) or hashes.original}, found {bytes_hash(data)})",
                    hint=f"reinstall {entry.distribution}=={entry.version} (nox -s env)",
                )
            edited = file_hash(site / rel) not in (hashes.patched, hashes.original)
            restored.append(RestoredFile(path=rel, hash=hashes.original, edited_after_apply=edited))
            writes[site / rel] = data
        results.append(
            SetResult(
                family=name,
                version=entry.version,
                action=Action.REVERTED,
                distribution=entry.distribution,
                installed_version=dist.version if dist else None,
                targets=tuple(entry.files),
                restored=tuple(restored),
            )
        )
        reverted.append(name)
    if not reverted:
        return PatchRun(command="revert", site_packages=site, sets=tuple(results))
    for name in reverted:
        del stamp.sets[name]
    if stamp.sets:
        writes.update(guard_files(site, stamp, _originals_of(site, stamp)))
        transaction.commit(site, writes)
        for name in reverted:
            shutil.rmtree(originals_dir(site, name), ignore_errors=True)
        guard = GuardChange.UPDATED
    else:
        transaction.commit(site, writes, remove_guard_after=True)
        guard = GuardChange.REMOVED
    return PatchRun(command="revert", site_packages=site, sets=tuple(results), guard=guard)
