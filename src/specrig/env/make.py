"""Make, verify and reuse an engine's virtual environment from a lock.

``make_env`` installs exactly what the lock pins (hash-checked by uv, nothing
else), adds the wheels specrig built from its wheelhouse, writes the recipe's
dist-info shims, verifies that the installed set equals the lock, and stamps the
environment with the lock's digest so the next call reuses it instead of
reinstalling. A preflight first checks the host against the recipe.

Two other kinds (docs/usage.md, "Provided environments"): an existing
interpreter (``provided = true`` or ``--python PATH``) is used as it is and only
checked (:mod:`specrig.provided`); with ``host_provides`` a venv is made over an
existing interpreter (a .pth file, so a venv base works too) and only the packages the host
does not provide are installed into it, hash-checked. ``offline`` installs from
a bundle or wheel folder (:mod:`specrig.bundle`) with no index.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from specrig.core import atomic, locks, paths
from specrig.core.errors import EnvError, LockError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.core.space import Need
from specrig.env.preflight import find_python, preflight
from specrig.env.provided import (
    PATCH_GUARD,
    Drift,
    DriftKind,
    check_provided,
    layered_problems,
    link_base,
    provided_python,
)
from specrig.env.record import damaged_files
from specrig.env.script import run_uv
from specrig.host.machine import Host, probe
from specrig.lock.built import BuiltRecord, BuiltWheel, find_wheel, read_record, record_path, supersede
from specrig.lock.indexes import Sources, sources_for
from specrig.lock.resolve import Lock, check_fresh, read_lock, uv_bin
from specrig.recipe.schema import Recipe

__all__ = [
    "Env",
    "preflight",
    "make_env",
    "verify_env",
    "find_python",
]

STAMP = "specrig-env.json"

ENVS_FIX = "free some space there, or put the environments on a larger disk: SPECRIG_ENVS_DIR=DIR"


@dataclass(frozen=True)
class Env:
    path: Path
    recipe: str
    name: str
    lock_digest: str
    reused: bool = False
    added: tuple[str, ...] = ()
    """Built wheels installed into a reused environment (from the built-wheel record)."""
    built: tuple[str, ...] = ()
    """Every built wheel the environment holds, as ``name version sha256:12 hex`` (the record's)."""
    interpreter: Path | None = None
    """A provided interpreter used as it is (``path`` is then its prefix)."""
    drift: Drift | None = None
    """How a provided (or host-provided) interpreter differs from the lock."""

    @property
    def python(self) -> Path:
        return self.interpreter or self.path / "bin" / "python"

    def bin(self, name: str) -> Path:
        return (self.interpreter.parent if self.interpreter else self.path / "bin") / name

    @property
    def provided(self) -> bool:
        return self.interpreter is not None


# --------------------------------------------------------------------------- install


def _built_wheel_lines(wheels: tuple[BuiltWheel, ...], record: Path, wheelhouse: Path | None) -> list[str]:
    """Requirement lines for built wheels: their wheelhouse file, hash-checked (the record's sha256)."""
    if not wheels:
        return []
    wh = wheelhouse or subdir("wheelhouse")
    lines = []
    for b in wheels:
        path = find_wheel(wh, b.fingerprint, b.filename, b.sha256)
        if path is None:
            raise EnvError(
                f"{record.name} needs the built wheel {b.filename} (fingerprint {b.fingerprint[:16]}…), "
                f"which is not in the wheelhouse {wh}",
                hint=f"build it with `nox -s build_{canonicalize_name(b.name).replace('-', '_')}`, or copy the wheelhouse "
                "from the host that built it and pass --wheelhouse DIR",
            )
        lines.append(f"{b.name} @ {path.resolve().as_uri()} --hash=sha256:{b.sha256}")
    return lines


def _write_shims(env: Path, python: Path, shims: dict[str, str]) -> None:
    if not shims:
        return
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name, version in shims.items():
        d = Path(purelib) / f"{name.replace('-', '_')}-{version}.dist-info"
        d.mkdir(exist_ok=True)
        atomic.write_text(d / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        atomic.write_text(d / "INSTALLER", "specrig\n")
        atomic.write_text(d / "RECORD", f"{d.name}/METADATA,,\n{d.name}/INSTALLER,,\n{d.name}/RECORD,,\n")


def installed(python: Path) -> dict[str, str]:
    proc = subprocess.run(
        [uv_bin(), "pip", "list", "--format", "json", "--python", str(python)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise EnvError(f"cannot list the packages of {python}: {proc.stderr.strip()}")
    return {str(canonicalize_name(p["name"])): p["version"] for p in json.loads(proc.stdout)}


def verify_env(path: Path, lock: Lock, shims: dict[str, str], built: BuiltRecord | None = None) -> list[str]:
    """Differences between the installed set and lock + shims + built wheels (empty: exact match)."""
    want = lock.versions() | {str(canonicalize_name(k)): v for k, v in shims.items()}
    want |= built.versions() if built else {}
    have = installed(path / "bin" / "python")
    have.pop(PATCH_GUARD, None)  # the patch guard belongs to the patched environment, not to the lock
    diffs = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            diffs.append(f"missing {name}=={want[name]}")
        elif name not in want:
            diffs.append(f"extra {name}=={have[name]}")
        elif have[name] != want[name]:
            diffs.append(f"{name}: installed {have[name]}, lock {want[name]}")
    return diffs


def _stamp(path: Path) -> dict:
    try:
        return json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def _write_stamp(path: Path, stamp: dict) -> None:
    atomic.write_text(path / STAMP, json.dumps(stamp, indent=2))


def _pip_install(venv: Path) -> list[str]:
    """``uv pip install`` into ``venv``: exactly the listed files, hash-checked, with their bytecode
    compiled (as pip does by default; uv only when asked): every server start imports torch and vLLM
    in three processes, each of which otherwise compiles them from source again wherever Python may
    not write its cache (PYTHONDONTWRITEBYTECODE, a read-only environment)."""
    return [
        "pip",
        "install",
        "--no-deps",
        "--require-hashes",
        "--compile-bytecode",
        "--python",
        str(venv / "bin" / "python"),
    ]


def _add_built_wheels(path: Path, wheels: tuple[BuiltWheel, ...], record: Path, wheelhouse: Path | None) -> None:
    """Install built wheels into an existing environment, hash-checked, replacing older builds
    of the same name; the lock's packages are left as they are. The stamp names what is in."""
    lines = _built_wheel_lines(wheels, record, wheelhouse)
    req_file = atomic.write_text(path / "specrig-built.txt", "".join(line + "\n" for line in lines))
    args = _pip_install(path)
    for w in wheels:
        args += ["--reinstall-package", w.name]
    try:
        run_uv([*args, "-r", str(req_file)], what=f"installing built wheels from {record.name}")
    finally:
        req_file.unlink(missing_ok=True)
    stamp = _stamp(path)
    stamp["built"] = stamp.get("built", {}) | {w.key: w.sha256 for w in wheels}
    _write_stamp(path, stamp)


def make_env(
    recipe: Recipe,
    env_name: str,
    *,
    lock_path: Path | None = None,
    wheelhouse: Path | None = None,
    host: Host | None = None,
    skip_preflight: bool = False,
    force: bool = False,
    python: Path | None = None,
    offline: bool = False,
) -> Env:
    """Make or reuse the environment. ``python``: an existing interpreter (used as it
    is, or as the base of a ``host_provides`` venv); ``offline``: install from the
    bundle or wheel folder ``wheelhouse`` with no index."""
    spec = recipe.env[env_name]
    if spec.provided or (python and not spec.layered):
        return _provided_env(recipe, env_name, python, lock_path)
    lock = read_lock(lock_path or recipe.lock_path(env_name))
    if lock.recipe != recipe.name or lock.env != env_name:
        raise LockError(
            f"lock {lock.path} is for {lock.recipe}.{lock.env}, not {recipe.name}.{env_name}",
            hint="pass the lock of this recipe and environment",
        )
    check_fresh(lock, recipe)
    path = paths.env_dir(recipe.name, env_name)
    with locks.hold(path, f"making the environment {path.name}"):
        return _make_venv(recipe, env_name, lock, path, wheelhouse, host, skip_preflight, force, python, offline)


def _make_venv(
    recipe: Recipe,
    env_name: str,
    lock: Lock,
    path: Path,
    wheelhouse: Path | None,
    host: Host | None,
    skip_preflight: bool,
    force: bool,
    python: Path | None,
    offline: bool,
) -> Env:
    """make_env under the environment's lock: one process makes or swaps it, a second waits and reuses it."""
    spec = recipe.env[env_name]
    digest = lock.digest
    base = str(provided_python(recipe, env_name, python)) if spec.layered else None
    # Built wheels live in their own record: a build never changes the lock (nor its
    # digest), so the environment is kept and new or rebuilt wheels are added to it.
    record_file = record_path(lock.path)
    built = read_record(record_file)
    lock = supersede(lock, built)  # a built wheel replaces the locked one of its name
    if not force:
        reused = _reuse(path, recipe, env_name, lock, built, record_file, wheelhouse, base)
        if reused is not None:
            return reused

    if not skip_preflight:
        for line in preflight(recipe, host or probe(), path, offline=offline):
            log.info(line)

    start = time.monotonic()
    interpreter = base or find_python(recipe.host.python, download=not offline)
    phases, built_lines, sources = _install_phases(recipe, env_name, lock, built, record_file, wheelhouse, offline)
    # Build beside the old environment and swap only once the new one verified:
    # a refused lock (hash mismatch, drift) leaves a working environment as it was.
    locks.clear_leftovers(path)  # a killed build's staging folder (this process holds the env's lock)
    staging = atomic.staging_dir(path)  # unique: two processes never share one
    what = f"{len(lock.installed_packages)} packages, hash-checked" + (", offline" if offline else "")
    if base:
        what += f", over {base} which provides {len(lock.provided_packages)}"
    log.step(f"creating {path} from {lock.path.name} ({what})")
    need = Need(path.parent, int(recipe.host.min_disk_gib * 2**30), f"the environment {path.name}", ENVS_FIX)
    try:
        _install(staging, interpreter, base, lock, phases, built_lines, sources, need)
        _write_shims(staging, staging / "bin" / "python", spec.shims)
        diffs = _verify(staging, recipe, env_name, lock, built)
        if diffs:
            raise EnvError(
                f"environment {path} does not match {lock.path.name} after install: " + "; ".join(diffs[:10]),
                hint="re-lock with `nox -s lock` and retry with --force",
            )
        _write_stamp(
            staging,
            {
                "recipe": recipe.name,
                "env": env_name,
                "lock": str(lock.path),
                "lock_digest": digest,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "specrig_python": sys.version.split()[0],
                "built": {w.key: w.sha256 for w in built.wheel},
                "base_python": base,
            },
        )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # never leave a half-made env behind
        raise
    # the venv is relocatable: its scripts do not name the staging folder
    atomic.publish_dir(staging, path, replace=True)
    log.step(f"environment ready in {time.monotonic() - start:.0f} s: {path}")
    return Env(path, recipe.name, env_name, digest, built=_built_names(built))


def _built_names(built: BuiltRecord) -> tuple[str, ...]:
    return tuple(f"{w.key} {w.version} sha256:{w.sha256[:12]}" for w in built.wheel)


def _reuse(
    path: Path,
    recipe: Recipe,
    env_name: str,
    lock: Lock,
    built: BuiltRecord,
    record_file: Path,
    wheelhouse: Path | None,
    base: str | None,
) -> Env | None:
    """The environment already made from this lock over this base, with any newly built wheels
    added to it, when it still verifies; None: it must be (re)made."""
    stamp = _stamp(path)
    if stamp.get("base_python") != base or stamp.get("lock_digest") != lock.digest:
        return None
    if not (path / "bin" / "python").exists():
        return None
    have = stamp.get("built", {})
    todo = tuple(w for w in built.wheel if have.get(w.key) != w.sha256)
    if todo:
        log.step(f"adding {', '.join(w.filename for w in todo)} to {path} (lock unchanged)")
        _add_built_wheels(path, todo, record_file, wheelhouse)
    diffs = _verify(path, recipe, env_name, lock, built) + damaged_files(path)
    if diffs:
        log.warn(f"environment {path} drifted from its lock ({'; '.join(diffs[:5])}): rebuilding it")
        return None
    log.step(
        f"environment {path} matches {lock.path.name}"
        + (f" and {record_file.name}" if built.wheel else "")
        + ": reusing it"
    )
    added = tuple(w.name for w in todo)
    return Env(path, recipe.name, env_name, lock.digest, reused=True, added=added, built=_built_names(built))


_Phase = tuple[list[str], list[str]]
"""The names installed in one ``uv pip install`` and the source arguments they come from."""


def _install_phases(
    recipe: Recipe,
    env_name: str,
    lock: Lock,
    built: BuiltRecord,
    record_file: Path,
    wheelhouse: Path | None,
    offline: bool,
) -> tuple[list[_Phase], list[str], Sources | None]:
    """Where each locked package is installed from (offline: the bundle or wheel folder, checked
    first), and the requirement lines of the built wheels (added to the last phase)."""
    if offline:
        from specrig.env.bundle import prepare_offline

        folder = prepare_offline(wheelhouse, lock, built.wheel)
        built_lines = _built_wheel_lines(built.wheel, record_file, folder / "built")
        names = [p.name for p in lock.installed_packages]
        return [(names, ["--offline", "--no-index", "--find-links", str(folder)])], built_lines, None
    built_lines = _built_wheel_lines(built.wheel, record_file, wheelhouse)
    sources = sources_for(recipe, env_name)  # a recipe index serves only its own packages: one install per source
    groups = sources.groups([p.name for p in lock.installed_packages])
    return [(names, uv_args) for names, uv_args, _ in groups], built_lines, sources


def _install(
    staging: Path,
    interpreter: str,
    base: str | None,
    lock: Lock,
    phases: list[_Phase],
    built_lines: list[str],
    sources: Sources | None,
    need: Need,
) -> None:
    """A venv in ``staging`` with every locked package, hash-checked, ``--no-deps`` (a fresh venv:
    the whole set is what sync would install); ``need``: what it takes on its disk."""
    venv = ["venv", "--quiet", "--relocatable", "--python", interpreter, str(staging)]
    run_uv(venv, what="creating the virtual environment", writes=(need,))
    if base:
        link_base(staging, Path(base))
    for n, (names, source_args) in enumerate(phases, 1):
        lines = [p.requirement_line() for p in lock.installed_packages if p.name in names]
        lines += built_lines if n == len(phases) else []
        req_file = atomic.write_text(staging / f"specrig-requirements-{n}.txt", "".join(f"{ln}\n" for ln in lines))
        args = _pip_install(staging)
        run_uv(
            [*args, "-r", str(req_file), *source_args],
            what=f"installing {lock.path.name}",
            sources=sources,
            locked=tuple(p for p in lock.installed_packages if p.name in names),
            writes=(need,),
        )


# --------------------------------------------------------------------------- provided interpreters


def _verify(path: Path, recipe: Recipe, env_name: str, lock: Lock, built: BuiltRecord) -> list[str]:
    """verify_env; for a venv over a host interpreter: everything specrig installed must
    match exactly, while drift of what the host provides is reported, not refused."""
    if not recipe.env[env_name].layered:
        return verify_env(path, lock, recipe.env[env_name].shims, built)
    problems, drift = layered_problems(recipe, env_name, lock, path / "bin" / "python", built.versions())
    for item in drift.items:
        if item.kind is not DriftKind.EXTRA and item.line() not in problems:
            log.warn(f"host-provided package differs from the lock: {item.line()}")
    return problems


def _provided_env(recipe: Recipe, env_name: str, python: Path | None, lock_path: Path | None) -> Env:
    """An existing interpreter used as it is: nothing installed, its drift reported (against a lock
    whose inputs are the recipe's: a stale one is refused first)."""
    check_fresh(read_lock(lock_path or recipe.lock_path(env_name)), recipe)
    drift = check_provided(recipe, env_name, python, lock_path=lock_path)
    interpreter = Path(drift.python)
    (log.step if drift.clean else log.warn)(drift.summary())
    for item in drift.items:
        if item.kind is not DriftKind.EXTRA:
            log.info(f"  {item.line()}")
    lock = read_lock(lock_path or recipe.lock_path(env_name))
    return Env(
        Path(drift.prefix), recipe.name, env_name, lock.digest, reused=True, interpreter=interpreter, drift=drift
    )
