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

from pydantic import BaseModel, ConfigDict, field_serializer

from specrig.core.atomic import write_text
from specrig.core.errors import ConfigError, EnvError
from specrig.core.redact import redact_argv
from specrig.env.provided import Drift
from specrig.lab.options import BenchOptions
from specrig.lab.results import HostInfo, LoadPoint, RooflineInputs, Slo, Workload
from specrig.recipe.schema import Recipe, SpecConfig, refuse_managed_args

__all__ = ["BenchPlan", "ConfigPlan", "Workload", "Case", "prepare_plan", "parse_list"]  # Workload: lab.results


def _ints(text: str) -> list[int]:
    return [int(x) for x in parse_list(text)]


def _floats(text: str) -> list[float]:
    return [float(x) for x in parse_list(text)]


def parse_list(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConfigPlan(_Model):
    name: str
    spec: SpecConfig | None = None
    drafter: str | None = None
    drafter_info: dict[str, Any] = {}


@dataclass(frozen=True)
class Case:
    """One test of the suite: a configuration at a load point, in one repeat."""

    config: str
    point: LoadPoint
    repeat: int

    @property
    def id(self) -> str:
        return f"r{self.repeat}-{self.config}-{self.point.label}"


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
    lock_digest: str | None = None
    startup_timeout_s: float | None = None
    host: HostInfo = HostInfo()
    drift: Drift | None = None
    """How a provided interpreter differs from the recipe's lock (None: a lock-made env, or attached)."""
    roofline: RooflineInputs | None = None
    """Bytes per decoded token and bandwidth, derived from the served model and the host (or declared)."""
    profile: bool = False
    """``--profile``: each configuration's server runs with its profiler ready; one short run is profiled."""
    launch_ahead: int = 1
    """Servers started at once (sharing a GPU's memory), each measured in its turn."""

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

    def config(self, name: str) -> ConfigPlan:
        return next(c for c in self.configs if c.name == name)

    def cases(self) -> list[Case]:
        """Every test, interleaved: each repeat runs every configuration at every load."""
        return [
            Case(c.name, p, r) for r in range(self.workload.repeat) for c in self.configs for p in self.workload.points
        ]


def select_specs(recipe: Recipe, choice: str) -> list[str]:
    if choice in ("none", ""):
        return []
    if choice == "all":
        return list(recipe.spec)
    names = parse_list(choice)
    unknown = [n for n in names if n not in recipe.spec]
    if unknown:
        raise ConfigError(
            f"recipe {recipe.name!r} has no speculative configuration {', '.join(map(repr, unknown))}",
            hint=f"configurations: {', '.join(recipe.spec) or '(none)'}; or use --spec all / none",
        )
    return names


def _points(opts: BenchOptions, recipe: Recipe) -> list[LoadPoint]:
    try:
        if opts.request_rate:
            if opts.concurrency:
                raise ConfigError(
                    "give --concurrency or --request-rate, not both",
                    hint="closed loop: --concurrency; open loop: --request-rate",
                )
            rates = _floats(opts.request_rate)
            if any(r <= 0 for r in rates) or opts.burstiness <= 0:
                raise ConfigError("--request-rate and --burstiness must be > 0", hint="write e.g. --request-rate 0.5,2")
            return [LoadPoint(request_rate=r, burstiness=opts.burstiness) for r in rates]
        levels = _ints(opts.concurrency) if opts.concurrency else [recipe.bench.concurrency]
    except ValueError as exc:
        raise ConfigError(f"cannot read the load list: {exc}", hint="write e.g. --concurrency 1,4,16") from None
    if any(c < 1 for c in levels):
        raise ConfigError(
            f"--concurrency levels must be >= 1, got {opts.concurrency}", hint="write e.g. --concurrency 1,4,16"
        )
    return [LoadPoint(concurrency=c) for c in levels]


def workload_from(opts: BenchOptions, recipe: Recipe) -> Workload:
    for name in ("max_tokens", "num_prompts", "repeat", "random_input_len"):
        v = getattr(opts, name)
        if v is not None and v < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {v}", hint="give a whole number >= 1")
    max_tokens = opts.max_tokens
    if max_tokens is None and opts.dataset not in ("sharegpt", "custom"):
        max_tokens = recipe.bench.max_tokens
    dataset_path, n_file = None, 0
    if opts.dataset == "custom":
        from specrig.model.datasets import load_custom

        if not opts.dataset_path:
            raise ConfigError("--dataset custom needs --dataset-path FILE.jsonl", hint='one {"prompt": ...} a line')
        dataset_path = str(Path(opts.dataset_path).expanduser().resolve())
        n_file = len(load_custom(dataset_path))  # every line checked now, before any server starts
    elif opts.dataset_path:
        raise ConfigError("--dataset-path is for --dataset custom", hint="add --dataset custom")
    return Workload(
        dataset=opts.dataset,
        dataset_path=dataset_path,
        num_prompts=opts.num_prompts or (5 if opts.dataset == "story" else n_file if opts.dataset == "custom" else 40),
        seed=opts.seed,
        max_tokens=max_tokens,
        random_input_len=opts.random_input_len,
        points=_points(opts, recipe),
        repeat=opts.repeat,
        warmup_requests=recipe.bench.warmup_requests if opts.warmup is None else opts.warmup,
        slo=Slo.parse(opts.slo) if opts.slo else None,
        stall_timeout_s=_timeout(
            opts.stall_timeout, recipe.bench.stall_timeout_s, 30.0 if recipe.needs_gpu else 120.0, "stall"
        ),
        first_token_timeout_s=_timeout(
            opts.first_token_timeout,
            recipe.bench.first_token_timeout_s,
            120.0 if recipe.needs_gpu else 600.0,
            "first-token",
        ),
    )


def _timeout(given: float | None, recipe: float | None, default: float, what: str) -> float:
    if given is not None and given <= 0:
        raise ConfigError(f"--{what}-timeout must be > 0 seconds, got {given:g}", hint="e.g. 30")
    return given or recipe or default


DRAFTER_METHODS = ("eagle3", "eagle", "draft_model")


def drafter_refs(recipe: Recipe, text: str) -> list[tuple[str, str]]:
    """``(label, ref)`` for each ``--drafter`` value: ``@curve`` is every drafter of the
    recipe's data-size curve (labels ``n1000``...), ``@NAME`` a named drafter, else a folder."""
    from specrig.model.drafters import curve_drafters

    out: list[tuple[str, str]] = []
    for ref in parse_list(text):
        if ref == "@curve":
            out += [(label, str(path)) for label, path in curve_drafters(recipe.name)]
        elif ref.startswith("@"):
            out.append((ref[1:].removeprefix("eagle3-"), ref))
        else:
            path = Path(ref).expanduser().resolve()
            out.append((path.name, str(path)))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--drafter names two drafters with the same label: {labels}", hint="give distinct folders")
    return out


def spec_variants(
    recipe: Recipe, names: list[str], ks: str | None, drafters: str | None = None
) -> list[tuple[str, SpecConfig]]:
    """Each named configuration, once per ``--drafter`` (drafter-based methods:
    ``eagle3-n1000``) and once per ``--k`` value (``ngram-k2``), or as the recipe has it."""
    chosen = [(n, recipe.spec[n]) for n in names]
    if drafters:
        refs = drafter_refs(recipe, drafters)
        if not any(spec.method in DRAFTER_METHODS for _, spec in chosen):
            raise ConfigError(
                "--drafter needs a drafter-based configuration in --spec (eagle3, eagle or draft_model)",
                hint="e.g. --spec eagle3 --drafter @curve",
            )
        chosen = [
            v
            for n, spec in chosen
            for v in (
                [(f"{n}-{label}", spec.model_copy(update={"model": ref})) for label, ref in refs]
                if spec.method in DRAFTER_METHODS
                else [(n, spec)]
            )
        ]
    if not ks:
        return chosen
    try:
        k_list = _ints(ks)
    except ValueError:
        raise ConfigError(f"--k: cannot read {ks!r}", hint="write e.g. --k 1,2,3,5") from None
    if any(k < 1 or k > 16 for k in k_list):
        raise ConfigError(f"--k values must be within 1..16, got {ks}", hint="write e.g. --k 1,2,3,5")
    return [(f"{n}-k{k}", spec.model_copy(update={"num_speculative_tokens": k})) for n, spec in chosen for k in k_list]


def prepare_plan(opts: BenchOptions, recipe: Recipe) -> BenchPlan:
    """Check the options, make the environment, model and drafters, and return the plan."""
    from specrig.core.log import log
    from specrig.core.paths import subdir
    from specrig.engine import ENGINE_MODULES, get_engine
    from specrig.env.make import make_env
    from specrig.host.machine import probe
    from specrig.model.folder import drafter_info, prepare_drafter, prepare_model
    from specrig.patches.declared import settle
    from specrig.serve.server import attach, check_port_free

    if opts.engine not in ENGINE_MODULES or opts.engine not in recipe.engine:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [engine.{opts.engine}]", hint=f"engines: {', '.join(recipe.engine)}"
        )
    names = select_specs(recipe, opts.spec)
    variants = spec_variants(recipe, names, opts.k, opts.drafter)  # checked now, before anything is prepared
    workload = workload_from(opts, recipe)
    if opts.endpoint and len(names) > 1:
        raise ConfigError(
            "--endpoint measures one running server, so --spec must name at most one configuration",
            hint="name the configuration that server runs (it labels the run and selects its thresholds)",
        )
    if opts.endpoint and opts.drafter and len(variants) > 1:
        raise ConfigError("--endpoint measures one running server: give at most one --drafter (the server's)")
    if opts.launch_ahead is not None and opts.launch_ahead < 1:
        raise ConfigError(f"--launch-ahead must be >= 1, got {opts.launch_ahead}", hint="e.g. --launch-ahead 4")
    if opts.endpoint and opts.k and len(parse_list(opts.k)) > 1:
        raise ConfigError("--endpoint measures one running server: give at most one --k (the server's)")
    baseline_run = None
    if opts.baseline:
        from specrig.lab.results import load_summary

        base_dir = Path(opts.baseline).expanduser().resolve()
        load_summary(base_dir)  # fail now, not after the run
        baseline_run = str(base_dir)
    engine = get_engine(opts.engine)
    refuse_managed_args(opts.engine_arg, "--engine-arg")
    if opts.profile and engine.profile_paths is None:
        raise ConfigError(f"--profile: specrig cannot profile {opts.engine} yet", hint="profile with --engine vllm")
    endpoint = attach(opts.endpoint, engine.health_path) if opts.endpoint else None
    if opts.port and not endpoint:
        check_port_free(opts.port)
    host = probe()
    # unique per run: two benches started in the same second never share a folder
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{secrets.token_hex(2)}"
    results = Path(opts.results or subdir("results") / f"{stamp}-{recipe.name}-{opts.engine}").expanduser().resolve()
    (results / "logs").mkdir(parents=True, exist_ok=True)
    log.step(f"recipe {recipe.name}, engine {opts.engine}, results in {results}")

    env = model = None
    if not endpoint:
        python = Path(opts.python).expanduser() if opts.python else None
        env_name = recipe.env_for_engine(opts.engine)
        env = make_env(recipe, env_name, host=host, python=python)
        for line in settle(recipe, env_name, Path(env.python), provided=env.provided):
            log.step(line)
        _judge_drift(env.drift, allow=opts.allow_drift)
        model = prepare_model(recipe, env, opts.model)
    configs: list[ConfigPlan] = []
    # attached to a spec server, the baseline can only come from --baseline
    if not (opts.no_baseline and names) and not (endpoint and names) and not baseline_run:
        configs.append(ConfigPlan(name="baseline"))
    for name, spec in variants:
        drafter = prepare_drafter(spec, model, env, opts.engine) if model is not None else None
        if drafter and model is not None and spec.model != "@target":
            _refuse_other_target(name, Path(drafter), Path(model.path))
        configs.append(ConfigPlan(name=name, spec=spec, drafter=drafter, drafter_info=drafter_info(drafter)))
    if opts.memory_bandwidth is not None and opts.memory_bandwidth <= 0:
        raise ConfigError(
            f"--memory-bandwidth must be > 0 GB/s, got {opts.memory_bandwidth}", hint="e.g. 4800 for one H200"
        )
    from specrig.lab.roofline import roofline_inputs

    roof = roofline_inputs(recipe, opts.model, Path(model.path) if model else None, host, opts.memory_bandwidth)
    plan = BenchPlan(
        recipe=recipe.name,
        recipe_path=str(recipe.path),
        engine=opts.engine,
        results_dir=str(results),
        configs=configs,
        workload=workload,
        python=str(env.python) if env else None,
        model_path=str(model.path) if model else None,
        served_name=recipe.model_named(opts.model).served_name,
        model_source=model.source if model else (endpoint or ""),
        model=opts.model,
        endpoint=endpoint,
        baseline_run=baseline_run,
        port=opts.port,
        engine_args=list(opts.engine_arg or []),
        startup_timeout_s=opts.startup_timeout,
        lock_digest=env.lock_digest if env else None,
        host=HostInfo.model_validate(host.as_dict()),
        drift=env.drift if env else None,
        roofline=roof,
        profile=opts.profile,
        launch_ahead=1 if endpoint else (opts.launch_ahead or recipe.bench.launch_ahead),
    )
    plan.write(results / "plan.json")
    return plan


def _refuse_other_target(config: str, drafter: Path, target: Path) -> None:
    """A drafter made for another target is refused before any server starts (vLLM would
    load it and draft nonsense, or fail deep in its weight loader)."""
    import json

    from specrig.specdec.layers import target_mismatch

    try:
        cfg = json.loads((drafter / "config.json").read_text())
    except (OSError, ValueError):
        return
    why = target_mismatch(cfg, target)
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
