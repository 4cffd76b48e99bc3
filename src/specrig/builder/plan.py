"""Planning one build: from the request, the recipe, the build definition and
this host, decide everything a build does, without side effects.

The plan names the archs, the build python and its torch, the CUDA toolkit,
the sources (with their pins and cache status), the environment and config
settings the backend sets, the job cap, and the fingerprint of everything that
changes the wheel's bytes. ``--plan`` prints it (``render``); ``execute`` runs it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specrig.builder.backend import BuildContext, local_version_tag
from specrig.builder.backends import BACKENDS
from specrig.builder.cap import JobCap, host_budget, load_measured_entry, load_measured_units, plan_cap
from specrig.builder.definition import BuildDefinition, load_definition
from specrig.builder.sources import SourceCache, content_digest, fetchcontent_var
from specrig.builder.wheelhouse import fingerprint
from specrig.core import paths
from specrig.core.errors import ConfigError
from specrig.host import toolchain
from specrig.lock.built import record_path
from specrig.recipe.schema import BuildPin, Recipe, load_recipe

__all__ = [
    "BuildRequest",
    "BuildPlan",
    "SourceLine",
    "PythonInfo",
    "make_plan",
    "check_pin",
    "normalize_arch",
    "probe_python",
    "tree_digest",
]

FINGERPRINT_SCHEMA = 1
# Variables that change how fast a build runs, never the bytes it makes.
PARALLELISM_VARS = {"MAX_JOBS", "NVCC_THREADS", "CMAKE_BUILD_PARALLEL_LEVEL"}


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    target: str
    recipe: str
    """Recipe name or path (the command layer's one default-recipe policy picks it)."""
    archs: tuple[str, ...] | None = None
    jobs: int | None = None
    nvcc_threads: int | None = None
    source_cache: Path | None = None
    wheelhouse: Path | None = None
    python: Path | None = None
    record: Path | None = None
    """Built-wheel record to list the wheel in (default: the one beside the build env's lock)."""
    memory_gib: float | None = None
    cores: int | None = None
    offline: bool = False
    rebuild: bool = False
    reuse_only: bool = False
    log_dir: Path | None = None
    plan_only: bool = False
    """Planning only: a build that does not fit is shown (0 jobs), not refused."""


@dataclass(frozen=True, kw_only=True)
class SourceLine:
    name: str
    kind: str
    location: str
    pin: str
    sha256: str
    status: str
    cmake_var: str = ""


@dataclass(frozen=True, kw_only=True)
class PythonInfo:
    tag: str
    """``cp312``."""
    torch: str | None
    """``2.9.1+cu128``, None without torch."""


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    ctx: BuildContext
    env: dict[str, str]
    config_settings: list[str]
    sources: list[SourceLine]
    fingerprint_inputs: dict[str, Any]
    fingerprint: str
    python: Path
    python_exists: bool
    record_path: Path | None
    unrecorded: str
    """Why the wheel is listed in no built-wheel record (empty where it is)."""
    wheelhouse: Path
    source_cache: Path
    log_dir: Path
    cuda_home: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def definition(self) -> BuildDefinition:
        return self.ctx.definition

    @property
    def cap(self) -> JobCap:
        return self.ctx.cap


# --------------------------------------------------------------------------- probing


def normalize_arch(a: str) -> str:
    """``12.0``, ``sm_120``, ``120`` -> ``120``."""
    s = a.strip().lower().removeprefix("sm_").removeprefix("sm").replace(".", "")
    if not re.fullmatch(r"\d{2,3}[af]?", s):
        raise ConfigError(f"not a GPU arch: {a!r}", hint="write arch numbers like 120, 90 or 12.0")
    return s


_PY_PROBE = """
import json, sys
info = {"tag": f"cp{sys.version_info[0]}{sys.version_info[1]}", "torch": None}
try:
    import torch
    info["torch"] = torch.__version__
except Exception:
    pass
print(json.dumps(info))
"""


def probe_python(python: Path) -> PythonInfo:
    """The build python's tag and torch (run in that python)."""
    try:
        out = subprocess.run([str(python), "-c", _PY_PROBE], capture_output=True, text=True, timeout=120, check=True)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise ConfigError(
            f"cannot run the build python {python}: {exc}", hint="give --python of a working environment"
        ) from None
    return PythonInfo(tag=info["tag"], torch=info["torch"])


_BUILD_OUTPUTS = {"build", "dist", "__pycache__", ".git", ".pytest_cache"}


def tree_digest(root: Path) -> str:
    """The content digest of a local source folder, leaving out build outputs."""
    return content_digest(root, skip=lambda parts: any(x in _BUILD_OUTPUTS or x.endswith(".egg-info") for x in parts))


# --------------------------------------------------------------------------- planning


def _resolve_archs(req: BuildRequest, recipe: Recipe, pin: BuildPin | None, d: BuildDefinition) -> tuple[str, ...]:
    """``--arch`` > ``[builds.NAME].arch`` > ``host.compute_capability``, checked by the backend."""
    raw = req.archs or (tuple(pin.arch) if pin and pin.arch else tuple(recipe.host.arch_list))
    archs = tuple(dict.fromkeys(normalize_arch(a) for a in raw))
    if not archs:
        raise ConfigError(f"recipe {recipe.name!r} names no GPU arch", hint="give --arch 120 (or a GPU recipe)")
    BACKENDS[d.backend].check_archs(d, archs)
    return archs


def _resolve_python(
    req: BuildRequest, recipe: Recipe, pin: BuildPin | None, d: BuildDefinition, notes: list[str]
) -> tuple[Path, bool, PythonInfo]:
    """The python that builds (the recipe's env: its torch, no build isolation), its tag and torch.
    An env not made yet is planned from the recipe."""
    if req.python:
        python = Path(req.python)
        if python.parent == Path(".") and not python.exists():  # a bare name, as `python3`: from PATH
            python = Path(shutil.which(str(python)) or python)
        if not python.exists():
            raise ConfigError(
                f"--python {req.python}: no such interpreter",
                hint="give the path of the build environment's python, or a name on PATH (python3)",
            )
    elif pin:
        python = paths.env_dir(recipe.name, pin.env) / "bin" / "python"
    else:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [builds.{d.name}] table, so there is no environment to build in",
            hint="give --python PATH of an environment that has the build requirements",
        )
    if not python.exists():
        notes.append(f"build python {python} does not exist yet (make it with `nox -s env`); planned from the recipe")
        torch = f"{recipe.torch.version}+{recipe.torch.variant}" if d.uses_torch else None
        return python, False, PythonInfo(tag="cp" + recipe.host.python.replace(".", ""), torch=torch)
    info = probe_python(python)
    if not d.uses_torch:
        return python, True, PythonInfo(tag=info.tag, torch=None)
    if not info.torch:
        raise ConfigError(
            f"{python} has no torch; {d.name} builds against the recipe's torch", hint="make the env first: nox -s env"
        )
    if info.torch.split("+")[0] != recipe.torch.version:
        raise ConfigError(
            f"{python} has torch {info.torch}, the recipe locks {recipe.torch.version}",
            hint="rebuild the environment from its lock: nox -s env",
        )
    return python, True, info


def _resolve_toolkit(recipe: Recipe, torch: str | None, tc: toolchain.Toolchain | None, notes: list[str]) -> str:
    if tc is None:
        toolkit = recipe.host.cuda or "unknown"
        notes.append(f"no nvcc found here; planned for CUDA {toolkit} from the recipe")
        return toolkit
    if torch and "+cu" in torch:
        torch_cuda_major = torch.split("+cu", 1)[1][:2]
        if torch_cuda_major != str(tc.major):
            notes.append(
                f"torch {torch} was built with CUDA {torch_cuda_major}.x but nvcc here is {tc.version}: torch's "
                "cpp_extension refuses a CUDA major mismatch; build where the toolkit matches (set CUDA_HOME)"
            )
    return tc.version


def _plan_sources(d: BuildDefinition, cache: SourceCache) -> tuple[list[SourceLine], str, dict[str, Path]]:
    """What is fetched from where, its pin and cache status; the source digest; unpacked dependency dirs."""
    sources: list[SourceLine] = []
    src_archive = d.source_archive()
    if src_archive:
        loc = d.source.url or f"package index: {d.source.distribution}=={d.version} ({d.source.filename})"
        sources.append(
            SourceLine(
                name=d.name,
                kind=d.source.kind,
                location=loc,
                pin=d.source.commit or d.version,
                sha256=src_archive.digest or "(unpinned)",
                status=cache.status(src_archive),
            )
        )
        source_digest = src_archive.digest
    else:
        local = d.local_path()
        source_digest = tree_digest(local)
        sources.append(
            SourceLine(name=d.name, kind="path", location=str(local), pin="-", sha256=source_digest, status="local")
        )
    dep_dirs: dict[str, Path] = {}
    for dep in d.dependencies:
        a = dep.archive()
        st = "not used by this build" if not dep.fetch else cache.status(a) if a.key else "unpinned"
        if st == "unpacked":
            dep_dirs[dep.name] = cache.unpacked_path(a)
        sources.append(
            SourceLine(
                name=dep.name,
                kind="fetchcontent",
                location=dep.url or dep.repository,
                pin=dep.commit,
                sha256=a.digest or "(unpinned)",
                status=st,
                cmake_var=fetchcontent_var(dep.name) if dep.fetch else "",
            )
        )
    return sources, source_digest, dep_dirs


def _is_machine_specific(setting: str, d: BuildDefinition) -> bool:
    """Settings that name local paths or thread counts (not the bytes): left out of the fingerprint."""
    key = setting.split("=", 1)[0]
    if key.startswith("cmake.define.FETCHCONTENT_SOURCE_DIR_") or key == "build.verbose":
        return True
    return bool(d.cmake.threads_define) and key == f"cmake.define.{d.cmake.threads_define}"


def fingerprint_inputs(
    ctx: BuildContext, source_digest: str, env: dict[str, str], settings: list[str]
) -> dict[str, Any]:
    """Everything that changes the wheel's bytes (never parallelism or local paths)."""
    d = ctx.definition
    return {
        "schema": FINGERPRINT_SCHEMA,
        "name": d.name,
        "version": d.version,
        "backend": d.backend,
        "source_sha256": source_digest,
        "dependencies": {dep.name: dep.archive().digest for dep in d.dependencies if dep.fetch},
        "rewrites": [[r.file, r.pattern, r.replacement] for r in d.rewrites_for(ctx.archs)],
        "torch": ctx.torch,
        "cuda_toolkit": ctx.cuda_toolkit,
        "archs": list(ctx.archs),
        "python_tag": ctx.python_tag,
        "local_version": ctx.local_version,
        "env": {k: v for k, v in sorted(env.items()) if k not in PARALLELISM_VARS},
        "config_settings": sorted(s for s in settings if not _is_machine_specific(s, d)),
    }


def check_pin(recipe: Recipe, d: BuildDefinition) -> None:
    """The recipe's ``[builds.NAME].version``, where it pins the build, is the definition's."""
    pin = recipe.builds.get(d.name)
    if pin and pin.version != d.version:
        raise ConfigError(
            f"recipe {recipe.name!r} pins {d.name} {pin.version}, but the build definition {d.path.name} is for {d.version}",
            hint=f"update builds.{d.name}.version in the recipe or the definition so they agree",
        )


def make_plan(req: BuildRequest) -> BuildPlan:
    recipe = load_recipe(req.recipe)
    d = load_definition(req.target)
    backend = BACKENDS[d.backend]
    pin = recipe.builds.get(d.name)
    notes: list[str] = []
    check_pin(recipe, d)
    archs = _resolve_archs(req, recipe, pin, d)
    python, python_exists, py = _resolve_python(req, recipe, pin, d, notes)
    tc = toolchain.probe()
    toolkit = _resolve_toolkit(recipe, py.torch, tc, notes)

    threads = req.nvcc_threads or 1
    logs = req.log_dir or paths.subdir("build-logs")
    measured = measured_units = None
    if req.memory_gib is None:  # a plan for another host's memory does not use this host's measurement
        measured = load_measured_entry(logs, d.name, nvcc_threads=threads, n_archs=len(archs))
        measured_units = load_measured_units(logs, d.name, nvcc_threads=threads, n_archs=len(archs))
    cap = plan_cap(
        d.memory,
        host_budget(memory_gib=req.memory_gib, cores=req.cores),
        n_archs=len(archs),
        nvcc_threads=threads,
        units=d.units,
        jobs=req.jobs,
        measured_gb_per_job=measured[0] if measured else None,
        measured_complete=measured[1] if measured else False,
        measured_units=measured_units,
        refuse=not req.plan_only,
    )

    cache_root = req.source_cache or paths.subdir("sources")
    sources, source_digest, dep_dirs = _plan_sources(d, SourceCache(cache_root, offline=req.offline))

    ctx = BuildContext(
        definition=d,
        recipe=recipe.name,
        archs=archs,
        cap=cap,
        cuda_toolkit=toolkit,
        torch=py.torch,
        python_tag=py.tag,
        local_version=local_version_tag(d.local_version, archs=archs, cuda_toolkit=toolkit, torch=py.torch),
        dep_dirs=dep_dirs,
    )
    env = backend.environment(ctx)
    settings = backend.config_settings(ctx)
    inputs = fingerprint_inputs(ctx, source_digest, env, settings)
    record = req.record or (record_path(recipe.lock_path(pin.env)) if pin is not None else None)
    unrecorded = "" if record else "no built-wheel record for this build (no [builds] table in the recipe, no --record)"
    host_archs = set(recipe.host.arch_list)
    if record is not None and not req.record and host_archs and not host_archs & set(archs):
        # a cross-build (sm_120 on an sm_90 host): its wheel cannot run on the recipe's GPUs, so it
        # must not replace the wheel the recipe's environment installs
        unrecorded = (
            f"not recorded in {record.name}: a build for {', '.join('sm_' + a for a in archs)} cannot run on "
            f"{recipe.name}'s GPUs ({', '.join('sm_' + a for a in sorted(host_archs))}); it is kept in the "
            "wheelhouse only (--record FILE records it elsewhere)"
        )
        notes.append(unrecorded)
        record = None
    return BuildPlan(
        ctx=ctx,
        env=env,
        config_settings=settings,
        sources=sources,
        fingerprint_inputs=inputs,
        fingerprint=fingerprint(inputs),
        python=python,
        python_exists=python_exists,
        record_path=record,
        unrecorded=unrecorded,
        wheelhouse=req.wheelhouse or paths.subdir("wheelhouse"),
        source_cache=cache_root,
        log_dir=logs,
        cuda_home=tc.home if tc else toolchain.cuda_home(),
        notes=notes,
    )
