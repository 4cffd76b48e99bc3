"""check / apply / revert of patch sets on one site-packages folder, returning
typed results (:class:`~.state.PatchRun`); nothing here prints.

Apply is a transaction:

1. preflight (:func:`~.assess.assess`): no journal of an interrupted apply is
   present; the installed distribution's version is the set's, and every
   target file's sha256 equals both the installed RECORD and the set's
   ``[base]`` (the released wheel). Any difference is refused before anything
   is touched, naming the file, the expected and the found hash;
2. stage (:func:`~.transaction.stage`): the whole series is applied to copies
   of the targets with ``git apply`` (exact context, no fuzz), and every
   staged ``.py`` is compiled;
3. commit (:func:`~.transaction.commit_journaled`): a journal with the
   released bytes of every target first, then each target replaced
   atomically, then the guard and its stamp, then the journal is removed. If a
   step fails, every file already written is put back byte for byte; if the
   process is killed, the journal stays and ``revert`` restores from it
   (:func:`revert`).

Originals are kept inside the guard package so ``revert`` restores the RECORD
bytes exactly; re-applying an applied, unchanged set is a no-op.

``apply`` and ``revert`` hold the site-packages' lock (:mod:`specrig.core.locks`)
and clear what killed runs left: temporary files of atomic writes beside the
targets and in the guard, and staging folders in the system temp folder whose
owner is dead (:func:`~.transaction.clear_temp_files`,
:func:`~.transaction.clear_stale_staging`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from specrig.core import locks
from specrig.core.errors import HashMismatchError, PatchError
from specrig.patches import transaction
from specrig.patches.assess import assess, interrupted_error
from specrig.patches.model import Patch, PatchSet
from specrig.patches.record import InstalledDist, bytes_hash, file_hash, find_dist
from specrig.patches.stamp import (
    GUARD_DIST_INFO,
    GUARD_PACKAGE,
    AppliedSet,
    FileHashes,
    Stamp,
    guard_files,
    originals_dir,
    read_stamp,
)
from specrig.patches.state import Action, GuardChange, PatchInfo, PatchRun, RestoredFile, SetResult, State
from specrig.patches.transaction import Journal, JournalFile

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
    """Sets already applied (as results) and sets to apply; raises for any other state
    (an interrupted apply's journal first)."""
    journal = transaction.read_journal(site)
    if journal is not None:
        raise interrupted_error(site, journal)
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


def _known_targets(site: Path, stamp: Stamp, psets: Iterable[PatchSet] = ()) -> set[str]:
    """Every file a patch set may have been writing in ``site``: the stamp's, an interrupted
    apply's journal's, and ``psets``' targets."""
    journal = transaction.read_journal(site)
    return (
        {rel for entry in stamp.sets.values() for rel in entry.files}
        | {f.path for f in (journal.files if journal else [])}
        | {rel for pset in psets for rel in pset.targets}
    )


def _clear_leftovers(site: Path, targets: set[str]) -> None:
    transaction.clear_temp_files(site, targets)
    transaction.clear_stale_staging()


def apply(psets: list[PatchSet], site: Path) -> PatchRun:
    """Apply every set or none (see the module docstring)."""
    with locks.hold(site, f"applying patch sets to {site}"):
        return _apply(psets, site)


def _apply(psets: list[PatchSet], site: Path) -> PatchRun:
    stamp = read_stamp(site)
    done, todo = _preflight(psets, site, stamp)
    _clear_leftovers(site, _known_targets(site, stamp, psets))  # no journal: nothing of a killed run is needed
    if not todo:
        return PatchRun(command="apply", site_packages=site, sets=tuple(done))
    staged = transaction.stage([p for p, _ in todo], site)
    had_guard = bool(stamp.sets)
    originals = _originals_of(site, stamp)
    now = transaction.now()
    released: dict[str, bytes] = {}
    journal_files: list[JournalFile] = []
    for pset, dist in todo:
        files = {}
        for rel in pset.targets:
            original = (site / rel).read_bytes()
            if bytes_hash(original) != pset.base[rel]:
                raise HashMismatchError(
                    f"{pset.label}: {site / rel} changed while the patches were staged "
                    f"(expected {pset.base[rel]}, found {bytes_hash(original)})",
                    hint="nothing was changed; run apply again once nothing else writes into the environment",
                )
            originals[f"{pset.name}/{rel}"] = released[rel] = original
            files[rel] = FileHashes(original=bytes_hash(original), patched=bytes_hash(staged[rel]))
            journal_files.append(
                JournalFile(family=pset.name, path=rel, distribution=dist.name, **files[rel].model_dump())
            )
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
    journal = Journal(
        phase="saving",
        started_at=now,
        pid=os.getpid(),
        sets={pset.name: pset.version for pset, _ in todo},
        files=journal_files,
    )
    targets = {rel: staged[rel] for rel in released}
    transaction.commit_journaled(site, journal, released, targets, guard_files(site, stamp, originals))
    applied = [_result(p, d, Action.APPLIED, State.APPLIED) for p, d in todo]
    guard = GuardChange.UPDATED if had_guard else GuardChange.REGISTERED
    return PatchRun(command="apply", site_packages=site, sets=(*done, *applied), guard=guard)


def _verify_restored(site: Path, label: str, restored: tuple[RestoredFile, ...], hint: str) -> None:
    """Hash every restored file again: it must be the RECORD bytes."""
    for f in restored:
        found = file_hash(site / f.path)
        if found != f.hash:
            raise HashMismatchError(
                f"{label}: {f.path} is not its RECORD bytes after the restore (expected {f.hash}, found {found})",
                hint=hint,
            )


def _guard_present(site: Path) -> bool:
    return (site / GUARD_PACKAGE).exists() or (site / GUARD_DIST_INFO).exists()


def _recover(site: Path, journal: Journal) -> tuple[list[SetResult], GuardChange]:
    """Undo an interrupted apply: every target of the journal back to the released bytes it
    saved (each checked against the installed RECORD before it is written and hashed again
    after), the journal's sets out of the stamp, the journal removed."""
    stamp = read_stamp(site)
    writes: dict[Path, bytes] = {}
    results: list[SetResult] = []
    for name, version in journal.sets.items():
        files = [f for f in journal.files if f.family == name]
        dist_name = files[0].distribution if files else name
        dist = find_dist(site, (dist_name,))
        if dist is None:
            raise PatchError(
                f"{name} {version}: {dist_name} is no longer installed in {site}, so the files of the "
                "interrupted apply cannot be checked against its RECORD",
                hint="re-make the environment (nox -s env)",
            )
        record = dist.record()
        reinstall = f"reinstall {dist_name}=={dist.version} (nox -s env)"
        restored = []
        for f in files:
            expected = record.get(f.path)
            if expected != f.original:
                raise HashMismatchError(
                    f"{name}: {f.path} is {expected} in {dist_name}'s RECORD, but was {f.original} "
                    "when the interrupted apply started",
                    hint=reinstall,
                )
            found = file_hash(site / f.path)
            if found != expected:
                data = transaction.saved_original(site, f.path)
                saved = "nothing (not saved)" if data is None else bytes_hash(data)
                if data is None or saved != expected:
                    raise HashMismatchError(
                        f"{name}: the journal's copy of {f.path} is not its RECORD bytes "
                        f"(expected {expected}, found {saved})",
                        hint=reinstall,
                    )
                writes[site / f.path] = data
            edited = found not in (f.original, f.patched)
            restored.append(RestoredFile(path=f.path, hash=f.original, edited_after_apply=edited, record_verified=True))
        results.append(
            SetResult(
                family=name,
                version=version,
                action=Action.RECOVERED,
                distribution=dist.name,
                installed_version=dist.version,
                targets=tuple(f.path for f in files),
                restored=tuple(restored),
            )
        )
        stamp.sets.pop(name, None)
    if stamp.sets:  # sets applied before the interrupted apply stay applied
        writes.update(guard_files(site, stamp, _originals_of(site, stamp)))
        transaction.commit(site, writes)
        guard = GuardChange.UPDATED
    else:
        present = _guard_present(site)
        transaction.commit(site, writes, remove_guard_after=present)
        guard = GuardChange.REMOVED if present else GuardChange.UNCHANGED
    for result in results:
        _verify_restored(site, result.family, result.restored, f"reinstall {result.distribution} (nox -s env)")
        if stamp.sets:
            shutil.rmtree(originals_dir(site, result.family), ignore_errors=True)
    transaction.remove_journal(site)
    return results, guard


def _revert_stamped(names: list[str], site: Path) -> tuple[list[SetResult], GuardChange]:
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
            restored.append(
                RestoredFile(path=rel, hash=hashes.original, edited_after_apply=edited, record_verified=bool(record))
            )
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
        return results, GuardChange.UNCHANGED
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
    for result in results:
        if result.action is Action.REVERTED:
            hint = f"reinstall {result.distribution}=={result.version} (nox -s env)"
            _verify_restored(site, result.family, result.restored, hint)
    return results, guard


def revert(names: list[str], site: Path) -> PatchRun:
    """Put every target of the named sets back to its RECORD bytes. An interrupted apply's
    journal is undone first, whole (every set it names), whatever ``names`` says. What
    killed runs left (temporary files, staging folders) is cleared afterwards."""
    with locks.hold(site, f"reverting patch sets in {site}"):
        targets = _known_targets(site, read_stamp(site))
        run = _revert(names, site)
        _clear_leftovers(site, targets)
        return run


def _revert(names: list[str], site: Path) -> PatchRun:
    journal = transaction.read_journal(site)
    recovered: list[SetResult] = []
    guard = GuardChange.UNCHANGED
    if journal is not None:
        recovered, guard = _recover(site, journal)
    else:
        transaction.remove_journal(site)  # a leftover folder without journal.json, if any
    done = {r.family for r in recovered}
    results, changed = _revert_stamped([n for n in names if n not in done], site)
    if changed is not GuardChange.UNCHANGED:
        guard = changed
    return PatchRun(command="revert", site_packages=site, sets=(*recovered, *results), guard=guard)
