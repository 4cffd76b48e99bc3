"""What one bench invocation will measure (:class:`BenchPlan`), made once from
the typed options (:class:`~specrig.lab.options.BenchOptions`, declared once in
:mod:`specrig.lab.options` for both front doors).

Preparing a plan makes what the servers need (environment from the lock,
model, drafters); the plan lists the configurations (``--k`` expands each
speculative one into one per k), the load points (``--concurrency`` and
``--request-rate`` lists) and the repeats, so the suite's tests are
``(repeat, configuration, load point)`` in the interleaved order A, B, A, B."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from specrig.core.atomic import write_text
from specrig.core.errors import ConfigError, EnvError
from specrig.core.redact import redact_argv
from specrig.env.provided import Drift
from specrig.host.limits import connection_limits
from specrig.lab.eager import eager_twin_flag, with_eager_twins
from specrig.lab.folder import open_results, results_folder
from specrig.lab.identity import ConfigId, select_specs, spec_variants
from specrig.lab.options import BenchOptions
from specrig.lab.prelaunch import check_connections, check_outputs, check_prompts, context_limit, warn_batch_cap
from specrig.lab.results import HostInfo, LoadPoint, RooflineInputs, Slo, Workload, recorded_id
from specrig.model.offline import DrafterInfo
from specrig.recipe.schema import FIRST_TOKEN_TIMEOUT_S, STALL_TIMEOUT_S, Recipe, SpecConfig, refuse_managed_args

__all__ = [
    "BenchPlan",
    "ConfigPlan",
    "ConfigId",
    "Workload",
    "Case",
    "prepare_plan",
    "check_options",
]  # Workload: lab.results


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConfigPlan(_Model):
    id: ConfigId
    """What the configuration is (the recipe's spec, k, drafter, engine): gates and pairing read this."""
    name: str
    """For display only (``id.name``): tests, measurements and servers are keyed by ``id``."""
    spec: SpecConfig | None = None
    drafter: str | None = None
    drafter_info: DrafterInfo = DrafterInfo()
    server_args: list[str] = []
    """Server arguments of this configuration alone, after the run's (an eager twin's flag)."""

    @model_validator(mode="before")
    @classmethod
    def _identity(cls, data: Any) -> Any:
        """``ConfigPlan(name="ngram")``: a configuration exactly as the recipe names it
        (``baseline`` or a ``[spec.NAME]``); a variant is made from its ``id``."""
        if isinstance(data, dict) and "id" not in data:
            data = {**data, "id": recorded_id(data.get("name", ConfigId().name))}
        if isinstance(data, dict) and "name" not in data:
            ident = data["id"] if isinstance(data["id"], ConfigId) else ConfigId.model_validate(data["id"])
            data = {**data, "name": ident.name}
        return data


@dataclass(frozen=True)
class Case:
    """One test of the suite: a configuration at a load point, in one repeat."""

    config: ConfigId
    point: LoadPoint
    repeat: int

    @property
    def name(self) -> str:
        """The configuration's name, for display."""
        return self.config.name

    @property
    def id(self) -> str:
        """The pytest test id."""
        return f"r{self.repeat}-{self.name}-{self.point.label}"


class BenchPlan(_Model):
    recipe: str
    recipe_path: str
    engine: str
    results_dir: str
    configs: list[ConfigPlan]
    workload: Workload
    python: str | None = None
    """The engine environment's Python (None when attaching)."""
    model_path: str | None = None
    served_name: str = ""
    model_source: str = ""
    model: str | None = None
    """Which of the recipe's models is served (None: ``[model]``; else ``[models.NAME]``)."""
    endpoint: str | None = None
    baseline_run: str | None = None
    port: int | None = None
    engine_args: list[str] = []
    api_key: str | None = Field(None, exclude=True, repr=False)
    """The key sent to the server (``--api-key``, ``OPENAI_API_KEY``): never written."""
    lock_digest: str | None = None
    built: list[str] = []
    """The wheels specrig built that the engine's environment holds (``name version sha256:...``)."""
    startup_timeout_s: float
    """Seconds a server may take to become ready (``--startup-timeout``, else the recipe's engine's)."""
    host: HostInfo = HostInfo()
    drift: Drift | None = None
    """How a provided interpreter differs from the recipe's lock (None: a lock-made env, or attached)."""
    roofline: RooflineInputs | None = None
    """Bytes per decoded token and bandwidth, derived from the served model and the host (or declared)."""
    profile: bool = False
    """``--profile``: each configuration's server runs with its profiler ready; one short run is profiled."""
    launch_ahead: int = 1
    """Servers started at once (sharing a GPU's memory), each measured in its turn."""
    acceptance_note: str | None = None
    """Why ``--acceptance-check`` added no eager twin (the servers already run eager)."""

    @field_serializer("engine_args")
    def _redacted(self, args: list[str]) -> list[str]:
        """plan.json never holds a secret (``--api-key X`` is written ``--api-key ***``)."""
        return redact_argv(args)

    def write(self, path: Path) -> None:
        write_text(path, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, path: Path) -> BenchPlan:
        try:
            return cls.model_validate_json(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read the bench plan {path}: {exc}", hint="write it with `specrig bench`"
            ) from None

    def config(self, ident: ConfigId) -> ConfigPlan:
        return next(c for c in self.configs if c.id == ident)

    def named(self, name: str) -> ConfigPlan:
        """The configuration of this display name (what a user or a report names)."""
        return next(c for c in self.configs if c.name == name)

    @property
    def baseline(self) -> ConfigPlan | None:
        """The baseline measured in this run (None: none, or taken from ``--baseline RUN_DIR``)."""
        return next((c for c in self.configs if c.id.is_baseline), None)

    def cases(self) -> list[Case]:
        """Every test, interleaved: each repeat runs every configuration at every load."""
        return [
            Case(c.id, p, r) for r in range(self.workload.repeat) for c in self.configs for p in self.workload.points
        ]


def _points(opts: BenchOptions, recipe: Recipe) -> list[LoadPoint]:
    """The load points (each option was checked by BenchOptions; the recipe's default fills in)."""
    if opts.request_rate:
        return [LoadPoint(request_rate=r, burstiness=opts.burstiness) for r in opts.request_rate]
    return [LoadPoint(concurrency=c) for c in opts.concurrency or (recipe.bench.concurrency,)]


def workload_from(opts: BenchOptions, recipe: Recipe) -> Workload:
    """The options with the recipe's defaults resolved, once: the one place a default is applied."""
    max_tokens = opts.max_tokens
    if max_tokens is None and opts.dataset not in ("sharegpt", "custom"):
        max_tokens = recipe.bench.max_tokens
    dataset_path, n_file = None, 0
    if opts.dataset == "custom":
        from specrig.model.datasets import load_custom

        dataset_path = str(Path(str(opts.dataset_path)).expanduser().resolve())
        n_file = len(load_custom(dataset_path))  # every line checked now, before any server starts
    where = "gpu" if recipe.needs_gpu else "cpu"
    return Workload(
        dataset=opts.dataset,
        dataset_path=dataset_path,
        num_prompts=opts.num_prompts or (5 if opts.dataset == "story" else n_file if opts.dataset == "custom" else 40),
        seed=opts.seed,
        max_tokens=max_tokens,
        default_output_len=recipe.bench.max_tokens,
        random_input_len=opts.random_input_len,
        points=_points(opts, recipe),
        repeat=opts.repeat,
        stop_at_eos=opts.stop_at_eos,
        chat=opts.chat,
        warmup_requests=recipe.bench.warmup_requests if opts.warmup is None else opts.warmup,
        slo=Slo.parse(opts.slo) if opts.slo else None,
        stall_timeout_s=opts.stall_timeout or recipe.bench.stall_timeout_s or STALL_TIMEOUT_S[where],
        first_token_timeout_s=opts.first_token_timeout
        or recipe.bench.first_token_timeout_s
        or FIRST_TOKEN_TIMEOUT_S[where],
    )


def prepare_plan(opts: BenchOptions, recipe: Recipe) -> BenchPlan:
    """Check the options, make the environment, model and drafters, and return the plan."""
    from specrig.core.log import log
    from specrig.host.machine import probe
    from specrig.lab.roofline import roofline_inputs
    from specrig.serve.auth import bench_api_key
    from specrig.serve.server import attach, check_port_free

    checked = _checked(opts, recipe)  # what needs the recipe, resolved before anything is made
    secret = opts.api_key.get_secret_value() if opts.api_key else None
    api_key, key_args = bench_api_key(secret, opts.engine_arg, launching=not opts.endpoint)
    endpoint = attach(opts.endpoint, checked.engine.health_path, api_key=api_key) if opts.endpoint else None
    if opts.port and not endpoint:
        check_port_free(opts.port)
    host = probe()
    if not endpoint:  # more requests in flight than the engine batches: said before it starts
        warn_batch_cap(checked.workload, opts, recipe, checked.engine, host.gpus, spec=bool(checked.variants))
    # unique per run: two benches started in the same second never share a folder
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{secrets.token_hex(2)}"
    results = results_folder(opts.results, f"{stamp}-{recipe.name}-{opts.engine}")  # checked; made once accepted
    log.step(f"recipe {recipe.name}, engine {opts.engine}, results in {results}")

    env, model = (None, None) if endpoint else _made(opts, recipe, host)
    if env is not None and model is not None:  # every prompt known now, with its output, within the context
        ctx = context_limit(opts, recipe, checked.engine, Path(model.path))
        check_prompts(checked.workload, ctx, env.python, Path(model.path))
    configs = _configs(opts, checked, launching=not endpoint, env=env, model=model)
    if checked.eager[1]:
        log.step(checked.eager[1])
    roof = roofline_inputs(recipe, opts.model, Path(model.path) if model else None, host, opts.memory_bandwidth)
    plan = BenchPlan(
        recipe=recipe.name,
        recipe_path=str(recipe.path),
        engine=opts.engine,
        results_dir=str(results),
        configs=configs,
        workload=checked.workload,
        python=str(env.python) if env else None,
        model_path=str(model.path) if model else None,
        served_name=recipe.model_named(opts.model).served_name,
        model_source=model.source if model else (endpoint or ""),
        model=opts.model,
        endpoint=endpoint,
        baseline_run=checked.baseline_run,
        port=opts.port,
        engine_args=[*opts.engine_arg, *key_args],
        api_key=api_key,
        startup_timeout_s=checked.startup_timeout_s,
        lock_digest=env.lock_digest if env else None,
        built=list(env.built) if env else [],
        host=HostInfo.model_validate(host.as_dict()),
        drift=env.drift if env else None,
        roofline=roof,
        profile=opts.profile,
        launch_ahead=checked.launch_ahead,
        acceptance_note=checked.eager[1],
    )
    open_results(results)  # the run is accepted: its folder, marked INCOMPLETE until the summary is written
    plan.write(results / "plan.json")
    return plan


@dataclass(frozen=True)
class _Checked:
    """The options resolved against the recipe (every option itself was checked by BenchOptions)."""

    engine: Any  # the engine adapter (specrig.engine)
    names: list[str]
    variants: list[tuple[ConfigId, SpecConfig]]
    workload: Workload
    baseline_run: str | None
    startup_timeout_s: float
    """``--startup-timeout``, else the recipe's engine's."""
    launch_ahead: int
    """``--launch-ahead``, else the recipe's; 1 attached to a server (nothing is launched)."""
    eager: tuple[str | None, str | None] = (None, None)
    """``--acceptance-check``: (the flag each eager twin's server gets, what to say when none is added)."""


def check_options(opts: BenchOptions, recipe: Recipe) -> None:
    """Refuse options that do not fit the recipe (engine, specs, drafters, workload, engine
    arguments), making and starting nothing: what a bench checks first, for a study's check."""
    _checked(opts, recipe)


def _checked(opts: BenchOptions, recipe: Recipe) -> _Checked:
    """Everything about the options that needs the recipe, refused before anything is made."""
    from specrig.engine import ENGINE_MODULES, get_engine

    if opts.engine not in ENGINE_MODULES or opts.engine not in recipe.engine:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [engine.{opts.engine}]", hint=f"engines: {', '.join(recipe.engine)}"
        )
    names = select_specs(recipe, opts.spec)
    variants = spec_variants(recipe, names, opts.k, opts.drafter, opts.engine)
    workload = workload_from(opts, recipe)
    engine = get_engine(opts.engine)
    check_connections(workload, opts, connection_limits())  # the client's side, whoever serves
    if not opts.endpoint:  # an attached server is judged by its own context
        check_outputs(workload, opts, context_limit(opts, recipe, engine))
    if opts.endpoint and opts.drafter and len(variants) > 1:  # @curve may stand for several
        raise ConfigError("--endpoint measures one running server: give at most one --drafter (the server's)")
    baseline_run = None
    if opts.baseline:
        from specrig.lab.results import load_summary

        base_dir = Path(opts.baseline).expanduser().resolve()
        load_summary(base_dir)  # fail now, not after the run
        baseline_run = str(base_dir)
    if opts.chat and opts.endpoint and engine.native_generate_path is not None and any(s for _, s in variants):
        raise ConfigError(
            f"--chat --endpoint: {opts.engine}'s per-request speculative stats come only from its native "
            f"{engine.native_generate_path}, which takes the chat template's rendering as token ids, and specrig "
            "renders it with the model's tokenizer in the environment it launches from",
            hint=f"let specrig launch {opts.engine} (leave out --endpoint), or leave out --chat",
        )
    refuse_managed_args(opts.engine_arg, "--engine-arg")
    if opts.profile and engine.profile_paths is None:
        raise ConfigError(f"--profile: specrig cannot profile {opts.engine} yet", hint="profile with --engine vllm")
    eng = recipe.engine[opts.engine]
    eager = eager_twin_flag(engine, [*eng.args, *eng.spec_args, *opts.engine_arg], asked=opts.acceptance_check)
    startup = opts.startup_timeout or eng.startup_timeout_s
    ahead = 1 if opts.endpoint else (opts.launch_ahead or recipe.bench.launch_ahead)
    return _Checked(engine, names, variants, workload, baseline_run, startup, ahead, eager)


def _made(opts: BenchOptions, recipe: Recipe, host: Any) -> tuple[Any, Any]:
    """The engine's environment (patched as the recipe declares) and the target model, made or reused."""
    from specrig.core.log import log
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model
    from specrig.patches.declared import settle

    python = Path(opts.python).expanduser() if opts.python else None
    env_name = recipe.env_for_engine(opts.engine)
    env = make_env(recipe, env_name, host=host, python=python)
    for line in settle(recipe, env_name, Path(env.python), provided=env.provided):
        log.step(line)
    _judge_drift(env.drift, allow=opts.allow_drift)
    return env, prepare_model(recipe, env, opts.model)


def _configs(opts: BenchOptions, checked: _Checked, *, launching: bool, env: Any, model: Any) -> list[ConfigPlan]:
    """The configurations to measure, each a typed identity; the baseline first where one is measured
    (attached to a spec server, the baseline can only come from --baseline)."""
    from specrig.model.folder import drafter_info, prepare_drafter

    configs: list[ConfigPlan] = []
    if not (opts.no_baseline and checked.names) and (launching or not checked.names) and not checked.baseline_run:
        configs.append(ConfigPlan(id=ConfigId(engine=opts.engine)))
    for ident, spec in checked.variants:
        drafter = prepare_drafter(spec, model, env, opts.engine) if model is not None else None
        if drafter and model is not None and spec.model != "@target":
            _refuse_other_target(ident.name, Path(drafter), Path(model.path), own_model=spec.method == "draft_model")
        configs.append(ConfigPlan(id=ident, spec=spec, drafter=drafter, drafter_info=drafter_info(drafter)))
    return with_eager_twins(configs, checked.eager[0])  # --acceptance-check: each one's eager twin right after it


def _refuse_other_target(config: str, drafter: Path, target: Path, *, own_model: bool = False) -> None:
    """A drafter made for another target is refused before any server starts (vLLM would
    load it and draft nonsense, or fail deep in its weight loader); a draft model (``own_model``)
    needs only the target's vocabulary."""
    import json

    from specrig.specdec.layers import target_mismatch

    try:
        cfg = json.loads((drafter / "config.json").read_text())
    except (OSError, ValueError):
        return
    why = target_mismatch(cfg, target, own_model=own_model)
    if why:
        raise ConfigError(
            f"{config}: the drafter {drafter} was not made for the served model {target.name}: {why}",
            hint="train one for this target (`nox -s drafter`), or serve the model it was made for",
        )


def _judge_drift(drift: Drift | None, *, allow: bool) -> None:
    """A provided interpreter whose engine, torch or CUDA variant differ from the lock
    is refused, unless the user allows it (then the drift is recorded)."""
    from specrig.core.log import log

    if drift is None or not drift.core_mismatch:
        return
    lines = "; ".join(i.line() for i in drift.core_mismatch)
    if not allow:
        raise EnvError(
            f"{drift.python} does not match the recipe's lock {drift.lock} in its core packages: {lines}",
            hint="use an interpreter that matches (`nox -s env -- --check --python PATH` lists every difference), "
            "or pass --allow-drift to measure it anyway (the drift is recorded in summary.json)",
        )
    log.warn(f"--allow-drift: measuring {drift.python} despite {lines}")
