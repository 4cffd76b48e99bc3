"""A study folder carried home: its results (no model weights, no large caches) as one
``NAME.tar.gz``, placed into volumes of at most N MB the way the kit places its files
(:func:`specrig.env.bundle.place_in_volumes`: first fit, a big file in parts), with ``pack.toml``
(the study, the file, each part's sha256) in every volume. :func:`unpack` reads the volumes
back (laid out in any way under one folder), checks every part and makes the study folder."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import tomllib
from pathlib import Path
from typing import Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field

from specrig.core import atomic
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.core.validation import first_toml
from specrig.env.bundle import MB, BundleFile, assemble, place_in_volumes

__all__ = ["PACK_MANIFEST", "LEFT_OUT", "pack", "unpack"]

PACK_MANIFEST = "pack.toml"
LEFT_OUT = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.npy", "*.arrow", "*.gguf", "*.lock", "profiles")
"""What a pack leaves out: model weights, tensors, datasets' caches, lock files, raw profiler traces."""


class PackManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal[1] = Field(1, alias="schema")
    study: str
    split_mb: int
    left_out: list[str]
    file: BundleFile


def _left_out(path: Path) -> bool:
    return any(path.match(pattern) for pattern in LEFT_OUT)


def _tar(folder: Path, dest: Path) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if _left_out(Path(info.name)) or info.issym() else info

    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder, arcname=folder.name, filter=keep)


def _sha(path: Path) -> str:
    from specrig.core.digest import sha256_file

    return sha256_file(path)


def pack(folder: Path, out: Path, *, split_mb: int) -> Path:
    """Pack the study folder into volumes under ``out`` (``vol-001``, ...); returns ``out``."""
    from specrig.study.record import StudyState

    folder = Path(folder).absolute()
    name = StudyState.load(folder, _study_name(folder)).study
    staging = atomic.staging_dir(out)
    try:
        work = Path(tempfile.mkdtemp(prefix=".pack-", dir=staging))
        tar = work / f"{name}.tar.gz"
        _tar(folder, tar)
        entry = BundleFile(
            name=name, version="1", filename=tar.name, sha256=_sha(tar), size=tar.stat().st_size, parts=[]
        )
        [placed] = place_in_volumes([(entry, tar)], staging, split_mb)
        shutil.rmtree(work)
        manifest = PackManifest(study=name, split_mb=split_mb, left_out=list(LEFT_OUT), file=placed)
        text = f"# specrig study {name}, packed: read it back with `specrig study unpack FOLDER --out DIR`\n"
        text += tomli_w.dumps(manifest.model_dump(mode="json", by_alias=True, exclude_none=True))
        volumes = sorted({p.path.split("/")[0] for p in placed.parts})
        for vol in volumes:
            atomic.write_text(staging / vol / PACK_MANIFEST, text)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    atomic.publish_dir(staging, out, replace=True)
    log.step(f"study {name}: {placed.size / MB:.2f} MB in {len(volumes)} volume(s) of <= {split_mb} MB in {out}")
    return out


def _study_name(folder: Path) -> str:
    try:
        return str(tomllib.loads((folder / "study.toml").read_text())["study"]["name"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        raise ConfigError(f"{folder} is no study folder (no readable study.toml)", hint="give a study folder") from None


def _manifest(volumes: Path) -> PackManifest:
    candidates = [volumes / PACK_MANIFEST, *sorted(volumes.rglob(PACK_MANIFEST))]
    found = first_toml(candidates, PackManifest, not_what="not a study pack's manifest", hint="pack the study again")
    if found is None:
        raise ConfigError(
            f"no {PACK_MANIFEST} under {volumes}", hint="give the folder holding the volumes (vol-001, ...)"
        )
    return found


def _parts(volumes: Path, manifest: PackManifest) -> list[Path]:
    found = {p.name: p for p in volumes.rglob("*") if p.is_file()}
    out, missing = [], []
    for part in manifest.file.parts:
        direct = volumes / part.path
        path = direct if direct.is_file() else found.get(Path(part.path).name)
        (out if path else missing).append(path or part.path)
    if missing:
        raise ConfigError(
            f"{volumes} lacks {len(missing)} part(s) of the pack: {', '.join(map(str, missing))}",
            hint="copy every volume into the folder",
        )
    return out


def unpack(volumes: Path, out: Path) -> Path:
    """Read packed volumes back into the study folder ``out`` (made; refused if it exists)."""
    volumes, out = Path(volumes).absolute(), Path(out).absolute()
    manifest = _manifest(volumes)
    if out.exists():
        raise ConfigError(f"{out} exists", hint="name a new folder: --out DIR")
    sources = _parts(volumes, manifest)
    staging = atomic.staging_dir(out)
    try:
        tar = staging / ".pack" / manifest.file.filename
        assemble(manifest.file, sources, tar)  # every part, and the whole, checked
        with tarfile.open(tar) as t:
            t.extractall(staging / ".unpacked", filter="data")
        atomic.publish_dir(staging / ".unpacked" / _only(staging / ".unpacked"), out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.step(f"study {manifest.study}: unpacked into {out}")
    return out


def _only(folder: Path) -> str:
    names = [p.name for p in folder.iterdir()]
    if len(names) != 1:
        raise ConfigError(f"the pack holds {len(names)} top-level entries, not one study folder", hint="pack it again")
    return names[0]
