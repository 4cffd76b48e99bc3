"""Where one patch set stands in one site-packages, before anything is touched.

:func:`assess` compares the installed distribution (version, RECORD) and the
target files with the set and the applied stamp, and returns a
:class:`~.state.State` with the files that differ and, when the set cannot be
applied as it stands, the error that ``check``/``apply`` raise. ``status``
shows the same assessment instead of raising it.

A journal left by an interrupted apply (:mod:`.transaction`) comes first: every
set it names is ``partial`` whatever its files and the stamp say, and
:func:`interrupted_error` is why ``check``/``apply`` refuse until ``revert``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specrig.core.errors import HashMismatchError, PatchError, SpecrigError
from specrig.patches.model import PatchSet, available_versions
from specrig.patches.record import InstalledDist, file_hash, find_dist
from specrig.patches.stamp import Stamp
from specrig.patches.state import FileDrift, State
from specrig.patches.transaction import REVERT_HINT, Journal, journal_dir, read_journal

__all__ = ["Assessment", "assess", "interrupted_error"]


@dataclass(frozen=True)
class Assessment:
    state: State
    dist: InstalledDist | None
    drift: tuple[FileDrift, ...] = ()
    error: SpecrigError | None = None
    """Why ``apply`` refuses (None for APPLIED and NOT_APPLIED)."""
    with_hint: bool = False
    """``detail`` carries the hint too (``status`` prints only the detail)."""

    @property
    def detail(self) -> str | None:
        if self.error is None:
            return None
        return str(self.error) if self.with_hint else self.error.message


def _reinstall_hint(pset: PatchSet, dist: InstalledDist) -> str:
    return (
        f"reinstall the pristine wheel: uv pip install --reinstall --no-deps {dist.name}=={pset.version} "
        f"--target {dist.site_packages} (or re-make the env: nox -s env), then apply again"
    )


def _drift_lines(drift: list[FileDrift]) -> str:
    return "\n".join(f"{d.path}\n  expected {d.expected} ({d.expected_is})\n  found    {d.found}" for d in drift)


def _stamped(pset: PatchSet, site: Path, stamp: Stamp) -> Assessment:
    entry = stamp.sets[pset.name]
    dist = find_dist(site, (entry.distribution,))
    if entry.version != pset.version or entry.series_digest != pset.digest:
        return Assessment(
            State.STALE,
            dist,
            error=PatchError(
                f"{pset.name}: {site} carries a different series ({entry.version}, digest "
                f"{entry.series_digest[:12]}) than {pset.path} (digest {pset.digest[:12]})",
                hint="revert first (nox -s patch -- revert), then apply",
            ),
        )
    changed, back = [], []
    for rel, hashes in entry.files.items():
        found = file_hash(site / rel)
        if found == hashes.patched:
            continue
        d = FileDrift(path=site / rel, expected=hashes.patched, found=found, expected_is="patched")
        (back if found == hashes.original else changed).append(d)
    if not changed and not back:
        return Assessment(State.APPLIED, dist)
    state = State.DRIFTED if changed else State.PARTIAL
    what = (
        "files changed since"
        if changed
        else f"{len(back)} of {len(entry.files)} files are back to their released bytes"
    )
    return Assessment(
        state,
        dist,
        drift=tuple(changed + back),
        error=HashMismatchError(
            f"{pset.label} is stamped as applied but {what}:\n{_drift_lines(changed + back)}",
            hint="revert restores the RECORD bytes (nox -s patch -- revert), then apply again",
        ),
    )


def _pristine(pset: PatchSet, site: Path) -> Assessment:
    dist = find_dist(site, pset.distributions)
    if dist is None:
        return Assessment(
            State.NOT_INSTALLED,
            None,
            error=PatchError(
                f"{' or '.join(pset.distributions)} is not installed in {site}; "
                f"the patch set is for {pset.distribution} {pset.version}",
                hint="make the environment first (nox -s env) or pass --site-packages PATH",
            ),
        )
    if dist.version != pset.version:
        have = ", ".join(available_versions(pset.name, pset.path.parents[1]))
        return Assessment(
            State.WRONG_VERSION,
            dist,
            error=PatchError(
                f"{dist.name} {dist.version} is installed in {site}, "
                f"but this patch set is for {pset.distribution} {pset.version}",
                hint=f"install {pset.distribution}=={pset.version}, or use the set for {dist.version} "
                f"if one exists (have: {have})",
            ),
        )
    record = dist.record()
    other_build = [
        FileDrift(path=site / rel, expected=pset.base[rel], found=record.get(rel), expected_is="patch set [base]")
        for rel in pset.targets
        if record.get(rel) != pset.base[rel]
    ]
    if other_build:
        return Assessment(
            State.DRIFTED,
            dist,
            drift=tuple(other_build),
            error=HashMismatchError(
                f"{dist.name} {dist.version}'s RECORD differs from the released wheel the patch set "
                f"{pset.distribution} {pset.version} was made for:\n{_drift_lines(other_build)}",
                hint="this is a different build of that version; the patch set cannot vouch for it",
            ),
        )
    drift = [
        FileDrift(path=site / rel, expected=pset.base[rel], found=found, expected_is="RECORD")
        for rel in pset.targets
        if (found := file_hash(site / rel)) != pset.base[rel]
    ]
    if drift:
        return Assessment(
            State.DRIFTED,
            dist,
            drift=tuple(drift),
            error=HashMismatchError(
                f"{len(drift)} file(s) drifted from {dist.name} {dist.version}'s RECORD "
                f"(patch set {pset.label}):\n{_drift_lines(drift)}",
                hint=_reinstall_hint(pset, dist),
            ),
        )
    return Assessment(State.NOT_APPLIED, dist)


def interrupted_error(site: Path, journal: Journal) -> PatchError:
    """What an interrupted apply's journal says, as the error ``check``/``apply`` raise."""
    written = sum(file_hash(site / f.path) != f.original for f in journal.files)
    if journal.phase == "saving":
        when = "while saving the released files, before any target was written"
    else:
        when = f"after {written} of {len(journal.files)} target files were written"
    sets = ", ".join(f"{name} {version}" for name, version in journal.sets.items())
    return PatchError(
        f"the apply of {sets} in {site} was interrupted {when} (started {journal.started_at}, "
        f"pid {journal.pid}); {journal_dir(site).name}/ holds the released files",
        hint=REVERT_HINT,
    )


def _interrupted(pset: PatchSet, site: Path, journal: Journal) -> Assessment:
    drift = [
        FileDrift(path=site / f.path, expected=f.original, found=found, expected_is="RECORD")
        for f in journal.files
        if f.family == pset.name and (found := file_hash(site / f.path)) != f.original
    ]
    error = interrupted_error(site, journal)
    return Assessment(State.PARTIAL, find_dist(site, pset.distributions), tuple(drift), error, with_hint=True)


def assess(pset: PatchSet, site: Path, stamp: Stamp) -> Assessment:
    """The state of ``pset`` in ``site``; never raises for what it finds."""
    try:
        journal = read_journal(site)
    except SpecrigError as exc:  # a damaged journal: nothing can be vouched for
        return Assessment(State.PARTIAL, find_dist(site, pset.distributions), error=exc, with_hint=True)
    if journal is not None and pset.name in journal.sets:
        return _interrupted(pset, site, journal)
    if pset.name in stamp.sets:
        return _stamped(pset, site, stamp)
    return _pristine(pset, site)
