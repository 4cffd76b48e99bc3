"""The halves of an all-or-nothing apply: stage every series on copies of its
targets, then commit the results into site-packages, journaled, so that
neither an error nor a kill leaves patched files without a record.

``git apply`` rather than a home-made diff engine or GNU patch: it refuses
fuzzy matches by default and needs nothing beyond git. It runs with
``GIT_CEILING_DIRECTORIES`` so it never mistakes a surrounding repository for
the target.

The journal (:func:`commit_journaled`) lives beside the guard package, in
``<site-packages>/specrig_patch_guard.journal/``, and is written in this order,
every file with :func:`specrig.core.atomic.write_bytes` (temp file, fsync, rename):

1. ``journal.json`` with ``phase = "saving"``: every target file with its
   RECORD hash and its patched hash;
2. ``originals/<path>``: the released bytes of every target;
3. ``journal.json`` again with ``phase = "committing"``;
4. the targets, one by one; then the guard (originals, ``stamp.json``, and
   the dist-info that registers the plugin last);
5. the journal is removed (``journal.json`` first: its absence is the commit).

An error in 2-4 puts every file back in-process and removes the journal. A
kill leaves ``journal.json``: ``status`` reports the sets as ``partial``,
``apply`` refuses, and ``revert`` restores every target from the saved
originals (verified against RECORD). A journal folder without ``journal.json``
is a leftover (of a finished apply, or of one killed before it wrote
anything) and is ignored and cleaned up.

What a killed process leaves besides the journal is cleared by the next ``revert``
or ``apply`` (:func:`clear_temp_files`, :func:`clear_stale_staging`): the temporary
files of an atomic write it was in the middle of (``.NAME.*.tmp`` beside a target
or in the guard's folders), and its staging folder in the system temp folder
(``specrig-patch-PID-*``; only one whose owner no longer holds the ``flock`` on
its ``.owner`` file, so a running apply's folder is never touched). Both run with
the site-packages' lock held (:func:`specrig.core.locks.hold`), so no other
specrig process is writing there at the time.

Test hook: ``SPECRIG_TEST_KILL_AFTER_TARGETS=N`` (read here only, by the tests
in ``tests/test_patches_journal.py``) makes the process ``os._exit(9)`` right
after the N-th target file is written (0: after the journal is marked
committing, before any target), to prove the recovery.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from specrig.core.atomic import write_bytes
from specrig.core.errors import ConfigError, PatchError
from specrig.patches.model import PatchSet, RecordHash, validation_message
from specrig.patches.stamp import GUARD_DIST_INFO, GUARD_PACKAGE, remove_guard, stamp_path

__all__ = [
    "JOURNAL_DIR",
    "KILL_HOOK",
    "REVERT_HINT",
    "Journal",
    "JournalFile",
    "STAGING_PREFIX",
    "clear_stale_staging",
    "clear_temp_files",
    "commit",
    "commit_journaled",
    "journal_dir",
    "now",
    "read_journal",
    "remove_journal",
    "saved_original",
    "stage",
    "write_atomic",
]

JOURNAL_DIR = f"{GUARD_PACKAGE}.journal"
KILL_HOOK = "SPECRIG_TEST_KILL_AFTER_TARGETS"
REVERT_HINT = "run `nox -s patch -- revert` to restore the released files"


class JournalFile(BaseModel):
    """One target file of an apply in progress."""

    model_config = ConfigDict(extra="forbid")
    family: str
    path: str
    """Relative to site-packages."""
    distribution: str
    original: RecordHash
    """The installed RECORD hash (what the saved original is, and what revert restores)."""
    patched: RecordHash


class Journal(BaseModel):
    """``specrig_patch_guard.journal/journal.json``."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = 1
    phase: Literal["saving", "committing"]
    """saving: the originals are being saved, no target is touched yet; committing: targets are being written."""
    started_at: str
    pid: int
    sets: dict[str, str]
    """Family -> version of every set being applied."""
    files: list[JournalFile]

    def to_json(self) -> bytes:
        return (self.model_dump_json(indent=2) + "\n").encode()


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def journal_dir(site: Path) -> Path:
    return site / JOURNAL_DIR


def _journal_path(site: Path) -> Path:
    return journal_dir(site) / "journal.json"


def _saved_path(site: Path, rel: str) -> Path:
    return journal_dir(site) / "originals" / rel


def read_journal(site: Path) -> Journal | None:
    """The journal of an interrupted apply, or None; a damaged one is a ConfigError."""
    path = _journal_path(site)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return Journal.model_validate_json(raw)
    except ValidationError as exc:
        raise ConfigError(
            validation_message(f"damaged patch journal {path}", exc),
            hint="the journal is written only by `specrig patch apply`; re-make the environment (nox -s env) "
            "to get the released files back",
        ) from None


def saved_original(site: Path, rel: str) -> bytes | None:
    """The released bytes of ``rel`` as the journal saved them (None: not saved)."""
    try:
        return _saved_path(site, rel).read_bytes()
    except FileNotFoundError:
        return None


def _sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_journal(site: Path) -> None:
    """``journal.json`` first (one unlink: from then on there is no journal), then the rest."""
    folder = journal_dir(site)
    _journal_path(site).unlink(missing_ok=True)
    if folder.exists():
        _sync_dir(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _git_apply(patch_path: Path, cwd: Path) -> None:
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(cwd.parent), LC_ALL="C")
    argv = ["git", "apply", "-p1", "--whitespace=nowarn", str(patch_path)]
    try:
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise PatchError("git is not on PATH", hint="install git (apt-get install git)") from exc
    if out.returncode != 0:
        raise PatchError(
            f"{patch_path.name} does not apply: {out.stderr.strip()}",
            hint="nothing was changed; the patch's context no longer matches its target",
        )


STAGING_PREFIX = "specrig-patch-"
_OWNER = ".owner"
_UNOWNED_AGE_S = 3600.0
"""A staging folder without an owner file (made before owner files, or its maker was killed
between making it and locking it) is removed once it is this old: staging takes seconds."""


@contextlib.contextmanager
def _staging_folder() -> Iterator[Path]:
    """A staging folder in the system temp folder, ``specrig-patch-PID-*``, its ``.owner`` file
    ``flock``-ed for as long as this process uses it (the kernel drops the lock when it dies)."""
    clear_stale_staging()
    folder = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
    fd = os.open(folder / _OWNER, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def clear_stale_staging(temp: Path | None = None) -> list[Path]:
    """Remove the staging folders of applies that were killed (their owner's ``flock`` is gone);
    a running apply's folder is left alone. Returns what was removed."""
    removed = []
    for folder in Path(temp or tempfile.gettempdir()).glob(f"{STAGING_PREFIX}*"):
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            fd = os.open(folder / _OWNER, os.O_RDWR)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if time.time() - folder.stat().st_mtime > _UNOWNED_AGE_S:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed.append(folder)
            continue
        except OSError:
            continue  # another user's folder: not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its apply is running
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


def clear_temp_files(site: Path, targets: Iterable[str]) -> list[Path]:
    """Remove the temporary files a killed atomic write left (``.NAME.*.tmp``, the names
    :func:`specrig.core.atomic.atomic_path` gives) beside every target in ``targets``
    (relative to ``site``) and anywhere in the guard's folders. Call it with the site's
    lock held: no other specrig process is writing there then. Returns what was removed."""
    stale: set[Path] = set()
    for rel in targets:
        path = site / rel
        stale.update(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    for base in (site / GUARD_PACKAGE, site / GUARD_DIST_INFO):
        if base.is_dir():
            stale.update(base.rglob(".*.tmp"))
    removed = []
    for p in sorted(stale):
        if p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def stage(psets: list[PatchSet], site: Path) -> dict[str, bytes]:
    """Apply every series to copies of its targets; returns target -> patched bytes.
    Every patched ``.py`` must compile. Writes nothing into ``site``."""
    with _staging_folder() as tmp:
        work = Path(tmp) / "site"
        for pset in psets:
            for rel in pset.targets:
                dest = work / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(site / rel, dest)
        for pset in psets:
            for patch in pset.patches:
                try:
                    _git_apply(patch.path, work)
                except PatchError as exc:
                    raise PatchError(f"{pset.label}: {exc.message}", hint=exc.hint) from None
        staged: dict[str, bytes] = {}
        for pset in psets:
            for rel in pset.targets:
                data = (work / rel).read_bytes()
                if rel.endswith(".py"):
                    try:
                        compile(data, rel, "exec", dont_inherit=True)
                    except SyntaxError as exc:
                        raise PatchError(
                            f"{pset.label}: {rel} does not compile after patching: {exc}",
                            hint="nothing was changed; fix the patch",
                        ) from None
                staged[rel] = data
        return staged


def write_atomic(path: Path, data: bytes) -> None:
    """:func:`specrig.core.atomic.write_bytes`, keeping the mode of the file it replaces (0644 for a new one)."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    write_bytes(path, data, mode=mode)


class _RollbackFailed(PatchError):
    """A write failed and putting the files back failed too: a journal must stay."""


def _kill_after() -> int | None:
    """The test hook (module docstring)."""
    value = os.environ.get(KILL_HOOK)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(
            f"{KILL_HOOK}={value!r} is not a number", hint=f"it is a test hook: unset {KILL_HOOK}"
        ) from None


def _guard_now(site: Path) -> dict[Path, bytes]:
    return {
        p: p.read_bytes()
        for base in (site / GUARD_PACKAGE, site / GUARD_DIST_INFO)
        if base.exists()
        for p in base.rglob("*")
        if p.is_file()
    }


def commit(site: Path, writes: dict[Path, bytes], *, remove_guard_after: bool = False, targets: int = 0) -> None:
    """Write every file or none: on failure, put back what was there (guard included).
    ``targets``: how many of ``writes`` (the first ones) are target files (for the test hook)."""
    kill_after = _kill_after() if targets else None
    guard_existed = (site / GUARD_PACKAGE).exists() or (site / GUARD_DIST_INFO).exists()
    old_guard = _guard_now(site) if remove_guard_after else {}
    done: list[tuple[Path, bytes | None]] = []
    current: Path | None = None
    try:
        if kill_after == 0:
            os._exit(9)
        for i, (path, data) in enumerate(writes.items(), 1):
            current = path
            previous = path.read_bytes() if path.exists() else None
            done.append((path, previous))
            write_atomic(path, data)
            if kill_after == i <= targets:
                os._exit(9)
        current = site / GUARD_PACKAGE
        if remove_guard_after:
            remove_guard(site)
    except BaseException as exc:
        try:
            for path, previous in reversed(done):
                if previous is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomic(path, previous)
            if not guard_existed:
                remove_guard(site)
            for path, data in old_guard.items():  # remove_guard_after had started
                write_atomic(path, data)
        except BaseException as again:
            raise _RollbackFailed(
                f"writing {current} failed ({exc}), and putting the files back failed too ({again})",
                hint=REVERT_HINT,
            ) from again
        if isinstance(exc, OSError):
            raise PatchError(
                f"writing {current} failed: {exc}; every file already written was put back",
                hint="nothing was changed; free disk space or fix the permissions, then run it again",
            ) from exc
        raise


def _sync_tree(folder: Path) -> None:
    for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        _sync_dir(d)


def _begin(site: Path, journal: Journal, originals: dict[str, bytes]) -> None:
    """Steps 1-3 of the module docstring; on any failure the journal is removed again."""
    folder = journal_dir(site)
    if _journal_path(site).exists():
        raise PatchError(
            f"{folder} appeared while this apply was preparing: another apply is running or was interrupted",
            hint=REVERT_HINT,
        )
    shutil.rmtree(folder, ignore_errors=True)  # a leftover without journal.json: nothing to recover
    try:
        folder.mkdir()
    except FileExistsError:
        raise PatchError(
            f"another apply is writing {folder}", hint="wait for it to end, then run `nox -s patch -- status`"
        ) from None
    try:
        _sync_dir(site)
        write_bytes(_journal_path(site), journal.model_copy(update={"phase": "saving"}).to_json())
        for rel, data in originals.items():
            write_bytes(_saved_path(site, rel), data)
        _sync_tree(folder)
        write_bytes(_journal_path(site), journal.model_copy(update={"phase": "committing"}).to_json())
    except BaseException as exc:
        remove_journal(site)
        if isinstance(exc, OSError):
            raise PatchError(
                f"saving the released files into {folder} failed: {exc}",
                hint="nothing was changed; free disk space or fix the permissions, then apply again",
            ) from exc
        raise


def _guard_rank(site: Path, path: Path) -> int:
    """The guard's files in the order they are written: package, stamp.json, dist-info (registers the plugin)."""
    if path == stamp_path(site):
        return 1
    return 2 if path.relative_to(site).parts[0] == GUARD_DIST_INFO else 0


def commit_journaled(
    site: Path, journal: Journal, originals: dict[str, bytes], targets: dict[str, bytes], guard: dict[Path, bytes]
) -> None:
    """Apply's commit (module docstring): ``originals`` and ``targets`` map a target
    (relative to ``site``) to its released and its patched bytes; ``guard`` is every guard file."""
    _begin(site, journal, originals)
    writes = {site / rel: data for rel, data in targets.items()}
    writes.update(sorted(guard.items(), key=lambda item: _guard_rank(site, item[0])))
    try:
        commit(site, writes, targets=len(targets))
    except _RollbackFailed:
        raise  # the journal stays: revert restores every target from it
    except BaseException:
        remove_journal(site)  # every file was put back
        raise
    remove_journal(site)
