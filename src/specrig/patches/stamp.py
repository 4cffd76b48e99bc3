"""The applied stamp and the guard distribution written into site-packages.

``apply`` leaves three things in the target site-packages:

``specrig_patch_guard/__init__.py``
    the guard plugin (:mod:`specrig.patches.guard_plugin`, copied verbatim);
``specrig_patch_guard/stamp.json``
    which sets are applied, their series digest, every target file's original
    (RECORD) and patched hash;
``specrig_patch_guard/originals/<set>/<path>``
    the original bytes of every target, so ``revert`` restores them exactly;
``specrig_patch_guard-1.0.dist-info/``
    METADATA, RECORD and ``entry_points.txt`` registering the plugin under
    ``vllm.general_plugins`` (so ``pip uninstall specrig-patch-guard`` also works).

``revert`` removes all of it once no set is applied any more.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .record import bytes_hash

__all__ = [
    "GUARD_DIST_INFO",
    "GUARD_PACKAGE",
    "PLUGIN_NAME",
    "guard_files",
    "originals_dir",
    "read_stamp",
    "remove_guard",
]

GUARD_PACKAGE = "specrig_patch_guard"
GUARD_VERSION = "1.0"
GUARD_DIST_INFO = f"{GUARD_PACKAGE}-{GUARD_VERSION}.dist-info"
PLUGIN_NAME = "specrig_patch_guard"
_STAMP_FORMAT = 1


def read_stamp(site_packages: Path) -> dict:
    """The stamp, or an empty one when nothing is applied."""
    path = site_packages / GUARD_PACKAGE / "stamp.json"
    if not path.is_file():
        return {"format": _STAMP_FORMAT, "site_packages": str(site_packages), "sets": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def originals_dir(site_packages: Path, set_name: str) -> Path:
    return site_packages / GUARD_PACKAGE / "originals" / set_name


def guard_files(site_packages: Path, stamp: dict, originals: dict[str, bytes]) -> dict[Path, bytes]:
    """Every guard file and its content for ``stamp``.

    ``originals`` maps ``<set>/<path>`` to the original bytes of that target.
    """
    plugin_src = (Path(__file__).with_name("guard_plugin.py")).read_bytes()
    pkg = site_packages / GUARD_PACKAGE
    files: dict[Path, bytes] = {
        pkg / "__init__.py": plugin_src,
        pkg / "stamp.json": (json.dumps(stamp, indent=2, sort_keys=True) + "\n").encode(),
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
    files[info / "entry_points.txt"] = (
        f"[vllm.general_plugins]\n{PLUGIN_NAME} = {GUARD_PACKAGE}:verify\n"
    ).encode()
    files[info / "INSTALLER"] = b"specrig\n"
    lines = [
        f"{path.relative_to(site_packages).as_posix()},{bytes_hash(data)},{len(data)}"
        for path, data in files.items()
    ]
    lines.append(f"{GUARD_DIST_INFO}/RECORD,,")
    files[info / "RECORD"] = ("\n".join(lines) + "\n").encode()
    return files


def remove_guard(site_packages: Path) -> None:
    shutil.rmtree(site_packages / GUARD_PACKAGE, ignore_errors=True)
    shutil.rmtree(site_packages / GUARD_DIST_INFO, ignore_errors=True)
