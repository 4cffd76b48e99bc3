"""What one bench invocation will measure (:class:`BenchPlan`), made once from
the options, and the options themselves, declared once: ``specrig bench``
offers them as ``--NAME``, the pytest suite in ``bench/`` as ``--specrig-NAME``.

Preparing a plan makes what the servers need (environment from the lock,
model, drafters); the plan lists the configurations (``--k`` expands each
speculative one into one per k), the load points (``--concurrency`` and
``--request-rate`` lists) and the repeats, so the suite's tests are
``(repeat, configuration, load point)`` in the interleaved order A, B, A, B."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .errors import ConfigError, EnvError
from .provided import Drift
from .recipe import Recipe, SpecConfig
from .results import LoadPoint, Slo

__all__ = ["OPTIONS", "add_options", "BenchPlan", "ConfigPlan", "Workload", "Case", "prepare_plan", "parse_list"]


def _ints(text: str) -> list[int]:
    return [int(x) for x in parse_list(text)]


def _floats(text: str) -> list[float]:
    return [float(x) for x in parse_list(text)]


def parse_list(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


# name, argparse keywords; one table for both front doors
OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("engine", {"default": "vllm", "help": "engine (default: vllm)"}),
    (
        "spec",
        {
            "default": "none",
            "help": "speculative configurations from the recipe: NAME[,NAME...], 'all' or "
            "'none' (default); each is paired with a baseline at the same load",
        },
    ),
    ("model", {"help": "which of the recipe's models to serve: default ([model]) or NAME of a [models.NAME]"}),
    ("k", {"help": "draft lengths to sweep for every speculative configuration, e.g. 1,2,3,5 (default: the recipe's)"}),
    (
        "dataset",
        {
            "default": "story",
            "choices": ["story", "sharegpt", "random"],
            "help": "prompts: the story's five (default), ShareGPT first turns, or random words",
        },
    ),
    ("num-prompts", {"type": int, "help": "requests per measured run (default: 5 for story, 40 otherwise)"}),
    ("seed", {"type": int, "default": 0, "help": "sampling seed for sharegpt/random prompts and arrivals (default 0)"}),
    (
        "max-tokens",
        {
            "type": int,
            "help": "output tokens per request (default: the recipe's; sharegpt: the answer's length when not given)",
        },
    ),
    ("random-input-len", {"type": int, "default": 128, "help": "words per random prompt (default 128)"}),
    ("concurrency", {"help": "requests in flight, one level or a sweep: 1,4,16 (default: the recipe's)"}),
    ("request-rate", {"help": "requests per second (Poisson arrivals) instead of fixed concurrency; a list sweeps"}),
    ("burstiness", {"type": float, "default": 1.0, "help": "gamma shape of arrivals with --request-rate (1: Poisson)"}),
    (
        "repeat",
        {
            "type": int,
            "default": 1,
            "help": "measure every configuration N times, interleaved A,B,A,B; gives the speedup a confidence interval",
        },
    ),
    ("warmup", {"type": int, "help": "warm-up requests after each server start (default: the recipe's)"}),
    ("slo", {"help": "objectives per request, e.g. ttft_ms=500,tpot_ms=50: share met and goodput"}),
    ("endpoint", {"help": "attach to this running server (e.g. http://127.0.0.1:8000) instead of launching"}),
    ("baseline", {"metavar": "RUN_DIR", "help": "take the paired baseline from an earlier run's results folder"}),
    ("port", {"type": int, "help": "port for launched servers (default: a free one)"}),
    (
        "engine-arg",
        {
            "action": "append",
            "default": [],
            "metavar": "ARG",
            "help": "extra server argument, passed through (repeatable; use --engine-arg=--flag)",
        },
    ),
    ("startup-timeout", {"type": float, "metavar": "S", "help": "seconds a server may take to become ready"}),
    ("results", {"help": "results folder (default: a new one under the user cache)"}),
    (
        "python",
        {
            "metavar": "PATH",
            "help": "serve from this existing interpreter (a container's, a cluster module's) instead of a "
            "lock-made environment; specrig never modifies it",
        },
    ),
    (
        "allow-drift",
        {
            "action": "store_true",
            "help": "run even when the interpreter's engine, torch, its CUDA variant or Python differ from the lock "
            "(the drift is recorded in summary.json)",
        },
    ),
    ("no-baseline", {"action": "store_true", "help": "skip the paired baseline (no speedup then)"}),
]


def add_options(add: Any, prefix: str = "") -> None:
    """Declare every option through ``add`` (argparse's add_argument or pytest's addoption)."""
    for name, kw in OPTIONS:
        add(f"--{prefix}{name}", **kw)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConfigPlan(_Model):
    name: str
    spec: SpecConfig | None = None
    drafter: str | None = None
    drafter_info: dict[str, Any] = {}


class Workload(_Model):
    dataset: str = "story"
    num_prompts: int = 5
    seed: int = 0
    max_tokens: int | None = 512
    """Output tokens per request; None: each ShareGPT prompt's answer length."""
    random_input_len: int = 128
    points: list[LoadPoint] = [LoadPoint(concurrency=1)]
    repeat: int = 1
    warmup_requests: int = 1
    slo: Slo | None = None

    def describe(self) -> str:
        out = "answer-length" if self.max_tokens is None else f"{self.max_tokens}"
        loads = ", ".join(p.describe() for p in self.points)
        rep = f", {self.repeat} repeats interleaved" if self.repeat > 1 else ""
        return f"{self.num_prompts} {self.dataset} prompts x {out} tokens; {loads}{rep}"


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
    host: dict[str, Any] = {}
    drift: Drift | None = None
    """How a provided interpreter differs from the recipe's lock (None: a lock-made env, or attached)."""

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

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


def _points(opts: argparse.Namespace, recipe: Recipe) -> list[LoadPoint]:
    try:
        if opts.request_rate:
            if opts.concurrency:
                raise ConfigError("give --concurrency or --request-rate, not both")
            rates = _floats(opts.request_rate)
            if any(r <= 0 for r in rates) or opts.burstiness <= 0:
                raise ConfigError("--request-rate and --burstiness must be > 0")
            return [LoadPoint(request_rate=r, burstiness=opts.burstiness) for r in rates]
        levels = _ints(opts.concurrency) if opts.concurrency else [recipe.bench.concurrency]
    except ValueError as exc:
        raise ConfigError(f"cannot read the load list: {exc}", hint="write e.g. --concurrency 1,4,16") from None
    if any(c < 1 for c in levels):
        raise ConfigError(f"--concurrency levels must be >= 1, got {opts.concurrency}")
    return [LoadPoint(concurrency=c) for c in levels]


def workload_from(opts: argparse.Namespace, recipe: Recipe) -> Workload:
    for name in ("max_tokens", "num_prompts", "repeat", "random_input_len"):
        v = getattr(opts, name)
        if v is not None and v < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    max_tokens = opts.max_tokens
    if max_tokens is None and opts.dataset != "sharegpt":
        max_tokens = recipe.bench.max_tokens
    return Workload(
        dataset=opts.dataset,
        num_prompts=opts.num_prompts or (5 if opts.dataset == "story" else 40),
        seed=opts.seed,
        max_tokens=max_tokens,
        random_input_len=opts.random_input_len,
        points=_points(opts, recipe),
        repeat=opts.repeat,
        warmup_requests=recipe.bench.warmup_requests if opts.warmup is None else opts.warmup,
        slo=Slo.parse(opts.slo) if opts.slo else None,
    )


def spec_variants(recipe: Recipe, names: list[str], ks: str | None) -> list[tuple[str, SpecConfig]]:
    """Each named configuration, once per ``--k`` value (``ngram-k2``) or as the recipe has it."""
    if not ks:
        return [(n, recipe.spec[n]) for n in names]
    try:
        k_list = _ints(ks)
    except ValueError:
        raise ConfigError(f"--k: cannot read {ks!r}", hint="write e.g. --k 1,2,3,5") from None
    if any(k < 1 or k > 16 for k in k_list):
        raise ConfigError(f"--k values must be within 1..16, got {ks}")
    return [
        (f"{n}-k{k}", recipe.spec[n].model_copy(update={"num_speculative_tokens": k})) for n in names for k in k_list
    ]


def prepare_plan(opts: argparse.Namespace, recipe: Recipe) -> BenchPlan:
    """Check the options, make the environment, model and drafters, and return the plan."""
    from .engines import ENGINE_MODULES, get_engine
    from .env import make_env
    from .host import probe
    from .log import log
    from .models import drafter_info, prepare_drafter, prepare_model
    from .paths import subdir
    from .server import attach, check_port_free

    if opts.engine not in ENGINE_MODULES or opts.engine not in recipe.engine:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [engine.{opts.engine}]", hint=f"engines: {', '.join(recipe.engine)}"
        )
    names = select_specs(recipe, opts.spec)
    workload = workload_from(opts, recipe)
    if opts.endpoint and len(names) > 1:
        raise ConfigError(
            "--endpoint measures one running server, so --spec must name at most one configuration",
            hint="name the configuration that server runs (it labels the run and selects its thresholds)",
        )
    if opts.endpoint and opts.k and len(parse_list(opts.k)) > 1:
        raise ConfigError("--endpoint measures one running server: give at most one --k (the server's)")
    baseline_run = None
    if opts.baseline:
        from .results import load_summary

        base_dir = Path(opts.baseline).expanduser().resolve()
        load_summary(base_dir)  # fail now, not after the run
        baseline_run = str(base_dir)
    engine = get_engine(opts.engine)
    endpoint = attach(opts.endpoint, engine.health_path) if opts.endpoint else None
    if opts.port and not endpoint:
        check_port_free(opts.port)
    host = probe()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = Path(opts.results or subdir("results") / f"{stamp}-{recipe.name}-{opts.engine}").expanduser().resolve()
    (results / "logs").mkdir(parents=True, exist_ok=True)
    log.step(f"recipe {recipe.name}, engine {opts.engine}, results in {results}")

    env = model = None
    if not endpoint:
        python = Path(opts.python).expanduser() if getattr(opts, "python", None) else None
        env = make_env(recipe, recipe.env_for_engine(opts.engine), host=host, python=python)
        _judge_drift(env.drift, allow=bool(getattr(opts, "allow_drift", False)))
        model = prepare_model(recipe, env, opts.model)
    configs: list[ConfigPlan] = []
    # attached to a spec server, the baseline can only come from --baseline
    if not (opts.no_baseline and names) and not (endpoint and names) and not baseline_run:
        configs.append(ConfigPlan(name="baseline"))
    for name, spec in spec_variants(recipe, names, opts.k):
        drafter = prepare_drafter(spec, model, env) if model is not None else None
        configs.append(ConfigPlan(name=name, spec=spec, drafter=drafter, drafter_info=drafter_info(drafter)))
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
        host=host.as_dict(),
        drift=env.drift if env else None,
    )
    plan.write(results / "plan.json")
    return plan


def _judge_drift(drift: Drift | None, *, allow: bool) -> None:
    """A provided interpreter whose engine, torch or CUDA variant differ from the lock
    is refused, unless the user allows it (then the drift is recorded)."""
    from .log import log

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
