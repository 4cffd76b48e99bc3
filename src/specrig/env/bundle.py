"""Offline bundles: every file a lock installs, hash-verified, in one folder
with a manifest, optionally in volumes of at most N MB for size-limited
transfers; and the other side, turning such a folder back into a wheel folder
that ``env --offline`` installs from with no index.

Layout (``bundle.toml`` is in the folder, and in every volume)::

    DIR/bundle.toml                    without --split-mb: the files themselves
    DIR/FILE.whl ...
    DIR/vol-001/bundle.toml            with --split-mb N: volumes of <= N MB (10^6 bytes)
    DIR/vol-001/FILE.whl
    DIR/vol-002/BIG.whl.part001        a file larger than a volume, in parts
    DIR/vol-003/BIG.whl.part002        (re-joined and re-hashed on install)
    DIR/built/FINGERPRINT/...          wheels specrig built (the built-wheel record)

The manifest holds names, versions, file names, sizes and sha256 of every file
and part: no URL. Files are fetched by :mod:`specrig.env.download` (``pip download
--no-deps --require-hashes`` for the recipe's platform and Python, from the same
sources as ``lock``) into a cache folder kept for the next bundle.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field

from specrig.core import atomic, locks
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError, EnvError, HashMismatchError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.core.space import Need, check_space, naming_full_disk
from specrig.core.validation import first_toml
from specrig.env.download import download, download_needs, on_disk, sizes
from specrig.lock.built import MANIFEST as BUILT_MANIFEST
from specrig.lock.built import BuiltWheel, find_wheel, read_record, record_path, supersede
from specrig.lock.file import Lock
from specrig.lock.resolve import check_fresh, read_lock
from specrig.recipe.schema import Recipe

__all__ = ["MANIFEST", "BundleManifest", "BundleFile", "make_bundle", "read_manifest", "prepare_offline"]

MANIFEST = "bundle.toml"
MB = 10**6
_RESERVE = 256 * 1024  # room in every volume for its copy of the manifest
_CHUNK = 8 * 2**20


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BundlePart(_Model):
    path: str
    """Relative to the bundle folder (``vol-002/x.whl.part001``)."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class BundleFile(_Model):
    name: str
    version: str
    filename: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    kind: Literal["locked", "built"] = "locked"
    fingerprint: str | None = None
    """Built wheels: their wheelhouse entry (``built/FINGERPRINT/``)."""
    parts: list[BundlePart]


class BundleManifest(_Model):
    schema_: Literal[1] = Field(1, alias="schema")
    recipe: str
    env: str
    lock: str
    lock_digest: str
    python: str
    platform: str
    split_mb: int | None = None
    files: list[BundleFile]

    @property
    def volumes(self) -> list[str]:
        return sorted({p.path.split("/")[0] for f in self.files for p in f.parts if "/" in p.path})


# --------------------------------------------------------------------------- make


def _locked_files(lock: Lock, folder: Path) -> list[tuple[BundleFile, Path]]:
    """Each installed package's file in ``folder``, hash-verified against the lock."""
    out = []
    for p in lock.installed_packages:
        found = None
        for filename, sha in p.file_hashes():
            path = folder / filename
            if path.is_file():
                got = sha256_file(path)
                if got != sha:
                    raise HashMismatchError(
                        f"{filename}: sha256 {got}, the lock records {sha}", hint="delete it and bundle again"
                    )
                found = (
                    BundleFile(
                        name=p.name,
                        version=p.version,
                        filename=filename,
                        sha256=sha,
                        size=path.stat().st_size,
                        parts=[],
                    ),
                    path,
                )
                break
        if found is None:
            raise EnvError(
                f"pip download saved no file of {p.name} {p.version} that the lock lists ({', '.join(p.files)})",
                hint="is the lock for this platform? re-lock with `nox -s lock`",
            )
        out.append(found)
    return out


def _built_files(lock: Lock, wheelhouse: Path | None) -> list[tuple[BundleFile, Path]]:
    record = read_record(record_path(lock.path))
    wh = wheelhouse or subdir("wheelhouse")
    out = []
    for w in record.wheel:
        path = find_wheel(wh, w.fingerprint, w.filename, w.sha256)
        if path is None:
            raise EnvError(
                f"{record_path(lock.path).name} lists the built wheel {w.filename}, which is not in the wheelhouse {wh}",
                hint="build it, or pass --wheelhouse DIR holding it",
            )
        out.append(
            (
                BundleFile(
                    name=w.name,
                    version=w.version,
                    filename=w.filename,
                    sha256=w.sha256,
                    size=path.stat().st_size,
                    kind="built",
                    fingerprint=w.fingerprint,
                    parts=[],
                ),
                path,
            )
        )
    return out


def _copy_range(src: Path, dst: Path, start: int, size: int) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fin.seek(start)
        left = size
        while left:
            data = fin.read(min(_CHUNK, left))
            if not data:
                raise EnvError(f"{src} is shorter than expected")
            h.update(data)
            fout.write(data)
            left -= len(data)
    return h.hexdigest()


def place_in_volumes(files: list[tuple[BundleFile, Path]], out: Path, split_mb: int | None) -> list[BundleFile]:
    """Copy the files into ``out`` (flat, or first-fit into volumes, big ones in parts): a bundle's, the kit's, a study's."""
    placed: list[BundleFile] = []
    if not split_mb:
        for f, src in files:
            rel = f"built/{f.fingerprint}/{f.filename}" if f.kind == "built" else f.filename
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            if src.resolve() != (out / rel).resolve():
                shutil.copyfile(src, out / rel)
            placed.append(f.model_copy(update={"parts": [BundlePart(path=rel, sha256=f.sha256, size=f.size)]}))
        return placed
    cap = split_mb * MB - _RESERVE
    if cap <= 0:
        raise ConfigError(f"--split-mb {split_mb} leaves no room for files", hint="use at least --split-mb 1")
    free: list[int] = []  # bytes left per volume

    def volume_for(size: int) -> int:
        for i, left in enumerate(free):
            if left >= size:
                free[i] -= size
                return i
        free.append(cap - size)
        return len(free) - 1

    for f, src in sorted(files, key=lambda x: -x[1].stat().st_size):
        parts = []
        chunks = [(0, f.size)] if f.size <= cap else [(o, min(cap, f.size - o)) for o in range(0, f.size, cap)]
        for n, (start, size) in enumerate(chunks, 1):
            vol = f"vol-{volume_for(size) + 1:03d}"
            name = f.filename if len(chunks) == 1 else f"{f.filename}.part{n:03d}"
            (out / vol).mkdir(parents=True, exist_ok=True)
            sha = _copy_range(src, out / vol / name, start, size)
            parts.append(BundlePart(path=f"{vol}/{name}", sha256=sha, size=size))
        placed.append(f.model_copy(update={"parts": parts}))
    return placed


def placed_bytes(sizes: list[int], split_mb: int | None, *, per_volume: int = 0) -> int:
    """About what :func:`place_in_volumes` of files of ``sizes`` takes on disk (in whole blocks), with a
    manifest beside them and in each volume (and ``per_volume`` more bytes in each: the kit's installer)."""
    cap = max(split_mb * MB - _RESERVE, 1) if split_mb else 0
    parts = [min(cap, n - o) for n in sizes for o in range(0, max(n, 1), cap)] if cap else list(sizes)
    manifest = on_disk(512 * (len(sizes) + len(parts) + 8))
    if not cap:
        return sum(on_disk(n) for n in parts) + manifest
    free: list[int] = []  # first fit, largest first, as place_in_volumes fills its volumes
    for part in sorted(parts, reverse=True):
        for i, left in enumerate(free):
            if left >= part:
                free[i] -= part
                break
        else:
            free.append(cap - part)
    return sum(on_disk(n) for n in parts) + manifest + len(free) * (manifest + on_disk(per_volume))


def make_bundle(
    recipe: Recipe, env_name: str, out: Path, *, split_mb: int | None = None, wheelhouse: Path | None = None
) -> BundleManifest:
    """Download every file ``env_name``'s lock installs into ``out`` with a manifest."""
    lock = read_lock(recipe.lock_path(env_name))
    lock = supersede(lock, read_record(record_path(lock.path)))  # a built wheel replaces the locked one
    check_fresh(lock, recipe)
    out = Path(out)
    with locks.hold(out, f"making the bundle {out}"):
        return _make_bundle(recipe, env_name, lock, out, split_mb, wheelhouse)


def _make_bundle(
    recipe: Recipe, env_name: str, lock: Lock, out: Path, split_mb: int | None, wheelhouse: Path | None
) -> BundleManifest:
    """make_bundle under the bundle's lock: staged in a unique folder beside ``out``, published in one rename."""
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists() and not any(out.glob("vol-*")):
        raise ConfigError(f"{out} exists and is not a bundle", hint="give an empty or new folder with --out")
    downloads = subdir("bundles") / f"{recipe.name}-{env_name}-downloads"  # kept: a second bundle downloads nothing
    downloads.mkdir(parents=True, exist_ok=True)
    built = _built_files(lock, wheelhouse)
    with locks.hold(downloads, f"downloading the files of {lock.path.name}"):
        fetched = sizes(recipe, lock, downloads)
        writes = download_needs([(downloads, fetched)], f"the files of {lock.path.name} to download")
        size = placed_bytes([*fetched.files.values(), *(f.size for f, _ in built)], split_mb)
        need = Need(
            out, size, f"the bundle, {fetched.estimate}", "free some space there, or bundle elsewhere: --out DIR"
        )
        for line in check_space([*writes, need]):  # before anything is downloaded or copied
            log.info(line)
        download(recipe, lock, downloads, writes=tuple(writes))
    files = _locked_files(lock, downloads) + built
    locks.clear_leftovers(out)
    staging = atomic.staging_dir(out)
    try:
        with naming_full_disk(f"writing the bundle {out}", [need]):
            manifest = _place(recipe, env_name, lock, files, staging, split_mb)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # no half-written bundle left
        raise
    atomic.publish_dir(staging, out, replace=True)
    total = sum(f.size for f in manifest.files)
    vols = f" in {len(manifest.volumes)} volumes of <= {split_mb} MB" if split_mb else ""
    log.step(f"bundle {out}: {len(manifest.files)} files, {total / MB:.1f} MB{vols}")
    return manifest


def _place(
    recipe: Recipe, env_name: str, lock: Lock, files: list[tuple[BundleFile, Path]], staging: Path, split_mb: int | None
) -> BundleManifest:
    """The files and their manifest (in the folder and each volume) written into ``staging``."""
    placed = place_in_volumes(files, staging, split_mb)
    manifest = BundleManifest(
        recipe=recipe.name,
        env=env_name,
        lock=lock.path.name,
        lock_digest=lock.digest,
        python=recipe.host.python,
        platform=recipe.host.platform,
        split_mb=split_mb,
        files=placed,
    )
    text = f"# specrig bundle of {lock.path.name}: names, versions, sha256; no URLs\n" + tomli_w.dumps(
        manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    atomic.write_text(staging / MANIFEST, text)
    for vol in manifest.volumes:
        atomic.write_text(staging / vol / MANIFEST, text)
    return manifest


# --------------------------------------------------------------------------- read / install


def read_manifest(folder: Path) -> BundleManifest | None:
    """The bundle's manifest (in the folder or any volume), or None for a plain wheel folder."""
    folder = Path(folder)
    candidates = [folder / MANIFEST, *sorted(folder.glob(f"vol-*/{MANIFEST}"))]
    return first_toml(candidates, BundleManifest, not_what="not a valid bundle manifest", hint="make the bundle again")


def _index(folder: Path) -> dict[str, list[Path]]:
    """Every file under ``folder`` by name (volumes may be laid side by side in any way)."""
    out: dict[str, list[Path]] = {}
    for p in folder.rglob("*"):
        if p.is_file():
            out.setdefault(p.name, []).append(p)
    return out


def _find(folder: Path, rel: str, names: dict[str, list[Path]]) -> Path | None:
    direct = folder / rel
    if direct.is_file():
        return direct
    return next(iter(names.get(Path(rel).name, [])), None)


def _need(lock: Lock, built: tuple[BuiltWheel, ...]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(name, version, [(file, sha256)...]) the install needs: one file of each."""
    return [(p.name, p.version, p.file_hashes()) for p in lock.installed_packages] + [
        (w.name, w.version, [(w.filename, w.sha256)]) for w in built
    ]


def prepare_offline(folder: Path | None, lock: Lock, built: tuple[BuiltWheel, ...] = ()) -> Path:
    """A flat folder holding one verified file of every package the lock installs
    (parts joined and re-hashed), with built wheels under ``built/``. Raises,
    naming every missing file (and its volume), before anything is installed."""
    if folder is None or not Path(folder).is_dir():
        raise ConfigError(f"--wheelhouse {folder} is not a folder", hint="pass the bundle folder (`nox -s bundle`)")
    folder = Path(folder)
    manifest = read_manifest(folder)
    final = subdir("offline") / f"{lock.path.stem}-{lock.digest.removeprefix('sha256:')[:16]}"
    with locks.hold(final, f"preparing the offline folder {final.name}"):
        locks.clear_leftovers(final)
        out = atomic.staging_dir(final)
        try:
            _gather(folder, manifest, lock, built, out)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        atomic.publish_dir(out, final, replace=True)
    if manifest and manifest.lock_digest != lock.digest:
        log.warn(f"bundle was made from another {manifest.lock} (digest differs); every file was found and verified")
    log.step(f"offline: {len(_need(lock, built))} files found and verified in {folder}")
    return final


def _gather(
    folder: Path, manifest: BundleManifest | None, lock: Lock, built: tuple[BuiltWheel, ...], out: Path
) -> None:
    """Place one verified file of every package into ``out``; raise naming every missing one."""
    names = _index(folder)
    entries = {(f.filename, f.sha256): f for f in manifest.files} if manifest else {}
    missing: list[str] = []
    by_built = {w.filename: w for w in built}
    for name, version, candidates in _need(lock, built):
        placed = None
        for filename, sha in candidates:
            target = out / filename
            if filename in by_built:
                target = out / "built" / by_built[filename].fingerprint / filename
            entry = entries.get((filename, sha))
            if entry:
                where = [_find(folder, p.path, names) for p in entry.parts]
                if any(w is None for w in where):
                    lost = [p.path for p, w in zip(entry.parts, where, strict=True) if w is None]
                    missing.append(f"{name} {version}: {filename} ({', '.join(lost)})")
                    placed = "missing"
                    break
                assemble(entry, [w for w in where if w], target)
                placed = target
                break
            if not manifest and (src := next(iter(names.get(filename, [])), None)):
                _check(src, sha)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(src.resolve(), target)
                placed = target
                break
        if placed is None:
            missing.append(f"{name} {version}: one of {', '.join(f for f, _ in candidates)}")
        elif isinstance(placed, Path) and placed.name in by_built:  # what built.find_wheel reads
            w = by_built[placed.name]
            atomic.write_text(placed.parent / BUILT_MANIFEST, json.dumps({"filename": w.filename, "sha256": w.sha256}))
    if missing:
        raise EnvError(
            f"{folder} lacks {len(missing)} file(s) that {lock.path.name} installs:\n"
            + "\n".join(f"  - {m}" for m in missing),
            hint="copy the missing volumes or files into the folder, or make the bundle again with `nox -s bundle`",
        )


def _check(path: Path, sha: str) -> None:
    got = sha256_file(path)
    if got != sha:
        raise HashMismatchError(
            f"{path} is damaged: sha256 {got}, expected {sha}",
            hint="copy it again from the bundle's source, or make the bundle again",
        )


def assemble(entry: BundleFile, sources: list[Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    for part, src in zip(entry.parts, sources, strict=True):
        _check(src, part.sha256)
    if len(sources) == 1:
        os.symlink(sources[0].resolve(), target)
        return
    with open(target, "wb") as fout:
        for src in sources:
            with open(src, "rb") as fin:
                shutil.copyfileobj(fin, fout, _CHUNK)
    _check(target, entry.sha256)
