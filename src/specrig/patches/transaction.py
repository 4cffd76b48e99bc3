"""The two halves of an all-or-nothing apply: stage every series on copies of
its targets, then commit the results into site-packages so that any failure
puts every file back byte for byte.

``git apply`` rather than a home-made diff engine or GNU patch: it refuses
fuzzy matches by default and needs nothing beyond git. It runs with
``GIT_CEILING_DIRECTORIES`` so it never mistakes a surrounding repository for
the target.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from specrig.core.errors import PatchError
from specrig.patches.model import PatchSet
from specrig.patches.stamp import GUARD_DIST_INFO, GUARD_PACKAGE, remove_guard

__all__ = ["commit", "stage", "write_atomic"]


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


def stage(psets: list[PatchSet], site: Path) -> dict[str, bytes]:
    """Apply every series to copies of its targets; returns target -> patched bytes.
    Every patched ``.py`` must compile. Writes nothing into ``site``."""
    with tempfile.TemporaryDirectory(prefix="specrig-patch-") as tmp:
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
    """Write to a sibling temporary file, then ``os.replace`` (keeps the mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.specrig-tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        shutil.copymode(path, tmp)
    os.replace(tmp, path)


def commit(site: Path, writes: dict[Path, bytes], *, remove_guard_after: bool = False) -> None:
    """Write every file or none: on failure, put back what was there (guard included)."""
    guard_existed = (site / GUARD_PACKAGE).exists() or (site / GUARD_DIST_INFO).exists()
    old_guard = {
        p: p.read_bytes()
        for base in (site / GUARD_PACKAGE, site / GUARD_DIST_INFO)
        if base.exists()
        for p in base.rglob("*")
        if p.is_file()
    }
    done: list[tuple[Path, bytes | None]] = []
    try:
        for path, data in writes.items():
            previous = path.read_bytes() if path.exists() else None
            done.append((path, previous))
            write_atomic(path, data)
        if remove_guard_after:
            remove_guard(site)
    except BaseException:
        for path, previous in reversed(done):
            if previous is None:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, previous)
        remove_guard(site)
        if guard_existed:
            for path, data in old_guard.items():
                write_atomic(path, data)
        raise
