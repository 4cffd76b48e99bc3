"""What a kit carries from this checkout besides the locks' files: specrig's wheel (``uv build``; a full
disk while it is built named, exit 6) and, as reproducible tars, what specrig reads from its checkout
(this recipe, the patch sets, the bench suite, the build definitions) and each drafter; with what
a tar takes on disk, known before it is written (:func:`tar_bytes`)."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from specrig.core import atomic
from specrig.core.errors import ConfigError, EnvError
from specrig.core.log import log
from specrig.core.paths import repo_root
from specrig.core.space import Need, disk_full_said, full_disk_error
from specrig.env.download import CACHE_FIX
from specrig.lock.resolve import uv_bin
from specrig.recipe.schema import Recipe

__all__ = ["Archive", "archives", "checkout", "specrig_wheel", "tar_bytes", "write_tar"]

_ROOT_DIRS = ("patches", "bench", "build")  # what specrig reads from its checkout (core.paths.repo_root)


def checkout() -> Path:
    root = repo_root()
    if not (root / "pyproject.toml").is_file() or not (root / "src" / "specrig").is_dir():
        raise ConfigError(
            f"{root} is not specrig's source checkout: the kit carries a wheel built from it",
            hint="run from a clone (`pip install -e .` or a nox session), or set SPECRIG_ROOT to one",
        )
    return root


def specrig_wheel(work: Path) -> Path:
    """A wheel of this checkout (``uv build --wheel``)."""
    out = work / "specrig-wheel"
    with log.timed("building specrig's wheel from this checkout (uv build)"):
        proc = subprocess.run(
            [uv_bin(), "build", "--wheel", "--quiet", "--out-dir", str(out), str(checkout())],
            capture_output=True,
            text=True,
        )
    wheels = sorted(out.glob("specrig-*.whl"))
    if proc.returncode != 0 and (said := disk_full_said(proc.stderr)):
        raise full_disk_error(
            "building specrig's wheel (uv build)", said, [Need(work, 0, "the kit's work folder", CACHE_FIX)]
        )
    if proc.returncode != 0 or len(wheels) != 1:
        raise EnvError(f"uv build failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    return wheels[0]


Archive = tuple[str, list[tuple[str, Path]], str, str, str]
"""An archive the kit carries: (its file name, its members as ``(name in the tar, path)``, the name,
version and kind of its entry)."""


def _files(members: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """(name in the tar, file) of every file ``members`` (folders or files) hold, bytecode left out."""
    out = []
    for arc, src in sorted(members):
        paths = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        for p in paths:
            if "__pycache__" not in p.parts and p.suffix != ".pyc":
                out.append((arc if p == src else f"{arc}/{p.relative_to(src).as_posix()}", p))
    return out


def tar_bytes(members: list[tuple[str, Path]]) -> int:
    """About what :func:`write_tar` writes: per file, a header and a PAX one and its bytes in 512-byte blocks; the end."""
    return sum(1024 + -(-p.stat().st_size // 512) * 512 for _, p in _files(members)) + 10240


def write_tar(members: list[tuple[str, Path]], dest: Path) -> Path:
    """A reproducible tar (sorted, no owners, no times) of ``(name in the tar, path)`` folders/files."""
    with atomic.atomic_path(dest) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, p in _files(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode = p.stat().st_size, 0o755 if p.stat().st_mode & 0o100 else 0o644
            with open(p, "rb") as f:
                tar.addfile(info, f)
    return dest


def archives(recipe: Recipe, drafters: list[Path]) -> list[Archive]:
    """What specrig reads from its checkout: this recipe (with its locks and built records), the patch
    sets, the bench suite and the build definitions (``SPECRIG_ROOT`` on the host); each drafter."""
    assert recipe.path is not None
    root = checkout()
    members = [(f"recipes/{p.name}", p) for p in sorted(recipe.path.parent.glob(f"{recipe.name}.*"))]
    members += [(d, root / d) for d in _ROOT_DIRS if (root / d).is_dir()]
    out: list[Archive] = [(f"specrig-root-{recipe.name}.tar", members, "specrig-root", recipe.name, "root")]
    for d in drafters:
        if not (d / "config.json").is_file():
            raise ConfigError(f"--drafter {d}: no drafter folder (no config.json in it)", hint="pass a drafter folder")
        out.append((f"drafter-{d.name}.tar", [(d.name, d)], d.name, "", "drafter"))
    return out
